// Selection and scans: CumSum (shaders/misc_cumsum.comp) and TopK (misc_topk.comp), one
// invocation per lane along the axis. TopK's k, a value that only sizes the output, comes
// from the plan's dims; CumSum's axis must be a constant.
#include "engine/vulkan/ops.h"

namespace tether::engine::vulkan {

namespace {

std::string numbers(const KernelInit& init) {
  return require_dtype(init, 0, {ir::DType::kFloat32, ir::DType::kInt32, ir::DType::kInt64});
}

// ---- CumSum -------------------------------------------------------------------------------------

struct CumSumPush {
  uint32_t lanes, len, inner;
};

class CumSumKernel final : public GpuKernel {
 public:
  explicit CumSumKernel(const KernelInit& init)
      : node_(init.node),
        kind_(static_cast<uint32_t>(element_kind(init.input_dtype(0)))),
        axis_(int_values(*init.constant(1)).at(0)),
        exclusive_(init.node.attr_int("exclusive", 0) != 0),
        reverse_(init.node.attr_int("reverse", 0) != 0) {}
  void prepare(Gpu& gpu) override {
    pipeline_ = element_pipeline(gpu, "misc_cumsum", 2, sizeof(CumSumPush),
                              {kLocal, kind_, exclusive_ ? 1u : 0u, reverse_ ? 1u : 0u}, kind_ == kFloatElement);
  }
  bool reads_on_device(size_t i) const override { return i == 0; }
  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    require_byte_storage(rec, node_);
    const std::vector<int64_t>& xd = in[0].dims;
    const auto a = static_cast<size_t>(normalize_axis(node_, axis_, xd.size()));
    check_u32(node_, in[0].numel(), "the input");
    const int64_t inner = product(xd, a + 1, xd.size());
    const CumSumPush p{static_cast<uint32_t>(product(xd, 0, a) * inner), static_cast<uint32_t>(xd[a]),
                       static_cast<uint32_t>(inner)};
    dispatch_1d(rec, *pipeline_, {in[0].range, out[0].range}, &p, sizeof p, p.lanes);
  }

 private:
  const ir::Node& node_;
  uint32_t kind_;
  int64_t axis_;
  bool exclusive_, reverse_;
  const Pipeline* pipeline_ = nullptr;
};

std::string cumsum_check(const KernelInit& init) {
  if (std::string why = numbers(init); !why.empty()) return why;
  const ir::Tensor* axis = init.constant(1);
  if (axis == nullptr) return "its axis is computed at run time; the Vulkan kernel takes a constant axis";
  if (axis->num_elements() != 1) return "its axis has " + std::to_string(axis->num_elements()) + " elements, not 1";
  return require_dtype(init, 1, {ir::DType::kInt32, ir::DType::kInt64});
}

// ---- TopK ---------------------------------------------------------------------------------------

struct TopKPush {
  uint32_t lanes, len, inner, k, write_values, write_indices;
};

class TopKKernel final : public GpuKernel {
 public:
  explicit TopKKernel(const KernelInit& init)
      : node_(init.node),
        kind_(static_cast<uint32_t>(element_kind(init.input_dtype(0)))),
        axis_(init.node.attr_int("axis", -1)),
        largest_(init.node.attr_int("largest", 1) != 0) {}
  void prepare(Gpu& gpu) override {
    pipeline_ = element_pipeline(gpu, "misc_topk", 3, sizeof(TopKPush),
                              {kLocal, kind_, largest_ ? 1u : 0u}, kind_ == kFloatElement);
  }
  bool reads_on_device(size_t i) const override { return i == 0; }  // k sizes the outputs
  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    require_byte_storage(rec, node_);
    const std::vector<int64_t>& xd = in[0].dims;
    const auto a = static_cast<size_t>(normalize_axis(node_, axis_, xd.size()));
    check_u32(node_, in[0].numel(), "the input");
    const GpuTensor& shaped = out[0].dims.empty() ? out[1] : out[0];
    const int64_t inner = product(xd, a + 1, xd.size());
    TopKPush p{static_cast<uint32_t>(product(xd, 0, a) * inner), static_cast<uint32_t>(xd[a]), static_cast<uint32_t>(inner),
               static_cast<uint32_t>(shaped.dims[a]), !out[0].dims.empty(), out.size() > 1 && !out[1].dims.empty()};
    if (p.k == 0) return;
    const Range values = p.write_values ? out[0].range : rec.unused();
    const Range indices = p.write_indices ? out[1].range : rec.unused();
    dispatch_1d(rec, *pipeline_, {in[0].range, values, indices}, &p, sizeof p, p.lanes);
  }

 private:
  const ir::Node& node_;
  uint32_t kind_;
  int64_t axis_;
  bool largest_;
  const Pipeline* pipeline_ = nullptr;
};

std::string topk_check(const KernelInit& init) {
  if (std::string why = numbers(init); !why.empty()) return why;
  if (init.node.inputs().size() > 1 && init.node.input(1) != nullptr)
    return require_dtype(init, 1, {ir::DType::kInt32, ir::DType::kInt64});
  return "";
}

}  // namespace

void register_misc(KernelRegistry& r) {
  r.add("CumSum", [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<CumSumKernel>(i); }, cumsum_check);
  r.add("TopK", [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<TopKKernel>(i); }, topk_check);
}

}  // namespace tether::engine::vulkan
