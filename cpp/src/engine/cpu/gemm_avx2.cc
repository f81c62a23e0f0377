// f32_gemm_6x16__avx2: 6 rows x 16 columns of C in 12 YMM accumulators. Compiled with
// -mavx2 -mfma; called only when the CPU has them.
#include <immintrin.h>

#include "engine/cpu/gemm.h"

namespace tether::engine::cpu {

void f32_gemm_6x16__avx2(int64_t k, const float* a, const float* panel, float* c, int64_t ldc, int64_t m, int64_t n,
                         bool accumulate) {
  constexpr int kMr = 6;
  __m256 acc[kMr][2];
#pragma GCC unroll 6
  for (int r = 0; r < kMr; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int64_t p = 0; p < k; ++p) {
    const __m256 b0 = _mm256_loadu_ps(panel + p * 16);
    const __m256 b1 = _mm256_loadu_ps(panel + p * 16 + 8);
#pragma GCC unroll 6
    for (int r = 0; r < kMr; ++r) {
      const __m256 av = _mm256_broadcast_ss(a + p * kMr + r);
      acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
    }
  }
  if (n == 16) {
    for (int r = 0; r < m; ++r) {
      float* cr = c + r * ldc;
      if (accumulate) {
        acc[r][0] = _mm256_add_ps(acc[r][0], _mm256_loadu_ps(cr));
        acc[r][1] = _mm256_add_ps(acc[r][1], _mm256_loadu_ps(cr + 8));
      }
      _mm256_storeu_ps(cr, acc[r][0]);
      _mm256_storeu_ps(cr + 8, acc[r][1]);
    }
    return;
  }
  alignas(32) float tile[16];
  for (int r = 0; r < m; ++r) {
    _mm256_store_ps(tile, acc[r][0]);
    _mm256_store_ps(tile + 8, acc[r][1]);
    float* cr = c + r * ldc;
    for (int64_t j = 0; j < n; ++j) cr[j] = accumulate ? cr[j] + tile[j] : tile[j];
  }
}

}  // namespace tether::engine::cpu
