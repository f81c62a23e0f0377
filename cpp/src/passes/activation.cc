// Activation fusion: a Conv, Gemm or MatMul (+ bias) followed by an activation becomes one
// ai.tether fused node that applies the activation to each output row while it is in cache.
#include <cmath>
#include <limits>

#include "passes/passes.h"
#include "passes/rewrite.h"

namespace tether::passes {

namespace {

// An activation node as the fused ops spell it: the name their `activation` attribute takes
// and its parameters. `input` is what it reads; `extra` are nodes it brings along (SiLU's
// Sigmoid).
struct Activation {
  std::string name;
  std::vector<float> params;
  ir::Value* input = nullptr;
  std::vector<ir::Node*> extra;
};

// A constant float32 scalar (the Clip bounds), or `fallback` when the input is omitted.
std::optional<float> scalar_bound(const ir::Value* v, float fallback) {
  if (v == nullptr) return fallback;
  std::optional<ir::Tensor> t = constant_of(v);
  if (!t || t->dtype() != ir::DType::kFloat32 || t->num_elements() != 1) return std::nullopt;
  return *t->data<float>();
}

std::optional<Activation> clip(const ir::Node& n, int64_t opset) {
  constexpr float kLowest = std::numeric_limits<float>::lowest(), kMax = std::numeric_limits<float>::max();
  std::optional<float> lo, hi;
  if (opset < 11) {
    lo = n.attr_float("min", kLowest);
    hi = n.attr_float("max", kMax);
  } else {
    lo = scalar_bound(n.input(1), -INFINITY);
    hi = scalar_bound(n.input(2), INFINITY);
  }
  // ONNX sets everything to max when min > max; the epilogue's clamp would not.
  if (!lo || !hi || std::isnan(*lo) || std::isnan(*hi) || *lo > *hi) return std::nullopt;
  return Activation{"Clip", {*lo, *hi}, n.input(0), {}};
}

// x * Sigmoid(x), either operand order, the Sigmoid read by the Mul alone.
std::optional<Activation> silu(ir::Node& mul) {
  for (size_t side = 0; side < 2; ++side) {
    ir::Value* s = mul.input(side);
    ir::Value* x = mul.input(1 - side);
    ir::Node* sig = s ? s->producer() : nullptr;
    if (sig == nullptr || !is_onnx(*sig, "Sigmoid") || sig->input(0) != x || !only_reader(*s, mul)) continue;
    // x feeds exactly the Sigmoid and the Mul.
    if (x->uses().size() != 2 || is_any_output(*x)) continue;
    return Activation{"SiLU", {}, x, {sig}};
  }
  return std::nullopt;
}

std::optional<Activation> activation_of(ir::Node& n, int64_t opset) {
  if (n.output(0) == nullptr || n.input(0) == nullptr) return std::nullopt;
  for (const char* op : {"Relu", "Sigmoid", "Tanh", "HardSwish"})
    if (is_onnx(n, op)) return Activation{op, {}, n.input(0), {}};
  if (is_onnx(n, "LeakyRelu")) return Activation{"LeakyRelu", {n.attr_float("alpha", 0.01f)}, n.input(0), {}};
  if (is_onnx(n, "HardSigmoid"))
    return Activation{"HardSigmoid", {n.attr_float("alpha", 0.2f), n.attr_float("beta", 0.5f)}, n.input(0), {}};
  if (is_onnx(n, "Gelu") || (n.domain() == "ai.tether" && n.op_type() == "Gelu")) {  // (fuse_gelu's, before opset 20)
    const std::string approx = n.attr_string("approximate", "none");
    if (approx == "none") return Activation{"Gelu", {}, n.input(0), {}};
    if (approx == "tanh") return Activation{"GeluTanh", {}, n.input(0), {}};
    return std::nullopt;
  }
  if (is_onnx(n, "Clip")) return clip(n, opset);
  if (is_onnx(n, "Mul") && n.inputs().size() == 2) return silu(n);
  return std::nullopt;
}

// What the activation's input comes from, as the fused node it turns into.
struct Producer {
  std::vector<ir::Node*> chain;
  std::string fused_op;
  std::vector<ir::Value*> inputs;
  std::vector<ir::Attribute> attributes;
  std::optional<MatMulBias> bias;  // MatMul + Add: the bias becomes the third input
};

std::optional<Producer> producer_of(ir::Value& v) {
  ir::Node* p = v.producer();
  if (p == nullptr || v.type().dtype() != ir::DType::kFloat32) return std::nullopt;
  for (const char* op : {"Conv", "Gemm", "MatMul"})
    if (is_onnx(*p, op)) return Producer{{p}, std::string("Fused") + op, p->inputs(), p->attributes(), {}};
  // A fused node from an earlier rewrite (MatMul + Add) that has no activation yet.
  if (p->domain() == "ai.tether" && p->attr_string("activation", "").empty() &&
      (p->op_type() == "FusedConv" || p->op_type() == "FusedGemm" || p->op_type() == "FusedMatMul" ||
       p->op_type() == "MatMulIntegerToFloat" || p->op_type() == "ConvIntegerToFloat"))
    return Producer{{p}, p->op_type(), p->inputs(), p->attributes(), {}};
  if (std::optional<MatMulBias> m = match_matmul_bias(*p))
    return Producer{{m->matmul, m->add}, "FusedMatMul", {m->matmul->input(0), m->matmul->input(1)}, {}, m};
  return std::nullopt;
}

}  // namespace

int fuse_activations(ir::Model& model) {
  ir::Graph& g = model.graph();
  const int64_t opset = model.opset("");
  int fused = 0;
  for (ir::Node* act : g.topological_order()) {
    std::optional<Activation> a = activation_of(*act, opset);
    if (!a) continue;
    // SiLU's input has its two readers checked already; any other activation is the only one.
    if (a->extra.empty() && !only_reader(*a->input, *act)) continue;
    std::optional<Producer> p = producer_of(*a->input);
    if (!p) continue;
    if (p->bias) p->inputs.push_back(bias_row_value(g, *p->bias));  // the [N] vector the kernel reads
    std::vector<ir::Node*> chain = p->chain;
    chain.insert(chain.end(), a->extra.begin(), a->extra.end());
    chain.push_back(act);
    std::vector<ir::Attribute> attributes = p->attributes;
    attributes.push_back(ir::Attribute::s("activation", a->name));
    if (!a->params.empty()) attributes.push_back(ir::Attribute::floats("activation_params", a->params));
    replace_chain(g, chain, p->fused_op, "ai.tether", p->inputs, attributes);
    import_tether_opset(model);
    ++fused;
  }
  return fused;
}

}  // namespace tether::passes
