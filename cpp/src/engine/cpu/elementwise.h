// Hand-written vector kernels of the element-wise family for the transcendental functions,
// called on contiguous floats by the unary kernels (elementwise.cc) and the fused epilogues
// (epilogue.cc) when run-time detection (capped by TETHER_ISA) finds AVX2 but not AVX-512; the
// portable loops over util/fastmath.h run everywhere else (on AVX-512 CPUs in their 16-lane
// multiversioned copy).
//
// Kernel names follow XNNPACK's grammar: f32_v<op>__<isa>. Each computes y[i] = op(x[i]) for
// i < n (any n >= 0; y may be x) within util/fastmath.h's documented error bounds, with its
// special values: NaN in gives NaN, infinities give the function's limits.
#pragma once

#include <cstdint>

namespace tether::engine::cpu {

/// A vector kernel: y[0:n] = op(x[0:n]); y may equal x (in place) but not overlap it otherwise.
using VectorUnaryFn = void (*)(const float* x, float* y, int64_t n);

#if defined(__x86_64__)
/// e^x: relative error below 3e-7; +inf above 88.72, 0 below -103.97, subnormal results
/// rounded once from the exact scaling (as util::fast_exp).
void f32_vexp__avx2(const float* x, float* y, int64_t n);
/// erf(x): absolute error below 2e-7 and relative error below 5e-7 (|x| small included).
void f32_verf__avx2(const float* x, float* y, int64_t n);
/// tanh(x): absolute error below 3e-7, relative error below 5e-7.
void f32_vtanh__avx2(const float* x, float* y, int64_t n);
/// 1 / (1 + e^-x): absolute error below 3e-7, relatively accurate down to 1e-37.
void f32_vsigmoid__avx2(const float* x, float* y, int64_t n);
/// x * sigmoid(x) (SiLU, Swish), computed as x / (1 + e^-x).
void f32_vsilu__avx2(const float* x, float* y, int64_t n);
/// x / 2 * (1 + erf(x / sqrt 2)): GELU, one pass.
void f32_vgelu__avx2(const float* x, float* y, int64_t n);
/// x / 2 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))): GELU's tanh form, one pass.
void f32_vgelu_tanh__avx2(const float* x, float* y, int64_t n);
#endif

}  // namespace tether::engine::cpu
