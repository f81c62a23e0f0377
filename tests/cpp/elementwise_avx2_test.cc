// The AVX2 element-wise kernels (engine/cpu/elementwise.h) against the C library in double,
// over the whole float range, with their special values and every tail length.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "../../cpp/src/engine/cpu/elementwise.h"
#include "../../cpp/src/util/cpu_features.h"

#if defined(__x86_64__)
namespace {

using tether::engine::cpu::VectorUnaryFn;
namespace cpu = tether::engine::cpu;

constexpr float kInf = std::numeric_limits<float>::infinity();

bool have_avx2() { return tether::util::cpu_features().avx2; }

// Every 997th float bit pattern of either sign between lo and hi (about 4 million values over
// the whole range), in one array so that the kernel sees them 8 at a time.
std::vector<float> floats_between(float lo, float hi) {
  std::vector<float> out;
  for (uint32_t bits = 0; bits < 0x7F800000u; bits += 997) {
    float v;
    std::memcpy(&v, &bits, sizeof v);
    for (float x : {v, -v})
      if (x >= lo && x <= hi) out.push_back(x);
  }
  return out;
}

std::vector<float> run(VectorUnaryFn f, const std::vector<float>& x) {
  std::vector<float> y(x.size());
  f(x.data(), y.data(), static_cast<int64_t>(x.size()));
  return y;
}

// The largest |got - want| / (abs + rel |want|) over x: below 1 when every element is within
// abs + rel |want| of the reference.
template <typename Ref>
double worst_ratio(VectorUnaryFn f, float lo, float hi, double abs, double rel, Ref ref) {
  const std::vector<float> x = floats_between(lo, hi);
  const std::vector<float> y = run(f, x);
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = ref(static_cast<double>(x[i]));
    const double ratio = std::fabs(y[i] - want) / (abs + rel * std::fabs(want));
    if (std::isnan(ratio)) return std::numeric_limits<double>::infinity();  // a NaN result
    worst = std::max(worst, ratio);
  }
  return worst;
}

float one(VectorUnaryFn f, float x) {
  float y = 0;
  f(&x, &y, 1);
  return y;
}

double sigmoid_ref(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double gelu_ref(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh_ref(double x) { return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

class ElementwiseAvx2 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_avx2()) GTEST_SKIP() << "this CPU (or TETHER_ISA) has no AVX2";
  }
};

TEST_F(ElementwiseAvx2, ExpRelativeErrorIsBelow3e7AndSubnormalResultsAreRoundedOnce) {
  EXPECT_LT(worst_ratio(cpu::f32_vexp__avx2, -87.0f, 88.7f, 0, 3e-7, [](double x) { return std::exp(x); }), 1);
  // Subnormal results: within one subnormal step (1.4e-45) of the true value.
  EXPECT_LT(worst_ratio(cpu::f32_vexp__avx2, -103.9f, -87.0f, 1.41e-45, 3e-7, [](double x) { return std::exp(x); }), 1);
  EXPECT_EQ(one(cpu::f32_vexp__avx2, 88.8f), kInf);
  EXPECT_EQ(one(cpu::f32_vexp__avx2, kInf), kInf);
  EXPECT_EQ(one(cpu::f32_vexp__avx2, -kInf), 0.0f);
  EXPECT_EQ(one(cpu::f32_vexp__avx2, -200.0f), 0.0f);
  EXPECT_EQ(one(cpu::f32_vexp__avx2, 0.0f), 1.0f);
  EXPECT_GT(one(cpu::f32_vexp__avx2, -100.0f), 0.0f);  // e^-100 is 3.7e-44: subnormal, not 0
}

TEST_F(ElementwiseAvx2, ErfAbsoluteErrorIsBelow2e7AndRelativeErrorBelow5e7) {
  EXPECT_LT(worst_ratio(cpu::f32_verf__avx2, -20.0f, 20.0f, 2e-7, 0, [](double x) { return std::erf(x); }), 1);
  // Small arguments keep their relative accuracy (erf(x) ~ 1.13 x), down to the normal floats.
  EXPECT_LT(worst_ratio(cpu::f32_verf__avx2, -0.5f, 0.5f, 1e-37, 5e-7, [](double x) { return std::erf(x); }), 1);
  EXPECT_EQ(one(cpu::f32_verf__avx2, kInf), 1.0f);
  EXPECT_EQ(one(cpu::f32_verf__avx2, -kInf), -1.0f);
  EXPECT_EQ(one(cpu::f32_verf__avx2, 5.0f), 1.0f);
  EXPECT_TRUE(std::signbit(one(cpu::f32_verf__avx2, -0.0f)));
}

TEST_F(ElementwiseAvx2, TanhAbsoluteErrorIsBelow3e7AndRelativeErrorBelow5e7) {
  const auto ref = [](double x) { return std::tanh(x); };
  EXPECT_LT(worst_ratio(cpu::f32_vtanh__avx2, -100.0f, 100.0f, 3e-7, 0, ref), 1);
  EXPECT_LT(worst_ratio(cpu::f32_vtanh__avx2, -100.0f, 100.0f, 1e-37, 5e-7, ref), 1);
  EXPECT_EQ(one(cpu::f32_vtanh__avx2, kInf), 1.0f);
  EXPECT_EQ(one(cpu::f32_vtanh__avx2, -kInf), -1.0f);
  EXPECT_EQ(one(cpu::f32_vtanh__avx2, 12.0f), 1.0f);
}

TEST_F(ElementwiseAvx2, SigmoidAndSiluAreAccurateIncludingTheirTails) {
  EXPECT_LT(worst_ratio(cpu::f32_vsigmoid__avx2, -100.0f, 100.0f, 3e-7, 0, sigmoid_ref), 1);
  // Relative accuracy where the result is a normal float far from 1.
  EXPECT_LT(worst_ratio(cpu::f32_vsigmoid__avx2, -85.0f, 100.0f, 0, 5e-7, sigmoid_ref), 1);
  EXPECT_LT(worst_ratio(cpu::f32_vsilu__avx2, -85.0f, 1e30f, 1e-37, 5e-7, [](double x) { return x * sigmoid_ref(x); }),
            1);
  for (float x : {-88.5f, -88.7f, -87.0f, 86.7f, 88.5f}) {
    EXPECT_NEAR(one(cpu::f32_vsigmoid__avx2, x), sigmoid_ref(x), 3e-7) << x;
    EXPECT_NEAR(one(cpu::f32_vsilu__avx2, x), x * sigmoid_ref(x), 3e-7 * std::fabs(x)) << x;
  }
  EXPECT_EQ(one(cpu::f32_vsigmoid__avx2, kInf), 1.0f);
  EXPECT_EQ(one(cpu::f32_vsigmoid__avx2, -kInf), 0.0f);
  EXPECT_EQ(one(cpu::f32_vsilu__avx2, kInf), kInf);
}

TEST_F(ElementwiseAvx2, GeluFormsAreWithin3e7OfTheirDefinitions) {
  // Error relative to max(1, |x|): erf's (or tanh's) error scaled by x / 2, and x's rounding.
  EXPECT_LT(worst_ratio(cpu::f32_vgelu__avx2, -1.0f, 1.0f, 3e-7, 0, gelu_ref), 1);
  EXPECT_LT(worst_ratio(cpu::f32_vgelu_tanh__avx2, -1.0f, 1.0f, 3e-7, 0, gelu_tanh_ref), 1);
  for (float lim : {-1e30f, 1e30f}) {
    const float lo = lim < 0 ? lim : 1.0f, hi = lim < 0 ? -1.0f : lim;
    const std::vector<float> x = floats_between(lo, hi);
    for (VectorUnaryFn f : {cpu::f32_vgelu__avx2, cpu::f32_vgelu_tanh__avx2}) {
      const std::vector<float> y = run(f, x);
      double worst = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        const double xd = x[i], want = f == cpu::f32_vgelu__avx2 ? gelu_ref(xd) : gelu_tanh_ref(xd);
        const double ratio = std::fabs(y[i] - want) / std::fabs(xd);
        worst = std::isnan(ratio) ? std::numeric_limits<double>::infinity() : std::max(worst, ratio);
      }
      EXPECT_LT(worst, 3e-7) << (f == cpu::f32_vgelu__avx2 ? "gelu" : "gelu_tanh") << " on sign " << lim;
    }
  }
  EXPECT_EQ(one(cpu::f32_vgelu__avx2, kInf), kInf);
  EXPECT_EQ(one(cpu::f32_vgelu_tanh__avx2, kInf), kInf);
}

const VectorUnaryFn kAll[] = {cpu::f32_vexp__avx2,     cpu::f32_verf__avx2,  cpu::f32_vtanh__avx2,
                              cpu::f32_vsigmoid__avx2, cpu::f32_vsilu__avx2, cpu::f32_vgelu__avx2,
                              cpu::f32_vgelu_tanh__avx2};

TEST_F(ElementwiseAvx2, NaNInGivesNaNOutInEveryLane) {
  for (VectorUnaryFn f : kAll) {
    std::vector<float> x = {1.0f, std::nanf(""), -2.0f, -std::nanf(""), 0.5f, std::nanf("7"), 3.0f, 0.0f, std::nanf("")};
    const std::vector<float> y = run(f, x);
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(std::isnan(y[i]), std::isnan(x[i])) << "element " << i;
  }
}

// Every length 0..23 (tails of 1..7 after 0, 1 and 2 full vectors), out of place and in place:
// the same values as in a long array, and nothing written past n.
TEST_F(ElementwiseAvx2, TailsMatchFullVectorsAndWriteNothingPastTheEnd) {
  std::vector<float> src(24);
  for (size_t i = 0; i < src.size(); ++i) src[i] = -3.0f + 0.37f * static_cast<float>(i);
  for (VectorUnaryFn f : kAll) {
    std::vector<float> padded(src);
    padded.resize(32, 0.25f);
    const std::vector<float> full = run(f, padded);
    for (int64_t n = 0; n <= 23; ++n) {
      std::vector<float> y(32, 42.0f);
      f(src.data(), y.data(), n);
      std::vector<float> in_place(src);
      in_place.resize(32, 42.0f);
      f(in_place.data(), in_place.data(), n);
      for (int64_t i = 0; i < 32; ++i) {
        const float want = i < n ? full[i] : 42.0f;
        EXPECT_EQ(y[i], want) << "n " << n << " element " << i;
        EXPECT_EQ(in_place[i], i < n ? full[i] : (i < 24 ? src[i] : 42.0f)) << "in place, n " << n << " element " << i;
      }
    }
  }
}

}  // namespace
#endif  // __x86_64__
