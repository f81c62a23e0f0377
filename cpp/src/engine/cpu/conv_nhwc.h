// Channels-last float convolutions: X [N, H, W, C] and Y [N, Ho, Wo, Cout] (ai.tether FusedConv
// with channels_last = 1; passes/channels_last_float.cc puts them there).
//
// An output row is cut into tiles of up to MR consecutive pixels. A tile's input pixels lie a
// constant stride apart for every kernel tap (stride x C floats), so the micro-kernel reads them
// in place: no im2col, no packing of the activations. It broadcasts one input channel of each
// pixel at a time against NR output channels of packed weights, for each tap the tile needs:
// taps whose input rows or columns lie wholly in the padding are skipped, which is what makes
// dilated convolutions cheap, and a copy of the input padded along W only (when the conv pads
// W) supplies the zeros of taps that are partly outside.
//
// Kernel names follow XNNPACK's grammar: f32_conv_nhwc_<MR>x<NR>__<isa>,
// f32_dwconv_nhwc_<MR>x<NR>__<isa>.
#pragma once

#include <cstdint>

#include "engine/cpu/gemm.h"

namespace tether::engine::cpu {

/// One tile of a dense (or one group's) channels-last convolution: Y[r, j] for r < rows (<= MR) and
/// j < n (<= NR) is the sum over taps t and input channels i of
/// x[r * x_stride + x_off[t] + i] * w[w_off[t] + i * NR + j], plus y[r * ldy + j] when
/// `accumulate`, then `ep` (col_bias, sum with row stride ep->sum_ld, clamp) before the store
/// to y[r * ldy + j]. `w` is one panel of packed weights (NR output channels, zero past n).
/// taps may be 0 (Y is then the epilogue of zero). With one tap this is a GEMM tile whose A
/// rows are read in place (sgemm uses it so: gemm.h).
using NhwcConvKernel = void (*)(int64_t rows, const float* x, int64_t x_stride, const int64_t* x_off,
                                const int64_t* w_off, int64_t taps, int64_t cin, const float* w, float* y, int64_t ldy,
                                int64_t n, bool accumulate, const TileEpilogue* ep);

/// One output row of a one-tap tile across `panels` (1 to 4) panels of weights laid
/// `panel_stride` floats apart: y[j] for j < n (<= panels * NR) is the sum over i < cin of
/// x[i] * w[(j / NR) * panel_stride + i * NR + j % NR], plus y[j] when `accumulate`, then `ep`
/// (col_bias and sum from column 0) before the store. Each sum runs in the order of
/// NhwcConvKernel's, so a row gets the same bits alone (a batch of 1) as within a tile; the
/// panels give the independent sums that keep the FMA units busy.
using NhwcConvRowKernel = void (*)(const float* x, int64_t cin, const float* w, int64_t panel_stride, int64_t panels,
                                   float* y, int64_t n, bool accumulate, const TileEpilogue* ep);

/// One tile of a depthwise channels-last convolution over all `c` channels: Y[r, j] for
/// r < rows (<= MR), j < c is the sum over taps t of x[r * x_stride + x_off[t] + j] *
/// w[w_off[t] + j], then `ep` (col_bias, sum with row stride ep->sum_ld, clamp) before the
/// store to y[r * ldy + j]. `w` holds each tap's c weights (a multiple of NR floats per tap,
/// zero past c).
using NhwcDepthwiseKernel = void (*)(int64_t rows, const float* x, int64_t x_stride, const int64_t* x_off,
                                     const int64_t* w_off, int64_t taps, int64_t c, const float* w, float* y,
                                     int64_t ldy, const TileEpilogue* ep);

/// The depthwise tile at stride 1 and dilation 1 along W, by kernel rows: for each row t,
/// x + x_off[t] is the tile's first input pixel of that row (pixels x_stride floats apart)
/// and w + w_off[t] its kw taps' weights (one block of `cpad` floats per tap), for `c`
/// channels. Each input pixel is loaded once per row and used by every tap that reads it. kw
/// is 3 or 5.
using NhwcDepthwiseRowsKernel = void (*)(int64_t rows, const float* x, int64_t x_stride, const int64_t* x_off,
                                         const int64_t* w_off, int64_t krows, int64_t kw, int64_t c, int64_t cpad,
                                         const float* w, float* y, int64_t ldy, const TileEpilogue* ep);

struct NhwcConvIsa {
  const char* name;  ///< "f32_conv_nhwc_14x32__avx512", ...
  int mr;
  int nr;
  NhwcConvKernel conv;
  NhwcDepthwiseKernel depthwise;
  int dw_mr;  ///< the depthwise kernel's MR
  int dw_nr;  ///< its channel block (the weights' padding)
  NhwcDepthwiseRowsKernel depthwise_rows;  ///< nullptr where the ISA has too few registers
  NhwcConvRowKernel conv_row;
};

/// Panels conv_row takes at most.
constexpr int64_t kConvRowPanels = 4;

/// The kernels for this machine (widest ISA available, see util::cpu_features).
const NhwcConvIsa& nhwc_conv_isa();

// Micro-kernels, one per ISA, in files compiled for that ISA.
void f32_conv_nhwc_14x32__avx512(int64_t rows, const float* x, int64_t x_stride, const int64_t* x_off,
                                 const int64_t* w_off, int64_t taps, int64_t cin, const float* w, float* y,
                                 int64_t ldy, int64_t n, bool accumulate, const TileEpilogue* ep);
void f32_dwconv_nhwc_8x16__avx512(int64_t rows, const float* x, int64_t x_stride, const int64_t* x_off,
                                  const int64_t* w_off, int64_t taps, int64_t c, const float* w, float* y, int64_t ldy,
                                  const TileEpilogue* ep);
void f32_dwconv_nhwc_rows_8x16__avx512(int64_t rows, const float* x, int64_t x_stride, const int64_t* x_off,
                                       const int64_t* w_off, int64_t krows, int64_t kw, int64_t c, int64_t cpad,
                                       const float* w, float* y, int64_t ldy, const TileEpilogue* ep);
void f32_conv_nhwc_row_4x32__avx512(const float* x, int64_t cin, const float* w, int64_t panel_stride,
                                    int64_t panels, float* y, int64_t n, bool accumulate, const TileEpilogue* ep);
void f32_conv_nhwc_row_4x16__avx2(const float* x, int64_t cin, const float* w, int64_t panel_stride, int64_t panels,
                                  float* y, int64_t n, bool accumulate, const TileEpilogue* ep);
void f32_conv_nhwc_6x16__avx2(int64_t rows, const float* x, int64_t x_stride, const int64_t* x_off,
                              const int64_t* w_off, int64_t taps, int64_t cin, const float* w, float* y, int64_t ldy,
                              int64_t n, bool accumulate, const TileEpilogue* ep);
void f32_dwconv_nhwc_8x8__avx2(int64_t rows, const float* x, int64_t x_stride, const int64_t* x_off,
                               const int64_t* w_off, int64_t taps, int64_t c, const float* w, float* y, int64_t ldy,
                               const TileEpilogue* ep);
void f32_conv_nhwc_6x16__neon(int64_t rows, const float* x, int64_t x_stride, const int64_t* x_off,
                              const int64_t* w_off, int64_t taps, int64_t cin, const float* w, float* y, int64_t ldy,
                              int64_t n, bool accumulate, const TileEpilogue* ep);
void f32_conv_nhwc_row_4x16__neon(const float* x, int64_t cin, const float* w, int64_t panel_stride, int64_t panels,
                                  float* y, int64_t n, bool accumulate, const TileEpilogue* ep);
void f32_dwconv_nhwc_8x8__neon(int64_t rows, const float* x, int64_t x_stride, const int64_t* x_off,
                               const int64_t* w_off, int64_t taps, int64_t c, const float* w, float* y, int64_t ldy,
                               const TileEpilogue* ep);

/// A kernel for an ai.tether FusedConv with channels_last = 1 (2-D, constant weights, any group:
/// depthwise ones take the depthwise kernel; the support check is nhwc_conv_support).
std::unique_ptr<Kernel> make_nhwc_conv(const KernelInit& init);
/// "" when make_nhwc_conv can run the node, else why not.
std::string nhwc_conv_support(const KernelInit& init);

/// A kernel for an ai.tether ConvTranspose with channels_last = 1 whose weights scatter
/// non-overlapping patches (ops::conv_transpose_is_patch_scatter), and its check.
std::unique_ptr<Kernel> make_nhwc_conv_transpose(const KernelInit& init);
std::string nhwc_conv_transpose_support(const KernelInit& init);

}  // namespace tether::engine::cpu
