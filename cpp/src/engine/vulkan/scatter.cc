// Indexed reads: GatherND (shaders/scatter_gather_nd.comp), with batch_dims, indices computed
// at run time or constant, elements of any kind of shaders/elements.glsl. The family is the CPU
// engine's cpu/scatter.cc (GatherND beside ScatterND and ScatterElements).
#include "engine/vulkan/ops.h"

namespace tether::engine::vulkan {

namespace {

struct GatherNdPush {
  uint32_t n, slice, q, per_batch, batch_stride;
  int32_t dims[6];
  uint32_t strides[6];
};

class GatherNdKernel final : public GpuKernel {
 public:
  explicit GatherNdKernel(const KernelInit& init)
      : node_(init.node),
        kind_(static_cast<uint32_t>(element_kind(init.input_dtype(0)))),
        index64_(init.input_dtype(1) == ir::DType::kInt64),
        batch_dims_(init.node.attr_int("batch_dims", 0)) {}
  void prepare(Gpu& gpu) override {
    pipeline_ = element_pipeline(gpu, "scatter_gather_nd", 4, sizeof(GatherNdPush), {kLocal, kind_, index64_ ? 1u : 0u},
                                 kind_ == kFloatElement);
  }
  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    require_byte_storage(rec, node_);
    const std::vector<int64_t>& xd = in[0].dims;
    const std::vector<int64_t>& id = in[1].dims;
    if (id.empty()) throw ArgumentError(node_.describe() + ": indices of rank 0");
    const int64_t q = id.back();
    const auto b = static_cast<size_t>(batch_dims_);
    if (q > 6) throw UnsupportedError(node_.describe() + ": index tuples of " + std::to_string(q) + "; the Vulkan kernel takes 6");
    if (b + static_cast<size_t>(q) > xd.size())
      throw ArgumentError(node_.describe() + ": index tuples of " + std::to_string(q) + " after " + std::to_string(b) +
                          " batch dims address more dims than data's " + std::to_string(xd.size()));
    check_u32(node_, in[0].numel(), "the data");
    check_u32(node_, out[0].numel(), "the output");
    const std::vector<int64_t> st = strides_of(xd);
    GatherNdPush p{};
    p.n = static_cast<uint32_t>(out[0].numel());
    p.q = static_cast<uint32_t>(q);
    p.slice = static_cast<uint32_t>(product(xd, b + static_cast<size_t>(q), xd.size()));
    p.per_batch = static_cast<uint32_t>(product(id, b, id.size() - 1));
    p.batch_stride = static_cast<uint32_t>(b == 0 ? in[0].numel() : st[b - 1]);
    for (size_t j = 0; j < static_cast<size_t>(q); ++j) {
      p.dims[j] = static_cast<int32_t>(xd[b + j]);
      p.strides[j] = static_cast<uint32_t>(st[b + j]);
    }
    if (p.slice == 0 || p.per_batch == 0) return;
    const Range fault = rec.fault(node_.describe() + ": an index is out of range for the data's dims; the index");
    dispatch_1d(rec, *pipeline_, {in[0].range, in[1].range, out[0].range, fault}, &p, sizeof p, p.n);
  }

 private:
  const ir::Node& node_;
  uint32_t kind_;
  bool index64_;
  int64_t batch_dims_;
  const Pipeline* pipeline_ = nullptr;
};

std::string gather_nd_check(const KernelInit& init) {
  if (std::string why = any_element(init, 0); !why.empty()) return why;
  return require_dtype(init, 1, {ir::DType::kInt32, ir::DType::kInt64});
}

}  // namespace

void register_scatter(KernelRegistry& r) {
  r.add("GatherND", [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<GatherNdKernel>(i); },
        gather_nd_check);
}

}  // namespace tether::engine::vulkan
