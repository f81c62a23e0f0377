// Single-precision GEMM: C = A @ B with B packed in column panels, a register-tiled
// micro-kernel per instruction set (chosen at run time), and a fused per-tile epilogue.
//
// Kernel names follow XNNPACK's grammar: f32_gemm_<MR>x<NR>__<isa>.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/cpu/cpu.h"

namespace tether::engine::cpu {

/// C[0:m, 0:n] = (accumulate ? C : 0) + A[0:m, 0:k] @ Bpanel[0:k, 0:nr], for one tile with
/// m <= MR and n <= NR. Row r of A starts at a + r * lda; the panel holds k rows of NR floats.
/// Only the first m rows and n columns of C are written.
using MicroKernel = void (*)(int64_t k, const float* a, int64_t lda, const float* panel, float* c, int64_t ldc,
                             int64_t m, int64_t n, bool accumulate);

struct GemmIsa {
  const char* name;  ///< "f32_gemm_12x32__avx512", ...
  int mr;
  int nr;
  MicroKernel kernel;
};

/// The micro-kernel for this machine (widest ISA available, see util::cpu_features).
const GemmIsa& gemm_isa();

// Micro-kernels, one per ISA, in files compiled for that ISA.
void f32_gemm_6x16__avx2(int64_t k, const float* a, int64_t lda, const float* panel, float* c, int64_t ldc, int64_t m,
                         int64_t n, bool accumulate);
void f32_gemm_12x32__avx512(int64_t k, const float* a, int64_t lda, const float* panel, float* c, int64_t ldc,
                            int64_t m, int64_t n, bool accumulate);

/// B [k, n] in panels of `nr` columns: panel j holds columns [j*nr, j*nr + nr) row by row
/// (k rows of nr floats), zero-padded past n. 64-byte aligned.
class PackedMatrix {
 public:
  PackedMatrix() = default;
  /// Room for a k x n matrix, not filled.
  PackedMatrix(int64_t k, int64_t n, int nr);
  /// Packs B where element (p, j) is b[p * row_stride + j * col_stride].
  static PackedMatrix pack(const float* b, int64_t k, int64_t n, int64_t row_stride, int64_t col_stride, int nr);
  /// Packs into caller memory (`storage` holds bytes_needed(k, n, nr) bytes, 64-byte aligned).
  static void pack_into(float* storage, const float* b, int64_t k, int64_t n, int64_t row_stride, int64_t col_stride,
                        int nr);
  static int64_t floats_needed(int64_t k, int64_t n, int nr) { return (n + nr - 1) / nr * nr * k; }

  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  int nr() const { return nr_; }
  const float* data() const { return data_; }
  float* data() { return data_; }

 private:
  std::shared_ptr<float> storage_;
  float* data_ = nullptr;
  int64_t k_ = 0, n_ = 0;
  int nr_ = 0;
};

/// What happens to each finished tile of C: a bias per row or per column, then an activation.
struct GemmEpilogue {
  const float* row_bias = nullptr;  ///< m values
  const float* col_bias = nullptr;  ///< n values
  Epilogue act;
};

/// C[m, n] (row stride ldc) = A[m, k] (row stride lda) @ B, then the epilogue; B is packed
/// (data points at `panels`, laid out as PackedMatrix with nr = gemm_isa().nr). Runs in
/// parallel on the context's pool.
void sgemm(const RunContext& ctx, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* panels,
           float* c, int64_t ldc, const GemmEpilogue& ep);

}  // namespace tether::engine::cpu
