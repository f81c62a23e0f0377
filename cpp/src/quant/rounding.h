// Rounding shared by the quantization parameters and the range methods.
#pragma once

#include <cmath>

namespace tether::quant {

/// x rounded to the nearest integer, halves to the even neighbour (numpy.round, and the
/// rounding of ONNX QuantizeLinear), whatever the floating-point environment's rounding mode.
inline double round_half_even(double x) {
  const double r = std::floor(x);
  const double frac = x - r;  // exact for every double
  if (frac > 0.5) return r + 1.0;
  if (frac < 0.5) return r;
  return std::fmod(r, 2.0) == 0.0 ? r : r + 1.0;
}

}  // namespace tether::quant
