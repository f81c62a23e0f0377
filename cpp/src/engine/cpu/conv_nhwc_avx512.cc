// f32_conv_nhwc_14x32__avx512 and f32_dwconv_nhwc_8x16__avx512 (see conv_nhwc.h). Compiled
// with AVX-512 flags; called only when the CPU has them.
#include <immintrin.h>

#include "engine/cpu/conv_nhwc.h"

namespace tether::engine::cpu {

namespace {

inline __mmask16 lanes(int64_t n) { return n >= 16 ? 0xFFFF : n <= 0 ? 0 : static_cast<__mmask16>((1u << n) - 1); }

// Bias, summand and clamp on one row's vectors, then the masked store.
template <int V>
inline void finish_row(__m512 (&acc)[V], const __mmask16 (&m)[V], bool accumulate, const TileEpilogue* ep, int64_t r,
                       float* y) {
  if (accumulate)
    for (int v = 0; v < V; ++v) acc[v] = _mm512_add_ps(acc[v], _mm512_maskz_loadu_ps(m[v], y + 16 * v));
  if (ep != nullptr) {
    for (int v = 0; v < V; ++v) {
      if (ep->col_bias != nullptr) acc[v] = _mm512_add_ps(acc[v], _mm512_maskz_loadu_ps(m[v], ep->col_bias + 16 * v));
      if (ep->sum != nullptr)
        acc[v] = _mm512_add_ps(acc[v], _mm512_maskz_loadu_ps(m[v], ep->sum + r * ep->sum_ld + 16 * v));
      if (ep->clamp) {
        // max(lo, v) and min(hi, v) return v when it is NaN (the second operand wins).
        acc[v] = _mm512_min_ps(_mm512_set1_ps(ep->hi), _mm512_max_ps(_mm512_set1_ps(ep->lo), acc[v]));
      }
    }
  }
  for (int v = 0; v < V; ++v) _mm512_mask_storeu_ps(y + 16 * v, m[v], acc[v]);
}

template <int R>
void conv_tile(const float* x, int64_t xs, const int64_t* x_off, const int64_t* w_off, int64_t taps, int64_t cin,
               const float* w, float* y, int64_t ldy, int64_t n, bool accumulate, const TileEpilogue* ep) {
  __m512 acc[R][2];
#pragma GCC unroll 14
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t t = 0; t < taps; ++t) {
    const float* xt = x + x_off[t];
    const float* wt = w + w_off[t];
    for (int64_t i = 0; i < cin; ++i) {
      // The weights stream from memory on a tile's first pass over them: fetch ahead.
      _mm_prefetch(reinterpret_cast<const char*>(wt + (i + 16) * 32), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(wt + (i + 16) * 32 + 16), _MM_HINT_T0);
      const __m512 b0 = _mm512_loadu_ps(wt + i * 32);
      const __m512 b1 = _mm512_loadu_ps(wt + i * 32 + 16);
#pragma GCC unroll 14
      for (int r = 0; r < R; ++r) {
        const __m512 a = _mm512_set1_ps(xt[r * xs + i]);
        acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
      }
    }
  }
  const __mmask16 m[2] = {lanes(n), lanes(n - 16)};
#pragma GCC unroll 14
  for (int r = 0; r < R; ++r) finish_row<2>(acc[r], m, accumulate, ep, r, y + r * ldy);
}

template <int R>
void dw_tile(const float* x, int64_t xs, const int64_t* x_off, const int64_t* w_off, int64_t taps, int64_t c,
             const float* w, float* y, int64_t ldy, const TileEpilogue* ep) {
  TileEpilogue block;
  for (int64_t c0 = 0; c0 < c; c0 += 16) {
    const __mmask16 m[1] = {lanes(c - c0)};
    __m512 acc[R][1];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r][0] = _mm512_setzero_ps();
    for (int64_t t = 0; t < taps; ++t) {
      const float* xt = x + x_off[t] + c0;
      const __m512 wv = _mm512_loadu_ps(w + w_off[t] + c0);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) acc[r][0] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m[0], xt + r * xs), wv, acc[r][0]);
    }
    const TileEpilogue* e = nullptr;
    if (ep != nullptr) {
      block = *ep;
      block.col_bias = ep->col_bias != nullptr ? ep->col_bias + c0 : nullptr;
      block.sum = ep->sum != nullptr ? ep->sum + c0 : nullptr;
      e = &block;
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) finish_row<1>(acc[r], m, false, e, r, y + r * ldy + c0);
  }
}

}  // namespace

void f32_conv_nhwc_14x32__avx512(int64_t rows, const float* x, int64_t xs, const int64_t* x_off, const int64_t* w_off,
                                 int64_t taps, int64_t cin, const float* w, float* y, int64_t ldy, int64_t n,
                                 bool accumulate, const TileEpilogue* ep) {
  switch (rows) {
#define TETHER_CONV_ROWS(R) \
  case R: return conv_tile<R>(x, xs, x_off, w_off, taps, cin, w, y, ldy, n, accumulate, ep);
    TETHER_CONV_ROWS(1) TETHER_CONV_ROWS(2) TETHER_CONV_ROWS(3) TETHER_CONV_ROWS(4) TETHER_CONV_ROWS(5)
    TETHER_CONV_ROWS(6) TETHER_CONV_ROWS(7) TETHER_CONV_ROWS(8) TETHER_CONV_ROWS(9) TETHER_CONV_ROWS(10)
    TETHER_CONV_ROWS(11) TETHER_CONV_ROWS(12) TETHER_CONV_ROWS(13) TETHER_CONV_ROWS(14)
#undef TETHER_CONV_ROWS
    default: return;
  }
}

void f32_dwconv_nhwc_8x16__avx512(int64_t rows, const float* x, int64_t xs, const int64_t* x_off, const int64_t* w_off,
                                  int64_t taps, int64_t c, const float* w, float* y, int64_t ldy,
                                  const TileEpilogue* ep) {
  switch (rows) {
#define TETHER_DW_ROWS(R) \
  case R: return dw_tile<R>(x, xs, x_off, w_off, taps, c, w, y, ldy, ep);
    TETHER_DW_ROWS(1) TETHER_DW_ROWS(2) TETHER_DW_ROWS(3) TETHER_DW_ROWS(4)
    TETHER_DW_ROWS(5) TETHER_DW_ROWS(6) TETHER_DW_ROWS(7) TETHER_DW_ROWS(8)
#undef TETHER_DW_ROWS
    default: return;
  }
}

}  // namespace tether::engine::cpu
