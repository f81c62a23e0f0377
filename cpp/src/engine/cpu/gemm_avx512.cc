// f32_gemm_<R>x32__avx512: R rows x 32 columns of C in 2R ZMM accumulators (R = 12 for full
// tiles; 8, 4, 2, 1 for the rows left over), masked stores for partial tiles. Compiled with
// AVX-512 flags; called only when the CPU has them.
#include "util/simd.h"

#include "engine/cpu/gemm.h"

namespace tether::engine::cpu {

namespace {

// B's row p: panel + p * 32 (packed), or b + b_off[p] (rows read in place, see OffsetKernel).
template <int kRows, bool kOffsets>
void gemm_rows_x32(int64_t k, const float* a, int64_t a_stride, const float* panel, const int64_t* b_off, float* c,
                   int64_t ldc, int64_t m, int64_t n, bool accumulate, const TileEpilogue* ep) {
  __m512 acc[kRows][2];
#pragma GCC unroll 12
  for (int r = 0; r < kRows; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < k; ++p) {
    // Packed A is read once from memory (weights stream through); fetch it ahead. The tiles of
    // a K block lie one after another, so past this tile's end lies the next tile's start.
    _mm_prefetch(reinterpret_cast<const char*>(a + (p + 24) * a_stride), _MM_HINT_T0);
    const float* row = kOffsets ? panel + b_off[p] : panel + p * 32;
    const __m512 b0 = _mm512_loadu_ps(row);
    const __m512 b1 = _mm512_loadu_ps(row + 16);
#pragma GCC unroll 12
    for (int r = 0; r < kRows; ++r) {
      const __m512 av = _mm512_set1_ps(a[p * a_stride + r]);
      acc[r][0] = _mm512_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm512_fmadd_ps(av, b1, acc[r][1]);
    }
  }
  const __mmask16 m0 = n >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << n) - 1);
  const __mmask16 m1 = n >= 32 ? 0xFFFF : n > 16 ? static_cast<__mmask16>((1u << (n - 16)) - 1) : 0;
#pragma GCC unroll 12
  for (int r = 0; r < kRows; ++r) {
    if (r >= m) break;
    float* cr = c + r * ldc;
    if (accumulate) {
      acc[r][0] = _mm512_add_ps(acc[r][0], _mm512_maskz_loadu_ps(m0, cr));
      acc[r][1] = _mm512_add_ps(acc[r][1], _mm512_maskz_loadu_ps(m1, cr + 16));
    }
    if (ep != nullptr) {
      if (ep->row_bias != nullptr) {
        const __m512 bv = _mm512_set1_ps(ep->row_bias[r]);
        acc[r][0] = _mm512_add_ps(acc[r][0], bv);
        acc[r][1] = _mm512_add_ps(acc[r][1], bv);
      }
      if (ep->col_bias != nullptr) {
        acc[r][0] = _mm512_add_ps(acc[r][0], _mm512_maskz_loadu_ps(m0, ep->col_bias));
        acc[r][1] = _mm512_add_ps(acc[r][1], _mm512_maskz_loadu_ps(m1, ep->col_bias + 16));
      }
      if (ep->sum != nullptr) {
        const float* sr = ep->sum + r * ep->sum_ld;
        acc[r][0] = _mm512_add_ps(acc[r][0], _mm512_maskz_loadu_ps(m0, sr));
        acc[r][1] = _mm512_add_ps(acc[r][1], _mm512_maskz_loadu_ps(m1, sr + 16));
      }
      if (ep->clamp) {
        // max(lo, v) and min(hi, v) return v when it is NaN (the second operand wins).
        const __m512 lo = _mm512_set1_ps(ep->lo), hi = _mm512_set1_ps(ep->hi);
        acc[r][0] = _mm512_min_ps(hi, _mm512_max_ps(lo, acc[r][0]));
        acc[r][1] = _mm512_min_ps(hi, _mm512_max_ps(lo, acc[r][1]));
      }
    }
    _mm512_mask_storeu_ps(cr, m0, acc[r][0]);
    _mm512_mask_storeu_ps(cr + 16, m1, acc[r][1]);
  }
}

}  // namespace

void f32_gemm_12x32__avx512(int64_t k, const float* a, int64_t a_stride, const float* panel, float* c, int64_t ldc,
                            int64_t m, int64_t n, bool accumulate, const TileEpilogue* ep) {
  // The narrowest variant that covers the tile's rows.
  if (m <= 1) return gemm_rows_x32<1, false>(k, a, a_stride, panel, nullptr, c, ldc, m, n, accumulate, ep);
  if (m <= 2) return gemm_rows_x32<2, false>(k, a, a_stride, panel, nullptr, c, ldc, m, n, accumulate, ep);
  if (m <= 4) return gemm_rows_x32<4, false>(k, a, a_stride, panel, nullptr, c, ldc, m, n, accumulate, ep);
  if (m <= 8) return gemm_rows_x32<8, false>(k, a, a_stride, panel, nullptr, c, ldc, m, n, accumulate, ep);
  gemm_rows_x32<12, false>(k, a, a_stride, panel, nullptr, c, ldc, m, n, accumulate, ep);
}

void f32_gemm_12x32_offsets__avx512(int64_t k, const float* a, int64_t a_stride, const float* b, const int64_t* b_off,
                                    float* c, int64_t ldc, int64_t m, int64_t n, bool accumulate,
                                    const TileEpilogue* ep) {
  if (m <= 1) return gemm_rows_x32<1, true>(k, a, a_stride, b, b_off, c, ldc, m, n, accumulate, ep);
  if (m <= 2) return gemm_rows_x32<2, true>(k, a, a_stride, b, b_off, c, ldc, m, n, accumulate, ep);
  if (m <= 4) return gemm_rows_x32<4, true>(k, a, a_stride, b, b_off, c, ldc, m, n, accumulate, ep);
  if (m <= 8) return gemm_rows_x32<8, true>(k, a, a_stride, b, b_off, c, ldc, m, n, accumulate, ep);
  gemm_rows_x32<12, true>(k, a, a_stride, b, b_off, c, ldc, m, n, accumulate, ep);
}

}  // namespace tether::engine::cpu
