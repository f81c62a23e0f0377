// Element-wise ops on more than float32: Where (shaders/elementwise_where.comp), comparisons
// and boolean logic (elementwise_compare.comp) and Cast (elementwise_cast.comp), on the element
// kinds of shaders/elements.glsl: float32, int32, int64, bool and uint8. Bools are bytes in
// device memory, so these kernels need 8-bit storage buffers; a device without them runs the
// nodes on the CPU, saying why.
#include "engine/vulkan/ops.h"

namespace tether::engine::vulkan {

namespace {

// The codes of elementwise_compare.comp.
enum CompareOp : uint32_t { kEqual = 0, kLess, kGreater, kLessOrEqual, kGreaterOrEqual, kAnd, kOr, kXor, kNot };

// ---- Where --------------------------------------------------------------------------------------

class WhereKernel final : public GpuKernel {
 public:
  explicit WhereKernel(const KernelInit& init)
      : node_(init.node), kind_(static_cast<uint32_t>(element_kind(init.input_dtype(1)))) {}
  void prepare(Gpu& gpu) override {
    pipeline_ = element_pipeline(gpu, "elementwise_where", 4, sizeof(BroadcastPush), {kLocal, kind_}, kind_ == kFloatElement);
  }
  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    require_byte_storage(rec, node_);
    const BroadcastPush p = broadcast_push(node_, {in[0].dims, in[1].dims, in[2].dims}, out[0]);
    dispatch_1d(rec, *pipeline_, {in[0].range, in[1].range, in[2].range, out[0].range}, &p, sizeof p, p.n);
  }

 private:
  const ir::Node& node_;
  uint32_t kind_;
  const Pipeline* pipeline_ = nullptr;
};

std::string where_check(const KernelInit& init) {
  if (std::string why = require_dtype(init, 0, {ir::DType::kBool}); !why.empty()) return why;
  return any_element(init, 1);
}

// ---- comparisons and logic ----------------------------------------------------------------------

class CompareKernel final : public GpuKernel {
 public:
  CompareKernel(const KernelInit& init, CompareOp op)
      : node_(init.node), op_(op), kind_(static_cast<uint32_t>(element_kind(init.input_dtype(0)))) {}
  void prepare(Gpu& gpu) override {
    pipeline_ = element_pipeline(gpu, "elementwise_compare", 3, kTwoOperandPushBytes, {kLocal, kind_, op_},
                                 kind_ == kFloatElement);
  }
  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    require_byte_storage(rec, node_);
    const GpuTensor& b = op_ == kNot ? in[0] : in[1];  // Not's b unread: a's strides stand in
    const BroadcastPush p = broadcast_push(node_, {in[0].dims, b.dims}, out[0]);
    dispatch_1d(rec, *pipeline_, {in[0].range, b.range, out[0].range}, &p, kTwoOperandPushBytes, p.n);
  }

 private:
  const ir::Node& node_;
  CompareOp op_;
  uint32_t kind_;
  const Pipeline* pipeline_ = nullptr;
};

std::string compare_check(const KernelInit& init) {
  if (std::string why = any_element(init, 0); !why.empty()) return why;
  if (init.input_dtype(0) == ir::DType::kBool) return "its operands are bool; the Vulkan kernel compares numbers";
  return "";
}

std::string logic_check(const KernelInit& init) {
  for (size_t i = 0; i < init.node.inputs().size(); ++i)
    if (std::string why = require_dtype(init, i, {ir::DType::kBool}); !why.empty()) return why;
  return "";
}

template <CompareOp kOp>
std::unique_ptr<Kernel> compare(const KernelInit& init) {
  return std::make_unique<CompareKernel>(init, kOp);
}

// ---- Cast ---------------------------------------------------------------------------------------

class CastKernel final : public GpuKernel {
 public:
  explicit CastKernel(const KernelInit& init)
      : from_(static_cast<uint32_t>(element_kind(init.input_dtype(0)))),
        to_(static_cast<uint32_t>(element_kind(init.output_dtype(0)))),
        node_(init.node) {}
  void prepare(Gpu& gpu) override {
    pipeline_ = element_pipeline(gpu, "elementwise_cast", 2, sizeof(uint32_t), {kLocal, from_, to_},
                                 from_ == kFloatElement || to_ == kFloatElement);
  }
  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    require_byte_storage(rec, node_);
    check_u32(node_, out[0].numel(), "the output");
    const auto n = static_cast<uint32_t>(out[0].numel());
    dispatch_1d(rec, *pipeline_, {in[0].range, out[0].range}, &n, sizeof n, n);
  }

 private:
  uint32_t from_, to_;
  const ir::Node& node_;
  const Pipeline* pipeline_ = nullptr;
};

std::string cast_check(const KernelInit& init) {
  if (std::string why = any_element(init, 0); !why.empty()) return why;
  if (element_kind(init.output_dtype(0)) < 0)
    return "it casts to " + std::string(ir::dtype_name(init.output_dtype(0))) +
           "; the Vulkan kernel casts to float32, int32, int64, bool and uint8";
  return "";
}

}  // namespace

void register_elementwise_logic(KernelRegistry& r) {
  r.add("Where", [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<WhereKernel>(i); }, where_check);
  r.add("Equal", compare<kEqual>, compare_check);
  r.add("Less", compare<kLess>, compare_check);
  r.add("Greater", compare<kGreater>, compare_check);
  r.add("LessOrEqual", compare<kLessOrEqual>, compare_check);
  r.add("GreaterOrEqual", compare<kGreaterOrEqual>, compare_check);
  r.add("And", compare<kAnd>, logic_check);
  r.add("Or", compare<kOr>, logic_check);
  r.add("Xor", compare<kXor>, logic_check);
  r.add("Not", compare<kNot>, logic_check);
  r.add("Cast", [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<CastKernel>(i); }, cast_check);
}

}  // namespace tether::engine::vulkan
