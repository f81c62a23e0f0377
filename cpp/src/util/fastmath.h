// Branch-free float approximations of exp, erf, tanh and sigmoid that compilers vectorise.
// Accuracy (checked against the C library over the whole float range in tests/cpp):
//   fast_exp:  relative error < 3e-7 (overflow to +inf above 88.72, 0 below -103.9)
//   fast_erf:  absolute error < 5e-7
//   fast_tanh: absolute error < 3e-7, relative error < 5e-7;  fast_sigmoid: absolute error < 3e-7
// NaN in gives NaN out; infinities give the functions' limits.
#pragma once

#include <cstdint>
#include <cstring>

namespace tether::util {

inline float fast_exp(float x) {
  // x = n ln2 + r with |r| <= ln2 / 2; e^r by a degree-6 polynomial; 2^n into the exponent.
  const float clamped = x > 88.72284f ? 88.72284f : (x < -103.9721f ? -103.9721f : x);
  const float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float n = (clamped * 1.44269504088896341f + kRound) - kRound;
  float r = clamped - n * 0.693145751953125f;
  r = r - n * 1.428606765330187e-06f;
  float p = 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // 2^n in two factors so that n down to -149 (subnormal results) stays exact.
  const int32_t ni = n == n ? static_cast<int32_t>(n) : 0;  // NaN: any exponent, p is NaN already
  const int32_t half = ni / 2;
  const uint32_t b1 = static_cast<uint32_t>(half + 127) << 23, b2 = static_cast<uint32_t>(ni - half + 127) << 23;
  float s1, s2;
  std::memcpy(&s1, &b1, sizeof s1);
  std::memcpy(&s2, &b2, sizeof s2);
  const float y = p * s1 * s2;
  // Above the clamp the true value overflows; NaN passes through (every comparison is false).
  return x > 88.72284f ? __builtin_inff() : (x != x ? x : y);
}

inline float fast_erf(float x) {
  // erfc(|x|) = t exp(-x^2 + P(t)), t = 1 / (1 + |x| / 2): Chebyshev fit, relative error
  // below 1.2e-7 over all x (Numerical Recipes' erfcc); erf = 1 - erfc with x's sign.
  const float z = x < 0 ? -x : x;
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  const float erfc = t * fast_exp(p - z * z);
  const float e = 1.0f - erfc;
  return x < 0 ? -e : (x != x ? x : e);
}

inline float fast_tanh(float x) {
  // tanh = 1 - 2 / (e^{2x} + 1) away from 0, where an error in e^{2x} hardly moves it; for
  // |x| <= 0.5, where that form cancels, tanh's odd Taylor series to x^17 (its remainder there
  // is below 1e-8 of tanh), so that the relative error stays a few ulp (recurrent layers feed
  // tanh's output back through many steps).
  const float e = fast_exp(2.0f * x);
  const float far = 1.0f - 2.0f / (e + 1.0f);
  const float x2 = x * x;
  float q = 5.9002744e-4f;
  q = q * x2 - 1.4558344e-3f;
  q = q * x2 + 3.5921280e-3f;
  q = q * x2 - 8.8632355e-3f;
  q = q * x2 + 2.1869488e-2f;
  q = q * x2 - 5.3968254e-2f;
  q = q * x2 + 1.3333334e-1f;
  q = q * x2 - 3.3333334e-1f;
  const float near = x + x * (x2 * q);
  const float a = x < 0 ? -x : x;
  return a <= 0.5f ? near : far;
}

inline float fast_sigmoid(float x) { return 1.0f / (1.0f + fast_exp(-x)); }

}  // namespace tether::util
