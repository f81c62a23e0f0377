// Integer convolutions: ConvInteger (int32 sums), QLinearConv (requantized to int8 / uint8,
// ONNX or ai.tether with an activation, NCHW or channels last) and ai.tether
// ConvIntegerToFloat (float sums times a scale, plus a bias, activated), on the integer GEMM
// (qgemm.h) or, depthwise, on their own kernels; and the support checks and registration of every
// integer kernel (the others are in qlinear_matmul.cc and qlinear_elementwise.cc). Constant
// weights are packed once, with their zero points and column sums; the zero points of the
// activations are applied from row sums, so no operand is ever widened and shifted in memory.
//
// Requantization follows onnxruntime: the output scale of column j is
// float(a_scale * b_scale[j]) / y_scale in float32, y = round_half_even(clamp(float(sum) *
// scale, lo - y_zp, hi - y_zp)) + y_zp; the integer sums are exact.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <optional>
#include <type_traits>

#include "engine/cpu/qlinear.h"
#include "util/cpu_features.h"

namespace tether::engine::cpu {

using namespace qlinear;

namespace {

// ai.tether QLinearConv with channels_last = 1: X and Y are [N, H, W, C] (see passes/channels_last.cc).
bool channels_last(const ir::Node& n) { return n.domain() == "ai.tether" && n.attr_int("channels_last", 0) != 0; }

// [N, spatial..., C] dims as [N, C, spatial...].
std::vector<int64_t> channels_first(const std::vector<int64_t>& d) {
  std::vector<int64_t> r = {d[0], d.back()};
  r.insert(r.end(), d.begin() + 1, d.end() - 1);
  return r;
}

// memcpy for the short runs of an im2col gather: runs up to 32 bytes as two fixed-size,
// possibly overlapping copies (inlined moves, where a call to memcpy costs more than the copy).
inline void copy_bytes(std::byte* dst, const std::byte* src, int64_t n) {
  if (n > 32) {
    std::memcpy(dst, src, static_cast<size_t>(n));
  } else if (n >= 16) {
    std::memcpy(dst, src, 16);
    std::memcpy(dst + n - 16, src + n - 16, 16);
  } else if (n >= 8) {
    std::memcpy(dst, src, 8);
    std::memcpy(dst + n - 8, src + n - 8, 8);
  } else if (n >= 4) {
    std::memcpy(dst, src, 4);
    std::memcpy(dst + n - 4, src + n - 4, 4);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
  }
}

// ---- ConvInteger and QLinearConv ----------------------------------------------------------------

// Writes `count` rows of one image-and-group's im2col matrix, starting at output position
// `o0`: row o holds the k = channels x kernel-size input values output position o reads, in
// the weight's order (channel, then kernel position), with `pad` where the window leaves x.
template <typename T>
void gather_rows(const T* x, const std::vector<int64_t>& xd, const std::vector<int64_t>& yd, const ConvGeometry& g,
                 int64_t channels, int64_t o0, int64_t count, T pad, T* dst) {
  const size_t sp = xd.size() - 2;
  int64_t in_size = 1, ksize = 1;
  for (size_t d = 0; d < sp; ++d) {
    in_size *= xd[d + 2];
    ksize *= g.kernel[d];
  }
  const int64_t k = channels * ksize;
  if (sp == 2) {
    const int64_t ih = xd[2], iw = xd[3], ow = yd[3], kh = g.kernel[0], kw = g.kernel[1];
    const int64_t sh = g.strides[0], sw = g.strides[1], dh = g.dilations[0], dw = g.dilations[1];
    const int64_t ph = g.pad_begin[0], pw = g.pad_begin[1];
    if (ksize == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0) {
      // 1x1, stride 1: row o is x[:, o], a transpose of [channels, count] in tiles.
      constexpr int64_t kTile = 16;
      for (int64_t c0 = 0; c0 < channels; c0 += kTile) {
        const int64_t c1 = std::min(channels, c0 + kTile);
        for (int64_t r = 0; r < count; ++r)
          for (int64_t c = c0; c < c1; ++c) dst[r * k + c] = x[c * in_size + o0 + r];
      }
      return;
    }
    int64_t oy = o0 / ow, ox = o0 % ow;
    for (int64_t r = 0; r < count; ++r) {
      T* row = dst + r * k;
      const int64_t y0 = oy * sh - ph, x0 = ox * sw - pw;
      for (int64_t c = 0; c < channels; ++c) {
        const T* plane = x + c * in_size;
        T* out = row + c * ksize;
        for (int64_t i = 0; i < kh; ++i) {
          const int64_t iy = y0 + i * dh;
          if (iy < 0 || iy >= ih) {
            for (int64_t j = 0; j < kw; ++j) out[i * kw + j] = pad;
            continue;
          }
          const T* src = plane + iy * iw;
          for (int64_t j = 0; j < kw; ++j) {
            const int64_t ix = x0 + j * dw;
            out[i * kw + j] = ix >= 0 && ix < iw ? src[ix] : pad;
          }
        }
      }
      if (++ox == ow) {
        ox = 0;
        ++oy;
      }
    }
    return;
  }
  std::vector<int64_t> start(sp), kpos(sp);
  for (int64_t r = 0; r < count; ++r) {
    int64_t o = o0 + r;
    for (size_t d = sp; d-- > 0;) {
      start[d] = (o % yd[d + 2]) * g.strides[d] - g.pad_begin[d];
      o /= yd[d + 2];
    }
    T* row = dst + r * k;
    for (int64_t kp = 0; kp < ksize; ++kp) {
      int64_t rest = kp, at = 0;
      bool inside = true;
      for (size_t d = sp; d-- > 0;) {
        kpos[d] = rest % g.kernel[d];
        rest /= g.kernel[d];
      }
      int64_t stride = 1;
      for (size_t d = sp; d-- > 0;) {
        const int64_t c = start[d] + kpos[d] * g.dilations[d];
        inside = inside && c >= 0 && c < xd[d + 2];
        at += c * stride;
        stride *= xd[d + 2];
      }
      for (int64_t c = 0; c < channels; ++c) row[c * ksize + kp] = inside ? x[c * in_size + at] : pad;
    }
  }
}

// ---- depthwise (one input and one output channel per group), 2-D ----------------------------------

// The padded input plane of one channel, as int16 values less the zero point (zeros in the
// padding), split into sh x sw phase planes: phase (fr, fc) holds padded rows fr, fr + sh, ...
// and columns fc, fc + sw, ..., each plane `pitch` columns wide. Tap (i, j) of output (r, c)
// is padded row r * sh + i * dh, column c * sw + j * dw: phase ((i * dh) % sh, (j * dw) % sw)
// at row r + (i * dh) / sh, column c + (j * dw) / sw. Over a plane, the outputs of a whole
// channel, computed `pitch` columns wide (the columns past ow are discarded), then read one
// contiguous run per tap.
struct PhasePlane {
  int64_t sh, sw, rows, pitch;  // phase planes: rows x pitch, then `tail` zeros
  int64_t tail, size;           // size: one phase plane's elements, tail included
};

PhasePlane phase_plane(int64_t oh, int64_t ow, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t dh, int64_t dw) {
  PhasePlane d;
  d.sh = sh;
  d.sw = sw;
  const int64_t rows = (oh - 1) * sh + (kh - 1) * dh + 1, cols = (ow - 1) * sw + (kw - 1) * dw + 1;
  d.rows = (rows + sh - 1) / sh;
  d.pitch = (cols + sw - 1) / sw;
  d.tail = (kw - 1) * dw / sw + 16;  // reads of the discarded columns of the last row
  d.size = d.rows * d.pitch + d.tail;
  return d;
}

template <typename T>
TETHER_MULTIVERSION void fill_phases(int16_t* __restrict pad, const T* __restrict x, const PhasePlane& d, int64_t ih,
                                     int64_t iw, int64_t ph, int64_t pw, int32_t zero) {
  const int64_t total = d.sh * d.sw * d.size, sh = d.sh, sw = d.sw, pitch = d.pitch, size = d.size;
  for (int64_t i = 0; i < total; ++i) pad[i] = 0;
  for (int64_t sr = 0; sr < ih; ++sr) {
    const int64_t r = sr + ph;  // padded row
    if (r < 0 || r >= d.rows * sh) continue;
    const T* __restrict src = x + sr * iw;
    int16_t* __restrict base = pad + (r % sh) * sw * size + (r / sh) * pitch;
    // Input column sc is padded column sc + pw: phase (sc + pw) % sw, at (sc + pw) / sw.
    for (int64_t fc = 0; fc < sw; ++fc) {
      int64_t sc = ((fc - pw) % sw + sw) % sw;  // the first input column of this phase
      int16_t* __restrict dst = base + fc * size;
      int64_t at = (sc + pw) / sw;
      for (; sc < iw && at < pitch; sc += sw, ++at)
        if (at >= 0) dst[at] = static_cast<int16_t>(static_cast<int32_t>(src[sc]) - zero);
    }
  }
}

// acc[r * pitch + c] = the window sums of one channel (see PhasePlane), for r < oh and every
// c < pitch (columns past ow are garbage the caller drops).
TETHER_MULTIVERSION void depthwise_plane_i16(int32_t* __restrict acc, const int16_t* __restrict pad, const PhasePlane& d,
                                            const int16_t* __restrict w, int64_t oh, int64_t kh, int64_t kw, int64_t dh,
                                            int64_t dw) {
  const int64_t n = oh * d.pitch, sh = d.sh, sw = d.sw, pitch = d.pitch, size = d.size;
  for (int64_t i = 0; i < n; ++i) acc[i] = 0;
  for (int64_t i = 0; i < kh; ++i) {
    for (int64_t j = 0; j < kw; ++j) {
      const int32_t wv = w[i * kw + j];
      const int64_t fr = (i * dh) % sh, fc = (j * dw) % sw;
      const int16_t* __restrict src = pad + (fr * sw + fc) * size + ((i * dh) / sh) * pitch + (j * dw) / sw;
      // Explicit 16-lane steps (the compiler's own choice for this loop is to jam two taps and
      // stay scalar).
      typedef int16_t H16 __attribute__((vector_size(32)));
      typedef int32_t I16 __attribute__((vector_size(64)));
      int64_t c = 0;
      for (; c + 16 <= n; c += 16) {
        H16 h;
        I16 a;
        std::memcpy(&h, src + c, sizeof h);
        std::memcpy(&a, acc + c, sizeof a);
        a += __builtin_convertvector(h, I16) * wv;
        std::memcpy(acc + c, &a, sizeof a);
      }
      for (; c < n; ++c) acc[c] += static_cast<int32_t>(src[c]) * wv;
    }
  }
}

// Requantizes (or stores) n sums of one output channel, as QGemmOutput defines it.
template <typename Y>
TETHER_MULTIVERSION void store_channel(const int32_t* __restrict acc, int64_t n, int32_t bias, float lo, float hi,
                                       int32_t zero, float scale, Y* __restrict y) {
  if constexpr (std::is_same_v<Y, int32_t>) {
    for (int64_t i = 0; i < n; ++i) y[i] = acc[i] + bias;
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<Y>(requantized(static_cast<float>(acc[i] + bias) * scale, lo, hi, zero));
  }
}

// ConvIntegerToFloat's store of n sums of one output channel: float(sum) * scale, then plus the
// bias (when there is one), then the activation: what Cast, Mul, Add and the activation compute,
// each rounded on its own (two loops, so that no compiler fuses the multiply and the add).
void store_channel_float(const int32_t* acc, int64_t n, float scale, const float* bias, const Epilogue& act, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(acc[i]) * scale;
  if (bias != nullptr)
    for (int64_t i = 0; i < n; ++i) y[i] = y[i] + *bias;
  act.apply(y, n);
}

class IntegerConvKernel final : public HostKernel {
 public:
  explicit IntegerConvKernel(const KernelInit& init)
      : node_(init.node),
        name_(init.node.describe()),
        s_(slots_of(init.node)),
        x_type_(init.input_dtype(0)),
        w_type_(init.input_dtype(static_cast<size_t>(s_.b))),
        out_type_(init.output_dtype(0)),
        threads_(init.threads),
        to_float_(init.node.op_type() == "ConvIntegerToFloat"),
        act_(to_float_ ? QActivation{} : QActivation::of(init.node)),
        float_act_(to_float_ ? Epilogue::from_node(init.node) : Epilogue{}),
        nhwc_(channels_last(init.node)) {
    bool all = false;
    std::vector<View> c = constant_views(init, all);
    const ir::Tensor* w = init.constant(static_cast<size_t>(s_.b));
    // Filters are prepared now when they and their zero point are constant, with the other
    // parameters too for the QLinear ops (their output scales); ConvInteger and
    // ConvIntegerToFloat read x's zero point at run time (DynamicQuantizeLinear computes it).
    const bool w_zero_fixed = init.node.input(static_cast<size_t>(s_.b_zp)) == nullptr ||
                              init.constant(static_cast<size_t>(s_.b_zp)) != nullptr;
    const bool ready = all || (s_.y_scale < 0 && w_zero_fixed);
    if (ready && w != nullptr && w->rank() == 4 && node_.attr_int("group", 1) == w->dims()[0] && w->dims()[1] == 1) {
      // Depthwise: the filters less their zero points, as int16, for the direct kernel.
      const int64_t cout = w->dims()[0], taps = w->dims()[2] * w->dims()[3];
      const Params p = read_params<ModelError>(name_, s_, c, -1, cout, "per output channel");
      // Channels last: int32 [tap][channel], with each channel's sum over the taps.
      if (nhwc_) {
        dw_weights32_.resize(static_cast<size_t>(cout * taps));
        dw_sums_.assign(static_cast<size_t>(cout), 0);
      } else {
        dw_weights_.resize(static_cast<size_t>(cout * taps));
      }
      for (int64_t ch = 0; ch < cout; ++ch) {
        const int32_t z = p.b_zp[p.b_zp.size() > 1 ? static_cast<size_t>(ch) : 0];
        for (int64_t t = 0; t < taps; ++t) {
          const int64_t at = ch * taps + t;
          const int32_t v = (w_type_ == DType::kInt8 ? w->data<int8_t>()[at] : static_cast<int32_t>(w->data<uint8_t>()[at])) - z;
          if (nhwc_) {
            dw_weights32_[static_cast<size_t>(t * cout + ch)] = v;
            dw_sums_[static_cast<size_t>(ch)] += v;
          } else {
            dw_weights_[static_cast<size_t>(at)] = static_cast<int16_t>(v);
          }
        }
      }
      // 3 x 3 channels last: each window row's filter as the int16 pair of its first two taps
      // and its third tap alone, the operands of the VNNI row kernel (qlinear_depthwise.cc).
      if (nhwc_ && w->dims()[2] == 3 && w->dims()[3] == 3) {
        dw_pairs3x3_.resize(static_cast<size_t>(6 * cout));
        for (int64_t i = 0; i < 3; ++i)
          for (int64_t ch = 0; ch < cout; ++ch) {
            auto tap = [&](int64_t j) { return static_cast<uint32_t>(dw_weights32_[static_cast<size_t>((3 * i + j) * cout + ch)]); };
            dw_pairs3x3_[static_cast<size_t>((2 * i) * cout + ch)] = static_cast<int32_t>((tap(0) & 0xFFFFu) | (tap(1) << 16));
            dw_pairs3x3_[static_cast<size_t>((2 * i + 1) * cout + ch)] = static_cast<int32_t>(tap(2) & 0xFFFFu);
          }
      }
    } else if (ready && w != nullptr && w->rank() >= 3) {
      const int64_t cout = w->dims()[0], group = node_.attr_int("group", 1);
      const Params p = read_params<ModelError>(name_, s_, c, -1, cout, "per output channel");
      const int64_t cg = cout / group, k = w->num_elements() / cout;
      const std::vector<int32_t>& z = p.b_zp;
      // 2-D filters in (kernel position, channel) order: the activations are then gathered as
      // runs of channels from a channels-last copy of the input.
      channels_last_ = w->rank() == 4;
      const int64_t taps = channels_last_ ? w->dims()[2] * w->dims()[3] : 1, cin_g = k / taps;
      std::vector<std::byte> reordered(static_cast<size_t>(channels_last_ ? cg * k : 0));
      for (int64_t gi = 0; gi < group; ++gi) {
        const auto* src = static_cast<const std::byte*>(w->raw_data()) + gi * cg * k;
        if (channels_last_) {
          for (int64_t j = 0; j < cg; ++j)
            for (int64_t c = 0; c < cin_g; ++c)
              for (int64_t t = 0; t < taps; ++t) reordered[static_cast<size_t>(j * k + t * cin_g + c)] = src[j * k + c * taps + t];
          src = reordered.data();
        }
        const int32_t* zg = z.size() > 1 ? z.data() + gi * cg : z.data();
        // A is read in place by a 1x1 convolution of stride 1 without padding (channels last).
        const bool unit = channels_last_ && taps == 1 && node_.attr_ints("strides", {1, 1}) == std::vector<int64_t>{1, 1} &&
                          node_.attr_ints("pads", {0, 0, 0, 0}) == std::vector<int64_t>{0, 0, 0, 0};
        packed_.push_back(QPackedB::pack(src, w_type_ == DType::kInt8, k, cg, 1, k, zg, z.size() > 1,
                                         qgemm_isa_for(k, unit && x_type_ == DType::kUInt8)));
      }
    }
  }

  bool packs_input(size_t i) const override {
    return (!packed_.empty() || is_depthwise()) && static_cast<int>(i) == s_.b;
  }

  int64_t scratch_bytes(const std::vector<View>& in, const std::vector<View>& out) const override {
    const View& w = in[static_cast<size_t>(s_.b)];
    const View& y = out[0];
    if (nhwc_) {
      const int64_t c = y.dims.back(), taps = w.numel() / (w.dims[0] * w.dims[1]);
      if (is_depthwise()) return dw_shared_bytes(c, in[0].dims[2]) + threads_ * dw_nhwc_slot_bytes(taps, w.dims[2]);
      const ConvGeometry g = conv_geometry(node_, channels_first(in[0].dims), w.dims, channels_first(y.dims), false);
      const int64_t positions = unit_window(g) ? y.numel() / c : y.dims[1] * y.dims[2];
      return qgemm_scratch_bytes(positions, c, w.numel() / c, threads_);
    }
    if (!dw_weights_.empty()) return threads_ * dw_slot_bytes(in[0], y, w);
    const int64_t group = node_.attr_int("group", 1), cg = y.dims[1] / group;
    int64_t positions = 1;
    for (size_t d = 2; d < y.rank(); ++d) positions *= y.dims[d];
    int64_t k = 1;
    for (size_t d = 1; d < w.rank(); ++d) k *= w.dims[d];
    const int64_t nhwc = channels_last_ ? (in[0].numel() / in[0].dims[0] / group + 64 +
                                           positions * cg * static_cast<int64_t>(elem_bytes(out_type_)) + 64)
                                        : 0;
    return qgemm_scratch_bytes(positions, cg, k, threads_) + (packed_.empty() ? QPackedB::bytes_needed(k, cg) + 64 : 0) +
           nhwc;
  }

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    const View& x = in[0];
    const View& w = in[static_cast<size_t>(s_.b)];
    View& y = out[0];
    const ConvGeometry g = nhwc_ ? conv_geometry(node_, channels_first(x.dims), w.dims, channels_first(y.dims), false)
                                 : conv_geometry(node_, x.dims, w.dims, y.dims, false);
    const int64_t cout = nhwc_ ? y.dims.back() : y.dims[1];
    const Params p = read_params<ArgumentError>(name_, s_, in, -1, cout, "per output channel");
    const View* bias = has(in, s_.bias) ? &in[static_cast<size_t>(s_.bias)] : nullptr;
    if (bias != nullptr && bias->numel() != cout)
      throw ArgumentError(name_ + ": B has shape " + dims_text(bias->dims) + ", expected [" + std::to_string(cout) +
                          "] (one int32 per output channel)");
    // ConvIntegerToFloat's epilogue, per output channel (a group's offsets added below).
    QGemmOutput float_out;
    if (to_float_) set_float_output(name_, in, cout, "per output channel", float_act_, float_out);
    if (nhwc_) {
      if (is_depthwise()) depthwise_nhwc(ctx, x, y, g, p, bias);
      else run_nhwc(ctx, x, y, g, p, bias);
      return;
    }
    const int64_t cg = cout / g.group, cin_g = x.dims[1] / g.group;
    int64_t positions = 1, in_size = 1, ksize = 1;
    for (size_t d = 2; d < y.rank(); ++d) {
      positions *= y.dims[d];
      in_size *= x.dims[d];
      ksize *= g.kernel[d - 2];
    }
    const int64_t k = cin_g * ksize;
    if (!dw_weights_.empty()) {
      depthwise(ctx, x, w, y, g, p, bias, to_float_ ? &float_out : nullptr);
      return;
    }
    const size_t esize = elem_bytes(out_type_);
    std::byte* scratch = ctx.scratch;
    std::byte* pack_space = scratch + qgemm_scratch_bytes(positions, cg, k, threads_);
    pack_space = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(pack_space) + 63) / 64 * 64);
    std::byte* nhwc = pack_space + (packed_.empty() ? QPackedB::bytes_needed(k, cg) : 0);
    nhwc = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(nhwc) + 63) / 64 * 64);
    std::byte* out_space = nhwc + (channels_last_ ? in_size * cin_g : 0);
    out_space = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(out_space) + 63) / 64 * 64);
    const bool per_channel = p.b_zp.size() > 1;
    const int32_t a_zp = p.a_zp[0];
    for (int64_t img = 0; img < x.dims[0]; ++img) {
      for (int64_t gi = 0; gi < g.group; ++gi) {
        QPackedB packed;
        if (!packed_.empty()) {
          packed = packed_[static_cast<size_t>(gi)];
        } else {
          const auto* src = static_cast<const std::byte*>(w.data) + gi * cg * k;
          const int32_t* zg = per_channel ? p.b_zp.data() + gi * cg : p.b_zp.data();
          packed = QPackedB::pack_into(pack_space, src, w_type_ == DType::kInt8, k, cg, 1, k, zg, per_channel);
        }
        QGemmA a;
        a.is_signed = x_type_ == DType::kInt8;
        a.zero_points = &a_zp;
        const auto* xg = static_cast<const std::byte*>(x.data) + (img * x.dims[1] + gi * cin_g) * in_size;
        if (channels_last_) {
          channels_last_rows(ctx, xg, x.dims, y.dims, g, cin_g, static_cast<std::byte>(a_zp), nhwc, a);
        } else {
          a.rows = [&, xg](const RunContext&, int64_t o0, int64_t count, void* dst) {
          if (a.is_signed)
            gather_rows(reinterpret_cast<const int8_t*>(xg), x.dims, y.dims, g, cin_g, o0, count,
                        static_cast<int8_t>(a_zp), static_cast<int8_t*>(dst));
          else
            gather_rows(reinterpret_cast<const uint8_t*>(xg), x.dims, y.dims, g, cin_g, o0, count,
                        static_cast<uint8_t>(a_zp), static_cast<uint8_t*>(dst));
          };
        }
        QGemmOutput o =
            to_float_ ? float_out : output_of(p, out_type_, bias != nullptr ? bias->as<int32_t>() + gi * cg : nullptr, act_);
        if (o.float_bias != nullptr) o.float_bias += gi * cg;
        if (o.scale_per_column) o.scale += gi * cg;
        std::byte* yg = static_cast<std::byte*>(y.data) + static_cast<int64_t>(esize) * (img * cout + gi * cg) * positions;
        if (channels_last_) {
          // Rows of C (positions) stored whole into scratch, then transposed to [channels, positions]:
          // a store with a column stride would write one byte per cache line.
          o.row_stride = cg;
          o.col_stride = 1;
          o.c = out_space;
          qgemm(ctx, positions, a, packed, o, scratch);
          transpose_out(ctx, out_space, yg, positions, cg, esize);
        } else {
          o.row_stride = 1;
          o.col_stride = positions;
          o.c = yg;
          qgemm(ctx, positions, a, packed, o, scratch);
        }
      }
    }
  }

 private:
  const ir::Node& node_;
  std::string name_;
  Slots s_;
  // One thread's scratch for the depthwise kernel: the padded input plane a channel's windows
  // read (int16, the input less its zero point) and the channel's sums (int32).
  struct DwPlane {
    PhasePlane phase;
    int64_t plane_bytes, bytes;
  };
  static int64_t round64(int64_t b) { return (b + 63) / 64 * 64; }
  // Channels-last depthwise scratch shared by the threads: a pixel of zero points, then the
  // int32 corrections and float scales of every channel.
  static int64_t dw_shared_bytes(int64_t c, int64_t iw = 0) { return round64(c) + 2 * round64(4 * c) + round64(iw * c); }
  // One thread's: the taps' input pixels, then the window's input rows.
  static int64_t dw_nhwc_slot_bytes(int64_t taps, int64_t kh) { return round64((taps + kh) * 8); }
  static DwPlane dw_plane(const View& y, const ConvGeometry& g) {
    DwPlane d;
    d.phase = phase_plane(y.dims[2], y.dims[3], g.kernel[0], g.kernel[1], g.strides[0], g.strides[1], g.dilations[0],
                          g.dilations[1]);
    d.plane_bytes = round64(d.phase.sh * d.phase.sw * d.phase.size * static_cast<int64_t>(sizeof(int16_t)));
    d.bytes = d.plane_bytes + round64(y.dims[2] * d.phase.pitch * static_cast<int64_t>(sizeof(int32_t)));
    return d;
  }
  int64_t dw_slot_bytes(const View& x, const View& y, const View& w) const {
    return dw_plane(y, conv_geometry(node_, x.dims, w.dims, y.dims, false)).bytes;
  }

  // `to_float`: ConvIntegerToFloat's scale, float bias and activation (set_float_output), else nullptr.
  void depthwise(const RunContext& ctx, const View& x, const View& w, View& y, const ConvGeometry& g, const Params& p,
                 const View* bias, const QGemmOutput* to_float) const;
  // Channels last: the GEMM over images [h, w, c] read in place (1x1, stride 1: every image's
  // positions at once) and rows of C stored as they are; the depthwise kernel over pixels.
  void run_nhwc(const RunContext& ctx, const View& x, View& y, const ConvGeometry& g, const Params& p,
                const View* bias) const;
  void depthwise_nhwc(const RunContext& ctx, const View& x, View& y, const ConvGeometry& g, const Params& p,
                      const View* bias) const;

  // dst[c * rows + r] = src[r * cols + c] for elements of `esize` bytes (1 or 4), in bands of rows.
  static void transpose_out(const RunContext& ctx, const std::byte* src, std::byte* dst, int64_t rows, int64_t cols,
                            size_t esize) {
    constexpr int64_t kBand = 64;
    parallel(ctx, (rows + kBand - 1) / kBand, 1, [&](int64_t t0, int64_t t1) {
      const int64_t r0 = t0 * kBand, r1 = std::min(rows, t1 * kBand);
      transpose_2d(src + r0 * cols * static_cast<int64_t>(esize), cols, dst + r0 * static_cast<int64_t>(esize), rows,
                   r1 - r0, cols, esize);
    });
  }

  // Copies one image-and-group's input [channels, h, w] channels-last into `nhwc`, then points
  // `a` at it: directly for a 1x1 convolution of stride 1 without padding (row o of A is
  // position o), else as rows gathered from it, each kernel position a run of `channels`
  // bytes (or `pad`, the input's zero point, outside the input).
  static void channels_last_rows(const RunContext& ctx, const std::byte* x, const std::vector<int64_t>& xd,
                                 const std::vector<int64_t>& yd, const ConvGeometry& g, int64_t channels, std::byte pad,
                                 std::byte* nhwc, QGemmA& a) {
    const int64_t ih = xd[2], iw = xd[3], hw = ih * iw;
    constexpr int64_t kBand = 64;
    parallel(ctx, (hw + kBand - 1) / kBand, 1, [&](int64_t t0, int64_t t1) {
      const int64_t p0 = t0 * kBand, p1 = std::min(hw, t1 * kBand);
      // x is [channels, hw]: positions [p0, p1) of every channel become rows of nhwc.
      transpose_2d(x + p0, hw, nhwc + p0 * channels, channels, channels, p1 - p0, 1);
    });
    point_at_nhwc(nhwc, ih, iw, yd[3], g, channels, pad, a);
  }

  static bool unit_window(const ConvGeometry& g) {
    return g.kernel[0] == 1 && g.kernel[1] == 1 && g.strides[0] == 1 && g.strides[1] == 1 && g.pad_begin[0] == 0 &&
           g.pad_begin[1] == 0;
  }

  // Points `a` at one channels-last image `src` ([ih, iw, channels]): directly for a 1x1
  // window of stride 1 without padding (row o of A is position o), else as rows gathered from
  // it, each kernel position a run of `channels` bytes (or `pad`, the input's zero point,
  // outside the input).
  static void point_at_nhwc(const std::byte* src, int64_t ih, int64_t iw, int64_t ow, const ConvGeometry& g,
                            int64_t channels, std::byte pad, QGemmA& a) {
    if (unit_window(g)) {
      a.data = src;
      a.lda = channels;
      return;
    }
    const int64_t kh = g.kernel[0], kw = g.kernel[1];
    const int64_t sh = g.strides[0], sw = g.strides[1], dh = g.dilations[0], dw = g.dilations[1];
    const int64_t ph = g.pad_begin[0], pw = g.pad_begin[1];
    a.rows = [=](const RunContext&, int64_t o0, int64_t count, void* out) {
      auto* dst = static_cast<std::byte*>(out);
      int64_t oy = o0 / ow, ox = o0 % ow;
      const int64_t run = kw * channels;  // one window row, when dw == 1 and it lies inside
      for (int64_t r = 0; r < count; ++r) {
        const int64_t y0 = oy * sh - ph, x0 = ox * sw - pw;
        const bool row_inside = dw == 1 && x0 >= 0 && x0 + kw <= iw;
        for (int64_t i = 0; i < kh; ++i) {
          const int64_t iy = y0 + i * dh;
          if (row_inside && iy >= 0 && iy < ih) {
            copy_bytes(dst, src + (iy * iw + x0) * channels, run);
            dst += run;
            continue;
          }
          for (int64_t j = 0; j < kw; ++j, dst += channels) {
            const int64_t ix = x0 + j * dw;
            if (iy >= 0 && iy < ih && ix >= 0 && ix < iw) copy_bytes(dst, src + (iy * iw + ix) * channels, channels);
            else std::memset(dst, static_cast<int>(pad), static_cast<size_t>(channels));
          }
        }
        if (++ox == ow) {
          ox = 0;
          ++oy;
        }
      }
    };
  }

  DType x_type_, w_type_, out_type_;
  int threads_;
  bool to_float_;  // ai.tether ConvIntegerToFloat
  QActivation act_;
  Epilogue float_act_;
  bool nhwc_;                        // channels_last: X and Y are [N, spatial..., C]
  std::vector<int16_t> dw_weights_;    // depthwise: cout x kh x kw filters less their zero points
  std::vector<int32_t> dw_weights32_;  // the same, channels last: kh x kw x cout
  std::vector<int32_t> dw_sums_;       // channels last, depthwise: each filter's sum
  std::vector<int32_t> dw_pairs3x3_;   // channels last, 3 x 3: DwPixel::pairs3x3
  bool is_depthwise() const { return !dw_weights_.empty() || !dw_weights32_.empty(); }
  bool channels_last_ = false;       // 2-D: packed filters in (kernel position, channel) order
  std::vector<QPackedB> packed_;  // one per group, when the weights and their zero points are constant
};

void IntegerConvKernel::depthwise(const RunContext& ctx, const View& x, const View& w, View& y, const ConvGeometry& g,
                                  const Params& p, const View* bias, const QGemmOutput* to_float) const {
  const DwPlane d = dw_plane(y, g);
  const int64_t channels = y.dims[1], ih = x.dims[2], iw = x.dims[3], oh = y.dims[2], ow = y.dims[3];
  const int64_t kh = g.kernel[0], kw = g.kernel[1], taps = kh * kw;
  const int32_t xz = p.a_zp[0];
  const QGemmOutput o = output_of(p, out_type_, nullptr, act_);
  const float lo = static_cast<float>(o.lo - o.zero_point), hi = static_cast<float>(o.hi - o.zero_point);
  auto plane = [&](int thread, int64_t q0, int64_t q1) {
    std::byte* slot = ctx.scratch + thread * d.bytes;
    auto* pad = reinterpret_cast<int16_t*>(slot);
    auto* acc = reinterpret_cast<int32_t*>(slot + d.plane_bytes);
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t ch = q % channels;
      if (x_type_ == DType::kInt8)
        fill_phases(pad, x.as<int8_t>() + q * ih * iw, d.phase, ih, iw, g.pad_begin[0], g.pad_begin[1], xz);
      else
        fill_phases(pad, x.as<uint8_t>() + q * ih * iw, d.phase, ih, iw, g.pad_begin[0], g.pad_begin[1], xz);
      depthwise_plane_i16(acc, pad, d.phase, dw_weights_.data() + ch * taps, oh, kh, kw, g.dilations[0],
                          g.dilations[1]);
      const int32_t b = bias != nullptr ? bias->as<int32_t>()[ch] : 0;
      const float scale = o.scale != nullptr ? o.scale[o.scale_per_column ? ch : 0] : 0.0f;
      const int64_t pitch = d.phase.pitch;
      if (to_float != nullptr) {
        const float fs = to_float->scale[to_float->scale_per_column ? ch : 0];
        const float* fb = to_float->float_bias != nullptr ? to_float->float_bias + ch : nullptr;
        for (int64_t r = 0; r < oh; ++r) store_channel_float(acc + r * pitch, ow, fs, fb, to_float->act, y.as<float>() + q * oh * ow + r * ow);
        continue;
      }
      for (int64_t r = 0; r < oh; ++r) {
        const int64_t at = q * oh * ow + r * ow;
        switch (out_type_) {
          case DType::kInt32: store_channel(acc + r * pitch, ow, b, lo, hi, o.zero_point, scale, y.as<int32_t>() + at); break;
          case DType::kInt8: store_channel(acc + r * pitch, ow, b, lo, hi, o.zero_point, scale, y.as<int8_t>() + at); break;
          default: store_channel(acc + r * pitch, ow, b, lo, hi, o.zero_point, scale, y.as<uint8_t>() + at); break;
        }
      }
    }
  };
  const int64_t planes = x.dims[0] * channels;
  if (ctx.pool == nullptr) plane(0, 0, planes);
  else ctx.pool->parallel_for_indexed(planes, 1, plane);
}

void IntegerConvKernel::run_nhwc(const RunContext& ctx, const View& x, View& y, const ConvGeometry& g, const Params& p,
                                 const View* bias) const {
  const int64_t n = x.dims[0], ih = x.dims[1], iw = x.dims[2], cin = x.dims[3];
  const int64_t oh = y.dims[1], ow = y.dims[2], cout = y.dims[3];
  const size_t esize = elem_bytes(out_type_);
  const int32_t a_zp = p.a_zp[0];
  QGemmOutput o = output_of(p, out_type_, bias != nullptr ? bias->as<int32_t>() : nullptr, act_);
  o.row_stride = cout;
  o.col_stride = 1;
  QGemmA a;
  a.is_signed = x_type_ == DType::kInt8;
  a.zero_points = &a_zp;
  if (unit_window(g)) {
    a.data = x.data;
    a.lda = cin;
    o.c = y.data;
    qgemm(ctx, n * oh * ow, a, packed_[0], o, ctx.scratch);
    return;
  }
  for (int64_t img = 0; img < n; ++img) {
    const std::byte* xi = static_cast<const std::byte*>(x.data) + img * ih * iw * cin;
    point_at_nhwc(xi, ih, iw, ow, g, cin, static_cast<std::byte>(a_zp), a);
    o.c = static_cast<std::byte*>(y.data) + static_cast<int64_t>(esize) * img * oh * ow * cout;
    qgemm(ctx, oh * ow, a, packed_[0], o, ctx.scratch);
  }
}

void IntegerConvKernel::depthwise_nhwc(const RunContext& ctx, const View& x, View& y, const ConvGeometry& g,
                                       const Params& p, const View* bias) const {
  const int64_t c = y.dims[3], taps = g.kernel[0] * g.kernel[1];
  const int32_t xz = p.a_zp[0];
  const QGemmOutput o = output_of(p, out_type_, nullptr, act_);
  // Shared, written once per run: a pixel of zero points, the sums' corrections, the scales.
  std::byte* zeros = ctx.scratch;
  auto* corr = reinterpret_cast<int32_t*>(zeros + round64(c));
  auto* scale = reinterpret_cast<float*>(zeros + round64(c) + round64(4 * c));
  std::memset(zeros, static_cast<int>(static_cast<uint8_t>(xz)), static_cast<size_t>(c));
  for (int64_t ch = 0; ch < c; ++ch) {
    const uint32_t b = bias != nullptr ? static_cast<uint32_t>(bias->as<int32_t>()[ch]) : 0u;
    corr[ch] = static_cast<int32_t>(b - static_cast<uint32_t>(xz) * static_cast<uint32_t>(dw_sums_[static_cast<size_t>(ch)]));
    scale[ch] = o.scale[o.scale_per_column ? ch : 0];
  }
  DwPixel pixel{taps, c, dw_weights32_.data(), corr, scale, static_cast<float>(o.lo - o.zero_point),
                static_cast<float>(o.hi - o.zero_point), o.zero_point,
                dw_pairs3x3_.empty() ? nullptr : dw_pairs3x3_.data()};
  // A whole input row of zero points, for window rows above and below the input.
  std::byte* zero_row = zeros + dw_shared_bytes(c, 0);
  std::memset(zero_row, static_cast<int>(static_cast<uint8_t>(xz)), static_cast<size_t>(x.dims[2] * c));
  const RunContext per_thread{ctx.pool, zeros + dw_shared_bytes(c, x.dims[2])};
  const int64_t slot = dw_nhwc_slot_bytes(taps, g.kernel[0]);
  depthwise_nhwc_rows(per_thread, x, y, g, pixel, zeros, zero_row, slot);
}

// ---- support checks ------------------------------------------------------------------------------

std::string integer_check(const KernelInit& init) {
  const Slots& s = slots_of(init.node);
  for (int slot : {s.a, s.b}) {
    const DType t = init.input_dtype(static_cast<size_t>(slot));
    const char* name = slot == s.a ? s.a_name : s.b_name;
    if (!is_8bit(t))
      return std::string(name) + " is " + type_text(t) + "; the cpu engine runs 8-bit integer products (int8, uint8)";
    const int zp = slot == s.a ? s.a_zp : s.b_zp;
    if (init.node.input(static_cast<size_t>(zp)) != nullptr && init.input_dtype(static_cast<size_t>(zp)) != t)
      return std::string(name) + "_zero_point is " + type_text(init.input_dtype(static_cast<size_t>(zp))) + " and " +
             name + " " + type_text(t) + "; they must have the same type";
  }
  if (s.y_scale < 0) return "";
  for (int slot : {s.a_scale, s.b_scale, s.y_scale})
    if (const DType t = init.input_dtype(static_cast<size_t>(slot)); t != DType::kFloat32 && t != DType::kFloat16)
      return "input " + std::to_string(slot) + " (a scale) is " + type_text(t) +
             "; the cpu engine runs float32 and float16 scales";
  if (!is_8bit(init.output_dtype(0)))
    return "y is " + type_text(init.output_dtype(0)) + "; the cpu engine requantizes to int8 and uint8";
  if (s.bias >= 0 && init.node.input(static_cast<size_t>(s.bias)) != nullptr &&
      init.input_dtype(static_cast<size_t>(s.bias)) != DType::kInt32)
    return "the bias is " + type_text(init.input_dtype(static_cast<size_t>(s.bias))) + "; it must be int32";
  if (channels_last(init.node)) {
    const ir::Shape& x = init.input_types[0].shape();
    const ir::Tensor* w = init.constant(static_cast<size_t>(s.b));
    if (!x.has_rank() || x.rank() != 4)
      return "channels_last takes a 4-D X [N, H, W, C], got " + (x.has_rank() ? x.to_string() : std::string("unknown rank"));
    if (w == nullptr || w->rank() != 4)
      return "channels_last takes constant 4-D weights";
    for (size_t i = static_cast<size_t>(s.a_scale); i < init.node.inputs().size(); ++i)
      if (static_cast<int>(i) != s.b && init.node.input(i) != nullptr && init.constant(i) == nullptr)
        return "channels_last takes constant scales, zero points and bias; input " + std::to_string(i) + " is not";
    const int64_t group = init.node.attr_int("group", 1);
    if (group != 1 && !(group == w->dims()[0] && w->dims()[1] == 1))
      return "channels_last runs group 1 or depthwise convolutions, not group " + std::to_string(group);
  }
  return "";
}

std::unique_ptr<Kernel> make_conv(const KernelInit& i) { return std::make_unique<IntegerConvKernel>(i); }

std::string qgemm_check(const KernelInit& init) {
  if (init.node.attr_int("transA", 0) != 0) return "transA = 1 is not supported (A must be [M, K])";
  if (init.node.attr_float("alpha", 1.0f) != 1.0f) return "alpha other than 1 is not supported";
  if ((init.node.input(7) == nullptr) != (init.node.input(8) == nullptr))
    return "y_scale and y_zero_point must be given together (a quantized output) or both omitted (a float output)";
  if (init.node.input(6) != nullptr) {
    const ir::Shape& c = init.input_types[6].shape();
    if (init.input_dtype(6) != DType::kInt32) return "C is " + type_text(init.input_dtype(6)) + "; it must be int32";
    if (c.has_rank() && c.rank() == 2 && !(c[0].is_known() && c[0].value() == 1))
      return "C of shape " + c.to_string() + " is not supported (one value, [N] or [1, N])";
  }
  if (init.node.input(7) == nullptr) {
    Slots s = kQGemm;
    for (int slot : {s.a, s.b})
      if (!is_8bit(init.input_dtype(static_cast<size_t>(slot))))
        return std::string(slot == s.a ? "a" : "b") + " is " + type_text(init.input_dtype(static_cast<size_t>(slot))) +
               "; the cpu engine runs 8-bit integer products (int8, uint8)";
    if (init.output_dtype(0) != DType::kFloat32) return "the output is " + type_text(init.output_dtype(0)) + "; expected float32";
    return "";
  }
  return integer_check(init);
}

std::string integer_to_float_check(const KernelInit& init) {
  if (std::string why = integer_check(init); !why.empty()) return why;
  for (size_t i : {kFloatScale, kFloatBias})
    if (init.node.input(i) != nullptr && init.input_dtype(i) != DType::kFloat32)
      return std::string(i == kFloatScale ? "scale" : "bias") + " is " + type_text(init.input_dtype(i)) + "; it must be float32";
  if (init.output_dtype(0) != DType::kFloat32) return "the output is " + type_text(init.output_dtype(0)) + "; it must be float32";
  return "";
}

}  // namespace

void register_qlinear(KernelRegistry& r) {
  TETHER_ADD(r, "MatMulInteger", make_integer_matmul, integer_check);
  TETHER_ADD(r, "QLinearMatMul", make_integer_matmul, integer_check);
  TETHER_ADD(r, "ConvInteger", make_conv, integer_check);
  TETHER_ADD(r, "QLinearConv", make_conv, integer_check);
  // The QDQ pass's forms: the ONNX op plus an activation (and QLinearMatMul a bias).
  TETHER_ADD_IN(r, "ai.tether", "QLinearMatMul", make_integer_matmul, integer_check);
  TETHER_ADD_IN(r, "ai.tether", "QLinearConv", make_conv, integer_check);
  TETHER_ADD_IN(r, "ai.tether", "MatMulIntegerToFloat", make_integer_matmul, integer_to_float_check);
  TETHER_ADD_IN(r, "ai.tether", "ConvIntegerToFloat", make_conv, integer_to_float_check);
  // onnxruntime's QOperator format.
  TETHER_ADD_IN(r, "com.microsoft", "QGemm", make_integer_matmul, qgemm_check);
  register_qlinear_elementwise(r);
}

}  // namespace tether::engine::cpu
