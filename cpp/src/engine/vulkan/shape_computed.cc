// Data movement whose indices or bounds are values rather than constants: Gather with indices
// computed at run time (embeddings; shaders/shape_gather.comp), Slice with computed starts
// (shape_slice.comp), Tile (shape_tile.comp) and Range (shape_range.comp), Pad (shape_pad.comp). A value that only
// decides a shape (Tile's repeats, Slice's ends, Range's limit) is not read here: the plan
// knows the output's dims. Elements of any kind of shaders/elements.glsl.
#include <cstring>

#include "engine/vulkan/ops.h"

namespace tether::engine::vulkan {

namespace {

// These kernels only move elements, so int8 moves as the bytes it is (element_kind leaves it out:
// the kernels that compute on bytes read them as uint8).
uint32_t kind_of(ir::DType t) {
  return t == ir::DType::kInt8 ? kByteElement : static_cast<uint32_t>(element_kind(t));
}

// ---- Gather -------------------------------------------------------------------------------------

struct GatherPush {
  uint32_t n, count, inner, axis_len;
};

class ComputedGatherKernel final : public GpuKernel {
 public:
  explicit ComputedGatherKernel(const KernelInit& init)
      : node_(init.node),
        kind_(kind_of(init.input_dtype(0))),
        index64_(init.input_dtype(1) == ir::DType::kInt64),
        axis_(init.node.attr_int("axis", 0)) {}
  void prepare(Gpu& gpu) override {
    pipeline_ = element_pipeline(gpu, "shape_gather", 4, sizeof(GatherPush),
                              {kLocal, kind_, index64_ ? 1u : 0u}, kind_ == kFloatElement);
  }
  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    require_byte_storage(rec, node_);
    const std::vector<int64_t>& xd = in[0].dims;
    const auto a = static_cast<size_t>(normalize_axis(node_, axis_, xd.size()));
    check_u32(node_, in[0].numel(), "the input");
    check_u32(node_, out[0].numel(), "the output");
    const GatherPush p{static_cast<uint32_t>(out[0].numel()), static_cast<uint32_t>(in[1].numel()),
                       static_cast<uint32_t>(product(xd, a + 1, xd.size())), static_cast<uint32_t>(xd[a])};
    const Range fault = rec.fault(node_.describe() + ": an index is out of range for axis " + std::to_string(a) +
                                  " of size " + std::to_string(xd[a]) + "; the index");
    dispatch_1d(rec, *pipeline_, {in[0].range, in[1].range, out[0].range, fault}, &p, sizeof p, p.n);
  }

 private:
  const ir::Node& node_;
  uint32_t kind_;
  bool index64_;
  int64_t axis_;
  const Pipeline* pipeline_ = nullptr;
};

// ---- Slice --------------------------------------------------------------------------------------

struct SlicePush {
  uint32_t n, rank;
  uint32_t dims[6], strides[6];
  int32_t slot[6], step[6], len[6];
};

// Starts read on the device; axes and steps constant (or absent), ends only shape the output.
class ComputedSliceKernel final : public GpuKernel {
 public:
  explicit ComputedSliceKernel(const KernelInit& init)
      : node_(init.node), kind_(kind_of(init.input_dtype(0))), index64_(init.input_dtype(1) == ir::DType::kInt64) {
    if (const ir::Tensor* a = init.constant(3)) axes_ = int_values(*a);
    if (const ir::Tensor* s = init.constant(4)) steps_ = int_values(*s);
  }
  void prepare(Gpu& gpu) override {
    pipeline_ = element_pipeline(gpu, "shape_slice", 3, sizeof(SlicePush),
                              {kLocal, kind_, index64_ ? 1u : 0u}, kind_ == kFloatElement);
  }
  bool reads_on_device(size_t i) const override { return i <= 1; }
  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    require_byte_storage(rec, node_);
    const std::vector<int64_t>& xd = in[0].dims;
    if (xd.size() > 6)
      throw UnsupportedError(node_.describe() + ": rank " + std::to_string(xd.size()) + "; the Vulkan kernel takes 6");
    check_u32(node_, in[0].numel(), "the input");
    const auto count = static_cast<size_t>(in[1].numel());
    std::vector<int64_t> axes = axes_, steps = steps_;
    if (axes.empty())
      for (size_t j = 0; j < count; ++j) axes.push_back(static_cast<int64_t>(j));
    if (steps.empty()) steps.assign(count, 1);
    SlicePush p{};
    p.n = static_cast<uint32_t>(out[0].numel());
    p.rank = static_cast<uint32_t>(xd.size());
    const std::vector<int64_t> strides = strides_of(xd);
    for (size_t d = 0; d < xd.size(); ++d) {
      p.dims[d] = static_cast<uint32_t>(out[0].dims[d]);
      p.strides[d] = static_cast<uint32_t>(strides[d]);
      p.slot[d] = -1;
      p.step[d] = 1;
      p.len[d] = static_cast<int32_t>(xd[d]);
    }
    for (size_t j = 0; j < count && j < axes.size(); ++j) {
      const auto a = static_cast<size_t>(normalize_axis(node_, axes[j], xd.size()));
      if (steps[j] == 0 || steps[j] < INT32_MIN || steps[j] > INT32_MAX)
        throw UnsupportedError(node_.describe() + ": step " + std::to_string(steps[j]) + " is 0 or past 32 bits");
      p.slot[a] = static_cast<int32_t>(j);
      p.step[a] = static_cast<int32_t>(steps[j]);
    }
    dispatch_1d(rec, *pipeline_, {in[0].range, in[1].range, out[0].range}, &p, sizeof p, p.n);
  }

 private:
  const ir::Node& node_;
  uint32_t kind_;
  bool index64_;
  std::vector<int64_t> axes_, steps_;
  const Pipeline* pipeline_ = nullptr;
};

// ---- Tile ---------------------------------------------------------------------------------------

struct TilePush {
  uint32_t n, rank;
  uint32_t dims[6], in_dims[6], strides[6];
};

class TileKernel final : public GpuKernel {
 public:
  explicit TileKernel(const KernelInit& init) : node_(init.node), kind_(kind_of(init.input_dtype(0))) {}
  void prepare(Gpu& gpu) override {
    pipeline_ = element_pipeline(gpu, "shape_tile", 2, sizeof(TilePush), {kLocal, kind_}, kind_ == kFloatElement);
  }
  bool reads_on_device(size_t i) const override { return i == 0; }
  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    require_byte_storage(rec, node_);
    const std::vector<int64_t>& xd = in[0].dims;
    if (xd.size() > 6)
      throw UnsupportedError(node_.describe() + ": rank " + std::to_string(xd.size()) + "; the Vulkan kernel takes 6");
    check_u32(node_, out[0].numel(), "the output");
    TilePush p{};
    p.n = static_cast<uint32_t>(out[0].numel());
    p.rank = static_cast<uint32_t>(xd.size());
    const std::vector<int64_t> strides = strides_of(xd);
    for (size_t d = 0; d < xd.size(); ++d) {
      p.dims[d] = static_cast<uint32_t>(out[0].dims[d]);
      p.in_dims[d] = static_cast<uint32_t>(xd[d]);
      p.strides[d] = static_cast<uint32_t>(strides[d]);
    }
    dispatch_1d(rec, *pipeline_, {in[0].range, out[0].range}, &p, sizeof p, p.n);
  }

 private:
  const ir::Node& node_;
  uint32_t kind_;
  const Pipeline* pipeline_ = nullptr;
};

// ---- Pad ----------------------------------------------------------------------------------------

struct PadPush {
  uint32_t n, rank;
  uint32_t dims[6];
  int32_t in_dims[6];
  uint32_t strides[6];
  int32_t slot[6];
  uint32_t value_bits;
};

// Pads from the attribute (before opset 11: kept as an int64 weight) or the input (read on the
// device, computed or constant); axes constant; the value an input read on the device, or the
// attribute's float.
class PadKernel final : public GpuKernel {
 public:
  explicit PadKernel(const KernelInit& init)
      : node_(init.node), kind_(kind_of(init.input_dtype(0))), from_attrs_(init.node.attr("pads") != nullptr) {
    const std::string mode = init.node.attr_string("mode", "constant");
    mode_ = mode == "constant" ? 0 : mode == "edge" ? 1 : mode == "wrap" ? 2 : 3;
    if (from_attrs_) attr_pads_ = init.node.attr_ints("pads");
    if (const ir::Tensor* a = init.constant(3)) axes_ = int_values(*a);
    value_input_ = !from_attrs_ && init.node.inputs().size() > 2 && init.node.input(2) != nullptr;
    pads64_ = from_attrs_ || init.input_dtype(1) == ir::DType::kInt64;
    const float value = init.node.attr_float("value", 0.0f);
    if (kind_ == kFloatElement && from_attrs_) value_bits_ = float_bits(value);
  }
  void prepare(Gpu& gpu) override {
    if (from_attrs_) {
      std::vector<std::byte> bytes(attr_pads_.size() * sizeof(int64_t));
      std::memcpy(bytes.data(), attr_pads_.data(), bytes.size());
      pads_weight_ = gpu.add_weight(std::move(bytes));
    }
    pipeline_ = element_pipeline(gpu, "shape_pad", 4, sizeof(PadPush),
                              {kLocal, kind_, mode_, pads64_ ? 1u : 0u, value_input_ ? 1u : 0u}, kind_ == kFloatElement);
  }
  bool reads_on_device(size_t i) const override { return i <= 2; }
  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    require_byte_storage(rec, node_);
    const std::vector<int64_t>& xd = in[0].dims;
    if (xd.size() > 6)
      throw UnsupportedError(node_.describe() + ": rank " + std::to_string(xd.size()) + "; the Vulkan kernel takes 6");
    check_u32(node_, out[0].numel(), "the output");
    PadPush p{};
    p.n = static_cast<uint32_t>(out[0].numel());
    p.rank = static_cast<uint32_t>(xd.size());
    p.value_bits = value_bits_;
    const std::vector<int64_t> strides = strides_of(xd);
    for (size_t d = 0; d < xd.size(); ++d) {
      p.dims[d] = static_cast<uint32_t>(out[0].dims[d]);
      p.in_dims[d] = static_cast<int32_t>(xd[d]);
      p.strides[d] = static_cast<uint32_t>(strides[d]);
      p.slot[d] = axes_.empty() ? static_cast<int32_t>(d) : -1;
    }
    for (size_t j = 0; j < axes_.size(); ++j) p.slot[normalize_axis(node_, axes_[j], xd.size())] = static_cast<int32_t>(j);
    const Range pads = from_attrs_ ? rec.weight(pads_weight_) : in[1].range;
    const Range value = value_input_ ? in[2].range : rec.unused();
    dispatch_1d(rec, *pipeline_, {in[0].range, pads, value, out[0].range}, &p, sizeof p, p.n);
  }

 private:
  const ir::Node& node_;
  uint32_t kind_;
  bool from_attrs_;
  uint32_t mode_ = 0;
  std::vector<int64_t> attr_pads_, axes_;
  bool value_input_ = false, pads64_ = true;
  uint32_t value_bits_ = 0;
  int pads_weight_ = -1;
  const Pipeline* pipeline_ = nullptr;
};

std::string pad_check(const KernelInit& init) {
  if (std::string why = any_element(init, 0); !why.empty()) return why;
  const std::string mode = init.node.attr_string("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap") return "unknown mode '" + mode + "'";
  if (init.node.attr("pads") != nullptr) return "";
  if (init.node.inputs().size() < 2 || init.node.input(1) == nullptr) return "its pads are missing";
  if (std::string why = require_dtype(init, 1, {ir::DType::kInt32, ir::DType::kInt64}); !why.empty()) return why;
  if (init.node.inputs().size() > 3 && init.node.input(3) != nullptr && init.constant(3) == nullptr)
    return "its axes are computed at run time; the Vulkan kernel takes constant axes";
  if (init.node.inputs().size() > 2 && init.node.input(2) != nullptr && init.input_dtype(2) != init.input_dtype(0))
    return "its value's type differs from the data's";
  return "";
}

// ---- Range --------------------------------------------------------------------------------------

class RangeKernel final : public GpuKernel {
 public:
  explicit RangeKernel(const KernelInit& init) : node_(init.node), kind_(kind_of(init.input_dtype(0))) {}
  void prepare(Gpu& gpu) override {
    pipeline_ = element_pipeline(gpu, "shape_range", 4, sizeof(uint32_t), {kLocal, kind_}, kind_ == kFloatElement);
  }
  bool reads_on_device(size_t i) const override { return i != 1; }  // the limit only sizes the output
  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    require_byte_storage(rec, node_);
    check_u32(node_, out[0].numel(), "the output");
    const auto n = static_cast<uint32_t>(out[0].numel());
    const Range fault = rec.fault(node_.describe() + ": its start or delta does not fit 32 bits, as the Vulkan kernel "
                                  "needs (compile with device='cpu'); the value");
    dispatch_1d(rec, *pipeline_, {in[0].range, in[2].range, out[0].range, fault}, &n, sizeof n, n);
  }

 private:
  const ir::Node& node_;
  uint32_t kind_;
  const Pipeline* pipeline_ = nullptr;
};

std::string range_check(const KernelInit& init) {
  return require_dtype(init, 0, {ir::DType::kFloat32, ir::DType::kInt32, ir::DType::kInt64});
}

}  // namespace

std::unique_ptr<Kernel> computed_gather_kernel(const KernelInit& init) {
  return std::make_unique<ComputedGatherKernel>(init);
}

std::string computed_gather_check(const KernelInit& init) {
  if (std::string why = any_element(init, 0); !why.empty()) return why;
  return computed_gather_indices_check(init);
}

std::string computed_gather_indices_check(const KernelInit& init) {
  return require_dtype(init, 1, {ir::DType::kInt32, ir::DType::kInt64});
}

std::unique_ptr<Kernel> computed_slice_kernel(const KernelInit& init) { return std::make_unique<ComputedSliceKernel>(init); }

std::string computed_slice_check(const KernelInit& init) {
  if (std::string why = any_element(init, 0); !why.empty()) return why;
  return computed_slice_bounds_check(init);
}

std::string computed_slice_bounds_check(const KernelInit& init) {
  if (init.node.inputs().size() < 3 || init.node.input(1) == nullptr) return "its starts are missing";
  if (std::string why = require_dtype(init, 1, {ir::DType::kInt32, ir::DType::kInt64}); !why.empty()) return why;
  for (size_t i : {size_t{3}, size_t{4}})
    if (i < init.node.inputs().size() && init.node.input(i) != nullptr && init.constant(i) == nullptr)
      return "its " + std::string(i == 3 ? "axes" : "steps") + " are computed at run time; the Vulkan kernel takes "
             "constant axes and steps";
  return "";
}

void register_shape_computed(KernelRegistry& r) {
  r.add("Tile", [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<TileKernel>(i); },
        [](const KernelInit& init) { return any_element(init, 0); });
  r.add("Pad", [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<PadKernel>(i); }, pad_check);
  r.add("Range", [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<RangeKernel>(i); }, range_check);
}

}  // namespace tether::engine::vulkan
