// com.microsoft MatMulNBits on the CPU: the products of float32 rows with block-quantized
// weights. Internal to the CPU backend.
//
// Kernel names follow XNNPACK's grammar: f32_qb<bits>w_gemv__<isa> (float32 activations,
// block-quantized weights of 4 or 8 bits, a matrix-vector product per row of A).
#pragma once

#include <cstdint>

#include "engine/cpu/cpu.h"

namespace tether::engine::cpu {

/// One product Y[m, n0:n1] = A[m, K] @ W^T for the rows of A, W being N columns of
/// block-quantized weights: w[n, k] = (q[n, k] - zp[n, b]) * scale[n, b], b = k / block_size.
///
/// The rows arrive prepared (prepare_nbits_rows): padded with zeros to k_blocks * block_size,
/// so a padding code in B's last block multiplies zero; for 4 bits each group of 16 values
/// reordered as its 8 even then its 8 odd positions, the order in which a byte's low and high
/// nibbles come out of B; and with each block's sum, which carries the zero point:
/// y = sum_b scale * (dot(a_b, q_b) - zp * sum(a_b)).
struct NBitsGemv {
  const float* a = nullptr;       ///< rows of a_stride floats, prepared as above
  const float* a_sums = nullptr;  ///< rows of k_blocks per-block sums of A
  int64_t a_stride = 0;           ///< k_blocks * block_size
  int64_t m = 0;
  const uint8_t* b = nullptr;     ///< [N, k_blocks, blob], as the model stores it
  /// Per column and block, {scale, scale * zero_point}: [N, k_blocks, 2].
  const float* params = nullptr;
  int64_t k_blocks = 0, block_size = 0, n = 0;
  const float* bias = nullptr;    ///< N values, or nullptr
  float* y = nullptr;             ///< rows of N floats (row stride n)
};

/// Computes columns [n0, n1) of every row. One function per bit width and ISA.
using NBitsGemvFn = void (*)(const NBitsGemv& p, int64_t n0, int64_t n1);

void f32_qb4w_gemv__generic(const NBitsGemv& p, int64_t n0, int64_t n1);
void f32_qb8w_gemv__generic(const NBitsGemv& p, int64_t n0, int64_t n1);
void f32_qb4w_gemv__avx2(const NBitsGemv& p, int64_t n0, int64_t n1);
void f32_qb8w_gemv__avx2(const NBitsGemv& p, int64_t n0, int64_t n1);

/// Dequantizes positions [from, from + len) of one quantization block, for `cols` columns
/// (blocks[c]: column c's codes of that block; w = code * scale[c] - shift[c]), into `len` rows
/// of a GEMM panel (row stride nr, a multiple of 8; zeros in columns [cols, nr)). `from` is a
/// multiple of 8 and from + len stays inside the block.
using NBitsDequantFn = void (*)(const uint8_t* const* blocks, const float* scale, const float* shift, int cols,
                                int64_t from, int64_t len, float* panel, int nr);

void f32_qb4w_dequant__generic(const uint8_t* const* blocks, const float* scale, const float* shift, int cols,
                               int64_t from, int64_t len, float* panel, int nr);
void f32_qb8w_dequant__generic(const uint8_t* const* blocks, const float* scale, const float* shift, int cols,
                               int64_t from, int64_t len, float* panel, int nr);
void f32_qb4w_dequant__avx2(const uint8_t* const* blocks, const float* scale, const float* shift, int cols,
                            int64_t from, int64_t len, float* panel, int nr);
void f32_qb8w_dequant__avx2(const uint8_t* const* blocks, const float* scale, const float* shift, int cols,
                            int64_t from, int64_t len, float* panel, int nr);

/// Writes one row of A (K floats) prepared for a gemv of `bits` bits (see NBitsGemv) to
/// `dst` (k_blocks * block_size floats) and its per-block sums to `sums` (k_blocks floats).
void prepare_nbits_row(const float* a, int64_t k, int64_t block_size, int bits, float* dst, float* sums);

/// Registers com.microsoft MatMulNBits with the CPU backend.
void register_matmul_nbits(KernelRegistry& r);

}  // namespace tether::engine::cpu
