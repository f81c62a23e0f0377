// The pieces of the integer GEMM each instruction set provides (see qgemm.h): a micro-kernel
// over packed panels and a tile epilogue, described by one QGemmIsa per kernel. Internal to
// the CPU backend; the files qgemm_<isa>.cc define them, each compiled for its ISA alone.
#pragma once

#include <cstdint>

#include "engine/cpu/qgemm.h"

namespace tether::engine::cpu {

/// Computes the raw sums of one MR x NR tile: acc[r * NR + q] = sum over the packed depth of
/// A(r, p) * B(p, q), for r < rows (rows <= MR; the rest of acc is left as is). Row r of A is at
/// a + r * lda bytes, and `b` is a panel of packed B, both `groups` steps deep (see QGemmIsa).
using QMicroKernel = void (*)(int64_t groups, const void* a, int64_t lda, const void* b, int32_t* acc, int64_t rows);

/// The zero point terms and bias of one tile, as wrap-around (uint32) int32 values:
///   s(r, q) = acc(r, q) + col_add[q] + row_add[r] - sum_t row_mul[t][r] * col_mul[t][q]
/// for t < products; and how a float output's activation is applied (Epilogue::as_clamp,
/// worked out once by the driver).
struct QTileTerms {
  const int32_t* col_add = nullptr;
  const int32_t* row_add = nullptr;
  const int32_t* row_mul[2] = {nullptr, nullptr};
  const int32_t* col_mul[2] = {nullptr, nullptr};
  int products = 0;
  bool act_fused = true;  ///< the activation is none or the clamp below
  bool act_clamp = false;
  float act_lo = 0.0f, act_hi = 0.0f;
};

/// Turns a tile of raw sums (row stride `ld`, rows x cols used) into s (QTileTerms) and stores
/// it through `out`'s epilogue as elements (i0 + r, j0 + q) of C.
using QTileEpilogue = void (*)(const int32_t* acc, int64_t ld, int64_t rows, int64_t cols, const QTileTerms& terms,
                               const QGemmOutput& out, int64_t i0, int64_t j0);

/// One integer GEMM kernel and the packing it reads.
///
/// A, as the kernel reads it: rows of uint8 values, or int16 when `a_wide`, depth zero-padded to
/// a whole number of steps of `group` values (unpadded uint8 A is read in place, with no copy).
/// Packed B, per panel of NR columns (columns past n zero): groups steps of NR x `group`
/// values, column c's values for depth [g * group, g * group + group) at ((g * NR) + c) *
/// group; depth past k is zero. Values are int8. Panels lie one after another.
struct QGemmIsa {
  const char* isa;  ///< "amx", "avx512vnni", "avxvnni", "avx256vnni", "avx2", "neoni8mm", "neondot", "generic"
  int mr;
  int nr;
  int group;  ///< depth per packed step: 4 for vpdpbusd, 2 for vpmaddwd, 1
  bool a_wide;  ///< A as int16
  QMicroKernel kernel;
  QTileEpilogue epilogue;
  int step_multiple = 1;  ///< the packed depth is a whole number of this many steps (AMX: 16)
  /// Called on a thread before it runs the kernel over a block of tiles (AMX: loads the tile
  /// configuration, which is per thread), or nullptr.
  void (*prepare)() = nullptr;
};

// Micro-kernels and epilogues, one file per ISA, compiled with that ISA's flags alone.
void qs8_gemm_32x32__amx(int64_t groups, const void* a, int64_t lda, const void* b, int32_t* acc, int64_t rows);
void qs8_gemm_32x32__amx_prepare();
void qs8_gemm_12x32__avx512vnni(int64_t groups, const void* a, int64_t lda, const void* b, int32_t* acc, int64_t rows);
void qs8_gemm_6x16__avxvnni(int64_t groups, const void* a, int64_t lda, const void* b, int32_t* acc, int64_t rows);
void qs8_gemm_6x16__avx256vnni(int64_t groups, const void* a, int64_t lda, const void* b, int32_t* acc, int64_t rows);
void qs8_gemm_6x16__avx2(int64_t groups, const void* a, int64_t lda, const void* b, int32_t* acc, int64_t rows);
void qs8_gemm_4x16c4__neondot(int64_t groups, const void* a, int64_t lda, const void* b, int32_t* acc, int64_t rows);
void qs8_gemm_4x16c4__neoni8mm(int64_t groups, const void* a, int64_t lda, const void* b, int32_t* acc, int64_t rows);
void qs8_gemm_epilogue__avx512(const int32_t* acc, int64_t ld, int64_t rows, int64_t cols, const QTileTerms& terms,
                               const QGemmOutput& out, int64_t i0, int64_t j0);
void qs8_gemm_epilogue__avx2(const int32_t* acc, int64_t ld, int64_t rows, int64_t cols, const QTileTerms& terms,
                             const QGemmOutput& out, int64_t i0, int64_t j0);

}  // namespace tether::engine::cpu
