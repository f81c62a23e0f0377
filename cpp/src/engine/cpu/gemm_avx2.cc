// f32_gemm_<R>x16__avx2: R rows x 16 columns of C in 2R YMM accumulators (R = 6 for full
// tiles; 4, 2, 1 for the rows left over). Compiled with -mavx2 -mfma; called only when the
// CPU has them.
#include "util/simd.h"

#include "engine/cpu/gemm.h"

namespace tether::engine::cpu {

namespace {

// B's row p: panel + p * 16 (packed), or b + b_off[p] (rows read in place, see OffsetKernel).
template <int kRows, bool kOffsets>
void gemm_rows_x16(int64_t k, const float* a, int64_t a_stride, const float* panel, const int64_t* b_off, float* c,
                   int64_t ldc, int64_t m, int64_t n, bool accumulate, const TileEpilogue* ep) {
  __m256 acc[kRows][2];
#pragma GCC unroll 6
  for (int r = 0; r < kRows; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int64_t p = 0; p < k; ++p) {
    // Packed A streams from memory once (see the AVX-512 kernel); fetch it ahead.
    _mm_prefetch(reinterpret_cast<const char*>(a + (p + 32) * a_stride), _MM_HINT_T0);
    const float* row = kOffsets ? panel + b_off[p] : panel + p * 16;
    const __m256 b0 = _mm256_loadu_ps(row);
    const __m256 b1 = _mm256_loadu_ps(row + 8);
#pragma GCC unroll 6
    for (int r = 0; r < kRows; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + p * a_stride + r);
      acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
    }
  }
  if (n == 16) {
    for (int r = 0; r < kRows && r < m; ++r) {
      float* cr = c + r * ldc;
      if (accumulate) {
        acc[r][0] = _mm256_add_ps(acc[r][0], _mm256_loadu_ps(cr));
        acc[r][1] = _mm256_add_ps(acc[r][1], _mm256_loadu_ps(cr + 8));
      }
      if (ep != nullptr) {
        if (ep->row_bias != nullptr) {
          const __m256 bv = _mm256_set1_ps(ep->row_bias[r]);
          acc[r][0] = _mm256_add_ps(acc[r][0], bv);
          acc[r][1] = _mm256_add_ps(acc[r][1], bv);
        }
        if (ep->col_bias != nullptr) {
          acc[r][0] = _mm256_add_ps(acc[r][0], _mm256_loadu_ps(ep->col_bias));
          acc[r][1] = _mm256_add_ps(acc[r][1], _mm256_loadu_ps(ep->col_bias + 8));
        }
        if (ep->sum != nullptr) {
          const float* sr = ep->sum + r * ep->sum_ld;
          acc[r][0] = _mm256_add_ps(acc[r][0], _mm256_loadu_ps(sr));
          acc[r][1] = _mm256_add_ps(acc[r][1], _mm256_loadu_ps(sr + 8));
        }
        if (ep->clamp) {
          // max(lo, v) and min(hi, v) return v when it is NaN (the second operand wins).
          const __m256 lo = _mm256_set1_ps(ep->lo), hi = _mm256_set1_ps(ep->hi);
          acc[r][0] = _mm256_min_ps(hi, _mm256_max_ps(lo, acc[r][0]));
          acc[r][1] = _mm256_min_ps(hi, _mm256_max_ps(lo, acc[r][1]));
        }
      }
      _mm256_storeu_ps(cr, acc[r][0]);
      _mm256_storeu_ps(cr + 8, acc[r][1]);
    }
    return;
  }
  alignas(32) float tile[16];
  for (int r = 0; r < kRows && r < m; ++r) {
    _mm256_store_ps(tile, acc[r][0]);
    _mm256_store_ps(tile + 8, acc[r][1]);
    float* cr = c + r * ldc;
    for (int64_t j = 0; j < n; ++j) cr[j] = tile_epilogue(accumulate ? cr[j] + tile[j] : tile[j], ep, r, j);
  }
}

}  // namespace

void f32_gemm_6x16__avx2(int64_t k, const float* a, int64_t a_stride, const float* panel, float* c, int64_t ldc,
                         int64_t m, int64_t n, bool accumulate, const TileEpilogue* ep) {
  if (m <= 1) return gemm_rows_x16<1, false>(k, a, a_stride, panel, nullptr, c, ldc, m, n, accumulate, ep);
  if (m <= 2) return gemm_rows_x16<2, false>(k, a, a_stride, panel, nullptr, c, ldc, m, n, accumulate, ep);
  if (m <= 4) return gemm_rows_x16<4, false>(k, a, a_stride, panel, nullptr, c, ldc, m, n, accumulate, ep);
  gemm_rows_x16<6, false>(k, a, a_stride, panel, nullptr, c, ldc, m, n, accumulate, ep);
}

void f32_gemm_6x16_offsets__avx2(int64_t k, const float* a, int64_t a_stride, const float* b, const int64_t* b_off,
                                 float* c, int64_t ldc, int64_t m, int64_t n, bool accumulate, const TileEpilogue* ep) {
  if (m <= 1) return gemm_rows_x16<1, true>(k, a, a_stride, b, b_off, c, ldc, m, n, accumulate, ep);
  if (m <= 2) return gemm_rows_x16<2, true>(k, a, a_stride, b, b_off, c, ldc, m, n, accumulate, ep);
  if (m <= 4) return gemm_rows_x16<4, true>(k, a, a_stride, b, b_off, c, ldc, m, n, accumulate, ep);
  gemm_rows_x16<6, true>(k, a, a_stride, b, b_off, c, ldc, m, n, accumulate, ep);
}

}  // namespace tether::engine::cpu
