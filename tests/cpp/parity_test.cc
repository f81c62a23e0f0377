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
