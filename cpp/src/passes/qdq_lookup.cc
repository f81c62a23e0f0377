// DequantizeLinear -> a unary element-wise op -> QuantizeLinear, per tensor, becomes one
// ai.tether QLinearLookup(X, table): an 8-bit X has 256 values, so the chain is a function of
// X's byte, computed once here for all of them by the evaluator (the CPU engine's own kernels,
// the same that run the unfused nodes) and then read from the table: one pass over 8-bit memory
// instead of three over float32. Quantized Sigmoid, Tanh, LeakyRelu, HardSwish, ... as
// onnxruntime's QOperator format (QLinearSigmoid, written out by expand_qoperator_ops) and QDQ
// models put them.
#include <array>

#include "passes/passes.h"
#include "passes/rewrite.h"

namespace tether::passes {

namespace {

// Element-wise ops of one float input (Clip's bounds aside) that the table can stand for.
bool unary(const ir::Node& n) {
  static const char* const kOps[] = {"Sigmoid", "Tanh", "Relu", "LeakyRelu", "Elu", "Selu", "Celu", "HardSigmoid",
                                     "HardSwish", "Softplus", "Softsign", "Gelu", "Erf", "Exp", "Log", "Sqrt",
                                     "Reciprocal", "Neg", "Abs", "Floor", "Ceil", "Round", "Sin", "Cos", "Mish",
                                     "ThresholdedRelu", "Sign", "Clip"};
  for (const char* op : kOps)
    if (is_onnx(n, op)) return n.outputs().size() == 1;
  return false;
}

// Input `i` of `n` is absent or a constant of one element (a per-tensor scale or zero point).
bool per_tensor(const ir::Node& n, size_t i) {
  if (i >= n.inputs().size() || n.input(i) == nullptr) return true;
  const std::optional<ir::Tensor> t = constant_of(n.input(i));
  return t && t->num_elements() == 1;
}

// The inputs of `n` as the evaluator takes them: `first` for input 0, the constants for the
// others (absent ones nullptr). False when one is not a constant.
bool constant_inputs(const ir::Node& n, const ir::Tensor& first, std::vector<std::optional<ir::Tensor>>& held,
                     std::vector<const ir::Tensor*>& inputs) {
  held.assign(n.inputs().size(), std::nullopt);
  inputs.assign(n.inputs().size(), nullptr);
  inputs[0] = &first;
  for (size_t i = 1; i < n.inputs().size(); ++i) {
    if (n.input(i) == nullptr) continue;
    held[i] = constant_of(n.input(i));
    if (!held[i]) return false;
    inputs[i] = &*held[i];
  }
  return true;
}

// `n` computed on `x` (its other inputs constants), one output; nullopt when the evaluator
// does not compute it.
std::optional<ir::Tensor> evaluate(const ConstantEvaluator& ev, const ir::Node& n, const ir::Tensor& x, int64_t opset) {
  std::vector<std::optional<ir::Tensor>> held;
  std::vector<const ir::Tensor*> inputs;
  if (!constant_inputs(n, x, held, inputs)) return std::nullopt;
  std::optional<std::vector<ir::Tensor>> out = ev.evaluate(n, inputs, opset, int64_t{1} << 16);
  if (!out || out->empty() || (*out)[0].num_elements() != 256) return std::nullopt;
  return std::move((*out)[0]);
}

}  // namespace

int fuse_qdq_lookup(ir::Model& model, const ConstantEvaluator* evaluator) {
  if (evaluator == nullptr) return 0;
  ir::Graph& g = model.graph();
  const int64_t opset = model.opset("");
  int fused = 0;
  std::vector<ir::Node*> quantizers;
  for (ir::Node* n : g.topological_order())
    if (is_onnx(*n, "QuantizeLinear")) quantizers.push_back(n);
  for (ir::Node* q : quantizers) {
    if (q->inputs().size() < 2 || q->output(0) == nullptr || !is_8bit(q->output(0)->type().dtype())) continue;
    if (!per_tensor(*q, 1) || !per_tensor(*q, 2)) continue;
    ir::Node* op = q->input(0)->producer();
    if (op == nullptr || !unary(*op) || op->output(0) != q->input(0) || !only_reader(*q->input(0), *q)) continue;
    ir::Node* dq = op->input(0) != nullptr ? op->input(0)->producer() : nullptr;
    if (dq == nullptr || !is_onnx(*dq, "DequantizeLinear") || !only_reader(*op->input(0), *op)) continue;
    ir::Value* x = dq->input(0);
    if (!is_8bit(x->type().dtype()) || !per_tensor(*dq, 1) || !per_tensor(*dq, 2)) continue;
    // Every byte X can hold, in byte order: the table is indexed by the byte.
    std::array<uint8_t, 256> bytes{};
    for (size_t b = 0; b < bytes.size(); ++b) bytes[b] = static_cast<uint8_t>(b);
    const ir::Tensor all = ir::Tensor::copy_of(x->type().dtype(), {256}, bytes.data(), bytes.size());
    std::optional<ir::Tensor> v = evaluate(*evaluator, *dq, all, opset);
    if (v) v = evaluate(*evaluator, *op, *v, opset);
    if (v) v = evaluate(*evaluator, *q, *v, opset);
    if (!v || v->dtype() != q->output(0)->type().dtype()) continue;
    const std::string base = q->name().empty() ? q->output(0)->name() : q->name();
    ir::Value* table = g.add_initializer(std::move(*v), unique_name(g, base + "_table"));
    replace_chain(g, {dq, op, q}, "QLinearLookup", "ai.tether", {x, table}, {});
    ++fused;
  }
  if (fused > 0) import_tether_opset(model);
  return fused;
}

}  // namespace tether::passes
