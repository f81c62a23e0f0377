// Data movement: Reshape, Flatten, Squeeze, Unsqueeze and Identity as views (the output is the
// input's range; nothing is recorded); Concat and Split (shaders/copy_slab.comp); Transpose,
// Slice and Expand (shaders/strided_copy.comp); Gather with constant indices
// (shaders/gather.comp). float32, int32 and int64 data, moved as 32-bit words (int64 as two;
// float32 as 16-bit words under precision fp16, where it is stored as float16).
#include <algorithm>
#include <cstring>

#include "engine/vulkan/ops.h"

namespace tether::engine::vulkan {

namespace {

std::string word_data(const KernelInit& init) {
  return require_dtype(init, 0, {ir::DType::kFloat32, ir::DType::kInt32, ir::DType::kInt64});
}

// 32-bit words per element: an int64 element moves as two.
int64_t words_of(ir::DType t) { return t == ir::DType::kInt64 ? 2 : 1; }

// The pipelines move words: int64 data takes int32's.
ir::DType word_type(ir::DType t) { return t == ir::DType::kInt64 ? ir::DType::kInt32 : t; }

class ViewKernel final : public GpuKernel {
 public:
  void prepare(Gpu&) override {}
  bool is_view() const override { return true; }
  bool reads_on_device(size_t i) const override { return i == 0; }
  void record(Recorder&, const std::vector<GpuTensor>&, const std::vector<GpuTensor>&) const override {}
};

// ---- Concat and Split --------------------------------------------------------------------------

struct SlabPush {
  uint32_t n, count;
  uint32_t src_block, src_offset;
  uint32_t dst_block, dst_offset;
};

const Pipeline& slab_pipeline(Gpu& gpu, ir::DType data) {
  return gpu.pipeline("copy_slab", 2, sizeof(SlabPush), {kLocal}, word_type(data));
}

class ConcatKernel final : public GpuKernel {
 public:
  explicit ConcatKernel(const KernelInit& init) : node_(init.node), data_(init.input_dtype(0)), axis_(init.node.attr_int("axis", 0)) {}
  void prepare(Gpu& gpu) override { pipeline_ = &slab_pipeline(gpu, data_); }

  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    const std::vector<int64_t>& od = out[0].dims;
    const auto a = static_cast<size_t>(normalize_axis(node_, axis_, od.size()));
    check_u32(node_, out[0].numel(), "the output");
    const int64_t outer = product(od, 0, a), inner = product(od, a + 1, od.size()) * words_of(data_);
    int64_t offset = 0;
    for (const GpuTensor& t : in) {
      const int64_t count = t.dims[a] * inner;
      SlabPush p{static_cast<uint32_t>(outer * count), static_cast<uint32_t>(count), static_cast<uint32_t>(count), 0,
                 static_cast<uint32_t>(od[a] * inner), static_cast<uint32_t>(offset * inner)};
      if (p.n > 0) dispatch_1d(rec, *pipeline_, {t.range, out[0].range}, &p, sizeof p, p.n);
      offset += t.dims[a];
    }
  }

 private:
  const ir::Node& node_;
  ir::DType data_;  // float32 or int32
  int64_t axis_;
  const Pipeline* pipeline_ = nullptr;
};

class SplitKernel final : public GpuKernel {
 public:
  explicit SplitKernel(const KernelInit& init) : node_(init.node), data_(init.input_dtype(0)), axis_(init.node.attr_int("axis", 0)) {}
  void prepare(Gpu& gpu) override { pipeline_ = &slab_pipeline(gpu, data_); }
  bool reads_on_device(size_t i) const override { return i == 0; }

  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    const std::vector<int64_t>& xd = in[0].dims;
    const auto a = static_cast<size_t>(normalize_axis(node_, axis_, xd.size()));
    check_u32(node_, in[0].numel(), "the input");
    const int64_t outer = product(xd, 0, a), inner = product(xd, a + 1, xd.size()) * words_of(data_);
    int64_t offset = 0;
    for (const GpuTensor& t : out) {
      if (t.dims.empty()) continue;  // an omitted output
      const int64_t count = t.dims[a] * inner;
      SlabPush p{static_cast<uint32_t>(outer * count), static_cast<uint32_t>(count), static_cast<uint32_t>(xd[a] * inner),
                 static_cast<uint32_t>(offset * inner), static_cast<uint32_t>(count), 0};
      if (p.n > 0) dispatch_1d(rec, *pipeline_, {in[0].range, t.range}, &p, sizeof p, p.n);
      offset += t.dims[a];
    }
  }

 private:
  const ir::Node& node_;
  ir::DType data_;  // float32 or int32
  int64_t axis_;
  const Pipeline* pipeline_ = nullptr;
};

// ---- strided copies: Transpose, Slice, Expand -------------------------------------------------------

struct StridedPush {
  uint32_t n, rank;
  int32_t base;
  uint32_t dims[6];
  int32_t strides[6];
};

// y (dims `dims`, contiguous) from x read at `base` + index . `strides`, in elements of `words`
// 32-bit words each (an int64 element is a last dim of 2 words).
void record_strided(Recorder& rec, const ir::Node& node, const Pipeline& p, std::vector<int64_t> dims,
                    std::vector<int64_t> strides, int64_t base, const Range& x, const Range& y, int64_t words = 1) {
  if (words > 1) {
    for (int64_t& st : strides) st *= words;
    dims.push_back(words);
    strides.push_back(1);
    base *= words;
  }
  const int64_t n = product(dims, 0, dims.size());
  if (n == 0) return;
  collapse_dims(dims, {&strides});
  if (dims.size() > 6)
    throw UnsupportedError(node.describe() + ": " + std::to_string(dims.size()) + " dims that do not merge; the Vulkan kernel takes 6");
  check_u32(node, n, "the output");
  StridedPush push{};
  push.n = static_cast<uint32_t>(n);
  push.rank = static_cast<uint32_t>(dims.size());
  push.base = static_cast<int32_t>(base);
  for (size_t d = 0; d < dims.size(); ++d) {
    push.dims[d] = static_cast<uint32_t>(dims[d]);
    push.strides[d] = static_cast<int32_t>(strides[d]);
  }
  dispatch_1d(rec, p, {x, y}, &push, sizeof push, n);
}

const Pipeline& strided_pipeline(Gpu& gpu, ir::DType data) {
  return gpu.pipeline("strided_copy", 2, sizeof(StridedPush), {kLocal}, word_type(data));
}

class TransposeKernel final : public GpuKernel {
 public:
  explicit TransposeKernel(const KernelInit& init) : node_(init.node), data_(init.input_dtype(0)), perm_(init.node.attr_ints("perm")) {}
  void prepare(Gpu& gpu) override { pipeline_ = &strided_pipeline(gpu, data_); }
  // A strided input (another Transpose, a Gather of one index, folded) composes with the
  // permutation: one copy where the graph has several.
  bool reads_strided(size_t i, const std::vector<GpuTensor>& in) const override { return i == 0 && in[0].scale == 1.0f; }

  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    const size_t rank = in[0].dims.size();
    std::vector<int64_t> perm = perm_;
    if (perm.empty())
      for (size_t d = rank; d-- > 0;) perm.push_back(static_cast<int64_t>(d));
    const std::vector<int64_t> xs = in[0].strides.empty() ? strides_of(in[0].dims) : in[0].strides;
    std::vector<int64_t> strides(rank);
    for (size_t d = 0; d < rank; ++d) strides[d] = xs[static_cast<size_t>(perm[d])];
    record_strided(rec, node_, *pipeline_, out[0].dims, strides, 0, in[0].range, out[0].range, words_of(data_));
  }

 private:
  const ir::Node& node_;
  ir::DType data_;  // float32 or int32
  std::vector<int64_t> perm_;
  const Pipeline* pipeline_ = nullptr;
};

}  // namespace

ConstantSlice::ConstantSlice(const KernelInit& init) {
  if (init.node.attr("starts") != nullptr) {
    starts = init.node.attr_ints("starts");
    axes = init.node.attr_ints("axes");
  } else {
    starts = int_values(*init.constant(1));
    if (const ir::Tensor* a = init.constant(3)) axes = int_values(*a);
    if (const ir::Tensor* s = init.constant(4)) steps = int_values(*s);
  }
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
}

void ConstantSlice::view(const ir::Node& node, const std::vector<int64_t>& dims, int64_t& base,
                         std::vector<int64_t>& strides) const {
  strides = strides_of(dims);
  base = 0;
  for (size_t i = 0; i < starts.size(); ++i) {
    const auto a = static_cast<size_t>(normalize_axis(node, axes[i], dims.size()));
    const int64_t len = dims[a];
    // ONNX's clamp: [0, len] going forward, [0, len - 1] going backward.
    int64_t s = starts[i] < 0 ? starts[i] + len : starts[i];
    s = steps[i] > 0 ? std::clamp<int64_t>(s, 0, len) : std::clamp<int64_t>(s, 0, len - 1);
    base += s * strides[a];
    strides[a] *= steps[i];
  }
}

namespace {

// Slice with constant starts, ends, axes and steps (inputs from opset 10, attributes before).
class SliceKernel final : public GpuKernel {
 public:
  explicit SliceKernel(const KernelInit& init) : node_(init.node), data_(init.input_dtype(0)), slice_(init) {}
  void prepare(Gpu& gpu) override { pipeline_ = &strided_pipeline(gpu, data_); }
  bool reads_on_device(size_t i) const override { return i == 0; }

  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    int64_t base = 0;
    std::vector<int64_t> strides;
    slice_.view(node_, in[0].dims, base, strides);
    check_u32(node_, in[0].numel(), "the input");
    record_strided(rec, node_, *pipeline_, out[0].dims, strides, base, in[0].range, out[0].range, words_of(data_));
  }

 private:
  const ir::Node& node_;
  ir::DType data_;  // float32 or int32
  ConstantSlice slice_;
  const Pipeline* pipeline_ = nullptr;
};

std::string slice_check(const KernelInit& init) {
  if (std::string why = word_data(init); !why.empty()) return why;
  if (init.node.attr("starts") != nullptr) return "";
  for (size_t i = 1; i < init.node.inputs().size(); ++i)
    if (init.node.input(i) != nullptr && init.constant(i) == nullptr)
      return "its input " + std::to_string(i) + " is computed at run time; the Vulkan kernel takes constant bounds";
  if (init.constant(1) == nullptr) return "its starts are missing";
  return "";
}

class ExpandKernel final : public GpuKernel {
 public:
  explicit ExpandKernel(const KernelInit& init) : node_(init.node), data_(init.input_dtype(0)) {}
  void prepare(Gpu& gpu) override { pipeline_ = &strided_pipeline(gpu, data_); }
  bool reads_on_device(size_t i) const override { return i == 0; }

  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    record_strided(rec, node_, *pipeline_, out[0].dims, broadcast_strides(in[0].dims, out[0].dims), 0, in[0].range,
                   out[0].range, words_of(data_));
  }

 private:
  const ir::Node& node_;
  ir::DType data_;  // float32 or int32
  const Pipeline* pipeline_ = nullptr;
};

// ---- Gather ---------------------------------------------------------------------------------------

struct GatherPush {
  uint32_t n, count, inner, axis_len;
};

class GatherKernel final : public GpuKernel {
 public:
  explicit GatherKernel(const KernelInit& init)
      : node_(init.node),
        data_(init.input_dtype(0)),
        axis_(init.node.attr_int("axis", 0)),
        indices_(int_values(*init.constant(1))),
        index_rank_(init.constant(1)->dims().size()) {}

  void prepare(Gpu& gpu) override {
    std::vector<std::byte> bytes(indices_.size() * sizeof(int32_t));
    for (size_t k = 0; k < indices_.size(); ++k) {
      const auto v = static_cast<int32_t>(indices_[k]);
      std::memcpy(bytes.data() + k * sizeof v, &v, sizeof v);
    }
    weight_ = gpu.add_weight(std::move(bytes));
    pipeline_ = &gpu.pipeline("gather", 3, sizeof(GatherPush), {kLocal}, word_type(data_));
    if (indices_.size() == 1) strided_ = &strided_pipeline(gpu, data_);
  }
  bool reads_on_device(size_t i) const override { return i == 0; }
  // One index of a strided input (a folded Transpose: the heads of a packed q/k/v projection)
  // is a strided copy from the index's slab.
  bool reads_strided(size_t i, const std::vector<GpuTensor>& in) const override {
    return i == 0 && indices_.size() == 1 && in[0].scale == 1.0f;
  }

  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    const std::vector<int64_t>& xd = in[0].dims;
    const auto a = static_cast<size_t>(normalize_axis(node_, axis_, xd.size()));
    const int64_t len = xd[a];
    // Checked here, once per plan, as the CPU kernel checks every run.
    for (int64_t v : indices_)
      if (v < -len || v >= len)
        throw ArgumentError(node_.describe() + ": index " + std::to_string(v) + " is out of range for axis " +
                            std::to_string(a) + " of size " + std::to_string(len));
    check_u32(node_, in[0].numel(), "the input");
    check_u32(node_, out[0].numel(), "the output");
    if (!in[0].strides.empty()) {
      const std::vector<int64_t>& xs = in[0].strides;
      std::vector<int64_t> strides(xs.begin(), xs.begin() + static_cast<std::ptrdiff_t>(a));
      strides.insert(strides.end(), index_rank_, 0);
      strides.insert(strides.end(), xs.begin() + static_cast<std::ptrdiff_t>(a) + 1, xs.end());
      const int64_t at = indices_[0] < 0 ? indices_[0] + len : indices_[0];
      if (at * xs[a] > INT32_MAX)
        throw UnsupportedError(node_.describe() + ": a strided input whose slab starts past 2^31 elements");
      record_strided(rec, node_, *strided_, out[0].dims, strides, at * xs[a], in[0].range, out[0].range, words_of(data_));
      return;
    }
    const int64_t words = words_of(data_);
    check_u32(node_, out[0].numel() * words, "the output's words");
    GatherPush p{static_cast<uint32_t>(out[0].numel() * words), static_cast<uint32_t>(indices_.size()),
                 static_cast<uint32_t>(product(xd, a + 1, xd.size()) * words), static_cast<uint32_t>(len)};
    dispatch_1d(rec, *pipeline_, {in[0].range, rec.weight(weight_), out[0].range}, &p, sizeof p, p.n);
  }

 private:
  const ir::Node& node_;
  ir::DType data_;  // float32 or int32
  int64_t axis_;
  std::vector<int64_t> indices_;
  size_t index_rank_;
  int weight_ = -1;
  const Pipeline* pipeline_ = nullptr;
  const Pipeline* strided_ = nullptr;  // for one index of a strided input
};

std::string gather_check(const KernelInit& init) {
  if (std::string why = word_data(init); !why.empty()) return why;
  const ir::Tensor* idx = init.constant(1);
  if (idx == nullptr) return "its indices are computed at run time; the Vulkan kernel takes constant indices";
  if (idx->dtype() != ir::DType::kInt64 && idx->dtype() != ir::DType::kInt32) return "its indices are not int32 or int64";
  if (idx->num_elements() == 0) return "its indices are empty";
  for (int64_t v : int_values(*idx))
    if (v < INT32_MIN || v > INT32_MAX) return "an index does not fit 32 bits";
  return "";
}

}  // namespace

void register_shape(KernelRegistry& r) {
  auto view = [](const KernelInit&) -> std::unique_ptr<Kernel> { return std::make_unique<ViewKernel>(); };
  // A view moves no data: any element type.
  for (const char* op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})
    r.add(op, view, [](const KernelInit& init) { return any_element(init, 0); });
  r.add("Concat", [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<ConcatKernel>(i); },
        [](const KernelInit& init) -> std::string {
          for (size_t i = 0; i < init.node.inputs().size(); ++i)
            if (std::string why = require_dtype(init, i, {ir::DType::kFloat32, ir::DType::kInt32, ir::DType::kInt64}); !why.empty())
              return why;
          return "";
        });
  r.add("Split", [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<SplitKernel>(i); }, word_data);
  r.add("Transpose", [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<TransposeKernel>(i); },
        word_data);
  // Bounds computed at run time (from shapes, mostly): shape_computed.cc's kernel.
  r.add("Slice",
        [](const KernelInit& i) -> std::unique_ptr<Kernel> {
          if (slice_check(i).empty()) return std::make_unique<SliceKernel>(i);
          return computed_slice_kernel(i);
        },
        [](const KernelInit& init) { return slice_check(init).empty() ? "" : computed_slice_check(init); });
  r.add("Expand", [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<ExpandKernel>(i); }, word_data);
  // Indices computed at run time (embeddings): shape_computed.cc's kernel.
  r.add("Gather",
        [](const KernelInit& i) -> std::unique_ptr<Kernel> {
          if (gather_check(i).empty()) return std::make_unique<GatherKernel>(i);
          return computed_gather_kernel(i);
        },
        [](const KernelInit& init) { return gather_check(init).empty() ? "" : computed_gather_check(init); });
}

}  // namespace tether::engine::vulkan
