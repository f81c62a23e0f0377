// Resize (opsets 10 to 19) and Upsample (opsets 7 and 9), nearest or linear over the last two
// axes (shaders/resize2d.comp): images and feature maps. Each plan computes where every output
// row and column reads from on the host, with the CPU engine's own formulas
// (ops/resize_geometry.h), into a table the shader reads, so that exact halves round alike
// on both backends. Cubic, tf_crop_and_resize, antialias, the keep_aspect_ratio policies and
// scales computed at run time stay on the CPU.
#include <cstring>

#include "engine/vulkan/ops.h"
#include "ops/resize_geometry.h"

namespace tether::engine::vulkan {

namespace {

namespace resize = ::tether::ops::resize;
using resize::Coord;
using resize::Mode;
using resize::Nearest;

struct ResizePush {
  uint32_t n;
  uint32_t H, W, OH, OW;
};

// Per output position of one axis: (index 0, index 1, weight 0 bits, weight 1 bits).
struct Tap {
  uint32_t i0 = 0, i1 = 0, w0 = 0, w1 = 0;
};

bool legacy_form(const KernelInit& init) { return init.node.op_type() == "Upsample" || init.opset < 11; }

// Index of the scales input (-1: the "scales" attribute of Upsample-7).
int scales_input(const KernelInit& init) {
  if (!legacy_form(init)) return 2;
  return init.node.attr("scales") != nullptr ? -1 : 1;
}

bool present(const KernelInit& init, size_t i) { return i < init.node.inputs().size() && init.node.input(i) != nullptr; }

// The scales given at compile time (attribute or constant input), empty when sizes decide.
// Sets *why when scales are an input computed at run time.
std::vector<float> given_scales(const KernelInit& init, std::string* why) {
  const int at = scales_input(init);
  if (at < 0) return init.node.attr("scales")->as_floats();
  if (!present(init, static_cast<size_t>(at))) return {};
  const ir::Tensor* s = init.constant(static_cast<size_t>(at));
  if (s == nullptr) {
    *why = "its scales are computed at run time (the Vulkan kernel takes constant scales, or sizes)";
    return {};
  }
  if (s->dtype() != ir::DType::kFloat32) {
    *why = "scales is not float32";
    return {};
  }
  return std::vector<float>(s->data<float>(), s->data<float>() + s->num_elements());
}

class ResizeKernel final : public GpuKernel {
 public:
  explicit ResizeKernel(const KernelInit& init) : node_(init.node) {
    const ir::Node& n = init.node;
    resize::parse_mode(n.attr_string("mode", "nearest"), &mode_);
    if (legacy_form(init)) {
      coord_ = Coord::kAsymmetric;
      nearest_ = Nearest::kSimple;
    } else {
      resize::parse_coord(n.attr_string("coordinate_transformation_mode", "half_pixel"), &coord_);
      resize::parse_nearest(n.attr_string("nearest_mode", "round_prefer_floor"), &nearest_);
      axes_ = n.attr_ints("axes");
    }
    std::string why;
    scales_ = given_scales(init, &why);
  }

  bool reads_on_device(size_t i) const override { return i == 0; }

  void prepare(Gpu& gpu) override {
    const bool linear = mode_ == Mode::kLinear;
    for (int y = 0; y < 2; ++y)
      for (int x = 0; x < 2; ++x)
        if (linear || (y == 0 && x == 0))
          pipelines_[y][x] = &gpu.pipeline("resize2d", 3, sizeof(ResizePush), {kLocal, uint32_t(y), uint32_t(x)});
  }

  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    const GpuTensor& x = in[0];
    const GpuTensor& y = out[0];
    const size_t rank = x.dims.size();
    const std::vector<float> scale = scales(rank, x.dims, y.dims);
    for (size_t d = 0; d + 2 < rank; ++d)
      if (x.dims[d] != y.dims[d] || (scale[d] != 1.0f && x.dims[d] > 1))
        throw UnsupportedError(node_.describe() + ": resizes axis " + std::to_string(d) +
                               "; the Vulkan kernel resizes the last two axes only (compile with device='cpu')");
    if (x.numel() == 0) throw ArgumentError(node_.describe() + ": an empty input cannot be resized to a non-empty output");
    check_u32(node_, y.numel(), "the output");
    check_u32(node_, x.numel(), "the input");
    const int64_t ih = x.dims[rank - 2], iw = x.dims[rank - 1], oh = y.dims[rank - 2], ow = y.dims[rank - 1];
    bool linear_y = false, linear_x = false;
    std::vector<Tap> table = taps(ih, oh, scale[rank - 2], &linear_y);
    const std::vector<Tap> cols = taps(iw, ow, scale[rank - 1], &linear_x);
    table.insert(table.end(), cols.begin(), cols.end());
    const Range t = rec.table(table.data(), static_cast<int64_t>(table.size() * sizeof(Tap)));
    ResizePush p{static_cast<uint32_t>(y.numel()), static_cast<uint32_t>(ih), static_cast<uint32_t>(iw),
                 static_cast<uint32_t>(oh), static_cast<uint32_t>(ow)};
    dispatch_1d(rec, *pipelines_[linear_y][linear_x], {x.range, t, y.range}, &p, sizeof p, p.n);
  }

 private:
  // Per-axis scales: given (over `axes` when set), else out / in; 1 on axes not resized.
  std::vector<float> scales(size_t rank, const std::vector<int64_t>& in, const std::vector<int64_t>& out) const {
    std::vector<size_t> ax;
    for (int64_t a : axes_) ax.push_back(static_cast<size_t>(normalize_axis(node_, a, rank)));
    if (ax.empty())
      for (size_t d = 0; d < rank; ++d) ax.push_back(d);
    std::vector<float> s(rank, 1.0f);
    if (!scales_.empty()) {
      if (scales_.size() != ax.size())
        throw ArgumentError(node_.describe() + ": scales has " + std::to_string(scales_.size()) + " entries, expected " +
                            std::to_string(ax.size()));
      for (size_t i = 0; i < ax.size(); ++i) {
        if (!(scales_[i] > 0)) throw ArgumentError(node_.describe() + ": scale " + std::to_string(scales_[i]) + " is not positive");
        s[ax[i]] = scales_[i];
      }
      return s;
    }
    for (size_t a : ax) s[a] = static_cast<float>(out[a]) / static_cast<float>(in[a]);
    return s;
  }

  // One axis's table, as the CPU engine's taps: identity when the axis maps one to one (then
  // a single tap even for linear), else one nearest tap or two linear ones per position.
  std::vector<Tap> taps(int64_t in, int64_t out, float scale, bool* two) const {
    std::vector<Tap> t(static_cast<size_t>(out));
    const uint32_t one = float_bits(1.0f);
    bool identity = in == out;
    for (int64_t o = 0; o < out && !(scale == 1.0f && in == out); ++o) {
      const float xo = resize::original_coordinate(coord_, static_cast<float>(o), scale, in, out, 0.0f, 1.0f);
      identity = identity && xo == static_cast<float>(o);
      Tap& tap = t[static_cast<size_t>(o)];
      if (mode_ == Mode::kNearest) {
        tap.i0 = tap.i1 = static_cast<uint32_t>(std::clamp<int64_t>(resize::nearest_index(nearest_, xo, scale), 0, in - 1));
        tap.w0 = one;
      } else {
        int64_t i0, i1;
        float w0, w1;
        resize::linear_taps(xo, in, &i0, &i1, &w0, &w1);
        tap = {static_cast<uint32_t>(i0), static_cast<uint32_t>(i1), float_bits(w0), float_bits(w1)};
      }
    }
    *two = mode_ == Mode::kLinear && !identity;
    if (identity)
      for (int64_t o = 0; o < out; ++o) t[static_cast<size_t>(o)] = {static_cast<uint32_t>(o), static_cast<uint32_t>(o), one, 0};
    return t;
  }

  const ir::Node& node_;
  Mode mode_ = Mode::kNearest;
  Coord coord_ = Coord::kHalfPixel;
  Nearest nearest_ = Nearest::kRoundPreferFloor;
  std::vector<int64_t> axes_;
  std::vector<float> scales_;
  const Pipeline* pipelines_[2][2] = {{nullptr, nullptr}, {nullptr, nullptr}};
};

std::string resize_check(const KernelInit& init) {
  const ir::Node& n = init.node;
  Mode mode;
  const std::string m = n.attr_string("mode", "nearest");
  if (!resize::parse_mode(m, &mode)) return "mode is '" + m + "'";
  if (mode == Mode::kCubic) return "mode 'cubic' has no Vulkan kernel";
  if (!legacy_form(init)) {
    Coord c;
    Nearest nm;
    const std::string cm = n.attr_string("coordinate_transformation_mode", "half_pixel");
    if (!resize::parse_coord(cm, &c)) return "coordinate_transformation_mode is '" + cm + "'";
    if (c == Coord::kTfCropAndResize) return "coordinate_transformation_mode 'tf_crop_and_resize' has no Vulkan kernel";
    if (!resize::parse_nearest(n.attr_string("nearest_mode", "round_prefer_floor"), &nm)) return "unknown nearest_mode";
    if (n.attr_int("antialias", 0) != 0) return "antialias=1 has no Vulkan kernel";
    if (n.attr_string("keep_aspect_ratio_policy", "stretch") != "stretch")
      return "keep_aspect_ratio_policy other than 'stretch' has no Vulkan kernel";
  }
  if (std::string why = require_dtype(init, 0, {ir::DType::kFloat32}); !why.empty()) return why;
  const ir::Shape& s = init.input_types[0].shape();
  if (!s.has_rank() || s.rank() < 2) return "input 0 must have a known rank of 2 or more";
  std::string why;
  const std::vector<float> scales = given_scales(init, &why);
  if (!why.empty()) return why;
  // Given scales must leave the leading axes alone (sizes are checked per plan).
  std::vector<int64_t> axes = legacy_form(init) ? std::vector<int64_t>{} : n.attr_ints("axes");
  const auto rank = static_cast<int64_t>(s.rank());
  if (axes.empty())
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  if (!scales.empty() && scales.size() == axes.size())
    for (size_t i = 0; i < axes.size(); ++i) {
      const int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
      if (a < rank - 2 && scales[i] != 1.0f) return "it resizes an axis other than the last two";
    }
  // With sizes, the leading axes must keep their size for all that inference can tell: the
  // node then goes to the CPU at compile rather than failing a run.
  if (scales.empty() && !init.output_types.empty()) {
    const ir::Shape& o = init.output_types[0].shape();
    if (!o.has_rank() || o.rank() != s.rank()) return "its output rank is not known";
    for (size_t d = 0; d + 2 < s.rank(); ++d)
      if (!s[d].same_as(o[d])) return "it may resize an axis other than the last two (its sizes)";
  }
  return "";
}

}  // namespace

void register_resize(KernelRegistry& r) {
  auto make = [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<ResizeKernel>(i); };
  r.add("Resize", make, resize_check);
  r.add("Upsample", make, resize_check);
}

}  // namespace tether::engine::vulkan
