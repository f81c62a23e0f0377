// tether/parity.h from C++: metrics on small tensors whose values are worked out by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tether/tether.h"

using namespace tether;

namespace {

ir::Tensor floats(std::vector<int64_t> dims, std::vector<float> v) {
  return ir::Tensor::copy_of(ir::DType::kFloat32, std::move(dims), v.data(), static_cast<int64_t>(v.size() * 4));
}

}  // namespace

TEST(Parity, MetricsOfASmallPairMatchTheirDefinitions) {
  // r = (3, 4), c = (3, 5): |d| = (0, 1); rel = (0, 1/4); r.c = 29; |r|^2 = 25, |c|^2 = 34.
  const parity::Metrics m = parity::compare(floats({2}, {3, 4}), floats({2}, {3, 5}), {.atol = 0.5, .rtol = 0.1});
  EXPECT_DOUBLE_EQ(m.max_abs_error, 1.0);
  EXPECT_DOUBLE_EQ(m.mean_abs_error, 0.5);
  EXPECT_DOUBLE_EQ(m.max_rel_error, 0.25);
  EXPECT_DOUBLE_EQ(m.cosine, 29.0 / std::sqrt(25.0 * 34.0));
  EXPECT_DOUBLE_EQ(m.snr_db, 10 * std::log10(25.0 / 1.0));
  EXPECT_EQ(m.mismatches, 1);  // 1 > 0.5 + 0.1 * 4
  EXPECT_EQ(m.worst_index, 1);
  EXPECT_DOUBLE_EQ(m.required_atol, 1.0 - 0.1 * 4);
  EXPECT_DOUBLE_EQ(m.required_rtol, (1.0 - 0.5) / 4);
  EXPECT_FALSE(m.ok);
}

TEST(Parity, EitherRuleNeedsOneBoundOnly) {
  // |d| = 1 at r = 4: rel 0.25 passes rtol 0.3 although |d| > atol.
  const auto m = parity::compare(floats({2}, {3, 4}), floats({2}, {3, 5}),
                                 {.atol = 0.5, .rtol = 0.3, .rule = parity::ToleranceRule::kEither});
  EXPECT_TRUE(m.ok);
  EXPECT_EQ(parity::rule_from_name("polygraphy"), parity::ToleranceRule::kEither);
  EXPECT_THROW(parity::rule_from_name("close"), ArgumentError);
}

TEST(Parity, NanPositionsMustMatch) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(parity::compare(floats({2}, {nan, 1}), floats({2}, {nan, 1})).ok);
  const auto m = parity::compare(floats({2}, {nan, 1}), floats({2}, {0, 1}), {.atol = 1e9, .rtol = 1e9});
  EXPECT_FALSE(m.ok);
  EXPECT_EQ(m.nonfinite_mismatches, 1);
  EXPECT_EQ(m.worst_index, 0);
  EXPECT_TRUE(std::isinf(m.required_atol));
}

TEST(Parity, ShapeDifferenceIsAProblemNotAThrow) {
  const auto m = parity::compare(floats({2}, {1, 2}), floats({1, 2}, {1, 2}));
  EXPECT_FALSE(m.ok);
  EXPECT_EQ(m.problem, "shape [1, 2] differs from the reference's [2]");
  EXPECT_THROW(parity::compare(floats({1}, {1}), floats({1}, {1}), {.atol = -1}), ArgumentError);
}

TEST(ParityState, ShardsMergedInAnyOrderGiveTheWholeTensorsMetricsBitForBit) {
  // 13 rows of 3: values spanning many magnitudes, so a plain double sum would depend on order.
  std::vector<float> r, c;
  for (int i = 0; i < 39; ++i) {
    const float x = std::ldexp(static_cast<float>(i % 7) - 3.1f, (i * 11) % 40 - 20);
    r.push_back(x);
    c.push_back(x * (1 + 1e-3f * static_cast<float>(i % 5)));
  }
  const parity::Tolerance tol{.atol = 1e-6, .rtol = 1e-4};
  const parity::Metrics whole = parity::compare(floats({13, 3}, r), floats({13, 3}, c), tol);
  auto rows = [&](const std::vector<float>& v, int from, int to) {
    return floats({to - from, 3}, std::vector<float>(v.begin() + from * 3, v.begin() + to * 3));
  };
  parity::CompareState a(tol), b(tol), d(tol);
  d.add(rows(r, 9, 13), rows(c, 9, 13), 9);
  b.add(rows(r, 0, 2), rows(c, 0, 2), 0);
  a.add(rows(r, 2, 9), rows(c, 2, 9), 2);
  d.merge(parity::CompareState::from_bytes(a.to_bytes()));
  d.merge(b);
  const parity::Metrics m = d.metrics();
  EXPECT_EQ(m.shape, (std::vector<int64_t>{13, 3}));
  EXPECT_EQ(m.elements, whole.elements);
  EXPECT_EQ(m.mismatches, whole.mismatches);
  EXPECT_EQ(m.worst_index, whole.worst_index);
  EXPECT_EQ(m.max_abs_error, whole.max_abs_error);
  EXPECT_EQ(m.mean_abs_error, whole.mean_abs_error);
  EXPECT_EQ(m.cosine, whole.cosine);
  EXPECT_EQ(m.snr_db, whole.snr_db);
  EXPECT_EQ(m.required_atol, whole.required_atol);
  EXPECT_EQ(m.required_rtol, whole.required_rtol);
  EXPECT_EQ(d.worst_location(), (std::pair<int64_t, int64_t>{whole.worst_index / 3, whole.worst_index % 3}));
}

TEST(ParityState, SumsAreExactWhereADoubleSumLosesTerms) {
  // r.c = 1e16 + 1 + 1 - 1e16 = 2 exactly; summed left to right in double it is 0.
  const ir::Tensor r = ir::Tensor::copy_of(ir::DType::kFloat64, {4}, std::vector<double>{1e8, 1, 1, -1e8}.data(), 32);
  const ir::Tensor c = ir::Tensor::copy_of(ir::DType::kFloat64, {4}, std::vector<double>{1e8, 1, 1, 1e8}.data(), 32);
  const double norm = 2e16 + 2;  // sum of squares, one correctly rounded addition of exact terms
  const parity::Metrics m = parity::compare(r, c);
  EXPECT_EQ(m.cosine, 2 / std::sqrt(norm * norm));
  // The same across many terms (past the accumulator's 1024-term buckets): r.c = 3000 exactly.
  std::vector<double> rv(3002, 1.0), cv(3002, 1.0);
  rv.front() = cv.front() = cv.back() = 1e8;
  rv.back() = -1e8;
  const auto bytes = static_cast<int64_t>(rv.size() * sizeof(double));
  const parity::Metrics many =
      parity::compare(ir::Tensor::copy_of(ir::DType::kFloat64, {3002}, rv.data(), bytes),
                      ir::Tensor::copy_of(ir::DType::kFloat64, {3002}, cv.data(), bytes));
  const double norm_many = 2e16 + 3000;  // exactly representable
  EXPECT_EQ(many.cosine, 3000 / std::sqrt(norm_many * norm_many));
  EXPECT_THROW(parity::CompareState::from_bytes("not a state"), ArgumentError);
  parity::CompareState s({.atol = 1}), t({.atol = 2});
  EXPECT_THROW(s.merge(t), ArgumentError);
}
