// GEMM driver, packing, the portable micro-kernel and ISA selection.
#include "engine/cpu/gemm.h"

#include "engine/cpu/conv_nhwc.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "util/cpu_features.h"

namespace tether::engine::cpu {

namespace {

constexpr int kGenericMr = 4;
constexpr int kGenericNr = 16;
// Cache blocking: a KC x NR panel slice stays in L1, MC rows of A (KC deep) in L2, and a
// KC x NC block of B in L2/L3.
constexpr int64_t kKc = kGemmKc;
constexpr int64_t kMc = 144;
constexpr int64_t kNc = 1024;
// Bytes of B's panels (one K block deep) that the tiles of rows computed in place take in turn.
constexpr int64_t kChunkBytes = 128 * 1024;

template <bool kOffsets>
void gemm_4x16_generic(int64_t k, const float* a, int64_t a_stride, const float* panel, const int64_t* b_off, float* c,
                       int64_t ldc, int64_t m, int64_t n, bool accumulate, const TileEpilogue* ep) {
  float acc[kGenericMr][kGenericNr] = {};
  for (int64_t p = 0; p < k; ++p) {
    const float* b = kOffsets ? panel + b_off[p] : panel + p * kGenericNr;
    for (int64_t r = 0; r < m; ++r) {
      const float av = a[p * a_stride + r];
      for (int j = 0; j < kGenericNr; ++j) acc[r][j] += av * b[j];
    }
  }
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < n; ++j)
      c[r * ldc + j] = tile_epilogue(accumulate ? c[r * ldc + j] + acc[r][j] : acc[r][j], ep, r, j);
}

void f32_gemm_4x16__generic(int64_t k, const float* a, int64_t a_stride, const float* panel, float* c, int64_t ldc,
                            int64_t m, int64_t n, bool accumulate, const TileEpilogue* ep) {
  gemm_4x16_generic<false>(k, a, a_stride, panel, nullptr, c, ldc, m, n, accumulate, ep);
}

void f32_gemm_4x16_offsets__generic(int64_t k, const float* a, int64_t a_stride, const float* b, const int64_t* b_off,
                                    float* c, int64_t ldc, int64_t m, int64_t n, bool accumulate,
                                    const TileEpilogue* ep) {
  gemm_4x16_generic<true>(k, a, a_stride, b, b_off, c, ldc, m, n, accumulate, ep);
}

GemmIsa select() {
  const util::CpuFeatures& f = util::cpu_features();
#if defined(__x86_64__)
  if (f.avx512) return {"f32_gemm_12x32__avx512", 12, 32, f32_gemm_12x32__avx512, f32_gemm_12x32_offsets__avx512};
  if (f.avx2) return {"f32_gemm_6x16__avx2", 6, 16, f32_gemm_6x16__avx2, f32_gemm_6x16_offsets__avx2};
#elif defined(__aarch64__)
  // NR 16 as the channels-last convolution's kernels, whose panels sgemm shares (gemm_rows_in_place).
  if (f.neon) return {"f32_gemm_6x16__neon", 6, 16, f32_gemm_6x16__neon, f32_gemm_6x16_offsets__neon};
#endif
  return {"f32_gemm_4x16__generic", kGenericMr, kGenericNr, f32_gemm_4x16__generic, f32_gemm_4x16_offsets__generic};
}

float* aligned_floats(int64_t count, std::shared_ptr<float>& owner) {
  const size_t bytes = (static_cast<size_t>(std::max<int64_t>(count, 1)) * sizeof(float) + 63) / 64 * 64;
  auto* p = static_cast<float*>(std::aligned_alloc(64, bytes));
  if (p == nullptr) throw std::bad_alloc();
  owner.reset(p, [](float* q) { std::free(q); });
  return p;
}

}  // namespace

const GemmIsa& gemm_isa() {
  static const GemmIsa isa = select();
  return isa;
}

TETHER_MULTIVERSION __attribute__((optimize("no-tree-loop-distribute-patterns")))
void copy_tile(float* __restrict dst, int64_t ldd, const float* __restrict src, int64_t lds, int64_t rows,
               int64_t cols) {
  typedef float Lanes __attribute__((vector_size(16 * sizeof(float))));
  for (int64_t r = 0; r < rows; ++r) {
    float* d = dst + r * ldd;
    const float* s = src + r * lds;
    int64_t q = 0;
    for (; q + 16 <= cols; q += 16) {
      Lanes v;
      std::memcpy(&v, s + q, sizeof v);
      std::memcpy(d + q, &v, sizeof v);
    }
    for (; q < cols; ++q) d[q] = s[q];
  }
}

PackedMatrix::PackedMatrix(int64_t k, int64_t n, int nr) : k_(k), n_(n), nr_(nr) {
  data_ = aligned_floats(floats_needed(k, n, nr), storage_);
}

void PackedMatrix::pack_into(float* dst, const float* b, int64_t k, int64_t n, int64_t row_stride, int64_t col_stride,
                             int nr) {
  const int64_t panels = (n + nr - 1) / nr;
  for (int64_t j = 0; j < panels; ++j) {
    const int64_t c0 = j * nr, cols = std::min<int64_t>(nr, n - c0);
    float* out = dst + j * k * nr;
    if (col_stride == 1) {  // k rows of `cols` floats, without a library call per row
      copy_tile(out, nr, b + c0, row_stride, k, cols);
      if (cols < nr)
        for (int64_t p = 0; p < k; ++p) std::fill(out + p * nr + cols, out + (p + 1) * nr, 0.0f);
      continue;
    }
    for (int64_t p = 0; p < k; ++p) {
      float* row = out + p * nr;
      const float* src = b + p * row_stride + c0 * col_stride;
      for (int64_t q = 0; q < cols; ++q) row[q] = src[q * col_stride];
      for (int64_t q = cols; q < nr; ++q) row[q] = 0.0f;
    }
  }
}

PackedMatrix PackedMatrix::pack(const float* b, int64_t k, int64_t n, int64_t row_stride, int64_t col_stride, int nr) {
  PackedMatrix m(k, n, nr);
  // K block by K block, as sgemm reads them (see PackedA).
  const int64_t width = (n + nr - 1) / nr * nr;
  for (int64_t k0 = 0; k0 < k; k0 += kKc)
    pack_into(m.data_ + k0 * width, b + k0 * row_stride, std::min(kKc, k - k0), n, row_stride, col_stride, nr);
  return m;
}

PackedA::PackedA(const float* a, int64_t m, int64_t k, int64_t lda) : m_(m), k_(k) {
  const int mr = gemm_isa().mr;
  data_ = aligned_floats(floats_needed(m, k, mr), storage_);
  // K block by K block, as sgemm reads them: the panels one block needs lie together, so the
  // weights stream through memory in the order they are used.
  const int64_t rows = (m + mr - 1) / mr * mr;  // block(k0) starts k0 * rows floats in
  for (int64_t k0 = 0; k0 < k; k0 += kKc) pack_into(data_ + k0 * rows, a, m, k0, std::min(kKc, k - k0), lda, mr);
}

const float* PackedA::block(int64_t k0) const { return data_ + k0 * ((m_ + gemm_isa().mr - 1) / gemm_isa().mr * gemm_isa().mr); }

void PackedA::pack_into(float* dst, const float* a, int64_t m, int64_t k0, int64_t kc, int64_t lda, int mr) {
  const int64_t tiles = (m + mr - 1) / mr;
  for (int64_t t = 0; t < tiles; ++t) {
    float* out = dst + t * kc * mr;
    const int64_t rows = std::min<int64_t>(mr, m - t * mr);
    for (int64_t r = 0; r < rows; ++r) {
      const float* src = a + (t * mr + r) * lda + k0;
      for (int64_t p = 0; p < kc; ++p) out[p * mr + r] = src[p];
    }
    for (int64_t r = rows; r < mr; ++r)
      for (int64_t p = 0; p < kc; ++p) out[p * mr + r] = 0.0f;
  }
}

namespace {

// Floats of one thread's scratch: a B block of KC x min(n, NC) (A is pre-packed or read in place).
int64_t per_thread_floats(int64_t n, int64_t k) {
  const int64_t nr = gemm_isa().nr;
  const int64_t kc = std::min(kKc, std::max<int64_t>(k, 1));
  return (kc * std::min((n + nr - 1) / nr * nr, kNc) + 15) / 16 * 16;
}

// [begin, end) of part `i` when `count` items are split into `parts` near-equal runs.
int64_t split_point(int64_t count, int64_t parts, int64_t i) { return count * i / parts; }

// The micro-kernel's store epilogue for C's tile at (i0, j0): the biases and summand from there
// on, and the clamp (the activation's bounds when it is one).
TileEpilogue tile_epilogue(const GemmEpilogue& ep, const float* sum, int64_t ldc, int64_t i0, int64_t j0, bool clamp,
                           float lo, float hi) {
  TileEpilogue te;
  te.row_bias = ep.row_bias != nullptr ? ep.row_bias + i0 : nullptr;
  te.col_bias = ep.col_bias != nullptr ? ep.col_bias + j0 : nullptr;
  te.sum = sum != nullptr ? sum + i0 * ldc + j0 : nullptr;
  te.sum_ld = ldc;
  te.clamp = clamp;
  te.lo = lo;
  te.hi = hi;
  return te;
}

// Rows [r0, r1) of C times panels [q0, q1) of one packed K block of B (block: the panels from
// q0 on), with A's rows read in place by the channels-last convolution's micro-kernel (one tap
// of k channels): a GEMM whose A is computed at run time (activations, attention scores) never
// copies it.
void gemm_rows_in_place(const GemmA& a, float* c, int64_t ldc, const GemmEpilogue& ep, const float* sum, int64_t r0,
                        int64_t r1, int64_t n, int64_t k0, int64_t kc, bool last, const float* block, int64_t q0,
                        int64_t q1, bool fused, bool clamp, float lo, float hi) {
  const NhwcConvIsa& isa = nhwc_conv_isa();
  const int64_t mr = isa.mr, nr = isa.nr;
  const int64_t no_offset = 0;
  // Panels of B in chunks of about kChunkBytes (a whole number of conv_row's groups): every
  // tile of rows runs along one chunk, read from L2, before the next chunk is read.
  const int64_t chunk = std::max<int64_t>(1, kChunkBytes / (kc * nr * int64_t{sizeof(float)}) / kConvRowPanels) *
                        kConvRowPanels;
  for (int64_t c0 = q0; c0 < q1; c0 += chunk) {
    const int64_t c1 = std::min(q1, c0 + chunk);
    for (int64_t i0 = r0; i0 < r1; i0 += mr) {
      const int64_t rows = std::min(mr, r1 - i0);
      // A row alone (a batch of 1, or the last of a batch) runs across several panels at once:
      // the same sums in the same order as in a tile of rows, with enough of them in flight.
      const int64_t step = rows == 1 ? kConvRowPanels : 1;
      const float* a_row = a.data + i0 * a.lda + k0;
      for (int64_t q = c0; q < c1; q += step) {
        const int64_t panels = std::min(step, c1 - q);
        const int64_t j0 = q * nr, cols = std::min(panels * nr, n - j0);
        float* ct = c + i0 * ldc + j0;
        const float* block_q = block + (q - q0) * kc * nr;
        auto product = [&](const TileEpilogue* te) {
          if (rows == 1) isa.conv_row(a_row, kc, block_q, kc * nr, panels, ct, cols, k0 > 0, te);
          else isa.conv(rows, a_row, a.lda, &no_offset, &no_offset, 1, kc, block_q, ct, ldc, cols, k0 > 0, te);
        };
        if (!last || ep.row_bias != nullptr) {
          // (The micro-kernel's epilogue has no per-row bias: a GEMM with one adds it after.)
          product(nullptr);
          if (last)
            ep.act.apply_tile(ct, ldc, rows, cols, ep.row_bias + i0,
                              ep.col_bias != nullptr ? ep.col_bias + j0 : nullptr,
                              sum != nullptr ? sum + i0 * ldc + j0 : nullptr);
          continue;
        }
        const TileEpilogue te = tile_epilogue(ep, sum, ldc, i0, j0, clamp, lo, hi);  // (no row bias here)
        product(&te);
        if (!fused) ep.act.apply_tile(ct, ldc, rows, cols, nullptr, nullptr, nullptr);
      }
    }
  }
}

// One task of sgemm: rows [t0 * MR, t1 * MR) of C and panels [p0, p1) of the images' panels
// laid end to end (panel v is panel v % ppi of image v / ppi), through all of K, packing what
// it needs into its own scratch. Within a K block the task walks its images in turn, so A's
// block is read from memory once for all of them.
void gemm_block(int64_t m, int64_t n, int64_t k, const GemmA& a, const GemmB& b, float* c, int64_t ldc,
                const GemmEpilogue& ep, const GemmImages& images, int64_t t0, int64_t t1, int64_t p0, int64_t p1,
                float* scratch) {
  const GemmIsa& isa = gemm_isa();
  const int64_t mr = isa.mr, nr = isa.nr;
  const int64_t mtiles = (m + mr - 1) / mr, ppi = (n + nr - 1) / nr;
  const int64_t group = std::max<int64_t>(1, kMc / mr);  // M tiles whose A panels stay in L2 together
  const int64_t m0 = t0 * mr, rows_here = std::min(m, t1 * mr) - m0;
  float* b_block = scratch;
  const RunContext serial;  // packing runs on this task's thread
  bool clamp = false;
  float lo = 0.0f, hi = 0.0f;
  const bool fused = ep.act.as_clamp(clamp, lo, hi);
  for (int64_t k0 = 0; k0 < k; k0 += kKc) {
    const int64_t kc = std::min(kKc, k - k0);
    const bool last = k0 + kc >= k;
    // A's tiles t0.. for this K block: a window of the pre-packed matrix. A matrix computed at
    // run time is read in place instead (see the in-place loop below).
    const float* a_panels = a.packed != nullptr ? a.packed + k0 * (mtiles * mr) + t0 * kc * mr : nullptr;
    // Runs of at most NC columns, never across an image's end.
    for (int64_t v0 = p0; v0 < p1;) {
      const int64_t image = v0 / ppi, q0 = v0 % ppi;
      const int64_t q1 = std::min({ppi, q0 + kNc / nr, q0 + (p1 - v0)});
      v0 += q1 - q0;
      const int64_t n0 = q0 * nr, nc = std::min(n, q1 * nr) - n0;
      const float* block = nullptr;
      if (b.packed != nullptr) {
        block = b.packed + k0 * (ppi * nr) + q0 * kc * nr;  // PackedMatrix::block(k0), panel q0
      } else {
        b.pack(serial, image, k0, kc, n0, nc, b_block);
        block = b_block;
      }
      float* ci = c + image * images.c_stride;
      const float* sum = ep.sum != nullptr ? ep.sum + image * images.c_stride : nullptr;
      if (a_panels == nullptr) {
        gemm_rows_in_place(a, ci, ldc, ep, sum, m0, m0 + rows_here, n, k0, kc, last, block, q0, q1, fused, clamp, lo, hi);
        continue;
      }
      // A group of M tiles at a time, walking the block's panels: the group's A panels stay
      // in cache while each B panel slice is read once per tile from L1/L2.
      for (int64_t g0 = t0; g0 < t1; g0 += group) {
        const int64_t g1 = std::min(t1, g0 + group);
        for (int64_t it = g0; it < g1; ++it) {
          for (int64_t q = q0; q < q1; ++q) {
          const int64_t j0 = q * nr, cols = std::min(nr, n - j0);
          const float* panel = block + (q - q0) * kc * nr;
            const int64_t i0 = it * mr, rows = std::min(mr, m - i0);
            float* ct = ci + i0 * ldc + j0;
            if (!last) {
              isa.kernel(kc, a_panels + (it - t0) * kc * mr, mr, panel, ct, ldc, rows, cols, k0 > 0, nullptr);
              continue;
            }
            // The last K block: biases, summand and a clamp go into the kernel's store; other
            // activations follow over the stored tile.
            const TileEpilogue te = tile_epilogue(ep, sum, ldc, i0, j0, clamp, lo, hi);
            isa.kernel(kc, a_panels + (it - t0) * kc * mr, mr, panel, ct, ldc, rows, cols, k0 > 0, &te);
            if (!fused) ep.act.apply_tile(ct, ldc, rows, cols, nullptr, nullptr, nullptr);
          }
        }
      }
    }
  }
}

}  // namespace

int64_t sgemm_scratch_floats(int64_t m, int64_t n, int64_t k, int threads) {
  return std::max(threads, 1) * per_thread_floats(n, k) + 16;
}

void sgemm(const RunContext& ctx, int64_t m, int64_t n, int64_t k, const GemmA& a, const GemmB& b, float* c,
           int64_t ldc, const GemmEpilogue& ep, float* scratch, const GemmImages& images) {
  const GemmIsa& isa = gemm_isa();
  const int64_t mr = isa.mr, nr = isa.nr;
  if (m == 0 || n == 0 || images.count == 0) return;
  TETHER_CHECK(images.count == 1 || b.packed == nullptr, "sgemm: images need B packed on demand");
  if (k == 0) {  // no product: C is zeros, and the epilogue still applies
    for (int64_t im = 0; im < images.count; ++im) {
      for (int64_t i = 0; i < m; ++i) {
        float* row = c + im * images.c_stride + i * ldc;
        std::fill(row, row + n, 0.0f);
        if (ep.row_bias != nullptr)
          for (int64_t q = 0; q < n; ++q) row[q] += ep.row_bias[i];
        if (ep.col_bias != nullptr)
          for (int64_t q = 0; q < n; ++q) row[q] += ep.col_bias[q];
        ep.act.apply(row, ep.sum != nullptr ? ep.sum + im * images.c_stride + i * ldc : nullptr, n);
      }
    }
    return;
  }
  TETHER_CHECK(scratch != nullptr, "sgemm needs scratch");
  TETHER_CHECK(a.packed != nullptr || a.data != nullptr, "sgemm: A has no data");
  TETHER_CHECK(b.packed != nullptr || b.pack, "sgemm: B is neither packed nor packable");
  const int64_t mtiles = (m + mr - 1) / mr, panels = (n + nr - 1) / nr * images.count;
  const int threads = ctx.pool != nullptr ? ctx.pool->threads() : 1;
  // One parallel region per product: a grid of tasks, each running all of K on its block of C
  // with its own packing buffers (no barrier per K block). Columns are split first: B (im2col,
  // or the weights) is then packed or streamed once, and only A is shared. Twice as many
  // tasks as threads evens out blocks of unequal cost.
  int64_t gn = 1, gm = 1;
  if (threads > 1) {
    // Every split copies work: with gn column blocks, A is packed (or read) gn times; with gm
    // row blocks, B is. Packing costs more than reading pre-packed data from cache, so a
    // matrix packed on demand weighs 4 to 1. Take the grid of about 2 x threads blocks that
    // copies least, columns first on a tie.
    const int64_t target = 2 * static_cast<int64_t>(threads);
    const int64_t a_weight = a.packed != nullptr ? 1 : 4, b_weight = b.packed != nullptr ? 1 : 4;
    double best = -1.0;
    for (int64_t cn = std::min(panels, target); cn >= 1; --cn) {
      const int64_t cm = std::min(mtiles, (target + cn - 1) / cn);
      if (cm * cn < std::min<int64_t>(threads, mtiles * panels)) continue;
      const double cost = static_cast<double>(a_weight * (cn - 1)) * static_cast<double>(m * k) +
                          static_cast<double>(b_weight * (cm - 1)) * static_cast<double>(k * n * images.count);
      if (best < 0.0 || cost < best) {
        best = cost;
        gn = cn;
        gm = cm;
      }
    }
  }
  const int64_t per_thread = per_thread_floats(n, k);
  auto task = [&](int thread, int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t im = t / gn, jn = t % gn;
      gemm_block(m, n, k, a, b, c, ldc, ep, images, split_point(mtiles, gm, im), split_point(mtiles, gm, im + 1),
                 split_point(panels, gn, jn), split_point(panels, gn, jn + 1), scratch + thread * per_thread);
    }
  };
  if (gm * gn == 1 || ctx.pool == nullptr) {
    task(0, 0, gm * gn);
    return;
  }
  ctx.pool->parallel_for_indexed(gm * gn, 1, task);
}

}  // namespace tether::engine::cpu
