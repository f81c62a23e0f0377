// Dim and Shape: symbol parsing, exact products and quotients, equality, printing.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "tether/error.h"
#include "tether/shape.h"

namespace {

using tether::ir::Dim;
using tether::ir::Shape;
using Factors = std::vector<std::pair<std::string, int>>;

TEST(Dim, KnownDimHoldsItsValue) {
  Dim d(7);
  EXPECT_TRUE(d.is_known());
  EXPECT_EQ(d.value(), 7);
  EXPECT_EQ(d.to_string(), "7");
  EXPECT_TRUE(Dim(0).is_known());
}

TEST(Dim, NegativeKnownDimThrowsArgumentError) {
  EXPECT_THROW(Dim(-1), tether::ArgumentError);
  EXPECT_THROW(Shape::of({2, -3}), tether::ArgumentError);
}

TEST(Dim, ValueOfNonKnownDimIsAnInternalError) {
  EXPECT_THROW(Dim().value(), tether::InternalError);
  EXPECT_THROW(Dim::symbol("n").value(), tether::InternalError);
}

TEST(Dim, PlainSymbolParsesAsOneFactor) {
  Dim b = Dim::symbol("batch");
  EXPECT_TRUE(b.is_symbolic());
  EXPECT_EQ(b.coefficient(), 1);
  EXPECT_EQ(b.factors(), (Factors{{"batch", 1}}));
  EXPECT_EQ(b.param(), "batch");
  EXPECT_EQ(b.to_string(), "batch");
}

TEST(Dim, ProductTextParsesAsMonomialInEitherOrder) {
  Dim b = Dim::symbol("batch");
  Dim a = Dim::symbol("7*batch");
  Dim c = Dim::symbol("batch*7");
  EXPECT_EQ(a.coefficient(), 7);
  EXPECT_EQ(a.factors(), (Factors{{"batch", 1}}));
  EXPECT_EQ(a, b * Dim(7));
  EXPECT_EQ(a, Dim(7) * b);
  EXPECT_EQ(c, a);
  // The text is kept as written for writing back.
  EXPECT_EQ(c.param(), "batch*7");
  EXPECT_EQ(Dim::symbol(" 2 * seq * batch ").factors(), (Factors{{"batch", 1}, {"seq", 1}}));
}

TEST(Dim, RepeatedSymbolBecomesAPower) {
  Dim sq = Dim::symbol("n*n");
  EXPECT_EQ(sq.factors(), (Factors{{"n", 2}}));
  EXPECT_EQ(sq, Dim::symbol("n") * Dim::symbol("n"));
}

TEST(Dim, NonProductTextIsOneOpaqueSymbol) {
  Dim s = Dim::symbol("s0 + 1");
  EXPECT_TRUE(s.is_symbolic());
  EXPECT_EQ(s.coefficient(), 1);
  EXPECT_EQ(s.factors(), (Factors{{"s0 + 1", 1}}));
  EXPECT_EQ(s.to_string(), "s0 + 1");
  EXPECT_NE(s, Dim::symbol("s0"));
}

TEST(Dim, ParenthesizedTermIsAFactorOfTheProduct) {
  Dim s = Dim::symbol("2*(s0 + 1)");
  EXPECT_EQ(s.coefficient(), 2);
  EXPECT_EQ(s.factors(), (Factors{{"s0 + 1", 1}}));
  EXPECT_EQ(s, Dim::symbol("s0 + 1") * Dim(2));
  // Built from parts, the opaque factor is written back in parentheses.
  EXPECT_EQ((Dim::symbol("s0 + 1") * Dim(2)).to_string(), "2*(s0 + 1)");
  ASSERT_TRUE(s.divide(Dim(2)).has_value());
  EXPECT_EQ(*s.divide(Dim(2)), Dim::symbol("s0 + 1"));
}

TEST(Dim, EmptySymbolTextGivesUnknownDim) {
  EXPECT_TRUE(Dim::symbol("").is_unknown());
  EXPECT_EQ(Dim().to_string(), "?");
}

TEST(Dim, ProductOfKnownDimsIsKnown) {
  Dim p = Dim(6) * Dim(7);
  ASSERT_TRUE(p.is_known());
  EXPECT_EQ(p.value(), 42);
  EXPECT_EQ((Dim(0) * Dim::symbol("b")).value(), 0);
}

TEST(Dim, ProductOfSymbolicDimsMultipliesCoefficientsAndFactors) {
  Dim p = Dim::symbol("3*a") * Dim::symbol("2*b*a");
  EXPECT_EQ(p.coefficient(), 6);
  EXPECT_EQ(p.factors(), (Factors{{"a", 2}, {"b", 1}}));
  EXPECT_EQ(p.to_string(), "6*a*a*b");
}

TEST(Dim, ProductWithUnknownOrOverflowIsUnknown) {
  EXPECT_TRUE((Dim() * Dim(3)).is_unknown());
  EXPECT_TRUE((Dim::symbol("b") * Dim()).is_unknown());
  const int64_t big = std::numeric_limits<int64_t>::max() / 2 + 1;
  EXPECT_TRUE((Dim(big) * Dim(2)).is_unknown());
  EXPECT_TRUE((Dim::symbol("b") * Dim(big) * Dim(2)).is_unknown());
}

TEST(Dim, DivideIsExactOrNullopt) {
  Dim b = Dim::symbol("b");
  auto q = (b * Dim(64)).divide(b);
  ASSERT_TRUE(q.has_value());
  ASSERT_TRUE(q->is_known());
  EXPECT_EQ(q->value(), 64);

  auto r = (b * Dim(64)).divide(Dim(16));
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(*r, b * Dim(4));

  EXPECT_FALSE(b.divide(b * Dim(2)).has_value());          // 1/2 is not an integer
  EXPECT_FALSE(b.divide(Dim::symbol("c")).has_value());    // would leave c^-1
  EXPECT_FALSE((b * Dim(3)).divide(Dim(2)).has_value());
  EXPECT_FALSE(Dim(7).divide(Dim(2)).has_value());
  EXPECT_EQ(Dim(12).divide(Dim(4))->value(), 3);
  EXPECT_FALSE(Dim(12).divide(Dim(0)).has_value());
  EXPECT_FALSE(Dim().divide(Dim(1)).has_value());
  EXPECT_FALSE(Dim(4).divide(Dim()).has_value());
}

TEST(Dim, UnknownDimsAreNeverEqual) {
  Dim u;
  EXPECT_FALSE(u == u);
  EXPECT_FALSE(Dim() == Dim());
  EXPECT_FALSE(Dim() == Dim(1));
  EXPECT_FALSE(Dim(1) == Dim());
}

TEST(Dim, KnownAndSymbolicDimsCompareByValue) {
  EXPECT_EQ(Dim(3), Dim(3));
  EXPECT_NE(Dim(3), Dim(4));
  EXPECT_NE(Dim(3), Dim::symbol("b"));
  EXPECT_EQ(Dim::symbol("b"), Dim::symbol("b"));
  EXPECT_NE(Dim::symbol("b"), Dim::symbol("2*b"));
}

TEST(Shape, ToStringShowsEveryKindOfDim) {
  Shape s({Dim::symbol("batch"), Dim(3), Dim(224), Dim()});
  EXPECT_EQ(s.to_string(), "[batch, 3, 224, ?]");
  EXPECT_EQ(Shape(std::vector<Dim>{}).to_string(), "[]");
  EXPECT_EQ(Shape().to_string(), "[...]");
  EXPECT_EQ(Shape({Dim::symbol("b") * Dim(7)}).to_string(), "[7*b]");
}

TEST(Shape, StaticSizesOnlyWhenEveryDimIsKnown) {
  Shape s = Shape::of({2, 3});
  EXPECT_TRUE(s.is_static());
  EXPECT_EQ(s.static_sizes(), (std::vector<int64_t>{2, 3}));
  Shape d({Dim::symbol("n"), Dim(3)});
  EXPECT_FALSE(d.is_static());
  EXPECT_FALSE(d.static_sizes().has_value());
  EXPECT_FALSE(Shape().is_static());
  EXPECT_TRUE(Shape(std::vector<Dim>{}).is_static());
  EXPECT_EQ(Shape(std::vector<Dim>{}).rank(), 0u);
}

TEST(Shape, RankOfUnknownRankShapeIsAnInternalError) {
  Shape s;
  EXPECT_FALSE(s.has_rank());
  EXPECT_THROW(s.rank(), tether::InternalError);
}

}  // namespace
