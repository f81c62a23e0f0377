// Softmax and LogSoftmax (shaders/softmax.comp), LayerNormalization (shaders/layernorm.comp):
// one invocation per row on CPU-lane devices; on GPUs (gpu_kernels) a workgroup per row
// (softmax_rows.comp, layernorm_rows.comp; their _subgroup forms where the device reduces by
// subgroups), so that a few long rows still spread over the device.
#include "engine/vulkan/ops.h"

namespace tether::engine::vulkan {

namespace {

// Invocations per row of the workgroup-per-row forms (a power of two): a row of BERT-base's
// LayerNorm (768) takes 6 elements per invocation, an attention row (128) one.
constexpr uint32_t kRowGroup = 128;

// The row form's pipeline on GPUs (reducing by subgroups where it may: row_shader), else the
// one-invocation-per-row form's; `rows` says which.
const Pipeline& row_pipeline(Gpu& gpu, const std::string& shader, uint32_t bindings, uint32_t push_bytes, uint32_t flag,
                             bool& rows) {
  rows = gpu_kernels(gpu.device);
  const std::string name = rows ? row_shader(gpu.device, shader + "_rows") : shader;
  return gpu.pipeline(name, bindings, push_bytes, {rows ? kRowGroup : kLocal, flag});
}

void dispatch(Recorder& rec, bool rows, const Pipeline& p, const std::vector<Range>& bindings, const void* push,
              size_t push_bytes, uint32_t n) {
  if (rows)
    dispatch_rows(rec, p, bindings, push, push_bytes, n);
  else
    dispatch_1d(rec, p, bindings, push, push_bytes, n);
}

struct SoftmaxPush {
  uint32_t rows, len, inner;
};

class SoftmaxKernel final : public GpuKernel {
 public:
  SoftmaxKernel(const KernelInit& init, bool log)
      : node_(init.node), log_(log), coerce_(init.opset < 13), axis_(init.node.attr_int("axis", init.opset < 13 ? 1 : -1)) {}

  void prepare(Gpu& gpu) override { pipeline_ = &row_pipeline(gpu, "softmax", 2, sizeof(SoftmaxPush), log_ ? 1 : 0, rows_); }

  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    const std::vector<int64_t>& d = in[0].dims;
    const auto a = static_cast<size_t>(normalize_axis(node_, axis_, d.size()));
    check_u32(node_, in[0].numel(), "the input");
    // Before opset 13 the input is seen as 2-D, [dims before axis, dims from axis on].
    const int64_t len = coerce_ ? product(d, a, d.size()) : d[a];
    const int64_t inner = coerce_ ? 1 : product(d, a + 1, d.size());
    SoftmaxPush p{static_cast<uint32_t>(product(d, 0, a) * inner), static_cast<uint32_t>(len), static_cast<uint32_t>(inner)};
    if (len == 0) return;
    dispatch(rec, rows_, *pipeline_, {in[0].range, out[0].range}, &p, sizeof p, p.rows);
  }

 private:
  const ir::Node& node_;
  bool log_, coerce_, rows_ = false;
  int64_t axis_;
  const Pipeline* pipeline_ = nullptr;
};

struct LayerNormPush {
  uint32_t rows, len;
  float epsilon;
  uint32_t scale_step, bias_step;
};

class LayerNormKernel final : public GpuKernel {
 public:
  explicit LayerNormKernel(const KernelInit& init)
      : node_(init.node),
        axis_(init.node.attr_int("axis", -1)),
        epsilon_(init.node.attr_float("epsilon", 1e-5f)),
        has_bias_(init.node.inputs().size() > 2 && init.node.input(2) != nullptr) {}

  void prepare(Gpu& gpu) override {
    pipeline_ = &row_pipeline(gpu, "layernorm", 4, sizeof(LayerNormPush), has_bias_ ? 1 : 0, rows_);
  }

  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    const std::vector<int64_t>& d = in[0].dims;
    const auto a = static_cast<size_t>(normalize_axis(node_, axis_, d.size()));
    check_u32(node_, in[0].numel(), "the input");
    LayerNormPush p{static_cast<uint32_t>(product(d, 0, a)), static_cast<uint32_t>(product(d, a, d.size())), epsilon_, 1, 1};
    auto step = [&](const GpuTensor& t, const char* what) -> uint32_t {
      if (t.numel() == p.len) return 1;
      if (t.numel() == 1) return 0;
      throw UnsupportedError(node_.describe() + ": " + what + " has " + std::to_string(t.numel()) + " elements for rows of " +
                             std::to_string(p.len) + "; the Vulkan kernel takes one per element of a row, or one");
    };
    p.scale_step = step(in[1], "the scale");
    const Range bias = has_bias_ ? in[2].range : rec.unused();
    if (has_bias_) p.bias_step = step(in[2], "the bias");
    if (p.len == 0) return;
    dispatch(rec, rows_, *pipeline_, {in[0].range, in[1].range, bias, out[0].range}, &p, sizeof p, p.rows);
  }

 private:
  const ir::Node& node_;
  int64_t axis_;
  float epsilon_;
  bool has_bias_, rows_ = false;
  const Pipeline* pipeline_ = nullptr;
};

std::string layernorm_check(const KernelInit& init) {
  if (std::string why = float32_only(init); !why.empty()) return why;
  for (size_t k = 1; k < init.node.outputs().size(); ++k)
    if (init.node.output(k) != nullptr) return "its Mean and InvStdDev outputs are not computed on Vulkan";
  if (init.node.attr_int("stash_type", 1) != 1) return "stash_type other than float32";
  return "";
}

}  // namespace

void register_norm(KernelRegistry& r) {
  r.add("Softmax", [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<SoftmaxKernel>(i, false); },
        float32_only);
  r.add("LogSoftmax", [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<SoftmaxKernel>(i, true); },
        float32_only);
  r.add("LayerNormalization", [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<LayerNormKernel>(i); },
        layernorm_check);
}

}  // namespace tether::engine::vulkan
