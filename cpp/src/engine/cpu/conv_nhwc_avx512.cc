// f32_conv_nhwc_14x32__avx512 and f32_dwconv_nhwc_8x16__avx512 (see conv_nhwc.h). Compiled
// with AVX-512 flags; called only when the CPU has them.
#include "util/simd.h"

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
        // max(lo, v) and min(hi, v) return v when it is NaN (the second operand wins). (The
        // merge-masked forms, all lanes set: GCC 12 warns on the plain ones' undefined source.)
        const __m512 lo = _mm512_mask_max_ps(acc[v], 0xFFFF, _mm512_set1_ps(ep->lo), acc[v]);
        acc[v] = _mm512_mask_min_ps(lo, 0xFFFF, _mm512_set1_ps(ep->hi), lo);
      }
    }
  }
  for (int v = 0; v < V; ++v) _mm512_mask_storeu_ps(y + 16 * v, m[v], acc[v]);
}

// R pixels x 16 V output channels (V = 1 when a panel holds 16 channels or fewer).
template <int R, int V>
void conv_tile(const float* x, int64_t xs, const int64_t* x_off, const int64_t* w_off, int64_t taps, int64_t cin,
               const float* w, float* y, int64_t ldy, int64_t n, bool accumulate, const TileEpilogue* ep) {
  __m512 acc[R][V];
#pragma GCC unroll 14
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t t = 0; t < taps; ++t) {
    const float* xt = x + x_off[t];
    const float* wt = w + w_off[t];
    for (int64_t i = 0; i < cin; ++i) {
      // The weights stream from memory on a tile's first pass over them: fetch ahead.
      _mm_prefetch(reinterpret_cast<const char*>(wt + (i + 16) * 32), _MM_HINT_T0);
      if (V > 1) _mm_prefetch(reinterpret_cast<const char*>(wt + (i + 16) * 32 + 16), _MM_HINT_T0);
      __m512 b[V];
      for (int v = 0; v < V; ++v) b[v] = _mm512_loadu_ps(wt + i * 32 + 16 * v);
#pragma GCC unroll 14
      for (int r = 0; r < R; ++r) {
        const __m512 a = _mm512_set1_ps(xt[r * xs + i]);
        for (int v = 0; v < V; ++v) acc[r][v] = _mm512_fmadd_ps(a, b[v], acc[r][v]);
      }
    }
  }
  __mmask16 m[V];
  for (int v = 0; v < V; ++v) m[v] = lanes(n - 16 * v);
#pragma GCC unroll 14
  for (int r = 0; r < R; ++r) finish_row<V>(acc[r], m, accumulate, ep, r, y + r * ldy);
}

// One pixel across P panels (a GEMV: a batch-1 matrix-vector product): 2P independent sums,
// enough to keep the FMA units busy, each summed in the order of conv_tile (channel by
// channel, one chain per output vector), so a row gets the same bits alone as in a tile.
template <int P>
void conv_row_panels(const float* x, int64_t cin, const float* w, int64_t panel_stride, float* y, int64_t n,
                     bool accumulate, const TileEpilogue* ep) {
  constexpr int V = 2 * P;
  __m512 acc[V];
  for (int v = 0; v < V; ++v) acc[v] = _mm512_setzero_ps();
  for (int64_t i = 0; i < cin; ++i) {
    const __m512 a = _mm512_set1_ps(x[i]);
#pragma GCC unroll 4
    for (int q = 0; q < P; ++q) {
      const float* wq = w + q * panel_stride + i * 32;
      _mm_prefetch(reinterpret_cast<const char*>(wq + 16 * 32), _MM_HINT_T0);
      acc[2 * q] = _mm512_fmadd_ps(a, _mm512_loadu_ps(wq), acc[2 * q]);
      acc[2 * q + 1] = _mm512_fmadd_ps(a, _mm512_loadu_ps(wq + 16), acc[2 * q + 1]);
    }
  }
  __mmask16 m[V];
  for (int v = 0; v < V; ++v) m[v] = lanes(n - 16 * v);
  finish_row<V>(acc, m, accumulate, ep, 0, y);
}

template <int R>
void conv_tile_any(const float* x, int64_t xs, const int64_t* x_off, const int64_t* w_off, int64_t taps, int64_t cin,
                   const float* w, float* y, int64_t ldy, int64_t n, bool accumulate, const TileEpilogue* ep) {
  if (n <= 16) conv_tile<R, 1>(x, xs, x_off, w_off, taps, cin, w, y, ldy, n, accumulate, ep);
  else conv_tile<R, 2>(x, xs, x_off, w_off, taps, cin, w, y, ldy, n, accumulate, ep);
}

// The epilogue and store of channels [c0, c0 + 16) of R depthwise output pixels.
template <int R>
inline void store_block(__m512 (&acc)[R][1], const __mmask16 (&m)[1], const TileEpilogue* ep, int64_t c0, float* y,
                        int64_t ldy) {
  TileEpilogue block;
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

template <int R>
void dw_tile(const float* x, int64_t xs, const int64_t* x_off, const int64_t* w_off, int64_t taps, int64_t c,
             const float* w, float* y, int64_t ldy, const TileEpilogue* ep) {
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
    store_block<R>(acc, m, ep, c0, y, ldy);
  }
}

// Stride 1 by kernel rows: the R + KW - 1 input pixels of a row are loaded once, and tap j of
// output pixel r reads pixel r + j.
template <int R, int KW>
void dw_rows_tile(const float* x, int64_t xs, const int64_t* x_off, const int64_t* w_off, int64_t krows, int64_t c,
                  int64_t cpad, const float* w, float* y, int64_t ldy, const TileEpilogue* ep) {
  for (int64_t c0 = 0; c0 < c; c0 += 16) {
    const __mmask16 m[1] = {lanes(c - c0)};
    __m512 acc[R][1];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r][0] = _mm512_setzero_ps();
    for (int64_t t = 0; t < krows; ++t) {
      const float* xt = x + x_off[t] + c0;
      __m512 v[R + KW - 1];
#pragma GCC unroll 12
      for (int j = 0; j < R + KW - 1; ++j) v[j] = _mm512_maskz_loadu_ps(m[0], xt + j * xs);
#pragma GCC unroll 5
      for (int j = 0; j < KW; ++j) {
        const __m512 wv = _mm512_loadu_ps(w + w_off[t] + j * cpad + c0);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) acc[r][0] = _mm512_fmadd_ps(v[r + j], wv, acc[r][0]);
      }
    }
    store_block<R>(acc, m, ep, c0, y, ldy);
  }
}

template <int KW>
void dw_rows(int64_t rows, const float* x, int64_t xs, const int64_t* x_off, const int64_t* w_off, int64_t krows,
             int64_t c, int64_t cpad, const float* w, float* y, int64_t ldy, const TileEpilogue* ep) {
  switch (rows) {
#define TETHER_DW_ROWS(R) \
  case R: return dw_rows_tile<R, KW>(x, xs, x_off, w_off, krows, c, cpad, w, y, ldy, ep);
    TETHER_DW_ROWS(1) TETHER_DW_ROWS(2) TETHER_DW_ROWS(3) TETHER_DW_ROWS(4)
    TETHER_DW_ROWS(5) TETHER_DW_ROWS(6) TETHER_DW_ROWS(7) TETHER_DW_ROWS(8)
#undef TETHER_DW_ROWS
    default: return;
  }
}

}  // namespace

void f32_dwconv_nhwc_rows_8x16__avx512(int64_t rows, const float* x, int64_t xs, const int64_t* x_off,
                                       const int64_t* w_off, int64_t krows, int64_t kw, int64_t c, int64_t cpad,
                                       const float* w, float* y, int64_t ldy, const TileEpilogue* ep) {
  if (kw == 3) dw_rows<3>(rows, x, xs, x_off, w_off, krows, c, cpad, w, y, ldy, ep);
  else if (kw == 5) dw_rows<5>(rows, x, xs, x_off, w_off, krows, c, cpad, w, y, ldy, ep);
}

void f32_conv_nhwc_14x32__avx512(int64_t rows, const float* x, int64_t xs, const int64_t* x_off, const int64_t* w_off,
                                 int64_t taps, int64_t cin, const float* w, float* y, int64_t ldy, int64_t n,
                                 bool accumulate, const TileEpilogue* ep) {
  switch (rows) {
#define TETHER_CONV_ROWS(R) \
  case R: return conv_tile_any<R>(x, xs, x_off, w_off, taps, cin, w, y, ldy, n, accumulate, ep);
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

void f32_conv_nhwc_row_4x32__avx512(const float* x, int64_t cin, const float* w, int64_t panel_stride,
                                    int64_t panels, float* y, int64_t n, bool accumulate, const TileEpilogue* ep) {
  switch (panels) {
    case 1: return conv_row_panels<1>(x, cin, w, panel_stride, y, n, accumulate, ep);
    case 2: return conv_row_panels<2>(x, cin, w, panel_stride, y, n, accumulate, ep);
    case 3: return conv_row_panels<3>(x, cin, w, panel_stride, y, n, accumulate, ep);
    case 4: return conv_row_panels<4>(x, cin, w, panel_stride, y, n, accumulate, ep);
    default: return;
  }
}

}  // namespace tether::engine::cpu
