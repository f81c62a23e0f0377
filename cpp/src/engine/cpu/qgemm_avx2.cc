// qs8_gemm_6x16__avx2: R rows x 16 columns of int32 sums in 2R YMM accumulators (R = 1..6 by
// the tile's rows), exact for every uint8 x int8 pair. vpmaddubsw would multiply the bytes
// directly but saturates its int16 pair sums (2 x 255 x -128 is past -32768), so the products
// are formed in int16 instead: a packed step is 2 depths, A's rows hold int16 (two values of a
// row are broadcast as one dword), B stays int8 in memory and vpmovsxbw widens 8 columns x 2
// depths per load, and vpmaddwd forms the two products and their sum in int32 before vpaddd
// accumulates them. (Packing B as int16 instead ran about 5% faster with many rows but 20%
// slower for one row, which streams B, and doubled the packed weights.) Also the integer GEMM's
// tile epilogue compiled for AVX2. Compiled with -mavx2 -mfma; called only when the CPU has
// them.
#include "util/simd.h"

#include <cstring>
#include <type_traits>

#include "engine/cpu/qgemm_kernels.h"

namespace tether::engine::cpu {

#include "engine/cpu/qgemm_epilogue.inc"

namespace {

constexpr int kNr = 16;

template <int kRows>
void gemm_rows_x16(int64_t groups, const uint8_t* a, int64_t lda, const int8_t* b, int32_t* acc) {
  __m256i c[kRows][2];
#pragma GCC unroll 6
  for (int r = 0; r < kRows; ++r) c[r][0] = c[r][1] = _mm256_setzero_si256();
  for (int64_t g = 0; g < groups; ++g) {
    const __m256i b0 = _mm256_cvtepi8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(b + g * 2 * kNr)));
    const __m256i b1 = _mm256_cvtepi8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(b + g * 2 * kNr + 16)));
#pragma GCC unroll 6
    for (int r = 0; r < kRows; ++r) {
      int32_t a2;  // two int16 values
      std::memcpy(&a2, a + r * lda + 4 * g, 4);
      const __m256i av = _mm256_set1_epi32(a2);
      c[r][0] = _mm256_add_epi32(c[r][0], _mm256_madd_epi16(av, b0));
      c[r][1] = _mm256_add_epi32(c[r][1], _mm256_madd_epi16(av, b1));
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < kRows; ++r) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(acc + r * kNr), c[r][0]);
    _mm256_store_si256(reinterpret_cast<__m256i*>(acc + r * kNr + 8), c[r][1]);
  }
}

}  // namespace

void qs8_gemm_6x16__avx2(int64_t groups, const void* a, int64_t lda, const void* b, int32_t* acc, int64_t rows) {
  const auto* pa = static_cast<const uint8_t*>(a);
  const auto* pb = static_cast<const int8_t*>(b);
  switch (rows) {
    case 1: return gemm_rows_x16<1>(groups, pa, lda, pb, acc);
    case 2: return gemm_rows_x16<2>(groups, pa, lda, pb, acc);
    case 3: return gemm_rows_x16<3>(groups, pa, lda, pb, acc);
    case 4: return gemm_rows_x16<4>(groups, pa, lda, pb, acc);
    case 5: return gemm_rows_x16<5>(groups, pa, lda, pb, acc);
    default: return gemm_rows_x16<6>(groups, pa, lda, pb, acc);
  }
}

void qs8_gemm_epilogue__avx2(const int32_t* acc, int64_t ld, int64_t rows, int64_t cols, const QTileTerms& terms,
                             const QGemmOutput& out, int64_t i0, int64_t j0) {
  tile_epilogue(acc, ld, rows, cols, terms, out, i0, j0);
}

}  // namespace tether::engine::cpu
