// Element-wise ops: unary functions and activations (shaders/unary.comp, the function chosen
// by specialisation), and binary ops with numpy broadcasting (shaders/binary.comp).
#include <cfloat>
#include <cmath>
#include <cstring>

#include "engine/vulkan/ops.h"

namespace tether::engine::vulkan {

namespace {

// ---- unary ----------------------------------------------------------------------------------------

class UnaryKernel final : public GpuKernel {
 public:
  explicit UnaryKernel(Activation f) : f_(f) {}

  void prepare(Gpu& gpu) override {
    std::vector<uint32_t> spec = f_.spec();
    spec.insert(spec.begin(), kLocal);
    pipeline_ = &gpu.pipeline("unary", 2, sizeof(uint32_t), spec);
  }
  bool reads_on_device(size_t i) const override { return i == 0; }

  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    const uint32_t n = static_cast<uint32_t>(out[0].numel());
    dispatch_1d(rec, *pipeline_, {in[0].range, out[0].range}, &n, sizeof n, n);
  }

 private:
  Activation f_;
  const Pipeline* pipeline_ = nullptr;
};

// Clip's bounds: attributes before opset 11, optional constant inputs after.
std::string clip_check(const KernelInit& init) {
  if (std::string why = require_dtype(init, 0, {ir::DType::kFloat32}); !why.empty()) return why;
  for (size_t i = 1; i < init.node.inputs().size(); ++i)
    if (init.node.input(i) != nullptr && init.constant(i) == nullptr)
      return "its bound (input " + std::to_string(i) + ") is computed at run time; the Vulkan kernel takes constant bounds";
  return "";
}

std::unique_ptr<Kernel> clip_kernel(const KernelInit& init) {
  Activation f{kClip, -INFINITY, INFINITY};
  if (init.opset < 11) {
    f.a = init.node.attr_float("min", -FLT_MAX);
    f.b = init.node.attr_float("max", FLT_MAX);
  } else {
    if (const ir::Tensor* lo = init.constant(1); lo != nullptr && lo->num_elements() > 0) f.a = lo->data<float>()[0];
    if (const ir::Tensor* hi = init.constant(2); hi != nullptr && hi->num_elements() > 0) f.b = hi->data<float>()[0];
  }
  return std::make_unique<UnaryKernel>(f);
}

std::string float_input(const KernelInit& init) { return require_dtype(init, 0, {ir::DType::kFloat32}); }

// ---- binary ---------------------------------------------------------------------------------------

enum BinaryOp : uint32_t { kAdd = 0, kSub, kMul, kDiv, kPow, kMax, kMin, kPRelu };

class BinaryKernel final : public GpuKernel {
 public:
  BinaryKernel(const ir::Node& node, BinaryOp op) : node_(node), op_(op) {}

  void prepare(Gpu& gpu) override { pipeline_ = &gpu.pipeline("binary", 3, kTwoOperandPushBytes, {kLocal, op_}); }

  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    const BroadcastPush p = broadcast_push(node_, {in[0].dims, in[1].dims}, out[0]);
    dispatch_1d(rec, *pipeline_, {in[0].range, in[1].range, out[0].range}, &p, kTwoOperandPushBytes, p.n);
  }

 private:
  const ir::Node& node_;
  BinaryOp op_;
  const Pipeline* pipeline_ = nullptr;
};

std::string binary_check(const KernelInit& init) {
  if (init.node.inputs().size() != 2) return "it has " + std::to_string(init.node.inputs().size()) + " inputs; the Vulkan kernel takes 2";
  if (init.node.input(0) == nullptr || init.node.input(1) == nullptr) return "an input is omitted";
  return float32_only(init);
}

template <BinaryOp kOp>
std::unique_ptr<Kernel> binary(const KernelInit& init) {
  return std::make_unique<BinaryKernel>(init.node, kOp);
}

template <UnaryOp kOp>
std::unique_ptr<Kernel> unary(const KernelInit&) {
  return std::make_unique<UnaryKernel>(Activation{kOp, 0, 0});
}

}  // namespace

void register_elementwise(KernelRegistry& r) {
  r.add("Relu", unary<kRelu>, float_input);
  r.add("Sigmoid", unary<kSigmoid>, float_input);
  r.add("Tanh", unary<kTanh>, float_input);
  r.add("Erf", unary<kErf>, float_input);
  r.add("Exp", unary<kExp>, float_input);
  r.add("Log", unary<kLog>, float_input);
  r.add("Sqrt", unary<kSqrt>, float_input);
  r.add("Neg", unary<kNeg>, float_input);
  r.add("Abs", unary<kAbs>, float_input);
  r.add("Reciprocal", unary<kReciprocal>, float_input);
  r.add("Floor", unary<kFloor>, float_input);
  r.add("Ceil", unary<kCeil>, float_input);
  r.add("Softplus", unary<kSoftplus>, float_input);
  r.add("Sin", unary<kSin>, float_input);
  r.add("Cos", unary<kCos>, float_input);
  r.add("Sign", unary<kSign>, float_input);
  r.add("Round", unary<kRound>, float_input);
  r.add("Softsign", unary<kSoftsign>, float_input);
  r.add("Mish", unary<kMish>, float_input);
  r.add("HardSwish", unary<kHardSwish>, float_input);
  r.add("LeakyRelu", [](const KernelInit& i) -> std::unique_ptr<Kernel> {
    return std::make_unique<UnaryKernel>(Activation{kLeakyRelu, i.node.attr_float("alpha", 0.01f), 0});
  }, float_input);
  r.add("Elu", [](const KernelInit& i) -> std::unique_ptr<Kernel> {
    return std::make_unique<UnaryKernel>(Activation{kElu, i.node.attr_float("alpha", 1.0f), 0});
  }, float_input);
  r.add("Celu", [](const KernelInit& i) -> std::unique_ptr<Kernel> {
    return std::make_unique<UnaryKernel>(Activation{kCelu, i.node.attr_float("alpha", 1.0f), 0});
  }, float_input);
  r.add("ThresholdedRelu", [](const KernelInit& i) -> std::unique_ptr<Kernel> {
    return std::make_unique<UnaryKernel>(Activation{kThresholdedRelu, i.node.attr_float("alpha", 1.0f), 0});
  }, float_input);
  r.add("Selu", [](const KernelInit& i) -> std::unique_ptr<Kernel> {
    return std::make_unique<UnaryKernel>(Activation{kSelu, i.node.attr_float("alpha", 1.67326319217681884765625f),
                                                    i.node.attr_float("gamma", 1.05070102214813232421875f)});
  }, float_input);
  r.add("HardSigmoid", [](const KernelInit& i) -> std::unique_ptr<Kernel> {
    return std::make_unique<UnaryKernel>(Activation{kHardSigmoid, i.node.attr_float("alpha", 0.2f), i.node.attr_float("beta", 0.5f)});
  }, float_input);
  auto gelu = [](const KernelInit& i) -> std::unique_ptr<Kernel> {
    return std::make_unique<UnaryKernel>(Activation{i.node.attr_string("approximate", "none") == "tanh" ? kGeluTanh : kGelu, 0, 0});
  };
  r.add("Gelu", gelu, float_input);
  r.add("Gelu", gelu, float_input, "ai.tether");  // passes::fuse_gelu's, before opset 20
  r.add("Clip", clip_kernel, clip_check);

  r.add("Add", binary<kAdd>, binary_check);
  r.add("Sub", binary<kSub>, binary_check);
  r.add("Mul", binary<kMul>, binary_check);
  r.add("Div", binary<kDiv>, binary_check);
  r.add("Pow", binary<kPow>, binary_check);
  r.add("Max", binary<kMax>, binary_check);
  r.add("Min", binary<kMin>, binary_check);
  r.add("PRelu", binary<kPRelu>, [](const KernelInit& init) -> std::string {
    if (init.opset < 7) return "PRelu before opset 7 broadcasts differently";
    return binary_check(init);
  });
}

BroadcastPush broadcast_push(const ir::Node& node, const std::vector<std::vector<int64_t>>& operands, const GpuTensor& out) {
  std::vector<int64_t> dims = out.dims;
  std::vector<std::vector<int64_t>> s;
  for (const std::vector<int64_t>& d : operands) s.push_back(broadcast_strides(d, dims));
  std::vector<std::vector<int64_t>*> ptrs;
  for (auto& v : s) ptrs.push_back(&v);
  collapse_dims(dims, ptrs);
  if (dims.size() > 6)
    throw UnsupportedError(node.describe() + ": broadcasting over " + std::to_string(dims.size()) +
                           " dims that do not merge; the Vulkan kernel takes 6");
  check_u32(node, out.numel(), "the output");
  BroadcastPush p{};
  p.n = static_cast<uint32_t>(out.numel());
  p.rank = static_cast<uint32_t>(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    p.dims[d] = static_cast<uint32_t>(dims[d]);
    for (size_t k = 0; k < s.size(); ++k) p.strides[k][d] = static_cast<uint32_t>(s[k][d]);
  }
  return p;
}

}  // namespace tether::engine::vulkan
