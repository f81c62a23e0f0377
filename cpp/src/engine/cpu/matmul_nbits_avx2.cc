// f32_qb4w_gemv__avx2 and f32_qb8w_gemv__avx2: rows of A against block-quantized columns
// (see NBitsGemv). Four columns at a time share each load of A; a code becomes a float with
// one zero-extension per 8 bytes (4 bits: the 32-bit lanes then split into low and high
// nibbles, which is why A arrives with even and odd positions apart). Compiled with -mavx2
// -mfma; called only when the CPU has them.
#include "util/simd.h"

#include <cstring>

#include "engine/cpu/matmul_nbits.h"

namespace tether::engine::cpu {

namespace {

float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// 8 codes of 8 bits (or 8 bytes of two 4-bit codes each) widened to 32-bit lanes.
__m256i widen8(const uint8_t* src) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src)));
}

template <int kBits, int kCols>
void gemv_cols(const NBitsGemv& p, int64_t n0) {
  const int64_t blob = p.block_size * kBits / 8, col_bytes = p.k_blocks * blob;
  const __m256i low_nibble = _mm256_set1_epi32(0x0F);
  for (int64_t r = 0; r < p.m; ++r) {
    const float* a = p.a + r * p.a_stride;
    const float* sums = p.a_sums + r * p.k_blocks;
    __m256 acc[kCols];
    float corr[kCols];
    for (int c = 0; c < kCols; ++c) {
      acc[c] = _mm256_setzero_ps();
      corr[c] = 0.0f;
    }
    for (int64_t blk = 0; blk < p.k_blocks; ++blk) {
      const float* ab = a + blk * p.block_size;
      const uint8_t* bb = p.b + n0 * col_bytes + blk * blob;
      __m256 dot[kCols];
      for (int c = 0; c < kCols; ++c) dot[c] = _mm256_setzero_ps();
      if constexpr (kBits == 4) {
        for (int64_t g = 0; g < p.block_size; g += 16) {
          const __m256 even = _mm256_loadu_ps(ab + g), odd = _mm256_loadu_ps(ab + g + 8);
          for (int c = 0; c < kCols; ++c) {
            const __m256i v = widen8(bb + c * col_bytes + g / 2);
            const __m256 lo = _mm256_cvtepi32_ps(_mm256_and_si256(v, low_nibble));
            const __m256 hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4));
            dot[c] = _mm256_fmadd_ps(lo, even, dot[c]);
            dot[c] = _mm256_fmadd_ps(hi, odd, dot[c]);
          }
        }
      } else {
        for (int64_t g = 0; g < p.block_size; g += 8) {
          const __m256 av = _mm256_loadu_ps(ab + g);
          for (int c = 0; c < kCols; ++c)
            dot[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(widen8(bb + c * col_bytes + g)), av, dot[c]);
        }
      }
      for (int c = 0; c < kCols; ++c) {
        const float* prm = p.params + ((n0 + c) * p.k_blocks + blk) * 2;
        acc[c] = _mm256_fmadd_ps(dot[c], _mm256_set1_ps(prm[0]), acc[c]);
        corr[c] += prm[1] * sums[blk];
      }
    }
    float* y = p.y + r * p.n + n0;
    for (int c = 0; c < kCols; ++c) y[c] = hsum(acc[c]) - corr[c] + (p.bias != nullptr ? p.bias[n0 + c] : 0.0f);
  }
}

template <int kBits>
void gemv(const NBitsGemv& p, int64_t n0, int64_t n1) {
  int64_t j = n0;
  for (; j + 4 <= n1; j += 4) gemv_cols<kBits, 4>(p, j);
  for (; j < n1; ++j) gemv_cols<kBits, 1>(p, j);
}

// 8 codes from position `at` (a multiple of 8) of a block, as floats.
template <int kBits>
__m256 codes8(const uint8_t* block, int64_t at) {
  if constexpr (kBits == 8) return _mm256_cvtepi32_ps(widen8(block + at));
  int32_t four;
  std::memcpy(&four, block + at / 2, 4);
  const __m128i w = _mm_cvtepu8_epi16(_mm_cvtsi32_si128(four));
  // Low nibble first: the even position, then the odd one.
  const __m128i pairs = _mm_unpacklo_epi16(_mm_and_si128(w, _mm_set1_epi16(0x0F)), _mm_srli_epi16(w, 4));
  return _mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(pairs));
}

// r[i] holds row i of an 8 x 8 tile; afterwards it holds column i.
void transpose8x8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

// Tiles of 8 columns by 8 positions: decoded along K (where a column's codes lie), transposed,
// stored as 8 panel rows.
template <int kBits>
void dequant(const uint8_t* const* blocks, const float* scale, const float* shift, int cols, int64_t from,
             int64_t len, float* panel, int nr) {
  for (int c0 = 0; c0 < nr; c0 += 8) {
    for (int64_t i = 0; i < len; i += 8) {
      __m256 v[8];
      for (int c = 0; c < 8; ++c) {
        const int col = c0 + c;
        v[c] = col < cols ? _mm256_fmsub_ps(codes8<kBits>(blocks[col], from + i), _mm256_set1_ps(scale[col]),
                                            _mm256_set1_ps(shift[col]))
                          : _mm256_setzero_ps();
      }
      transpose8x8(v);
      const int64_t rows = len - i < 8 ? len - i : 8;
      for (int64_t r = 0; r < rows; ++r) _mm256_storeu_ps(panel + (i + r) * nr + c0, v[r]);
    }
  }
}

}  // namespace

void f32_qb4w_dequant__avx2(const uint8_t* const* blocks, const float* scale, const float* shift, int cols,
                            int64_t from, int64_t len, float* panel, int nr) {
  dequant<4>(blocks, scale, shift, cols, from, len, panel, nr);
}
void f32_qb8w_dequant__avx2(const uint8_t* const* blocks, const float* scale, const float* shift, int cols,
                            int64_t from, int64_t len, float* panel, int nr) {
  dequant<8>(blocks, scale, shift, cols, from, len, panel, nr);
}

void f32_qb4w_gemv__avx2(const NBitsGemv& p, int64_t n0, int64_t n1) { gemv<4>(p, n0, n1); }
void f32_qb8w_gemv__avx2(const NBitsGemv& p, int64_t n0, int64_t n1) { gemv<8>(p, n0, n1); }

}  // namespace tether::engine::cpu
