// f32_conv_nhwc_6x16__neon, f32_conv_nhwc_row_4x16__neon and f32_dwconv_nhwc_8x8__neon (see
// conv_nhwc.h): the AVX2 kernels' tiles in quad registers. The dense tile keeps 6 pixels x 16
// output channels in 24 accumulators and broadcasts one input channel of a pixel at a time
// (FMLA by element); the depthwise tile keeps up to 8 pixels x 8 channels in 16. NEON has no
// masked loads: channels past the last whole vector are summed one by one with the same fused
// multiply-adds, so every channel gets the bits a vector lane would.
#include <arm_neon.h>

#include <cmath>

#include "engine/cpu/conv_nhwc.h"
#include "engine/cpu/tile_neon.h"

namespace tether::engine::cpu {

namespace {

template <int R>
void conv_tile(const float* x, int64_t xs, const int64_t* x_off, const int64_t* w_off, int64_t taps, int64_t cin,
               const float* w, float* y, int64_t ldy, int64_t n, bool accumulate, const TileEpilogue* ep) {
  float32x4_t acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v) acc[r][v] = vdupq_n_f32(0.0f);
  for (int64_t t = 0; t < taps; ++t) {
    const float* xt = x + x_off[t];
    const float* wt = w + w_off[t];
    for (int64_t i = 0; i < cin; ++i) {
      const float* wi = wt + i * 16;
      const float32x4_t b0 = vld1q_f32(wi), b1 = vld1q_f32(wi + 4), b2 = vld1q_f32(wi + 8), b3 = vld1q_f32(wi + 12);
#pragma GCC unroll 6
      for (int r = 0; r < R; ++r) {
        const float a = xt[r * xs + i];
        acc[r][0] = vfmaq_n_f32(acc[r][0], b0, a);
        acc[r][1] = vfmaq_n_f32(acc[r][1], b1, a);
        acc[r][2] = vfmaq_n_f32(acc[r][2], b2, a);
        acc[r][3] = vfmaq_n_f32(acc[r][3], b3, a);
      }
    }
  }
  for (int r = 0; r < R; ++r) neon::store_row<4>(acc[r], y + r * ldy, n, accumulate, ep, r);
}

// One pixel across P panels (a GEMV): 4P independent sums, each in conv_tile's order, so a
// row gets the same bits alone as in a tile.
template <int P>
void conv_row_panels(const float* x, int64_t cin, const float* w, int64_t panel_stride, float* y, int64_t n,
                     bool accumulate, const TileEpilogue* ep) {
  constexpr int V = 4 * P;
  float32x4_t acc[V];
  for (int v = 0; v < V; ++v) acc[v] = vdupq_n_f32(0.0f);
  for (int64_t i = 0; i < cin; ++i) {
    const float a = x[i];
#pragma GCC unroll 16
    for (int v = 0; v < V; ++v) acc[v] = vfmaq_n_f32(acc[v], vld1q_f32(w + (v / 4) * panel_stride + i * 16 + (v % 4) * 4), a);
  }
  neon::store_row<V>(acc, y, n, accumulate, ep, 0);
}

// Channels [c0, c0 + 4V) of R pixels.
template <int R, int V>
void dw_block(const float* x, int64_t xs, const int64_t* x_off, const int64_t* w_off, int64_t taps, int64_t c0,
              const float* w, float* y, int64_t ldy, const TileEpilogue* ep) {
  float32x4_t acc[R][V];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) acc[r][v] = vdupq_n_f32(0.0f);
  for (int64_t t = 0; t < taps; ++t) {
    const float* xt = x + x_off[t] + c0;
    float32x4_t wv[V];
    for (int v = 0; v < V; ++v) wv[v] = vld1q_f32(w + w_off[t] + c0 + 4 * v);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) acc[r][v] = vfmaq_f32(acc[r][v], vld1q_f32(xt + r * xs + 4 * v), wv[v]);
  }
  for (int r = 0; r < R; ++r) neon::store_row<V>(acc[r], y + r * ldy + c0, 4 * V, false, ep, r);
}

template <int R>
void dw_tile(const float* x, int64_t xs, const int64_t* x_off, const int64_t* w_off, int64_t taps, int64_t c,
             const float* w, float* y, int64_t ldy, const TileEpilogue* ep) {
  TileEpilogue block;
  auto shifted = [&](int64_t c0) -> const TileEpilogue* {
    if (ep == nullptr) return nullptr;
    block = *ep;
    block.col_bias = ep->col_bias != nullptr ? ep->col_bias + c0 : nullptr;
    block.sum = ep->sum != nullptr ? ep->sum + c0 : nullptr;
    return &block;
  };
  int64_t c0 = 0;
  for (; c0 + 8 <= c; c0 += 8) dw_block<R, 2>(x, xs, x_off, w_off, taps, c0, w, y, ldy, shifted(c0));
  if (c0 + 4 <= c) {
    dw_block<R, 1>(x, xs, x_off, w_off, taps, c0, w, y, ldy, shifted(c0));
    c0 += 4;
  }
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = c0; j < c; ++j) {
      float acc = 0.0f;
      for (int64_t t = 0; t < taps; ++t) acc = std::fma(x[r * xs + x_off[t] + j], w[w_off[t] + j], acc);
      y[r * ldy + j] = tile_epilogue(acc, ep, r, j);
    }
}

}  // namespace

void f32_conv_nhwc_6x16__neon(int64_t rows, const float* x, int64_t xs, const int64_t* x_off, const int64_t* w_off,
                              int64_t taps, int64_t cin, const float* w, float* y, int64_t ldy, int64_t n,
                              bool accumulate, const TileEpilogue* ep) {
  switch (rows) {
    case 1: return conv_tile<1>(x, xs, x_off, w_off, taps, cin, w, y, ldy, n, accumulate, ep);
    case 2: return conv_tile<2>(x, xs, x_off, w_off, taps, cin, w, y, ldy, n, accumulate, ep);
    case 3: return conv_tile<3>(x, xs, x_off, w_off, taps, cin, w, y, ldy, n, accumulate, ep);
    case 4: return conv_tile<4>(x, xs, x_off, w_off, taps, cin, w, y, ldy, n, accumulate, ep);
    case 5: return conv_tile<5>(x, xs, x_off, w_off, taps, cin, w, y, ldy, n, accumulate, ep);
    case 6: return conv_tile<6>(x, xs, x_off, w_off, taps, cin, w, y, ldy, n, accumulate, ep);
    default: return;
  }
}

void f32_conv_nhwc_row_4x16__neon(const float* x, int64_t cin, const float* w, int64_t panel_stride, int64_t panels,
                                  float* y, int64_t n, bool accumulate, const TileEpilogue* ep) {
  switch (panels) {
    case 1: return conv_row_panels<1>(x, cin, w, panel_stride, y, n, accumulate, ep);
    case 2: return conv_row_panels<2>(x, cin, w, panel_stride, y, n, accumulate, ep);
    case 3: return conv_row_panels<3>(x, cin, w, panel_stride, y, n, accumulate, ep);
    case 4: return conv_row_panels<4>(x, cin, w, panel_stride, y, n, accumulate, ep);
    default: return;
  }
}

void f32_dwconv_nhwc_8x8__neon(int64_t rows, const float* x, int64_t xs, const int64_t* x_off, const int64_t* w_off,
                               int64_t taps, int64_t c, const float* w, float* y, int64_t ldy, const TileEpilogue* ep) {
  switch (rows) {
    case 1: return dw_tile<1>(x, xs, x_off, w_off, taps, c, w, y, ldy, ep);
    case 2: return dw_tile<2>(x, xs, x_off, w_off, taps, c, w, y, ldy, ep);
    case 3: return dw_tile<3>(x, xs, x_off, w_off, taps, c, w, y, ldy, ep);
    case 4: return dw_tile<4>(x, xs, x_off, w_off, taps, c, w, y, ldy, ep);
    case 5: return dw_tile<5>(x, xs, x_off, w_off, taps, c, w, y, ldy, ep);
    case 6: return dw_tile<6>(x, xs, x_off, w_off, taps, c, w, y, ldy, ep);
    case 7: return dw_tile<7>(x, xs, x_off, w_off, taps, c, w, y, ldy, ep);
    case 8: return dw_tile<8>(x, xs, x_off, w_off, taps, c, w, y, ldy, ep);
    default: return;
  }
}

}  // namespace tether::engine::cpu
