// Single-precision GEMM: C = A @ B with B packed in column panels, a register-tiled
// micro-kernel per instruction set (chosen at run time), and a fused per-tile epilogue.
//
// Kernel names follow XNNPACK's grammar: f32_gemm_<MR>x<NR>__<isa>.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "engine/cpu/cpu.h"

namespace tether::engine::cpu {

/// What a micro-kernel applies to a finished tile before storing it:
/// C = clamp(acc + row_bias[r] + col_bias[q] + sum[r * sum_ld + q], lo, hi), each part
/// optional; the clamp (Relu, Clip) lets NaN through.
struct TileEpilogue {
  const float* row_bias = nullptr;  ///< the tile's m values
  const float* col_bias = nullptr;  ///< the tile's n values
  const float* sum = nullptr;       ///< the tile's m x n values, row stride sum_ld
  int64_t sum_ld = 0;
  bool clamp = false;
  float lo = 0.0f, hi = 0.0f;
};

/// The value TileEpilogue gives one element (row r, column q of the tile) of sum `v`.
inline float tile_epilogue(float v, const TileEpilogue* ep, int64_t r, int64_t q) {
  if (ep == nullptr) return v;
  if (ep->row_bias != nullptr) v += ep->row_bias[r];
  if (ep->col_bias != nullptr) v += ep->col_bias[q];
  if (ep->sum != nullptr) v += ep->sum[r * ep->sum_ld + q];
  if (ep->clamp) {
    v = v < ep->lo ? ep->lo : v;
    v = v > ep->hi ? ep->hi : v;
  }
  return v;
}

/// C[0:m, 0:n] = (accumulate ? C : 0) + A @ Bpanel, for one tile with m <= MR and n <= NR,
/// then `ep` (when not nullptr) before the store.
/// A is a packed panel: k steps of `a_stride` floats (the packing's MR), row r at offset r.
/// The B panel holds k rows of NR floats. Only the first m rows and n columns of C are
/// written; kernels use a narrower variant when m is small.
using MicroKernel = void (*)(int64_t k, const float* a, int64_t a_stride, const float* panel, float* c, int64_t ldc,
                             int64_t m, int64_t n, bool accumulate, const TileEpilogue* ep);

/// As MicroKernel, but B's row p (NR floats, all readable) is read in place at b + b_off[p]
/// instead of from a packed panel: convolutions whose im2col rows are runs of a padded input.
using OffsetKernel = void (*)(int64_t k, const float* a, int64_t a_stride, const float* b, const int64_t* b_off,
                              float* c, int64_t ldc, int64_t m, int64_t n, bool accumulate, const TileEpilogue* ep);

struct GemmIsa {
  const char* name;  ///< "f32_gemm_12x32__avx512", ...
  int mr;
  int nr;
  MicroKernel kernel;
  OffsetKernel offsets_kernel;
};

/// dst[r * ldd + q] = src[r * lds + q] for r < rows, q < cols: short rows copied with vector
/// moves, not a library call each.
void copy_tile(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows, int64_t cols);

/// The micro-kernel for this machine (widest ISA available, see util::cpu_features).
const GemmIsa& gemm_isa();

// Micro-kernels, one per ISA, in files compiled for that ISA.
void f32_gemm_6x16__avx2(int64_t k, const float* a, int64_t a_stride, const float* panel, float* c, int64_t ldc,
                         int64_t m, int64_t n, bool accumulate, const TileEpilogue* ep);
void f32_gemm_12x32__avx512(int64_t k, const float* a, int64_t a_stride, const float* panel, float* c, int64_t ldc,
                            int64_t m, int64_t n, bool accumulate, const TileEpilogue* ep);
void f32_gemm_6x16_offsets__avx2(int64_t k, const float* a, int64_t a_stride, const float* b, const int64_t* b_off,
                                 float* c, int64_t ldc, int64_t m, int64_t n, bool accumulate, const TileEpilogue* ep);
void f32_gemm_12x32_offsets__avx512(int64_t k, const float* a, int64_t a_stride, const float* b, const int64_t* b_off,
                                    float* c, int64_t ldc, int64_t m, int64_t n, bool accumulate, const TileEpilogue* ep);
void f32_gemm_6x16__neon(int64_t k, const float* a, int64_t a_stride, const float* panel, float* c, int64_t ldc,
                         int64_t m, int64_t n, bool accumulate, const TileEpilogue* ep);
void f32_gemm_6x16_offsets__neon(int64_t k, const float* a, int64_t a_stride, const float* b, const int64_t* b_off,
                                 float* c, int64_t ldc, int64_t m, int64_t n, bool accumulate, const TileEpilogue* ep);

/// Depth of sgemm's K blocks: a KC x NR slice of a B panel stays in L1.
constexpr int64_t kGemmKc = 256;

/// A [m, k] packed for the micro-kernel, K block by K block (blocks of kGemmKc steps, the last
/// shorter): block b holds ceil(m / MR) tiles, tile t holding rows [t*MR, t*MR + MR) as kc steps
/// of MR floats (rows past m zero), so sgemm reads the weights of one block as one sequential
/// stream. 64-byte aligned.
class PackedA {
 public:
  PackedA() = default;
  /// Packs A where element (i, p) is a[i * lda + p].
  PackedA(const float* a, int64_t m, int64_t k, int64_t lda);
  /// Packs rows [0, m) and columns [k0, k0 + kc) of A into `dst` (panels of kc steps).
  static void pack_into(float* dst, const float* a, int64_t m, int64_t k0, int64_t kc, int64_t lda, int mr);
  static int64_t floats_needed(int64_t m, int64_t k, int mr) { return (m + mr - 1) / mr * mr * k; }
  const float* data() const { return data_; }
  /// The tiles of the K block starting at k0 (a multiple of kGemmKc).
  const float* block(int64_t k0) const;
  int64_t m() const { return m_; }
  int64_t k() const { return k_; }

 private:
  std::shared_ptr<float> storage_;
  float* data_ = nullptr;
  int64_t m_ = 0, k_ = 0;
};

/// B [k, n] packed for the micro-kernel, K block by K block as PackedA: block b (kc rows)
/// holds ceil(n / nr) panels, panel j holding columns [j*nr, j*nr + nr) as kc rows of nr
/// floats, zero-padded past n. 64-byte aligned. (pack_into fills one such block.)
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

/// What happens to each finished tile of C: a bias per row or per column, a summand of C's
/// own shape, then an activation.
struct GemmEpilogue {
  const float* row_bias = nullptr;  ///< m values
  const float* col_bias = nullptr;  ///< n values
  const float* sum = nullptr;       ///< m x n values, row stride ldc (as C); must not alias C
  Epilogue act;
};

/// Fills `dst` with rows [k0, k0 + kc) and columns [n0, n0 + nc) of image `image`'s B (see
/// GemmImages; 0 for a single product), packed: nc / nr panels (rounded up) of kc rows of nr
/// floats, zero-padded past column n0 + nc.
using PackBlock = std::function<void(const RunContext& ctx, int64_t image, int64_t k0, int64_t kc, int64_t n0,
                                     int64_t nc, float* dst)>;

/// Several products sharing A (a convolution over a batch of images): image i computes
/// C + i * c_stride = A @ B_i (B_i from the pack function), its epilogue's summand likewise
/// offset. sgemm then reads each block of A once for all the images a thread takes.
struct GemmImages {
  int64_t count = 1;
  int64_t c_stride = 0;  ///< floats between images in C (and in the epilogue's summand)
};

/// Where the GEMM's B comes from: already packed for all of K (PackedMatrix layout), or packed
/// block by block on demand (im2col, runtime matrices).
struct GemmB {
  const float* packed = nullptr;
  PackBlock pack;
};

/// Where the GEMM's A comes from: pre-packed for all of K (weights), or a row-major matrix
/// packed block by block.
struct GemmA {
  const float* packed = nullptr;  ///< PackedA layout, all of K
  const float* data = nullptr;    ///< row-major, row stride lda
  int64_t lda = 0;
};

/// Floats of scratch sgemm needs on `threads` threads (each packs whatever of A and B is
/// packed on demand into its own part).
int64_t sgemm_scratch_floats(int64_t m, int64_t n, int64_t k, int threads);

/// C[m, n] (row stride ldc) = A[m, k] @ B, then the epilogue. Blocked for the caches (B in
/// blocks of KC x NC, A in groups of M tiles) and run in parallel on the context's pool: one
/// parallel region, a grid of blocks of C each computed through all of K by one thread.
/// `scratch` holds sgemm_scratch_floats(m, n, k, threads) floats, 64-byte aligned, for at
/// least the pool's threads. B's pack function is called from the task's thread with a
/// context without a pool (it must not start parallel work).
void sgemm(const RunContext& ctx, int64_t m, int64_t n, int64_t k, const GemmA& a, const GemmB& b, float* c,
           int64_t ldc, const GemmEpilogue& ep, float* scratch, const GemmImages& images = {});

}  // namespace tether::engine::cpu
