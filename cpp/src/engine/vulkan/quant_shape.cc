// INT8 on Vulkan, data movement on 8-bit tensors: Concat, Split, Transpose, Expand and Slice
// with constant bounds, a byte per invocation (shaders/q_strided_copy.comp); a Slice whose
// bounds are computed takes shape_computed.cc's kernel, which moves bytes too. The word kernels
// of shape.cc move 32-bit elements; register_quant puts these before them for int8 and uint8
// inputs.
#include <algorithm>

#include "engine/vulkan/ops.h"
#include "engine/vulkan/quant.h"

namespace tether::engine::vulkan {

namespace {

constexpr size_t kMaxDims = 6;

struct BytePush {
  uint32_t n, rank;
  int32_t base, y_base;
  uint32_t dims[kMaxDims];
  int32_t strides[kMaxDims];
  int32_t y_strides[kMaxDims];
};

// Copies the `dims` elements from x at `base` + index * `strides` to y at `y_base` + index *
// `y_strides`, dims merged where both sides allow.
void record_bytes(Recorder& rec, const ir::Node& node, const Pipeline& p, std::vector<int64_t> dims,
                  std::vector<int64_t> strides, int64_t base, std::vector<int64_t> y_strides, int64_t y_base,
                  const Range& x, const Range& y) {
  const int64_t n = product(dims, 0, dims.size());
  if (n == 0) return;
  collapse_dims(dims, {&strides, &y_strides});
  if (dims.size() > kMaxDims)
    throw UnsupportedError(node.describe() + ": " + std::to_string(dims.size()) +
                           " dims that do not merge; the Vulkan kernel takes 6");
  check_u32(node, n, "the output");
  BytePush push{};
  push.n = static_cast<uint32_t>(n);
  push.rank = static_cast<uint32_t>(dims.size());
  push.base = static_cast<int32_t>(base);
  push.y_base = static_cast<int32_t>(y_base);
  for (size_t d = 0; d < dims.size(); ++d) {
    push.dims[d] = static_cast<uint32_t>(dims[d]);
    push.strides[d] = static_cast<int32_t>(strides[d]);
    push.y_strides[d] = static_cast<int32_t>(y_strides[d]);
  }
  dispatch_1d(rec, p, {x, y}, &push, sizeof push, n);
}

class ByteMoveKernel : public GpuKernel {
 public:
  explicit ByteMoveKernel(const KernelInit& init) : node_(init.node) {}
  void prepare(Gpu& gpu) override {
    if (gpu.device.storage8()) pipeline_ = &gpu.pipeline("q_strided_copy", 2, sizeof(BytePush), {kLocal}, ir::DType::kInt8);
  }

 protected:
  const ir::Node& node_;
  const Pipeline* pipeline_ = nullptr;
};

class ByteConcatKernel final : public ByteMoveKernel {
 public:
  explicit ByteConcatKernel(const KernelInit& init) : ByteMoveKernel(init), axis_(init.node.attr_int("axis", 0)) {}

  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    require_storage8(rec, node_);
    const std::vector<int64_t>& od = out[0].dims;
    const auto a = static_cast<size_t>(normalize_axis(node_, axis_, od.size()));
    const std::vector<int64_t> ys = strides_of(od);
    int64_t offset = 0;
    for (const GpuTensor& t : in) {
      check_u32(node_, t.numel(), "an input");
      record_bytes(rec, node_, *pipeline_, t.dims, strides_of(t.dims), 0, ys, offset * ys[a], t.range, out[0].range);
      offset += t.dims[a];
    }
  }

 private:
  int64_t axis_;
};

class ByteTransposeKernel final : public ByteMoveKernel {
 public:
  explicit ByteTransposeKernel(const KernelInit& init) : ByteMoveKernel(init), perm_(init.node.attr_ints("perm")) {}

  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    require_storage8(rec, node_);
    const size_t rank = in[0].dims.size();
    std::vector<int64_t> perm = perm_;
    if (perm.empty())
      for (size_t d = rank; d-- > 0;) perm.push_back(static_cast<int64_t>(d));
    const std::vector<int64_t> xs = strides_of(in[0].dims);
    std::vector<int64_t> strides(rank);
    for (size_t d = 0; d < rank; ++d) strides[d] = xs[static_cast<size_t>(perm[d])];
    check_u32(node_, in[0].numel(), "the input");
    record_bytes(rec, node_, *pipeline_, out[0].dims, strides, 0, strides_of(out[0].dims), 0, in[0].range, out[0].range);
  }

 private:
  std::vector<int64_t> perm_;
};

// Slice with constant bounds on 8-bit data: the view the word Slice takes (ConstantSlice).
class ByteSliceKernel final : public ByteMoveKernel {
 public:
  explicit ByteSliceKernel(const KernelInit& init) : ByteMoveKernel(init), slice_(init) {}

  bool reads_on_device(size_t i) const override { return i == 0; }

  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    require_storage8(rec, node_);
    int64_t base = 0;
    std::vector<int64_t> strides;
    slice_.view(node_, in[0].dims, base, strides);
    check_u32(node_, in[0].numel(), "the input");
    record_bytes(rec, node_, *pipeline_, out[0].dims, strides, base, strides_of(out[0].dims), 0, in[0].range, out[0].range);
  }

 private:
  ConstantSlice slice_;
};

// Split: each output a slab of x along the axis (the sizes are the outputs' own, which shape
// inference took from `split` or num_outputs on the host).
class ByteSplitKernel final : public ByteMoveKernel {
 public:
  explicit ByteSplitKernel(const KernelInit& init) : ByteMoveKernel(init), axis_(init.node.attr_int("axis", 0)) {}

  bool reads_on_device(size_t i) const override { return i == 0; }

  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    require_storage8(rec, node_);
    const std::vector<int64_t>& xd = in[0].dims;
    const auto a = static_cast<size_t>(normalize_axis(node_, axis_, xd.size()));
    const std::vector<int64_t> xs = strides_of(xd);
    check_u32(node_, in[0].numel(), "the input");
    int64_t offset = 0;
    for (const GpuTensor& t : out) {
      if (t.dims.empty()) continue;  // an omitted output
      record_bytes(rec, node_, *pipeline_, t.dims, xs, offset * xs[a], strides_of(t.dims), 0, in[0].range, t.range);
      offset += t.dims[a];
    }
  }

 private:
  int64_t axis_;
};

// Expand: x read with stride 0 along the dims it broadcasts.
class ByteExpandKernel final : public ByteMoveKernel {
 public:
  explicit ByteExpandKernel(const KernelInit& init) : ByteMoveKernel(init) {}

  bool reads_on_device(size_t i) const override { return i == 0; }

  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    require_storage8(rec, node_);
    check_u32(node_, in[0].numel(), "the input");
    record_bytes(rec, node_, *pipeline_, out[0].dims, broadcast_strides(in[0].dims, out[0].dims), 0,
                 strides_of(out[0].dims), 0, in[0].range, out[0].range);
  }
};

// Slice-1's attributes, or starts, ends, axes and steps all constants.
bool constant_bounds(const KernelInit& init) {
  if (init.node.attr("starts") != nullptr) return true;
  if (init.node.inputs().size() < 2 || init.constant(1) == nullptr) return false;
  for (size_t i = 2; i < init.node.inputs().size(); ++i)
    if (init.node.input(i) != nullptr && init.constant(i) == nullptr) return false;
  return true;
}

}  // namespace

std::unique_ptr<Kernel> byte_split_kernel(const KernelInit& init) { return std::make_unique<ByteSplitKernel>(init); }
std::unique_ptr<Kernel> byte_expand_kernel(const KernelInit& init) { return std::make_unique<ByteExpandKernel>(init); }
std::unique_ptr<Kernel> byte_concat_kernel(const KernelInit& init) { return std::make_unique<ByteConcatKernel>(init); }
std::unique_ptr<Kernel> byte_transpose_kernel(const KernelInit& init) { return std::make_unique<ByteTransposeKernel>(init); }
// Slice on 8-bit data: constant bounds on the byte strided copy, computed ones on the
// computed Slice's shader (which moves bytes as well).
std::unique_ptr<Kernel> byte_slice_kernel(const KernelInit& init) {
  if (constant_bounds(init)) return std::make_unique<ByteSliceKernel>(init);
  return computed_slice_kernel(init);
}

std::string byte_concat_check(const KernelInit& init) {
  for (size_t i = 0; i < init.node.inputs().size(); ++i)
    if (init.input_dtype(i) != init.input_dtype(0)) return "input " + std::to_string(i) + " differs from input 0 in type";
  return "";
}

std::string byte_transpose_check(const KernelInit&) { return ""; }

std::string byte_slice_check(const KernelInit& init) {
  return constant_bounds(init) ? "" : computed_slice_bounds_check(init);
}

}  // namespace tether::engine::vulkan
