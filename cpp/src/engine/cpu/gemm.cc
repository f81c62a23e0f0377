// GEMM driver, packing, the portable micro-kernel and ISA selection.
#include "engine/cpu/gemm.h"

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

void f32_gemm_4x16__generic(int64_t k, const float* a, int64_t a_stride, const float* panel, float* c, int64_t ldc,
                            int64_t m, int64_t n, bool accumulate) {
  float acc[kGenericMr][kGenericNr] = {};
  for (int64_t p = 0; p < k; ++p) {
    const float* b = panel + p * kGenericNr;
    for (int64_t r = 0; r < m; ++r) {
      const float av = a[p * a_stride + r];
      for (int j = 0; j < kGenericNr; ++j) acc[r][j] += av * b[j];
    }
  }
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < n; ++j) c[r * ldc + j] = accumulate ? c[r * ldc + j] + acc[r][j] : acc[r][j];
}

GemmIsa select() {
  const util::CpuFeatures& f = util::cpu_features();
  if (f.avx512) return {"f32_gemm_12x32__avx512", 12, 32, f32_gemm_12x32__avx512};
  if (f.avx2) return {"f32_gemm_6x16__avx2", 6, 16, f32_gemm_6x16__avx2};
  return {"f32_gemm_4x16__generic", kGenericMr, kGenericNr, f32_gemm_4x16__generic};
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

PackedMatrix::PackedMatrix(int64_t k, int64_t n, int nr) : k_(k), n_(n), nr_(nr) {
  data_ = aligned_floats(floats_needed(k, n, nr), storage_);
}

void PackedMatrix::pack_into(float* dst, const float* b, int64_t k, int64_t n, int64_t row_stride, int64_t col_stride,
                             int nr) {
  const int64_t panels = (n + nr - 1) / nr;
  for (int64_t j = 0; j < panels; ++j) {
    const int64_t c0 = j * nr, cols = std::min<int64_t>(nr, n - c0);
    float* out = dst + j * k * nr;
    for (int64_t p = 0; p < k; ++p) {
      float* row = out + p * nr;
      const float* src = b + p * row_stride + c0 * col_stride;
      if (col_stride == 1) {
        std::memcpy(row, src, static_cast<size_t>(cols) * sizeof(float));
      } else {
        for (int64_t q = 0; q < cols; ++q) row[q] = src[q * col_stride];
      }
      for (int64_t q = cols; q < nr; ++q) row[q] = 0.0f;
    }
  }
}

PackedMatrix PackedMatrix::pack(const float* b, int64_t k, int64_t n, int64_t row_stride, int64_t col_stride, int nr) {
  PackedMatrix m(k, n, nr);
  pack_into(m.data_, b, k, n, row_stride, col_stride, nr);
  return m;
}

PackedA::PackedA(const float* a, int64_t m, int64_t k, int64_t lda) : m_(m), k_(k) {
  const int mr = gemm_isa().mr;
  data_ = aligned_floats(floats_needed(m, k, mr), storage_);
  // K block by K block, as sgemm reads them: the panels one block needs lie together, so the
  // weights stream through memory in the order they are used.
  for (int64_t k0 = 0; k0 < k; k0 += kKc)
    pack_into(data_ + (block(k0) - data_), a, m, k0, std::min(kKc, k - k0), lda, mr);
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

int64_t sgemm_scratch_floats(int64_t m, int64_t n, int64_t k) {
  const int64_t nr = gemm_isa().nr, mr = gemm_isa().mr;
  const int64_t kc = std::min(kKc, std::max<int64_t>(k, 1));
  // B block, then A block, each rounded to whole cache lines.
  return (kc * std::min((n + nr - 1) / nr * nr, kNc) + 15) / 16 * 16 + (m + mr - 1) / mr * mr * kc + 16;
}

void sgemm(const RunContext& ctx, int64_t m, int64_t n, int64_t k, const GemmA& a, const GemmB& b, float* c,
           int64_t ldc, const GemmEpilogue& ep, float* scratch) {
  const GemmIsa& isa = gemm_isa();
  const int64_t mr = isa.mr, nr = isa.nr;
  if (m == 0 || n == 0) return;
  if (k == 0) {  // no product: C is zeros, and the epilogue still applies
    for (int64_t i = 0; i < m; ++i) {
      float* row = c + i * ldc;
      std::fill(row, row + n, 0.0f);
      if (ep.row_bias != nullptr)
        for (int64_t q = 0; q < n; ++q) row[q] += ep.row_bias[i];
      if (ep.col_bias != nullptr)
        for (int64_t q = 0; q < n; ++q) row[q] += ep.col_bias[q];
      ep.act.apply(row, ep.sum != nullptr ? ep.sum + i * ldc : nullptr, n);
    }
    return;
  }
  const int64_t mtiles = (m + mr - 1) / mr;
  const int64_t group = std::max<int64_t>(1, kMc / mr);  // M tiles whose A panels stay in L2 together
  const int64_t mgroups = (mtiles + group - 1) / group;
  float* b_block = scratch;
  float* a_block = scratch == nullptr ? nullptr
                                      : scratch + (std::min(kKc, k) * std::min((n + nr - 1) / nr * nr, kNc) + 15) / 16 * 16;
  for (int64_t k0 = 0; k0 < k; k0 += kKc) {
    const int64_t kc = std::min(kKc, k - k0);
    const bool last = k0 + kc >= k;
    // A's panels for this K block: a window of the pre-packed matrix, or packed now.
    const float* a_panels = nullptr;
    int64_t a_stride = 0;
    if (a.packed != nullptr) {
      a_panels = a.packed + k0 * (mtiles * mr);  // PackedA::block(k0)
      a_stride = kc * mr;
    } else {
      TETHER_CHECK(a_block != nullptr, "sgemm: A packed on demand needs scratch");
      parallel(ctx, mtiles, 4, [&](int64_t t0, int64_t t1) {
        PackedA::pack_into(a_block + t0 * kc * mr, a.data + t0 * mr * a.lda, std::min(m, t1 * mr) - t0 * mr, k0, kc,
                           a.lda, static_cast<int>(mr));
      });
      a_panels = a_block;
      a_stride = kc * mr;
    }
    for (int64_t n0 = 0; n0 < n; n0 += kNc) {
      const int64_t nc = std::min(kNc, n - n0);
      const int64_t panels = (nc + nr - 1) / nr;
      const float* block = nullptr;
      int64_t panel_stride = 0;
      if (b.packed != nullptr) {
        block = b.packed + (n0 / nr) * k * nr + k0 * nr;
        panel_stride = k * nr;
      } else {
        TETHER_CHECK(b_block != nullptr && b.pack, "sgemm: B packed on demand needs a pack function and scratch");
        b.pack(ctx, k0, kc, n0, nc, b_block);
        block = b_block;
        panel_stride = kc * nr;
      }
      // Tasks: (group of M tiles, panel); a thread walks the panels of one group, so the
      // group's A panels stay in cache while each B panel is used once per tile.
      parallel(ctx, mgroups * panels, 1, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t mg = t / panels, jt = t % panels;
          const int64_t j0 = n0 + jt * nr, cols = std::min(nr, n - j0);
          const float* panel = block + jt * panel_stride;
          for (int64_t it = mg * group; it < std::min(mtiles, (mg + 1) * group); ++it) {
            const int64_t i0 = it * mr, rows = std::min(mr, m - i0);
            float* ct = c + i0 * ldc + j0;
            isa.kernel(kc, a_panels + it * a_stride, mr, panel, ct, ldc, rows, cols, k0 > 0);
            if (!last) continue;
            ep.act.apply_tile(ct, ldc, rows, cols, ep.row_bias != nullptr ? ep.row_bias + i0 : nullptr,
                              ep.col_bias != nullptr ? ep.col_bias + j0 : nullptr,
                              ep.sum != nullptr ? ep.sum + i0 * ldc + j0 : nullptr);
          }
        }
      });
    }
  }
}

}  // namespace tether::engine::cpu
