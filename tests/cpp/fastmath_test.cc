// The vectorisable approximations against the C library, over the whole float range.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "../../cpp/src/util/fastmath.h"

namespace {

using tether::util::fast_erf;
using tether::util::fast_exp;
using tether::util::fast_sigmoid;
using tether::util::fast_tanh;

// Every 997th float bit pattern between lo and hi (about 4 million values over the range).
template <typename F>
void for_floats(float lo, float hi, F&& f) {
  for (uint32_t bits = 0; bits < 0xFF800000u; bits += 997) {
    float v;
    std::memcpy(&v, &bits, sizeof v);
    for (float x : {v, -v})
      if (x >= lo && x <= hi) f(x);
  }
}

TEST(FastMath, ExpRelativeErrorIsBelow3e7) {
  double worst = 0;
  for_floats(-87.0f, 88.7f, [&](float x) {
    const double want = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::fabs(fast_exp(x) - want) / want);
  });
  EXPECT_LT(worst, 3e-7);
}

TEST(FastMath, ExpLimitsAndNaN) {
  EXPECT_EQ(fast_exp(100.0f), std::numeric_limits<float>::infinity());
  EXPECT_EQ(fast_exp(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(fast_exp(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(fast_exp(-200.0f), 0.0f);
  EXPECT_TRUE(std::isnan(fast_exp(std::nanf(""))));
  EXPECT_EQ(fast_exp(0.0f), 1.0f);
  // Subnormal results stay accurate in absolute terms.
  EXPECT_NEAR(fast_exp(-100.0f), std::exp(-100.0), 1e-45);
}

TEST(FastMath, ErfAbsoluteErrorIsBelow5e7) {
  double worst = 0;
  for_floats(-20.0f, 20.0f, [&](float x) { worst = std::max(worst, std::fabs(fast_erf(x) - std::erf(static_cast<double>(x)))); });
  EXPECT_LT(worst, 5e-7);
  EXPECT_EQ(fast_erf(std::numeric_limits<float>::infinity()), 1.0f);
  EXPECT_EQ(fast_erf(-std::numeric_limits<float>::infinity()), -1.0f);
  EXPECT_TRUE(std::isnan(fast_erf(std::nanf(""))));
}

TEST(FastMath, TanhAndSigmoidAbsoluteErrorIsBelow3e7) {
  double worst_tanh = 0, worst_sigmoid = 0;
  for_floats(-100.0f, 100.0f, [&](float x) {
    const double xd = x;
    worst_tanh = std::max(worst_tanh, std::fabs(fast_tanh(x) - std::tanh(xd)));
    worst_sigmoid = std::max(worst_sigmoid, std::fabs(fast_sigmoid(x) - 1.0 / (1.0 + std::exp(-xd))));
  });
  EXPECT_LT(worst_tanh, 3e-7);
  EXPECT_LT(worst_sigmoid, 3e-7);
  // Relative to tanh too, small arguments included (no cancellation near 0).
  double worst_relative = 0;
  for_floats(-100.0f, 100.0f, [&](float x) {
    const double want = std::tanh(static_cast<double>(x));
    if (want != 0) worst_relative = std::max(worst_relative, std::fabs(fast_tanh(x) - want) / std::fabs(want));
  });
  EXPECT_LT(worst_relative, 5e-7);
  EXPECT_EQ(fast_tanh(std::numeric_limits<float>::infinity()), 1.0f);
  EXPECT_EQ(fast_tanh(-std::numeric_limits<float>::infinity()), -1.0f);
  EXPECT_TRUE(std::isnan(fast_tanh(std::nanf(""))));
  EXPECT_TRUE(std::isnan(fast_sigmoid(std::nanf(""))));
}

}  // namespace
