// Row cores of the normalisation kernels (norm.cc), shared with the com.microsoft fused
// normalisations (ms_norm.cc). Internal to the CPU backend.
#pragma once

#include <cstdint>

namespace tether::engine::cpu {

/// One row of n values: y = float((x - mean) * inv_std) * scale + bias (no bias when bias is
/// nullptr; scale is required), the statistics in double. Returns mean and inv_std =
/// 1 / sqrt(variance + eps). x and y may not overlap.
void layer_norm_row(const float* x, float* y, int64_t n, double eps, const float* scale, const float* bias,
                    double& mean_out, double& inv_out);

/// One row of n values normalised by its root mean square: y = float(x * inv_rms) * scale,
/// inv_rms = 1 / sqrt(mean(x^2) + eps) accumulated in double, and returned. x and y may not
/// overlap.
double rms_norm_row(const float* x, float* y, int64_t n, double eps, const float* scale);

}  // namespace tether::engine::cpu
