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
// K is processed in blocks so that a panel slice and the A rows stay in L1/L2.
constexpr int64_t kKc = 384;

void f32_gemm_4x16__generic(int64_t k, const float* a, int64_t lda, const float* panel, float* c, int64_t ldc,
                            int64_t m, int64_t n, bool accumulate) {
  float acc[kGenericMr][kGenericNr] = {};
  for (int64_t p = 0; p < k; ++p) {
    const float* b = panel + p * kGenericNr;
    for (int64_t r = 0; r < m; ++r) {
      const float av = a[r * lda + p];
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

void sgemm(const RunContext& ctx, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* panels,
           float* c, int64_t ldc, const GemmEpilogue& ep) {
  const GemmIsa& isa = gemm_isa();
  const int64_t mr = isa.mr, nr = isa.nr;
  const int64_t mtiles = (m + mr - 1) / mr, ntiles = (n + nr - 1) / nr;
  if (m == 0 || n == 0) return;
  // Tasks walk the M tiles of one panel before moving on, so a panel slice is reused from cache.
  const int64_t tasks = mtiles * ntiles;
  const int64_t work_per_task = mr * nr * std::max<int64_t>(k, 1);
  parallel(ctx, tasks, std::max<int64_t>(1, (1 << 16) / work_per_task), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t jt = t / mtiles, it = t % mtiles;
      const int64_t i0 = it * mr, j0 = jt * nr;
      const int64_t rows = std::min(mr, m - i0), cols = std::min(nr, n - j0);
      const float* panel = panels + jt * k * nr;
      float* ct = c + i0 * ldc + j0;
      if (k == 0) {
        for (int64_t r = 0; r < rows; ++r) std::fill(ct + r * ldc, ct + r * ldc + cols, 0.0f);
      }
      for (int64_t p0 = 0; p0 < k; p0 += kKc) {
        const int64_t kc = std::min(kKc, k - p0);
        isa.kernel(kc, a + i0 * lda + p0, lda, panel + p0 * nr, ct, ldc, rows, cols, p0 > 0);
      }
      for (int64_t r = 0; r < rows; ++r) {
        float* row = ct + r * ldc;
        if (ep.row_bias != nullptr) {
          const float bv = ep.row_bias[i0 + r];
          for (int64_t q = 0; q < cols; ++q) row[q] += bv;
        }
        if (ep.col_bias != nullptr)
          for (int64_t q = 0; q < cols; ++q) row[q] += ep.col_bias[j0 + q];
        ep.act.apply(row, cols);
      }
    }
  });
}

}  // namespace tether::engine::cpu
