// f32_conv_nhwc_6x16__avx2 and f32_dwconv_nhwc_8x8__avx2 (see conv_nhwc.h). Compiled with
// AVX2 and FMA flags; called only when the CPU has them.
#include "util/simd.h"

#include "engine/cpu/conv_nhwc.h"

namespace tether::engine::cpu {

namespace {

// Lanes [0, n) of 8 set (n clamped to [0, 8]).
inline __m256i lanes(int64_t n) {
  const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const int k = n >= 8 ? 8 : n <= 0 ? 0 : static_cast<int>(n);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), index);
}

// Vector v of a row of n floats: 8 lanes, or the first n - 8v of them through a mask, so
// nothing past the row's end is touched. A masked store costs about 14 cycles on AMD's Zen
// cores against 1 for a plain one, so whole vectors never take the masked form.
inline __m256 load_part(const float* p, int64_t lanes_left, __m256i mask) {
  return lanes_left >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, mask);
}

inline void store_part(float* p, int64_t lanes_left, __m256i mask, __m256 v) {
  if (lanes_left >= 8) _mm256_storeu_ps(p, v);
  else _mm256_maskstore_ps(p, mask, v);
}

// Row r of a tile (n of its 8V columns are C's) from its V accumulators: the old value when
// accumulating, the epilogue, the store.
template <int V>
inline void finish_row(__m256 (&acc)[V], const __m256i (&m)[V], int64_t n, bool accumulate, const TileEpilogue* ep,
                       int64_t r, float* y) {
  if (accumulate)
    for (int v = 0; v < V; ++v) acc[v] = _mm256_add_ps(acc[v], load_part(y + 8 * v, n - 8 * v, m[v]));
  if (ep != nullptr) {
    for (int v = 0; v < V; ++v) {
      if (ep->col_bias != nullptr) acc[v] = _mm256_add_ps(acc[v], load_part(ep->col_bias + 8 * v, n - 8 * v, m[v]));
      if (ep->sum != nullptr)
        acc[v] = _mm256_add_ps(acc[v], load_part(ep->sum + r * ep->sum_ld + 8 * v, n - 8 * v, m[v]));
      if (ep->clamp) {
        // max(lo, v) and min(hi, v) return v when it is NaN (the second operand wins).
        acc[v] = _mm256_min_ps(_mm256_set1_ps(ep->hi), _mm256_max_ps(_mm256_set1_ps(ep->lo), acc[v]));
      }
    }
  }
  for (int v = 0; v < V; ++v) store_part(y + 8 * v, n - 8 * v, m[v], acc[v]);
}

template <int R>
void conv_tile(const float* x, int64_t xs, const int64_t* x_off, const int64_t* w_off, int64_t taps, int64_t cin,
               const float* w, float* y, int64_t ldy, int64_t n, bool accumulate, const TileEpilogue* ep) {
  __m256 acc[R][2];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int64_t t = 0; t < taps; ++t) {
    const float* xt = x + x_off[t];
    const float* wt = w + w_off[t];
    for (int64_t i = 0; i < cin; ++i) {
      const __m256 b0 = _mm256_loadu_ps(wt + i * 16);
      const __m256 b1 = _mm256_loadu_ps(wt + i * 16 + 8);
#pragma GCC unroll 6
      for (int r = 0; r < R; ++r) {
        const __m256 a = _mm256_broadcast_ss(xt + r * xs + i);
        acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
      }
    }
  }
  const __m256i m[2] = {lanes(n), lanes(n - 8)};
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) finish_row<2>(acc[r], m, n, accumulate, ep, r, y + r * ldy);
}

// How many rows of a panel ahead conv_row_panels asks for: its panels are P streams a few KB
// apart, which the hardware prefetcher alone keeps short of the memory's bandwidth in a GEMV
// (decoding's products); 6 rows (384 bytes) ahead measured 5 to 10 % faster on Zen than none,
// 2 or 16.
constexpr int64_t kPrefetchRows = 6;

// One pixel across P panels (a GEMV): 2P independent sums, each in conv_tile's order, so a
// row gets the same bits alone as in a tile.
template <int P>
void conv_row_panels(const float* x, int64_t cin, const float* w, int64_t panel_stride, float* y, int64_t n,
                     bool accumulate, const TileEpilogue* ep) {
  constexpr int V = 2 * P;
  __m256 acc[V];
  for (int v = 0; v < V; ++v) acc[v] = _mm256_setzero_ps();
  for (int64_t i = 0; i < cin; ++i) {
    const __m256 a = _mm256_broadcast_ss(x + i);
#pragma GCC unroll 4
    for (int q = 0; q < P; ++q) {
      const float* wq = w + q * panel_stride + i * 16;
      _mm_prefetch(reinterpret_cast<const char*>(wq + kPrefetchRows * 16), _MM_HINT_T0);
      acc[2 * q] = _mm256_fmadd_ps(a, _mm256_loadu_ps(wq), acc[2 * q]);
      acc[2 * q + 1] = _mm256_fmadd_ps(a, _mm256_loadu_ps(wq + 8), acc[2 * q + 1]);
    }
  }
  __m256i m[V];
  for (int v = 0; v < V; ++v) m[v] = lanes(n - 8 * v);
  finish_row<V>(acc, m, n, accumulate, ep, 0, y);
}

template <int R>
void dw_tile(const float* x, int64_t xs, const int64_t* x_off, const int64_t* w_off, int64_t taps, int64_t c,
             const float* w, float* y, int64_t ldy, const TileEpilogue* ep) {
  TileEpilogue block;
  for (int64_t c0 = 0; c0 < c; c0 += 8) {
    const __m256i m[1] = {lanes(c - c0)};
    __m256 acc[R][1];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r][0] = _mm256_setzero_ps();
    if (c - c0 >= 8) {  // a whole block: plain loads, no test per load
      for (int64_t t = 0; t < taps; ++t) {
        const float* xt = x + x_off[t] + c0;
        const __m256 wv = _mm256_loadu_ps(w + w_off[t] + c0);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) acc[r][0] = _mm256_fmadd_ps(_mm256_loadu_ps(xt + r * xs), wv, acc[r][0]);
      }
    } else {
      for (int64_t t = 0; t < taps; ++t) {
        const float* xt = x + x_off[t] + c0;
        const __m256 wv = _mm256_loadu_ps(w + w_off[t] + c0);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) acc[r][0] = _mm256_fmadd_ps(_mm256_maskload_ps(xt + r * xs, m[0]), wv, acc[r][0]);
      }
    }
    const TileEpilogue* e = nullptr;
    if (ep != nullptr) {
      block = *ep;
      block.col_bias = ep->col_bias != nullptr ? ep->col_bias + c0 : nullptr;
      block.sum = ep->sum != nullptr ? ep->sum + c0 : nullptr;
      e = &block;
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) finish_row<1>(acc[r], m, c - c0, false, e, r, y + r * ldy + c0);
  }
}

}  // namespace

void f32_conv_nhwc_6x16__avx2(int64_t rows, const float* x, int64_t xs, const int64_t* x_off, const int64_t* w_off,
                              int64_t taps, int64_t cin, const float* w, float* y, int64_t ldy, int64_t n,
                              bool accumulate, const TileEpilogue* ep) {
  switch (rows) {
#define TETHER_CONV_ROWS(R) \
  case R: return conv_tile<R>(x, xs, x_off, w_off, taps, cin, w, y, ldy, n, accumulate, ep);
    TETHER_CONV_ROWS(1) TETHER_CONV_ROWS(2) TETHER_CONV_ROWS(3) TETHER_CONV_ROWS(4) TETHER_CONV_ROWS(5)
    TETHER_CONV_ROWS(6)
#undef TETHER_CONV_ROWS
    default: return;
  }
}

void f32_dwconv_nhwc_8x8__avx2(int64_t rows, const float* x, int64_t xs, const int64_t* x_off, const int64_t* w_off,
                               int64_t taps, int64_t c, const float* w, float* y, int64_t ldy, const TileEpilogue* ep) {
  switch (rows) {
#define TETHER_DW_ROWS(R) \
  case R: return dw_tile<R>(x, xs, x_off, w_off, taps, c, w, y, ldy, ep);
    TETHER_DW_ROWS(1) TETHER_DW_ROWS(2) TETHER_DW_ROWS(3) TETHER_DW_ROWS(4)
    TETHER_DW_ROWS(5) TETHER_DW_ROWS(6) TETHER_DW_ROWS(7) TETHER_DW_ROWS(8)
#undef TETHER_DW_ROWS
    default: return;
  }
}

void f32_conv_nhwc_row_4x16__avx2(const float* x, int64_t cin, const float* w, int64_t panel_stride, int64_t panels,
                                  float* y, int64_t n, bool accumulate, const TileEpilogue* ep) {
  switch (panels) {
    case 1: return conv_row_panels<1>(x, cin, w, panel_stride, y, n, accumulate, ep);
    case 2: return conv_row_panels<2>(x, cin, w, panel_stride, y, n, accumulate, ep);
    case 3: return conv_row_panels<3>(x, cin, w, panel_stride, y, n, accumulate, ep);
    case 4: return conv_row_panels<4>(x, cin, w, panel_stride, y, n, accumulate, ep);
    default: return;
  }
}

}  // namespace tether::engine::cpu
