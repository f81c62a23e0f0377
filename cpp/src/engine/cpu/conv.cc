// Conv (any spatial rank, groups, dilations, pads, auto_pad) and ConvTranspose, float32.
#include <algorithm>
#include <cstring>

#include "engine/cpu/conv_nhwc.h"
#include "engine/cpu/cpu.h"
#include "engine/cpu/gemm.h"

namespace tether::engine::cpu {

namespace {

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }

}  // namespace

namespace {

// Writes rows [r0, r1) and columns [o0, o0 + count) of one image-and-group's im2col matrix
// straight into packed GEMM panels (panel 0 starts at column o0, each panel holds r1 - r0
// rows). Column o is output position o; row (c, kernel position) is the input element that
// position reads, or 0 in the padding.
void im2col_block(const float* x, const std::vector<int64_t>& xd, const std::vector<int64_t>& yd, const ConvGeometry& g,
                  int64_t channels, int64_t r0, int64_t r1, int64_t o0, int64_t count, float* panels, int64_t nr) {
  const size_t k = xd.size() - 2;
  int64_t in_size = 1, ksize = 1;
  for (size_t d = 0; d < k; ++d) {
    in_size *= xd[d + 2];
    ksize *= g.kernel[d];
  }
  const int64_t rows = channels * ksize;
  bool pointwise = true;  // 1x1, stride 1, no padding: the matrix is the input itself
  for (size_t d = 0; d < k; ++d)
    pointwise = pointwise && g.kernel[d] == 1 && g.strides[d] == 1 && g.pad_begin[d] == 0 && yd[d + 2] == xd[d + 2];
  (void)rows;
  if (pointwise) {
    PackedMatrix::pack_into(panels, x + r0 * in_size + o0, r1 - r0, count, in_size, 1, static_cast<int>(nr));
    return;
  }
  const int64_t panel_stride = (r1 - r0) * nr;
  std::vector<int64_t> kpos(k), opos(k);
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t c = r / ksize;
    int64_t kr = r % ksize;
    for (size_t d = k; d-- > 0;) {
      kpos[d] = kr % g.kernel[d];
      kr /= g.kernel[d];
    }
    const float* xc = x + c * in_size;
    float* dp = panels + (r - r0) * nr;
    int64_t q = 0;
    if (k == 2) {
      // Output positions in order, one output row at a time: the inputs a row reads form one
      // run (contiguous when the stride is 1) between zeros from the padding.
      const int64_t ow_n = yd[3], ih_n = xd[2], iw_n = xd[3], sw = g.strides[1];
      const int64_t kh_off = kpos[0] * g.dilations[0] - g.pad_begin[0];
      const int64_t kw_off = kpos[1] * g.dilations[1] - g.pad_begin[1];
      // Output columns whose input column lies inside the image: [ow_lo, ow_hi).
      const int64_t ow_lo = std::clamp<int64_t>(ceil_div(-kw_off, sw), 0, ow_n);
      const int64_t ow_hi = std::clamp<int64_t>(floor_div(iw_n - 1 - kw_off, sw) + 1, ow_lo, ow_n);
      auto zeros = [&](int64_t n) {
        while (n > 0) {
          const int64_t take = std::min(n, nr - q);
          std::fill(dp + q, dp + q + take, 0.0f);
          n -= take;
          if ((q += take) == nr) {
            q = 0;
            dp += panel_stride;
          }
        }
      };
      auto values = [&](const float* src, int64_t n) {
        while (n > 0) {
          const int64_t take = std::min(n, nr - q);
          if (sw == 1) std::memcpy(dp + q, src, static_cast<size_t>(take) * sizeof(float));
          else
            for (int64_t i = 0; i < take; ++i) dp[q + i] = src[i * sw];
          src += take * sw;
          n -= take;
          if ((q += take) == nr) {
            q = 0;
            dp += panel_stride;
          }
        }
      };
      int64_t remaining = count, oh = o0 / ow_n, ow = o0 % ow_n;
      while (remaining > 0) {
        const int64_t n = std::min(ow_n - ow, remaining);
        const int64_t ih = oh * g.strides[0] + kh_off;
        if (ih < 0 || ih >= ih_n) {
          zeros(n);
        } else {
          const int64_t lo = std::clamp(ow_lo, ow, ow + n), hi = std::clamp(ow_hi, lo, ow + n);
          zeros(lo - ow);
          values(xc + ih * iw_n + lo * sw + kw_off, hi - lo);
          zeros(ow + n - hi);
        }
        remaining -= n;
        ow = 0;
        ++oh;
      }
    } else {
      for (int64_t o = o0; o < o0 + count; ++o) {
        int64_t orem = o, idx = 0;
        bool inside = true;
        for (size_t d = k; d-- > 0;) {
          opos[d] = orem % yd[d + 2];
          orem /= yd[d + 2];
        }
        for (size_t d = 0; d < k && inside; ++d) {
          const int64_t p = opos[d] * g.strides[d] - g.pad_begin[d] + kpos[d] * g.dilations[d];
          inside = p >= 0 && p < xd[d + 2];
          idx = idx * xd[d + 2] + p;
        }
        dp[q] = inside ? xc[idx] : 0.0f;
        if (++q == nr) {
          q = 0;
          dp += panel_stride;
        }
      }
    }
    // The tail of the last panel is never stored by the GEMM; keep it finite.
    if (q != 0) std::fill(dp + q, dp + nr, 0.0f);
  }
}

// The zero-padded copy of one plane that the row-by-row depthwise path reads. With a column
// stride s > 1 each padded row is stored as s phases (phase q holds padded columns q, q + s,
// q + 2s, ...), so that every kernel tap reads a contiguous run of its phase and the row
// loops vectorise as they do for stride 1.
struct PaddedPlane {
  int64_t rows, cols;   // padded rows and columns: every input position any window reads
  int64_t phase;        // floats per phase: ceil(cols / stride)
  int64_t pitch;        // floats per padded row: stride * phase
  // The plane, then room for the 16 floats at most that the row stencil reads past its end,
  // rounded to whole cache lines.
  int64_t floats() const { return (rows * pitch + pitch + 16 + 15) / 16 * 16; }
};

PaddedPlane padded_plane(const View& x, const View& y, const ConvGeometry& g) {
  PaddedPlane pp;
  pp.rows = std::max(x.dims[2] + g.pad_begin[0], (y.dims[2] - 1) * g.strides[0] + (g.kernel[0] - 1) * g.dilations[0] + 1);
  pp.cols = std::max(x.dims[3] + g.pad_begin[1], (y.dims[3] - 1) * g.strides[1] + (g.kernel[1] - 1) * g.dilations[1] + 1);
  pp.phase = (pp.cols + g.strides[1] - 1) / g.strides[1];
  pp.pitch = g.strides[1] * pp.phase;
  return pp;
}


// Channels per vector block of the channels-last depthwise path, and outputs per vector of
// the row stencil.
constexpr int64_t kDwLanes = 16;

// 16 floats as one value: one ZMM register, two YMM or four XMM, per the clone compiled.
typedef float Lanes __attribute__((vector_size(kDwLanes * sizeof(float))));

// A statement expression, not a function: a function returning 64 bytes of vector from a
// clone compiled without AVX-512 would change the calling convention, which clang refuses.
#define load_lanes(p) (__extension__({ Lanes lanes_; std::memcpy(&lanes_, (p), sizeof lanes_); lanes_; }))

// One padded row split into sw column phases: element k of phase q (at d + q * phase_stride)
// is padded column k * sw + q, i.e. input column k * sw + q - pw of `src` (zero outside the
// row, and everywhere when src is nullptr: a padding row). Vector loads and stores: no library
// call per row (rows are short, and there are many).
TETHER_MULTIVERSION __attribute__((optimize("no-tree-loop-distribute-patterns")))
void fill_padded_row(float* __restrict d0, const float* __restrict src, int64_t iw, int64_t pw, int64_t sw,
                     int64_t len, int64_t phase_stride) {
  for (int64_t q = 0; q < sw; ++q) {
    float* d = d0 + q * phase_stride;
    // Elements [lo, hi) of this phase lie inside the input row.
    const int64_t lo = src == nullptr ? len : std::clamp<int64_t>(ceil_div(pw - q, sw), 0, len);
    const int64_t hi = src == nullptr ? len : std::clamp<int64_t>(floor_div(iw - 1 + pw - q, sw) + 1, lo, len);
    int64_t k = 0;
    const Lanes zero{};
    if (lo == len) {
      for (; k + kDwLanes <= len; k += kDwLanes) std::memcpy(d + k, &zero, sizeof zero);
      for (; k < len; ++k) d[k] = 0.0f;
      continue;
    }
    for (; k < lo; ++k) d[k] = 0.0f;
    const float* s = src + lo * sw + q - pw;  // input column of element lo
    if (sw == 1) {
      for (; k + kDwLanes <= hi; k += kDwLanes) std::memcpy(d + k, s + (k - lo), sizeof(Lanes));
    } else if (sw == 2) {
      // 16 elements from two vectors of the row; the last read (2 * 16 - 1 past element k)
      // stays inside the row while element k + 16 does.
      for (; k + kDwLanes < hi; k += kDwLanes) {
        const Lanes a = load_lanes(s + 2 * (k - lo)), b = load_lanes(s + 2 * (k - lo) + kDwLanes);
        const Lanes even = __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        std::memcpy(d + k, &even, sizeof even);
      }
    }
    for (; k < hi; ++k) d[k] = s[(k - lo) * sw];
    for (; k < len; ++k) d[k] = 0.0f;
  }
}

// The zero-padded copy of one input plane (ih x iw) that the row stencil reads: padded row r
// is input row r - ph, stored as sw phases of `phase` floats (see fill_padded_row).
void fill_padded_plane(float* pad, const float* x, int64_t ih, int64_t iw, int64_t ph, int64_t pw, int64_t rows,
                       int64_t sw, int64_t phase) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t xr = r - ph;
    fill_padded_row(pad + r * sw * phase, xr < 0 || xr >= ih ? nullptr : x + xr * iw, iw, pw, sw, phase, phase);
  }
}

// Taps a row of the stencil keeps offsets for on the stack; wider kernels take the slow loop.
constexpr int64_t kDwMaxTaps = 64;

// Outputs [c0, c0 + n) of one row, n <= 16 * kVectors: every tap accumulated in kVectors
// registers (independent chains hide the FMA latency), then stored once. Lanes past n read
// whatever follows in the padded buffer and are dropped.
template <int kVectors>
[[gnu::always_inline]] inline void depthwise_run(float* yr, const float* src, const int64_t* offsets, const float* wp,
                                                 int64_t taps, int64_t c0, int64_t n, float bias) {
  Lanes acc[kVectors];
  for (int v = 0; v < kVectors; ++v) acc[v] = Lanes{} + bias;
  for (int64_t t = 0; t < taps; ++t) {
    const float* s = src + offsets[t] + c0;
    const float wv = wp[t];
    for (int v = 0; v < kVectors; ++v) acc[v] += wv * load_lanes(s + v * kDwLanes);
  }
  for (int v = 0; v < kVectors; ++v) {
    const int64_t count = n - v * kDwLanes;
    if (count >= kDwLanes) {
      std::memcpy(yr + c0 + v * kDwLanes, &acc[v], sizeof(Lanes));  // one vector store
    } else {
      // The row's ragged end, lane by lane (a copy of variable length would call memcpy).
      for (int64_t l = 0; l < count; ++l) yr[c0 + v * kDwLanes + l] = acc[v][l];
    }
  }
}

// One output plane (oh x ow, rows contiguous) of a depthwise convolution from its padded
// input plane (see fill_padded_plane). Tap (i, j) reads padded row i * dh, column phase
// (j * dw) % sw, from offset (j * dw) / sw on; each row is computed 64 outputs at a time with
// all taps held in registers. The padded buffer must hold 16 readable floats past the last
// position any tap reads.
TETHER_MULTIVERSION
void depthwise_plane(float* __restrict yp, const float* __restrict pad, int64_t pitch, int64_t phase,
                     const float* __restrict wp, int64_t kh, int64_t kw, int64_t sh, int64_t dh, int64_t dw, int64_t sw,
                     int64_t oh, int64_t ow, float bias) {
  const int64_t taps = kh * kw;
  if (taps > kDwMaxTaps) {  // a wide kernel: tap by tap over whole rows
    for (int64_t r = 0; r < oh; ++r) {
      float* yr = yp + r * ow;
      const float* src = pad + r * sh * pitch;
      for (int64_t c = 0; c < ow; ++c) yr[c] = bias;
      for (int64_t i = 0; i < kh; ++i) {
        int64_t q = 0, o = 0;
        for (int64_t j = 0; j < kw; ++j) {
          const float wv = wp[i * kw + j];
          const float* __restrict s = src + i * dh * pitch + q * phase + o;
          for (int64_t c = 0; c < ow; ++c) yr[c] += wv * s[c];
          for (q += dw; q >= sw; q -= sw) ++o;
        }
      }
    }
    return;
  }
  int64_t offsets[kDwMaxTaps];
  for (int64_t i = 0; i < kh; ++i) {
    // Tap column j * dw as (phase q, offset o), stepped without dividing.
    int64_t q = 0, o = 0;
    for (int64_t j = 0; j < kw; ++j) {
      offsets[i * kw + j] = i * dh * pitch + q * phase + o;
      for (q += dw; q >= sw; q -= sw) ++o;
    }
  }
  const int64_t full = ow / (4 * kDwLanes) * (4 * kDwLanes), rest = ow - full;
  for (int64_t r = 0; r < oh; ++r) {
    float* yr = yp + r * ow;
    const float* src = pad + r * sh * pitch;
    for (int64_t c0 = 0; c0 < full; c0 += 4 * kDwLanes) depthwise_run<4>(yr, src, offsets, wp, taps, c0, 4 * kDwLanes, bias);
    if (rest > 2 * kDwLanes) depthwise_run<4>(yr, src, offsets, wp, taps, full, rest, bias);
    else if (rest > kDwLanes) depthwise_run<2>(yr, src, offsets, wp, taps, full, rest, bias);
    else if (rest > 0) depthwise_run<1>(yr, src, offsets, wp, taps, full, rest, bias);
  }
}

// Depthwise 2-D convolution (one input and one output channel per group): a direct stencil
// over a zero-padded copy of each plane, vectorised along the output row. `sum` (laid out as
// y, or nullptr) is added to each finished row before the activation.
void depthwise_2d(const RunContext& ctx, const View& x, const View& w, const float* bias, const float* sum, View& y,
                  const ConvGeometry& g, const Epilogue& ep, float* padded) {
  const int64_t planes = x.dims[0] * x.dims[1], channels = x.dims[1];
  const int64_t ih = x.dims[2], iw = x.dims[3], oh = y.dims[2], ow = y.dims[3];
  const int64_t kh = g.kernel[0], kw = g.kernel[1];
  const int64_t sh = g.strides[0], sw = g.strides[1], dh = g.dilations[0], dw = g.dilations[1];
  const int64_t ph = g.pad_begin[0], pw = g.pad_begin[1];
  const PaddedPlane pp = padded_plane(x, y, g);
  // One padded plane per thread, reused plane after plane (it stays in cache).
  auto planes_of = [&](int thread, int64_t p0, int64_t p1) {
    float* pad = padded + thread * pp.floats();
    for (int64_t p = p0; p < p1; ++p) {
      fill_padded_plane(pad, x.as<float>() + p * ih * iw, ih, iw, ph, pw, pp.rows, sw, pp.phase);
      const float* wp = w.as<float>() + (p % channels) * kh * kw;
      float* yp = y.as<float>() + p * oh * ow;
      const float b = bias != nullptr ? bias[p % channels] : 0.0f;
      depthwise_plane(yp, pad, pp.pitch, pp.phase, wp, kh, kw, sh, dh, dw, sw, oh, ow, b);
      ep.apply(yp, sum != nullptr ? sum + p * oh * ow : nullptr, oh * ow);
    }
  };
  if (ctx.pool == nullptr || planes < 2) planes_of(0, 0, planes);
  else ctx.pool->parallel_for_indexed(planes, 1, planes_of);
}

// Below this output width, rows are too short to vectorise along: depthwise runs channels last.
constexpr int64_t kDwChannelsLastWidth = 64;

// One round of a 16 x 16 transpose: in every 2B x 2B block of the matrix held in r (row i in
// r[i]), the top-right and bottom-left B x B blocks trade places.
template <int B>
[[gnu::always_inline]] inline void swap_blocks(Lanes* r) {
  for (int i = 0; i < 16; ++i) {
    if ((i & B) != 0) continue;
    const Lanes a = r[i], b = r[i + B];
    if constexpr (B == 8) {
      r[i] = __builtin_shufflevector(a, b, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
      r[i + B] = __builtin_shufflevector(a, b, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    } else if constexpr (B == 4) {
      r[i] = __builtin_shufflevector(a, b, 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
      r[i + B] = __builtin_shufflevector(a, b, 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
    } else if constexpr (B == 2) {
      r[i] = __builtin_shufflevector(a, b, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29);
      r[i + B] = __builtin_shufflevector(a, b, 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
    } else {
      r[i] = __builtin_shufflevector(a, b, 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30);
      r[i + B] = __builtin_shufflevector(a, b, 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31);
    }
  }
}

// dst[j * dst_stride + i] = src[i * src_stride + j] for a 16 x 16 block, in registers: the
// off-diagonal blocks swapped at each scale (8, 4, 2, 1) transpose the whole.
[[gnu::always_inline]] inline void transpose_16x16(const float* src, int64_t src_stride, float* dst, int64_t dst_stride) {
  Lanes r[16];
  for (int i = 0; i < 16; ++i) r[i] = load_lanes(src + i * src_stride);
  swap_blocks<8>(r);
  swap_blocks<4>(r);
  swap_blocks<2>(r);
  swap_blocks<1>(r);
  for (int i = 0; i < 16; ++i) std::memcpy(dst + i * dst_stride, &r[i], sizeof(Lanes));
}

// dst[j * dst_stride + i] = src[i * src_stride + j] for i < rows, j < cols: 16 x 16 blocks in
// registers, the edges element by element.
TETHER_MULTIVERSION
void transpose(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows, int64_t cols) {
  int64_t i = 0;
  for (; i + 16 <= rows; i += 16) {
    int64_t j = 0;
    for (; j + 16 <= cols; j += 16) transpose_16x16(src + i * src_stride + j, src_stride, dst + j * dst_stride + i, dst_stride);
    for (; j < cols; ++j)
      for (int64_t k = i; k < i + 16; ++k) dst[j * dst_stride + k] = src[k * src_stride + j];
  }
  for (; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) dst[j * dst_stride + i] = src[i * src_stride + j];
}

// Outputs [o, o + kOut) of one output row, 16 channels each, from a zero-padded channels-last
// block: the bias plus every tap, each tap's weights loaded once for the kOut positions, whose
// accumulators are independent (they hide the FMA latency). Position u reads
// x + u * col_step + offsets[t] at tap t.
template <int kOut>
[[gnu::always_inline]] inline void depthwise_positions(float* y, const float* x, const int64_t* offsets,
                                                       const float* wt, const Lanes& bias, int64_t taps,
                                                       int64_t col_step) {
  Lanes acc[kOut];
  for (int u = 0; u < kOut; ++u) acc[u] = bias;
  for (int64_t t = 0; t < taps; ++t) {
    const Lanes wv = load_lanes(wt + t * kDwLanes);
    const float* xs = x + offsets[t];
    for (int u = 0; u < kOut; ++u) acc[u] += wv * load_lanes(xs + u * col_step);
  }
  for (int u = 0; u < kOut; ++u) std::memcpy(y + u * kDwLanes, &acc[u], sizeof(Lanes));
}

// Geometry of the channels-last blocked path: a padded block holds `rows` x `cols` positions
// of 16 channels.
struct DwBlock {
  int64_t rows, cols;
  int64_t floats() const { return rows * cols * kDwLanes; }
};

DwBlock dw_block(const View& x, const View& y, const ConvGeometry& g) {
  const PaddedPlane pp = padded_plane(x, y, g);
  return {pp.rows, pp.cols};
}

// Floats of one thread's scratch: the transposed input, its padded copy, the output block,
// the weights and the bias (16 channels each).
int64_t dw_block_floats(const View& x, const View& y, const ConvGeometry& g) {
  return (x.dims[2] * x.dims[3] + y.dims[2] * y.dims[3] + g.kernel[0] * g.kernel[1] + 1) * kDwLanes +
         dw_block(x, y, g).floats();
}

// One 16-channel block of one image, channels last: `xt` (ih * iw positions) is copied into
// the zero-padded `pad`, convolved into `yt` (oh * ow positions), four positions at a time.
TETHER_MULTIVERSION
void depthwise_block16(float* __restrict yt, float* __restrict pad, const float* __restrict xt,
                       const float* __restrict wt, const float* __restrict bias, const ConvGeometry& g, const DwBlock& b,
                       int64_t ih, int64_t iw, int64_t oh, int64_t ow) {
  const int64_t kh = g.kernel[0], kw = g.kernel[1], taps = kh * kw;
  const int64_t ph = g.pad_begin[0], pw = g.pad_begin[1];
  const Lanes zero{};
  for (int64_t r = 0; r < b.rows; ++r) {
    float* row = pad + r * b.cols * kDwLanes;
    const int64_t xr = r - ph;
    const int64_t lo = xr < 0 || xr >= ih ? b.cols : pw, hi = xr < 0 || xr >= ih ? b.cols : pw + iw;
    for (int64_t q = 0; q < lo; ++q) std::memcpy(row + q * kDwLanes, &zero, sizeof zero);
    for (int64_t q = lo; q < hi; ++q) std::memcpy(row + q * kDwLanes, xt + (xr * iw + q - pw) * kDwLanes, sizeof(Lanes));
    for (int64_t q = std::max(lo, hi); q < b.cols; ++q) std::memcpy(row + q * kDwLanes, &zero, sizeof zero);
  }
  int64_t offsets[kDwMaxTaps];
  for (int64_t i = 0; i < kh; ++i)
    for (int64_t j = 0; j < kw; ++j)
      offsets[i * kw + j] = (i * g.dilations[0] * b.cols + j * g.dilations[1]) * kDwLanes;
  const Lanes bv = load_lanes(bias);
  const int64_t col_step = g.strides[1] * kDwLanes;
  for (int64_t oy = 0; oy < oh; ++oy) {
    const float* xrow = pad + oy * g.strides[0] * b.cols * kDwLanes;
    float* yrow = yt + oy * ow * kDwLanes;
    int64_t ox = 0;
    for (; ox + 4 <= ow; ox += 4)
      depthwise_positions<4>(yrow + ox * kDwLanes, xrow + ox * col_step, offsets, wt, bv, taps, col_step);
    for (; ox < ow; ++ox)
      depthwise_positions<1>(yrow + ox * kDwLanes, xrow + ox * col_step, offsets, wt, bv, taps, col_step);
  }
}

// Depthwise 2-D convolution of small planes, channels last in blocks of 16 channels: each task
// (an image and 16 of its channels) transposes its planes to positions x 16 channels (16 x 16
// blocks in registers), pads them, convolves four positions at a time with each tap's 16
// weights loaded once, and transposes back through the epilogue (with `sum`, laid out as y,
// when not nullptr). Channels past C in the last block are zero and dropped. `scratch` holds
// dw_block_floats per thread.
void depthwise_2d_channels_last(const RunContext& ctx, const View& x, const View& w, const float* bias,
                                const float* sum, View& y, const ConvGeometry& g, const Epilogue& ep, float* scratch) {
  const int64_t batch = x.dims[0], c = x.dims[1], blocks = (c + kDwLanes - 1) / kDwLanes;
  const int64_t ih = x.dims[2], iw = x.dims[3], oh = y.dims[2], ow = y.dims[3];
  const int64_t taps = g.kernel[0] * g.kernel[1], in_size = ih * iw, out_size = oh * ow;
  TETHER_CHECK(taps <= kDwMaxTaps, "depthwise: kernel too large for the channels-last path");
  const DwBlock b = dw_block(x, y, g);
  const int64_t per_thread = dw_block_floats(x, y, g);
  auto run = [&](int thread, int64_t t0, int64_t t1) {
    float* xt = scratch + thread * per_thread;  // [in_size][16]
    float* yt = xt + in_size * kDwLanes;       // [out_size][16]
    float* wt = yt + out_size * kDwLanes;      // [taps][16]
    float* bt = wt + taps * kDwLanes;          // [16]
    float* pad = bt + kDwLanes;                // [rows][cols][16]
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t image = t / blocks, c0 = t % blocks * kDwLanes, nch = std::min(kDwLanes, c - c0);
      for (int64_t l = 0; l < kDwLanes; ++l) {
        bt[l] = bias != nullptr && l < nch ? bias[c0 + l] : 0.0f;
        for (int64_t q = 0; q < taps; ++q) wt[q * kDwLanes + l] = l < nch ? w.as<float>()[(c0 + l) * taps + q] : 0.0f;
      }
      if (nch < kDwLanes) std::fill(xt, xt + in_size * kDwLanes, 0.0f);
      const float* xs = x.as<float>() + (image * c + c0) * in_size;
      transpose(xs, in_size, xt, kDwLanes, nch, in_size);
      depthwise_block16(yt, pad, xt, wt, bt, g, b, ih, iw, oh, ow);
      float* ys = y.as<float>() + (image * c + c0) * out_size;
      transpose(yt, kDwLanes, ys, out_size, out_size, nch);
      for (int64_t l = 0; l < nch; ++l)
        ep.apply(ys + l * out_size, sum != nullptr ? sum + (image * c + c0 + l) * out_size : nullptr, out_size);
    }
  };
  if (ctx.pool == nullptr || batch * blocks < 2) run(0, 0, batch * blocks);
  else ctx.pool->parallel_for_indexed(batch * blocks, 1, run);
}

// Direct 2-D convolution (groups of 1): the GEMM of the packed weights with an im2col matrix
// that is never built. Each input channel is stored once, zero-padded and split into
// sh x sw phase planes of hq x wq (phase (a, b) holds padded rows a, a + sh, ... and columns
// b, b + sw, ...). Output position (oy, ox) is column oy * wq + ox of a "wide" output whose
// rows are wq long; im2col row (c, i, j) is then one contiguous run of c's phase plane
// ((i * dh) % sh, (j * dw) % sw), starting (i * dh) / sh rows and (j * dw) / sw columns in, and
// the micro-kernel reads B's rows there in place. The wq - ow columns past each output row are
// computed and dropped.
struct Direct {
  int64_t hq = 0, wq = 0, plane = 0;  // phase planes, and floats per channel (all its phases)
  int64_t n_wide = 0;                 // oh * wq
};

constexpr int64_t kDirectGroupRows = 144;  // rows of C a task finishes before the next (A in L2)

Direct direct_of(const View& x, const View& y, const ConvGeometry& g) {
  Direct d;
  const PaddedPlane pp = padded_plane(x, y, g);
  d.hq = (pp.rows + g.strides[0] - 1) / g.strides[0];
  d.wq = (pp.cols + g.strides[1] - 1) / g.strides[1];
  d.plane = g.strides[0] * g.strides[1] * d.hq * d.wq;
  d.n_wide = y.dims[2] * d.wq;
  return d;
}

// Scratch of the direct path: the phase planes of every image (with room for a panel read
// past the end), B's row offsets, then per thread a block of C.
struct DirectScratch {
  int64_t planes, offsets, per_thread;
  int64_t floats(int threads) const { return planes + offsets + threads * per_thread; }
};

DirectScratch direct_scratch(const View& x, const View& y, const ConvGeometry& g) {
  const Direct d = direct_of(x, y, g);
  const int64_t nr = gemm_isa().nr, k = x.dims[1] * g.kernel[0] * g.kernel[1];
  DirectScratch s;
  s.planes = (x.dims[0] * x.dims[1] * d.plane + 2 * nr + 15) / 16 * 16;
  s.offsets = (2 * k + 15) / 16 * 16;  // int64 each
  s.per_thread = (kDirectGroupRows + gemm_isa().mr) * nr;
  return s;
}

void conv_direct(const RunContext& ctx, const View& x, const View& y, const ConvGeometry& g, const PackedA& w,
                 const float* bias, const float* sum, const Epilogue& act, float* scratch) {
  const GemmIsa& isa = gemm_isa();
  const int64_t mr = isa.mr, nr = isa.nr;
  const int64_t batch = x.dims[0], cin = x.dims[1], ih = x.dims[2], iw = x.dims[3];
  const int64_t cout = y.dims[1], oh = y.dims[2], ow = y.dims[3], out_size = oh * ow;
  const int64_t kh = g.kernel[0], kw = g.kernel[1], sh = g.strides[0], sw = g.strides[1];
  const int64_t k = cin * kh * kw;
  const Direct d = direct_of(x, y, g);
  const DirectScratch layout = direct_scratch(x, y, g);
  float* planes = scratch;
  auto* offsets = reinterpret_cast<int64_t*>(scratch + layout.planes);
  float* per_thread = scratch + layout.planes + layout.offsets;
  TETHER_CHECK(w.m() == cout && w.k() == k, "Conv: packed weights differ from the plan");

  // B's row (c, i, j) as an offset from its image's planes.
  for (int64_t c = 0; c < cin; ++c)
    for (int64_t i = 0; i < kh; ++i)
      for (int64_t j = 0; j < kw; ++j) {
        const int64_t di = i * g.dilations[0], dj = j * g.dilations[1];
        offsets[(c * kh + i) * kw + j] =
            c * d.plane + ((di % sh) * sw + dj % sw) * d.hq * d.wq + (di / sh) * d.wq + dj / sw;
      }
  // Every (image, channel)'s padded phase planes; the room after them stays finite.
  parallel(ctx, batch * cin, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const float* xp = x.as<float>() + p * ih * iw;
      for (int64_t r = 0; r < d.hq * sh; ++r) {
        const int64_t xr = r - g.pad_begin[0];
        float* dst = planes + p * d.plane + (r % sh) * sw * d.hq * d.wq + (r / sh) * d.wq;
        fill_padded_row(dst, xr < 0 || xr >= ih ? nullptr : xp + xr * iw, iw, g.pad_begin[1], sw, d.wq, d.hq * d.wq);
      }
    }
  });
  std::fill(planes + batch * cin * d.plane, planes + layout.planes, 0.0f);
  const int64_t image_floats = cin * d.plane;

  // Tasks: a grid over the images' panels (laid end to end) and M tiles, panels first.
  const int64_t ppi = (d.n_wide + nr - 1) / nr, panels = batch * ppi, mtiles = (cout + mr - 1) / mr;
  const int threads = ctx.pool != nullptr ? ctx.pool->threads() : 1;
  int64_t gn = 1, gm = 1;
  if (threads > 1) {
    const int64_t target = 2 * static_cast<int64_t>(threads);
    gn = std::min(panels, target);
    gm = std::min(mtiles, (target + gn - 1) / gn);
  }
  const int64_t group = std::max<int64_t>(1, kDirectGroupRows / mr);
  // Without a summand (laid out as y, not as the wide rows) a clamp-like activation and the
  // bias are applied by the kernel; otherwise after the copy into y.
  bool clamp = false;
  float lo = 0.0f, hi = 0.0f;
  const bool in_kernel = sum == nullptr && act.as_clamp(clamp, lo, hi);
  auto task = [&](int thread, int64_t t_begin, int64_t t_end) {
    float* cbuf = per_thread + thread * layout.per_thread;  // group * mr rows x nr
    for (int64_t t = t_begin; t < t_end; ++t) {
      const int64_t im = t / gn, jn = t % gn;
      const int64_t t0 = mtiles * im / gm, t1 = mtiles * (im + 1) / gm;
      for (int64_t v = panels * jn / gn; v < panels * (jn + 1) / gn; ++v) {
        const int64_t image = v / ppi, j0 = v % ppi * nr, cols = std::min(nr, d.n_wide - j0);
        const float* base = planes + image * image_floats + j0;
        for (int64_t g0 = t0; g0 < t1; g0 += group) {
          const int64_t g1 = std::min(t1, g0 + group);
          for (int64_t k0 = 0; k0 < k; k0 += kGemmKc) {
            const int64_t kc = std::min(kGemmKc, k - k0);
            const float* a_block = w.block(k0);
            for (int64_t it = g0; it < g1; ++it) {
              const int64_t rows = std::min(mr, cout - it * mr);
              float* ct = cbuf + (it - g0) * mr * nr;
              // The last K block adds the bias and clamps in the kernel's store, when it can.
              TileEpilogue te;
              te.row_bias = bias != nullptr ? bias + it * mr : nullptr;
              te.clamp = clamp;
              te.lo = lo;
              te.hi = hi;
              const TileEpilogue* tep = in_kernel && k0 + kc >= k ? &te : nullptr;
              isa.offsets_kernel(kc, a_block + it * kc * mr, mr, base, offsets + k0, ct, nr, rows, nr, k0 > 0, tep);
            }
          }
          // Finished rows [r0, r1): the wide columns inside output rows go to y, then the epilogue.
          const int64_t r0 = g0 * mr, r1 = std::min(cout, g1 * mr);
          for (int64_t oy = j0 / d.wq; oy < oh && oy * d.wq < j0 + cols; ++oy) {
            const int64_t c0 = std::max<int64_t>(0, j0 - oy * d.wq), c1 = std::min(ow, j0 + cols - oy * d.wq);
            if (c0 >= c1) continue;
            const int64_t at = (image * cout + r0) * out_size + oy * ow + c0;
            float* dst = y.as<float>() + at;
            copy_tile(dst, out_size, cbuf + oy * d.wq + c0 - j0, nr, r1 - r0, c1 - c0);
            if (!in_kernel)
              act.apply_tile(dst, out_size, r1 - r0, c1 - c0, bias != nullptr ? bias + r0 : nullptr, nullptr,
                             sum != nullptr ? sum + at : nullptr);
          }
        }
      }
    }
  };
  if (ctx.pool == nullptr || gm * gn == 1) task(0, 0, gm * gn);
  else ctx.pool->parallel_for_indexed(gm * gn, 1, task);
}

// Conv (and FusedConv): the GEMM of the weights (A) with the im2col matrix (B), whose blocks
// are expanded on demand straight into packed panels, with the bias and activation fused into
// the GEMM's tiles.
class ConvKernel final : public HostKernel {
 public:
  explicit ConvKernel(const KernelInit& init)
      : node_(init.node), epilogue_(Epilogue::from_node(init.node)), threads_(init.threads) {
    // Constant weights of a GEMM convolution are packed once, per group, as the GEMM's A.
    const ir::Tensor* w = init.constant(1);
    const int64_t group = init.node.attr_int("group", 1);
    if (w == nullptr || w->rank() < 3 || w->dims()[0] % group != 0) return;
    const bool depthwise = w->rank() == 4 && group > 1 && w->dims()[1] == 1 && w->dims()[0] == group;
    if (depthwise) return;
    const int64_t cout_g = w->dims()[0] / group, rows = w->num_elements() / w->dims()[0];
    for (int64_t g = 0; g < group; ++g) packed_w_.emplace_back(w->data<float>() + g * cout_g * rows, cout_g, rows, rows);
  }

  bool packs_input(size_t i) const override { return i == 1 && !packed_w_.empty(); }

  int64_t scratch_bytes(const std::vector<View>& in, const std::vector<View>& out) const override {
    if (out[0].numel() == 0) return 0;  // run writes nothing (and the empty plane may be vast)
    const ConvGeometry g = conv_geometry(node_, in[0].dims, in[1].dims, out[0].dims, false);
    if (is_depthwise(in[0], out[0], g))
      return (use_channels_last(out[0], g) ? threads_ * dw_block_floats(in[0], out[0], g)
                                                    : threads_ * padded_plane(in[0], out[0], g).floats()) *
             4;
    if (use_direct(in[0], out[0], g)) return direct_scratch(in[0], out[0], g).floats(threads_) * 4;
    const Shape s = shape_of(in[0], out[0], g);
    return sgemm_scratch_floats(out[0].dims[1] / g.group, s.out_size, s.rows, threads_) * 4;
  }

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    const View& x = in[0];
    const View& w = in[1];
    View& y = out[0];
    if (y.numel() == 0) return;  // a batch of 0 (or channels or pixels of 0): nothing to write
    const ConvGeometry g = conv_geometry(node_, x.dims, w.dims, y.dims, false);
    const float* bias = present(in, 2) ? in[2].as<float>() : nullptr;
    // FusedConv's summand (a residual Add): the output's shape, added before the activation.
    const float* sum = present(in, 3) ? in[3].as<float>() : nullptr;
    TETHER_CHECK(sum == nullptr || in[3].dims == y.dims, "FusedConv: the summand's shape differs from the output's");
    auto* scratch = reinterpret_cast<float*>(ctx.scratch);
    if (is_depthwise(x, y, g)) {
      if (use_channels_last(y, g))
        depthwise_2d_channels_last(ctx, x, w, bias, sum, y, g, epilogue_, scratch);
      else
        depthwise_2d(ctx, x, w, bias, sum, y, g, epilogue_, scratch);
      return;
    }
    if (use_direct(x, y, g)) {
      conv_direct(ctx, x, y, g, packed_w_[0], bias, sum, epilogue_, scratch);
      return;
    }
    const Shape s = shape_of(x, y, g);
    const int64_t nr = gemm_isa().nr;
    const int64_t batch = x.dims[0], cin = x.dims[1], cout = y.dims[1];
    const int64_t cin_g = cin / g.group, cout_g = cout / g.group;
    TETHER_CHECK(!packed_w_.empty() || w.numel() == cout * s.rows, "Conv: weight size differs from the plan");
    TETHER_CHECK(packed_w_.empty() || (static_cast<int64_t>(packed_w_.size()) == g.group && packed_w_[0].k() == s.rows),
                 "Conv: packed weights differ from the plan");
    // One product per group over the whole batch: the images share the weights (A), which
    // sgemm then reads once per K block for all the images a thread takes.
    GemmImages images;
    images.count = batch;
    images.c_stride = cout * s.out_size;
    for (int64_t gi = 0; gi < g.group; ++gi) {
      GemmB source;
      source.pack = [&](const RunContext&, int64_t image, int64_t k0, int64_t kc, int64_t n0, int64_t nc, float* dst) {
        const float* xg = x.as<float>() + (image * cin + gi * cin_g) * s.in_size;
        im2col_block(xg, x.dims, y.dims, g, cin_g, k0, k0 + kc, n0, nc, dst, nr);
      };
      GemmEpilogue ep;
      ep.row_bias = bias != nullptr ? bias + gi * cout_g : nullptr;
      ep.sum = sum != nullptr ? sum + gi * cout_g * s.out_size : nullptr;
      ep.act = epilogue_;
      GemmA weights;
      if (!packed_w_.empty()) {
        weights.packed = packed_w_[static_cast<size_t>(gi)].data();
      } else {
        weights.data = w.as<float>() + gi * cout_g * s.rows;
        weights.lda = s.rows;
      }
      sgemm(ctx, cout_g, s.out_size, s.rows, weights, source, y.as<float>() + gi * cout_g * s.out_size, s.out_size, ep,
            scratch, images);
    }
  }

 private:
  struct Shape {
    int64_t rows, in_size, out_size;
  };

  static Shape shape_of(const View& x, const View& y, const ConvGeometry& g) {
    Shape s{x.dims[1] / g.group, 1, 1};
    for (size_t i = 0; i + 2 < x.rank(); ++i) {
      s.rows *= g.kernel[i];
      s.in_size *= x.dims[i + 2];
      s.out_size *= y.dims[i + 2];
    }
    return s;
  }

  // 2-D, one group, constant weights, a kernel wider than 1x1: the direct path. (A 1x1
  // convolution's im2col matrix is the input itself, or a fraction of it when strided; packing
  // its panels costs less than reading B's rows in place once many row tiles reuse them.)
  // The direct path copies the padded input as stride x stride phase planes, each rounded up
  // to whole strides: about the input's size while a stride is at most the kernel (every
  // input pixel is read), but stride^2 per channel past it (a stride of 20000 on an 8 x 8
  // input would take 1.6 GB a channel). Those convolutions read few pixels and take the
  // im2col path, whose scratch follows the output.
  bool use_direct(const View& x, const View&, const ConvGeometry& g) const {
    return x.rank() == 4 && g.group == 1 && !packed_w_.empty() && g.kernel[0] * g.kernel[1] > 1 &&
           g.strides[0] <= g.kernel[0] && g.strides[1] <= g.kernel[1];
  }

  // Narrow output rows are too short to vectorise along: those planes run channels last
  // (kernels of at most kDwMaxTaps taps).
  static bool use_channels_last(const View& y, const ConvGeometry& g) {
    return y.dims[3] < kDwChannelsLastWidth && g.kernel[0] * g.kernel[1] <= kDwMaxTaps;
  }

  static bool is_depthwise(const View& x, const View& y, const ConvGeometry& g) {
    return x.rank() == 4 && g.group > 1 && g.group == x.dims[1] && g.group == y.dims[1];
  }

  const ir::Node& node_;
  Epilogue epilogue_;
  int threads_;
  std::vector<PackedA> packed_w_;  // per group; empty when the weights are not constant
};

// ConvTranspose: per image and group, one GEMM of the transposed weights with the input,
//   cols[(oc, t), i] = sum over ic of W[ic, oc, t] * x[ic, i]   (t a kernel position, i an input pixel)
// then a scatter (col2im) that adds each column value into output pixel i * stride - pad +
// t * dilation. The transposed weights are packed once when constant. Ranks 3 to 5 (1-D to
// 3-D) run as 3-D with leading sizes of 1.
class ConvTransposeKernel final : public HostKernel {
 public:
  explicit ConvTransposeKernel(const KernelInit& init) : node_(init.node), threads_(init.threads) {
    const ir::Tensor* w = init.constant(1);
    const int64_t group = init.node.attr_int("group", 1);
    if (w == nullptr || w->rank() < 3 || w->dims()[0] % group != 0) return;
    const int64_t cin_g = w->dims()[0] / group, rows = w->num_elements() / w->dims()[0];
    std::vector<float> t(static_cast<size_t>(rows * cin_g));
    for (int64_t g = 0; g < group; ++g) {
      transpose_weights(w->data<float>() + g * cin_g * rows, cin_g, rows, t.data());
      packed_w_.emplace_back(t.data(), rows, cin_g, cin_g);
    }
  }

  bool packs_input(size_t i) const override { return i == 1 && !packed_w_.empty(); }

  int64_t scratch_bytes(const std::vector<View>& in, const std::vector<View>& out) const override {
    if (out[0].numel() == 0) return 0;  // as run
    const Shape s = shape_of(in[0], in[1], out[0]);
    return 4 * (round16(s.rows * s.in_size) + (packed_w_.empty() ? round16(s.rows * s.cin_g) : 0) +
                sgemm_scratch_floats(s.rows, s.in_size, s.cin_g, threads_));
  }

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    const View& x = in[0];
    const View& w = in[1];  // [cin, cout / group, kernel...]
    View& y = out[0];
    if (y.numel() == 0) return;
    const ConvGeometry g = conv_geometry(node_, x.dims, w.dims, y.dims, true);
    const Shape s = shape_of(x, w, y);
    const int64_t batch = x.dims[0], cin = x.dims[1], cout = y.dims[1], cout_g = cout / g.group;
    const float* bias = present(in, 2) ? in[2].as<float>() : nullptr;
    auto* cols = reinterpret_cast<float*>(ctx.scratch);
    float* weights_t = cols + round16(s.rows * s.in_size);
    float* gemm_scratch = weights_t + (packed_w_.empty() ? round16(s.rows * s.cin_g) : 0);
    const Geometry3 geo = geometry3(x, y, g);
    const int64_t nr = gemm_isa().nr;
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t gi = 0; gi < g.group; ++gi) {
        GemmA a;
        if (!packed_w_.empty()) {
          a.packed = packed_w_[static_cast<size_t>(gi)].data();
        } else {
          transpose_weights(w.as<float>() + gi * s.cin_g * s.rows, s.cin_g, s.rows, weights_t);
          a.data = weights_t;
          a.lda = s.cin_g;
        }
        const float* xg = x.as<float>() + (b * cin + gi * s.cin_g) * s.in_size;
        GemmB source;
        const int64_t in_size = s.in_size;
        source.pack = [xg, in_size, nr](const RunContext&, int64_t, int64_t k0, int64_t kc, int64_t n0, int64_t nc,
                                        float* dst) {
          PackedMatrix::pack_into(dst, xg + k0 * in_size + n0, kc, nc, in_size, 1, static_cast<int>(nr));
        };
        sgemm(ctx, s.rows, s.in_size, s.cin_g, a, source, cols, s.in_size, GemmEpilogue{}, gemm_scratch);
        float* yg = y.as<float>() + (b * cout + gi * cout_g) * s.out_size;
        parallel(ctx, cout_g, 1, [&](int64_t c0, int64_t c1) {
          for (int64_t c = c0; c < c1; ++c)
            col2im(cols + c * s.ksize * s.in_size, geo, bias != nullptr ? bias[gi * cout_g + c] : 0.0f,
                   yg + c * s.out_size);
        });
      }
    }
  }

 private:
  struct Shape {
    int64_t cin_g, rows, ksize, in_size, out_size;  // rows = cout_g * ksize
  };
  // The spatial geometry as 3-D (leading dims of size 1 for 1-D and 2-D).
  struct Geometry3 {
    int64_t in[3], out[3], kernel[3], stride[3], dilation[3], pad[3];
  };

  static int64_t round16(int64_t v) { return (v + 15) / 16 * 16; }

  Shape shape_of(const View& x, const View& w, const View& y) const {
    const int64_t group = node_.attr_int("group", 1);
    Shape s{x.dims[1] / group, w.numel() / w.dims[0], 1, 1, 1};
    for (size_t i = 2; i < x.rank(); ++i) {
      s.ksize *= w.dims[i];
      s.in_size *= x.dims[i];
      s.out_size *= y.dims[i];
    }
    return s;
  }

  static Geometry3 geometry3(const View& x, const View& y, const ConvGeometry& g) {
    Geometry3 r{};
    const size_t k = x.rank() - 2, lead = 3 - k;
    for (size_t d = 0; d < 3; ++d) {
      const bool used = d >= lead;
      const size_t i = d - lead;
      r.in[d] = used ? x.dims[i + 2] : 1;
      r.out[d] = used ? y.dims[i + 2] : 1;
      r.kernel[d] = used ? g.kernel[i] : 1;
      r.stride[d] = used ? g.strides[i] : 1;
      r.dilation[d] = used ? g.dilations[i] : 1;
      r.pad[d] = used ? g.pad_begin[i] : 0;
    }
    return r;
  }

  // t[r * cin + i] = w[i * rows + r]: the weights of one group [cin, rows] as the GEMM's A.
  static void transpose_weights(const float* w, int64_t cin, int64_t rows, float* t) {
    for (int64_t i = 0; i < cin; ++i)
      for (int64_t r = 0; r < rows; ++r) t[r * cin + i] = w[i * rows + r];
  }

  // One output channel: y = bias, plus every kernel position's row of cols ([ksize][in pixels])
  // added where it lands. Along the last axis, the input columns whose output falls inside
  // are worked out once per kernel column, so the inner loop has no test.
  static void col2im(const float* cols, const Geometry3& g, float bias, float* y) {
    const int64_t out_size = g.out[0] * g.out[1] * g.out[2], in_size = g.in[0] * g.in[1] * g.in[2];
    std::fill(y, y + out_size, bias);
    const int64_t sw = g.stride[2];
    for (int64_t kd = 0; kd < g.kernel[0]; ++kd)
      for (int64_t kh = 0; kh < g.kernel[1]; ++kh)
        for (int64_t kw = 0; kw < g.kernel[2]; ++kw) {
          const float* row = cols + ((kd * g.kernel[1] + kh) * g.kernel[2] + kw) * in_size;
          // ow = iw * sw + shift lies in [0, out_w) for iw in [w0, w1).
          const int64_t shift = kw * g.dilation[2] - g.pad[2];
          const int64_t w0 = std::max<int64_t>(0, (-shift + sw - 1) / sw);
          const int64_t w1 = std::min(g.in[2], shift >= g.out[2] ? 0 : (g.out[2] - shift + sw - 1) / sw);
          if (w0 >= w1) continue;
          for (int64_t id = 0; id < g.in[0]; ++id) {
            const int64_t od = id * g.stride[0] - g.pad[0] + kd * g.dilation[0];
            if (od < 0 || od >= g.out[0]) continue;
            for (int64_t ih = 0; ih < g.in[1]; ++ih) {
              const int64_t oh = ih * g.stride[1] - g.pad[1] + kh * g.dilation[1];
              if (oh < 0 || oh >= g.out[1]) continue;
              const float* src = row + (id * g.in[1] + ih) * g.in[2];
              float* dst = y + (od * g.out[1] + oh) * g.out[2];
              for (int64_t iw = w0; iw < w1; ++iw) dst[iw * sw + shift] += src[iw];
            }
          }
        }
  }

  const ir::Node& node_;
  int threads_;
  std::vector<PackedA> packed_w_;  // per group: the transposed weights [cout_g * ksize, cin_g]
};

}  // namespace

void register_conv(KernelRegistry& r) {
  TETHER_ADD(r, "Conv",
        [](const KernelInit& init) -> std::unique_ptr<Kernel> { return std::make_unique<ConvKernel>(init); },
        float_only);
  // channels_last = 1 (X and Y [N, H, W, C]): the channels-last kernels of conv_nhwc.cc.
  TETHER_ADD_IN(r, "ai.tether", "FusedConv",
      [](const KernelInit& init) -> std::unique_ptr<Kernel> {
        if (init.node.attr_int("channels_last", 0) != 0) return make_nhwc_conv(init);
        return std::make_unique<ConvKernel>(init);
      },
      [](const KernelInit& init) {
        return init.node.attr_int("channels_last", 0) != 0 ? nhwc_conv_support(init) : float_only(init);
      });
  TETHER_ADD(r, "ConvTranspose",
        [](const KernelInit& init) -> std::unique_ptr<Kernel> { return std::make_unique<ConvTransposeKernel>(init); },
        float_only);
  TETHER_ADD_IN(r, "ai.tether", "ConvTranspose", make_nhwc_conv_transpose,
        [](const KernelInit& init) {
          if (init.node.attr_int("channels_last", 0) == 0) return std::string("ai.tether ConvTranspose takes channels_last = 1");
          return nhwc_conv_transpose_support(init);
        });
}

}  // namespace tether::engine::cpu
