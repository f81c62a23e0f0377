// Resize (opsets 10 to 19) and Upsample (opsets 7 and 9): nearest, n-D linear and n-D cubic
// interpolation, separable per axis. Coordinates, rounding and weights are computed in float
// with onnxruntime's formulas, so that indices picked at exact halves agree with it.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "engine/cpu/cpu.h"
#include "ops/resize_geometry.h"

namespace tether::engine::cpu {

namespace {

namespace resize = ::tether::ops::resize;
using resize::Coord;
using resize::Mode;
using resize::Nearest;
using resize::nearest_index;
using resize::original_coordinate;
using resize::parse_coord;
using resize::parse_mode;
using resize::parse_nearest;

// Whether the node is one of the forms without roi, sizes and the newer attributes.
bool legacy_form(const KernelInit& init) { return init.node.op_type() == "Upsample" || init.opset < 11; }

std::array<float, 4> cubic_coeffs(float s, float a) {
  s = std::fabs(s);
  return {((a * (s + 1) - 5 * a) * (s + 1) + 8 * a) * (s + 1) - 4 * a, ((a + 2) * s - (a + 3)) * s * s + 1,
          ((a + 2) * (1 - s) - (a + 3)) * (1 - s) * (1 - s) + 1, ((a * (2 - s) - 5 * a) * (2 - s) + 8 * a) * (2 - s) - 4 * a};
}

// One axis's reads: for each output position up to 4 (input index, weight) taps, or a flag
// that the position lies outside the crop (tf_crop_and_resize) and takes the extrapolation value.
struct AxisTaps {
  int count = 1;
  std::vector<int64_t> index;  // out * 4
  std::vector<float> weight;   // out * 4
  std::vector<uint8_t> outside;
};

// out[i] = wa * A(i) + wb * B(i) for the c channels of one output pixel, A(i) = w0 * a[c0 + i]
// (+ w1 * a[c1 + i] when linear along W), as row_mix does along a row.
TETHER_MULTIVERSION
void mix_pixel(const float* __restrict a, const float* __restrict b, float wa, float wb, bool two_rows,
               bool two_cols, int64_t c0, int64_t c1, float w0, float w1, int64_t c, float* __restrict out) {
  if (two_rows && two_cols)
    for (int64_t i = 0; i < c; ++i)
      out[i] = wa * (w0 * a[c0 + i] + w1 * a[c1 + i]) + wb * (w0 * b[c0 + i] + w1 * b[c1 + i]);
  else if (two_rows)
    for (int64_t i = 0; i < c; ++i) out[i] = wa * (w0 * a[c0 + i]) + wb * (w0 * b[c0 + i]);
  else if (two_cols)
    for (int64_t i = 0; i < c; ++i) out[i] = wa * (w0 * a[c0 + i] + w1 * a[c1 + i]);
  else
    for (int64_t i = 0; i < c; ++i) out[i] = wa * (w0 * a[c0 + i]);
}

class ResizeKernel final : public HostKernel {
 public:
  explicit ResizeKernel(const KernelInit& init) : name_(init.node.describe()) {
    const ir::Node& n = init.node;
    parse_mode(n.attr_string("mode", "nearest"), &mode_);
    if (legacy_form(init)) {
      coord_ = Coord::kAsymmetric;
      nearest_ = Nearest::kSimple;
      if (const ir::Attribute* a = n.attr("scales")) attr_scales_ = a->as_floats();
      scales_input_ = n.attr("scales") != nullptr ? -1 : 1;
    } else {
      parse_coord(n.attr_string("coordinate_transformation_mode", "half_pixel"), &coord_);
      parse_nearest(n.attr_string("nearest_mode", "round_prefer_floor"), &nearest_);
      cubic_a_ = n.attr_float("cubic_coeff_a", -0.75f);
      exclude_outside_ = n.attr_int("exclude_outside", 0) != 0;
      extrapolation_ = n.attr_float("extrapolation_value", 0.0f);
      axes_attr_ = n.attr_ints("axes");
      policy_ = n.attr_string("keep_aspect_ratio_policy", "stretch");
      scales_input_ = 2;
    }
  }

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    const View& x = in[0];
    View& y = out[0];
    const size_t rank = x.rank();
    TETHER_CHECK(y.rank() == rank, "Resize: planned output rank differs from the input's");
    if (y.numel() == 0) return;
    if (x.numel() == 0) throw ArgumentError(name_ + ": an empty input cannot be resized to a non-empty output");
    const std::vector<float> scale = scales(in, y);
    std::vector<float> roi_start(rank, 0.0f), roi_end(rank, 1.0f);
    if (coord_ == Coord::kTfCropAndResize) read_roi(in, roi_start, roi_end);
    std::vector<AxisTaps> taps(rank);
    for (size_t d = 0; d < rank; ++d) taps[d] = axis_taps(x.dims[d], y.dims[d], scale[d], roi_start[d], roi_end[d]);
    if (planar(x, y, taps)) interpolate_planes(ctx, x, y, taps[rank - 2], taps[rank - 1]);
    else if (channels_last(x, y, taps)) interpolate_pixels(ctx, x, y, taps[1], taps[2]);
    else interpolate(ctx, x, y, taps);
  }

 private:
  std::vector<size_t> axes(size_t rank) const {
    std::vector<size_t> a;
    for (int64_t v : axes_attr_) a.push_back(static_cast<size_t>(v < 0 ? v + static_cast<int64_t>(rank) : v));
    if (a.empty())
      for (size_t d = 0; d < rank; ++d) a.push_back(d);
    return a;
  }

  // Per-axis scales: given, or from sizes (out / in, or one shared scale under a
  // keep_aspect_ratio_policy), 1 on axes that are not resized.
  std::vector<float> scales(const std::vector<View>& in, const View& y) const {
    const View& x = in[0];
    const size_t rank = x.rank();
    const std::vector<size_t> ax = axes(rank);
    std::vector<float> given = attr_scales_;
    if (scales_input_ > 0 && present(in, static_cast<size_t>(scales_input_)) && in[static_cast<size_t>(scales_input_)].numel() > 0) {
      const View& s = in[static_cast<size_t>(scales_input_)];
      given.assign(s.as<float>(), s.as<float>() + s.numel());
    }
    std::vector<float> scale(rank, 1.0f);
    if (!given.empty()) {
      if (given.size() != ax.size())
        throw ArgumentError(name_ + ": scales has " + std::to_string(given.size()) + " entries, expected " +
                            std::to_string(ax.size()));
      for (size_t i = 0; i < ax.size(); ++i) {
        if (!(given[i] > 0)) throw ArgumentError(name_ + ": scale " + std::to_string(given[i]) + " is not positive");
        scale[ax[i]] = given[i];
      }
      return scale;
    }
    if (!present(in, 3)) throw ArgumentError(name_ + ": neither scales nor sizes is given");
    const std::vector<int64_t> sizes = int_values(in[3]);
    if (sizes.size() != ax.size())
      throw ArgumentError(name_ + ": sizes has " + std::to_string(sizes.size()) + " entries, expected " + std::to_string(ax.size()));
    if (policy_ == "stretch") {
      for (size_t i = 0; i < ax.size(); ++i) {
        TETHER_CHECK(y.dims[ax[i]] == sizes[i], "Resize: planned output differs from sizes");
        scale[ax[i]] = static_cast<float>(sizes[i]) / static_cast<float>(x.dims[ax[i]]);
      }
      return scale;
    }
    float shared = policy_ == "not_larger" ? std::numeric_limits<float>::max() : std::numeric_limits<float>::lowest();
    for (size_t i = 0; i < ax.size(); ++i) {
      const float s = static_cast<float>(sizes[i]) / static_cast<float>(x.dims[ax[i]]);
      shared = policy_ == "not_larger" ? std::min(shared, s) : std::max(shared, s);
    }
    for (size_t a : ax) scale[a] = shared;
    return scale;
  }

  void read_roi(const std::vector<View>& in, std::vector<float>& start, std::vector<float>& end) const {
    if (!present(in, 1) || in[1].numel() == 0) return;
    const size_t rank = start.size();
    const std::vector<size_t> ax = axes(rank);
    const View& r = in[1];
    if (static_cast<size_t>(r.numel()) != 2 * ax.size())
      throw ArgumentError(name_ + ": roi has " + std::to_string(r.numel()) + " entries, expected " + std::to_string(2 * ax.size()));
    for (size_t i = 0; i < ax.size(); ++i) {
      start[ax[i]] = r.as<float>()[i];
      end[ax[i]] = r.as<float>()[i + ax.size()];
    }
  }

  AxisTaps axis_taps(int64_t in, int64_t out, float scale, float roi_start, float roi_end) const {
    AxisTaps t;
    t.count = mode_ == Mode::kNearest ? 1 : mode_ == Mode::kLinear ? 2 : 4;
    t.index.assign(static_cast<size_t>(out * 4), 0);
    t.weight.assign(static_cast<size_t>(out * 4), 0.0f);
    t.outside.assign(static_cast<size_t>(out), 0);
    const bool extrapolate = coord_ == Coord::kTfCropAndResize;
    // An axis with scale 1 is copied whatever the coordinate transform (roi included), as
    // onnxruntime does; other axes whose coordinates map one to one are copied too.
    if (scale == 1.0f && in == out) return identity_taps(out);
    bool identity = in == out;
    for (int64_t o = 0; o < out; ++o) {
      const float xo = original_coordinate(coord_, static_cast<float>(o), scale, in, out, roi_start, roi_end);
      identity = identity && xo == static_cast<float>(o);
      if (extrapolate && (xo < 0 || xo > static_cast<float>(in - 1))) {
        t.outside[static_cast<size_t>(o)] = 1;
        continue;
      }
      int64_t* idx = &t.index[static_cast<size_t>(o * 4)];
      float* w = &t.weight[static_cast<size_t>(o * 4)];
      if (mode_ == Mode::kNearest) {
        idx[0] = std::clamp<int64_t>(nearest_index(nearest_, xo, scale), 0, in - 1);
        w[0] = 1.0f;
      } else if (mode_ == Mode::kLinear) {
        resize::linear_taps(xo, in, &idx[0], &idx[1], &w[0], &w[1]);
      } else {
        const float fl = std::floor(xo);
        const std::array<float, 4> c = cubic_coeffs(xo - fl, cubic_a_);
        float sum = 0;
        for (int j = 0; j < 4; ++j) {
          const int64_t at = static_cast<int64_t>(fl) - 1 + j;
          const bool inside = at >= 0 && at < in;
          w[j] = exclude_outside_ && !inside ? 0.0f : c[static_cast<size_t>(j)];
          idx[j] = std::clamp<int64_t>(at, 0, in - 1);  // edge values stand in for outside points
          sum += w[j];
        }
        if (exclude_outside_)
          for (int j = 0; j < 4; ++j) w[j] /= sum;
      }
    }
    return identity && !extrapolate ? identity_taps(out) : t;
  }

  static AxisTaps identity_taps(int64_t n) {
    AxisTaps t;
    t.index.assign(static_cast<size_t>(n * 4), 0);
    t.weight.assign(static_cast<size_t>(n * 4), 0.0f);
    t.outside.assign(static_cast<size_t>(n), 0);
    for (int64_t o = 0; o < n; ++o) {
      t.index[static_cast<size_t>(o * 4)] = o;
      t.weight[static_cast<size_t>(o * 4)] = 1.0f;
    }
    return t;
  }

  // The common resize: nearest or linear over the last two axes only (images, feature maps),
  // nothing outside the crop. Each output row then mixes at most two input rows, each value at
  // most two input columns, with per-row and per-column taps.
  bool planar(const View& x, const View& y, const std::vector<AxisTaps>& taps) const {
    const size_t rank = x.rank();
    if (rank < 2 || mode_ == Mode::kCubic || coord_ == Coord::kTfCropAndResize) return false;
    for (size_t d = 0; d + 2 < rank; ++d) {
      if (x.dims[d] != y.dims[d] || taps[d].count != 1) return false;
      for (int64_t o = 0; o < y.dims[d]; ++o)
        if (taps[d].index[static_cast<size_t>(o * 4)] != o || taps[d].weight[static_cast<size_t>(o * 4)] != 1.0f) return false;
    }
    return true;
  }

  void interpolate_planes(const RunContext& ctx, const View& x, View& y, const AxisTaps& ty, const AxisTaps& tx) const {
    const size_t rank = x.rank();
    const int64_t ih = x.dims[rank - 2], iw = x.dims[rank - 1], oh = y.dims[rank - 2], ow = y.dims[rank - 1];
    const int64_t rows = y.numel() / ow;
    // Per output column: its (one or two) input columns and weights, compact.
    std::vector<int64_t> c0(static_cast<size_t>(ow)), c1(static_cast<size_t>(ow));
    std::vector<float> w0(static_cast<size_t>(ow)), w1(static_cast<size_t>(ow));
    for (int64_t o = 0; o < ow; ++o) {
      const auto k = static_cast<size_t>(o * 4);
      c0[static_cast<size_t>(o)] = tx.index[k];
      c1[static_cast<size_t>(o)] = tx.index[k + (tx.count > 1 ? 1 : 0)];
      w0[static_cast<size_t>(o)] = tx.weight[k];
      w1[static_cast<size_t>(o)] = tx.count > 1 ? tx.weight[k + 1] : 0.0f;
    }
    const float* xp = x.as<float>();
    float* yp = y.as<float>();
    const bool linear_x = tx.count > 1, linear_y = ty.count > 1;
    parallel(ctx, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(ow, 1)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t plane = r / oh, oy = r % oh;
        const auto k = static_cast<size_t>(oy * 4);
        float* out = yp + r * ow;
        // Nearest rows repeat: a row that reads the same input row as the one above is a copy.
        if (!linear_y && oy > 0 && r > r0 && ty.index[k] == ty.index[k - 4]) {
          std::copy(out - ow, out, out);
          continue;
        }
        const float* a = xp + (plane * ih + ty.index[k]) * iw;
        const float* b = xp + (plane * ih + ty.index[k + (linear_y ? 1 : 0)]) * iw;
        const float wa = ty.weight[k], wb = linear_y ? ty.weight[k + 1] : 0.0f;
        if (linear_x) row_mix<true>(a, b, wa, wb, linear_y, c0.data(), c1.data(), w0.data(), w1.data(), ow, out);
        else row_mix<false>(a, b, wa, wb, linear_y, c0.data(), c1.data(), w0.data(), w1.data(), ow, out);
      }
    });
  }

  // The same resize channels last ([N, H, W, C], passes/channels_last_float.cc): nearest or
  // linear over axes 1 and 2 only. Each output pixel then mixes at most four input pixels, a
  // run of C channels at a time.
  bool channels_last(const View& x, const View& y, const std::vector<AxisTaps>& taps) const {
    if (x.rank() != 4 || mode_ == Mode::kCubic || coord_ == Coord::kTfCropAndResize) return false;
    for (size_t d : {size_t{0}, size_t{3}}) {
      if (x.dims[d] != y.dims[d] || taps[d].count != 1) return false;
      for (int64_t o = 0; o < y.dims[d]; ++o)
        if (taps[d].index[static_cast<size_t>(o * 4)] != o || taps[d].weight[static_cast<size_t>(o * 4)] != 1.0f) return false;
    }
    return true;
  }

  void interpolate_pixels(const RunContext& ctx, const View& x, View& y, const AxisTaps& ty, const AxisTaps& tx) const {
    const int64_t ih = x.dims[1], iw = x.dims[2], c = x.dims[3], oh = y.dims[1], ow = y.dims[2];
    const float* xp = x.as<float>();
    float* yp = y.as<float>();
    const bool linear_x = tx.count > 1, linear_y = ty.count > 1;
    parallel(ctx, y.dims[0] * oh, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t img = r / oh, oy = r % oh;
        const auto k = static_cast<size_t>(oy * 4);
        float* out = yp + r * ow * c;
        // Nearest rows repeat: a row that reads the same input row as the one above is a copy.
        if (!linear_y && oy > 0 && r > r0 && ty.index[k] == ty.index[k - 4]) {
          std::copy(out - ow * c, out, out);
          continue;
        }
        const float* a = xp + (img * ih + ty.index[k]) * iw * c;
        const float* b = xp + (img * ih + ty.index[k + (linear_y ? 1 : 0)]) * iw * c;
        const float wa = ty.weight[k], wb = linear_y ? ty.weight[k + 1] : 0.0f;
        for (int64_t o = 0; o < ow; ++o) {
          const auto j = static_cast<size_t>(o * 4);
          const int64_t c0 = tx.index[j] * c, c1 = tx.index[j + (linear_x ? 1 : 0)] * c;
          const float w0 = tx.weight[j], w1 = linear_x ? tx.weight[j + 1] : 0.0f;
          mix_pixel(a, b, wa, wb, linear_y, linear_x, c0, c1, w0, w1, c, out + o * c);
        }
      }
    });
  }

  // out[o] = wa * A(o) + wb * B(o) (B only when two rows mix), A(o) the row a read at column
  // c0[o] (times w0[o], plus w1[o] times column c1[o] when linear along the row).
  template <bool kLinearX>
  static void row_mix(const float* __restrict a, const float* __restrict b, float wa, float wb, bool two_rows,
                      const int64_t* __restrict c0, const int64_t* __restrict c1, const float* __restrict w0,
                      const float* __restrict w1, int64_t ow, float* __restrict out) {
    auto along = [&](const float* row, int64_t o) {
      if constexpr (kLinearX) return w0[o] * row[c0[o]] + w1[o] * row[c1[o]];
      else return w0[o] * row[c0[o]];
    };
    if (two_rows)
      for (int64_t o = 0; o < ow; ++o) out[o] = wa * along(a, o) + wb * along(b, o);
    else
      for (int64_t o = 0; o < ow; ++o) out[o] = wa * along(a, o);
  }

  void interpolate(const RunContext& ctx, const View& x, View& y, const std::vector<AxisTaps>& taps) const {
    const size_t rank = x.rank();
    const std::vector<int64_t> xs = strides_of(x.dims);
    const float* xp = x.as<float>();
    float* yp = y.as<float>();
    parallel(ctx, y.numel(), 256, [&](int64_t o0, int64_t o1) {
      std::vector<int64_t> pos(rank);
      for (int64_t o = o0; o < o1; ++o) {
        int64_t rem = o, total = 1;
        bool outside = false;
        for (size_t d = rank; d-- > 0;) {
          pos[d] = rem % y.dims[d];
          rem /= y.dims[d];
          outside = outside || taps[d].outside[static_cast<size_t>(pos[d])];
          total *= taps[d].count;
        }
        if (outside) {
          yp[o] = extrapolation_;
          continue;
        }
        double acc = 0;
        for (int64_t t = 0; t < total; ++t) {
          int64_t tr = t, off = 0;
          double w = 1;
          for (size_t d = rank; d-- > 0;) {
            const AxisTaps& a = taps[d];
            const auto k = static_cast<size_t>(pos[d] * 4 + tr % a.count);
            tr /= a.count;
            off += a.index[k] * xs[d];
            w *= a.weight[k];
          }
          acc += w * xp[off];
        }
        yp[o] = static_cast<float>(acc);
      }
    });
  }

  std::string name_;
  Mode mode_ = Mode::kNearest;
  Coord coord_ = Coord::kHalfPixel;
  Nearest nearest_ = Nearest::kRoundPreferFloor;
  float cubic_a_ = -0.75f;
  bool exclude_outside_ = false;
  float extrapolation_ = 0.0f;
  std::vector<int64_t> axes_attr_;
  std::string policy_ = "stretch";
  std::vector<float> attr_scales_;  // Upsample-7
  int scales_input_ = 2;            // input index of scales, -1 when they are an attribute
};

std::string resize_check(const KernelInit& init) {
  const ir::Node& n = init.node;
  Mode mode;
  const std::string m = n.attr_string("mode", "nearest");
  if (!parse_mode(m, &mode)) return "mode is '" + m + "'; supported: nearest, linear, cubic";
  if (legacy_form(init)) {
    if (mode == Mode::kCubic) return "mode 'cubic' needs Resize from opset 11";
  } else {
    Coord c;
    Nearest nm;
    const std::string cm = n.attr_string("coordinate_transformation_mode", "half_pixel");
    if (!parse_coord(cm, &c))
      return "coordinate_transformation_mode is '" + cm +
             "'; supported: half_pixel, half_pixel_symmetric, pytorch_half_pixel, align_corners, asymmetric, "
             "tf_half_pixel_for_nn, tf_crop_and_resize";
    const std::string nmode = n.attr_string("nearest_mode", "round_prefer_floor");
    if (!parse_nearest(nmode, &nm)) return "nearest_mode is '" + nmode + "'; supported: round_prefer_floor, round_prefer_ceil, floor, ceil";
    if (n.attr_int("antialias", 0) != 0) return "antialias=1 is not supported";
    const std::string policy = n.attr_string("keep_aspect_ratio_policy", "stretch");
    if (policy != "stretch" && policy != "not_larger" && policy != "not_smaller")
      return "keep_aspect_ratio_policy is '" + policy + "'; supported: stretch, not_larger, not_smaller";
    if (n.input(1) != nullptr && init.input_dtype(1) != DType::kFloat32)
      return "roi is " + std::string(ir::dtype_name(init.input_dtype(1))) + "; supported: float32";
    if (n.input(3) != nullptr && init.input_dtype(3) != DType::kInt64)
      return "sizes is " + std::string(ir::dtype_name(init.input_dtype(3))) + "; supported: int64";
  }
  if (init.input_dtype(0) != DType::kFloat32)
    return "input 0 is " + std::string(ir::dtype_name(init.input_dtype(0))) + "; supported: float32";
  const size_t scales_at = legacy_form(init) ? 1 : 2;
  if (n.input(scales_at) != nullptr && init.input_dtype(scales_at) != DType::kFloat32)
    return "scales is " + std::string(ir::dtype_name(init.input_dtype(scales_at))) + "; supported: float32";
  return "";
}

}  // namespace

void register_resize(KernelRegistry& r) {
  auto make = [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<ResizeKernel>(i); };
  TETHER_ADD(r, "Resize", make, resize_check);
  TETHER_ADD(r, "Upsample", make, resize_check);
}

}  // namespace tether::engine::cpu
