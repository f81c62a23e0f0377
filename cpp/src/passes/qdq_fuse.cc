// QDQ fusion: DequantizeLinear -> Conv / MatMul / Gemm (-> Relu / Clip) -> QuantizeLinear, with
// 8-bit weights, becomes one integer node, the way onnxruntime's QDQ transformer rewrites it:
// QLinearConv or QLinearMatMul in the ONNX domain, or in the ai.tether domain where the node
// also carries an activation (attribute `activation`, Relu or Clip with `activation_params`),
// a bias (QLinearMatMul's ninth input, int32), or both. The kernel then computes the integer
// sums and requantizes them once, instead of dequantizing both operands, computing in float
// and quantizing again. Between them, DequantizeLinear -> MaxPool / Reshape / Transpose /
// Flatten / Squeeze / Unsqueeze / Slice -> QuantizeLinear with the same scale and zero point on
// both sides becomes the op on the integer tensor (Concat likewise when all its inputs share
// the output's parameters), and a residual Add of two dequantized tensors (-> Relu) ->
// QuantizeLinear one ai.tether QLinearAdd, a Mul of two (broadcasting) one ai.tether QLinearMul.
//
// The activations fold into the output's clamp: Q(Relu(v)) is Q(v) clamped below at the zero
// point, Q(Clip(v, a, b)) is Q(v) clamped to [Q(a), Q(b)], because rounding is monotone.
//
// A pattern is left as it is (and runs in float between its Q/DQ kernels) unless every
// parameter is constant and fits the integer kernel: scalar activation scales and zero
// points, 8-bit operands, weights per tensor or per output channel, and a bias that is int32
// dequantized with the scale x_scale * w_scale (as onnxruntime and tether's quantizer write it).
#include <cmath>
#include <cstring>
#include <limits>

#include "passes/passes.h"
#include "passes/rewrite.h"

namespace tether::passes {

namespace {

using ir::DType;

// A DequantizeLinear node and what it reads, when its scale and zero point are constant.
struct Dq {
  ir::Node* node = nullptr;
  ir::Value* q = nullptr;       // the integer input
  ir::Value* scale = nullptr;
  ir::Value* zero = nullptr;    // may be nullptr (zero)
  ir::Tensor scale_value;
  int64_t axis = 1;
};

std::optional<Dq> dq_of(ir::Value* v) {
  ir::Node* n = v != nullptr ? v->producer() : nullptr;
  if (n == nullptr || !is_onnx(*n, "DequantizeLinear") || n->input(0) == nullptr || n->input(1) == nullptr) return std::nullopt;
  if (n->attr_int("block_size", 0) != 0) return std::nullopt;
  std::optional<ir::Tensor> s = constant_of(n->input(1));
  if (!s || s->dtype() != DType::kFloat32) return std::nullopt;
  ir::Value* zero = n->inputs().size() > 2 ? n->input(2) : nullptr;
  if (zero != nullptr && !constant_of(zero)) return std::nullopt;
  return Dq{n, n->input(0), n->input(1), zero, *s, n->attr_int("axis", 1)};
}

// A scalar activation DQ on an 8-bit tensor with a zero point of its type.
bool scalar_8bit(const Dq& d) {
  if (!is_8bit(d.q->type().dtype()) || d.scale_value.num_elements() != 1) return false;
  return d.zero == nullptr || (d.zero->type().dtype() == d.q->type().dtype() && constant_of(d.zero)->num_elements() == 1);
}

// Constant 8-bit weights with scales per tensor or along `axis` (the output channels).
bool weights_8bit(const Dq& d, int64_t axis, int64_t channels) {
  std::optional<ir::Tensor> w = constant_of(d.q);
  if (!w || !is_8bit(w->dtype())) return false;
  const int64_t n = d.scale_value.num_elements();
  if (n != 1) {
    const int64_t a = d.axis < 0 ? d.axis + w->rank() : d.axis;
    if (a != axis || n != channels || d.scale_value.rank() != 1) return false;
  }
  if (d.zero == nullptr) return true;
  std::optional<ir::Tensor> z = constant_of(d.zero);
  return z->dtype() == w->dtype() && z->num_elements() == n;
}

// The bias DQ: int32 with zero point 0 and scale x_scale * w_scale[j] (float32 products).
bool bias_fits(const Dq& b, const Dq& x, const Dq& w, int64_t channels) {
  std::optional<ir::Tensor> q = constant_of(b.q);
  if (!q || q->dtype() != DType::kInt32 || q->num_elements() != channels) return false;
  if (b.zero != nullptr) {
    std::optional<ir::Tensor> z = constant_of(b.zero);
    for (int64_t i = 0; i < z->num_elements(); ++i)
      if (z->data<int32_t>()[i] != 0) return false;
  }
  const float xs = x.scale_value.data<float>()[0];
  const int64_t n = b.scale_value.num_elements(), wn = w.scale_value.num_elements();
  if (n != 1 && n != channels) return false;
  for (int64_t j = 0; j < channels; ++j) {
    const float want = xs * w.scale_value.data<float>()[wn == 1 ? 0 : j];
    const float got = b.scale_value.data<float>()[n == 1 ? 0 : j];
    if (std::fabs(got - want) > 1e-6f * want) return false;
  }
  return true;
}

// The QuantizeLinear that ends the pattern and the activation before it, if any.
struct Tail {
  std::vector<ir::Node*> nodes;  // the activation (if any), then the QuantizeLinear
  ir::Node* q = nullptr;
  std::string activation;
  std::vector<float> params;
};

std::optional<Tail> tail_of(ir::Value* y, int64_t opset) {
  if (y == nullptr || y->uses().size() != 1 || is_any_output(*y)) return std::nullopt;
  ir::Node* next = y->uses()[0].node;
  Tail t;
  if (is_onnx(*next, "Relu")) {
    t.activation = "Relu";
  } else if (is_onnx(*next, "Clip")) {
    float lo = -INFINITY, hi = INFINITY;
    if (opset < 11) {
      lo = next->attr_float("min", std::numeric_limits<float>::lowest());
      hi = next->attr_float("max", std::numeric_limits<float>::max());
    } else {
      for (size_t i = 1; i < 3 && i < next->inputs().size(); ++i) {
        if (next->input(i) == nullptr) continue;
        std::optional<ir::Tensor> c = constant_of(next->input(i));
        if (!c || c->dtype() != DType::kFloat32 || c->num_elements() != 1) return std::nullopt;
        (i == 1 ? lo : hi) = *c->data<float>();
      }
    }
    if (std::isnan(lo) || std::isnan(hi) || lo > hi) return std::nullopt;
    t.activation = "Clip";
    t.params = {lo, hi};
  }
  if (!t.activation.empty()) {
    t.nodes.push_back(next);
    ir::Value* a = next->output(0);
    if (a == nullptr || a->uses().size() != 1 || is_any_output(*a)) return std::nullopt;
    next = a->uses()[0].node;
  }
  if (!is_onnx(*next, "QuantizeLinear") || next->input(1) == nullptr || next->inputs().size() < 3 ||
      next->input(2) == nullptr || next->attr_int("block_size", 0) != 0)
    return std::nullopt;
  std::optional<ir::Tensor> s = constant_of(next->input(1));
  std::optional<ir::Tensor> z = constant_of(next->input(2));
  if (!s || !z || s->dtype() != DType::kFloat32 || s->num_elements() != 1 || z->num_elements() != 1 ||
      !is_8bit(z->dtype()))
    return std::nullopt;
  t.q = next;
  t.nodes.push_back(next);
  return t;
}

ir::Value* zero_or_new(ir::Graph& g, const Dq& d, const std::string& base) {
  if (d.zero != nullptr) return d.zero;
  const DType t = d.q->type().dtype() == DType::kInt32 ? DType::kInt32 : d.q->type().dtype();
  ir::Tensor z = ir::Tensor::zeros(t, d.scale_value.dims());
  return g.add_initializer(std::move(z), unique_name(g, base));
}

// Gemm's weights [N, K] (transB) transposed to [K, N], as a new initializer.
ir::Value* transposed(ir::Graph& g, const ir::Tensor& w, const std::string& base) {
  const int64_t n = w.dims()[0], k = w.dims()[1];
  ir::Tensor t = ir::Tensor::zeros(w.dtype(), {k, n});
  const auto* src = static_cast<const uint8_t*>(w.raw_data());
  auto* dst = static_cast<uint8_t*>(t.mutable_raw_data());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < k; ++p) dst[p * n + i] = src[i * k + p];
  return g.add_initializer(std::move(t), unique_name(g, base));
}

// True when two constant tensors hold the same type, shape and bytes.
bool same_constant(const ir::Value* a, const ir::Value* b) {
  if (a == b) return true;
  if (a == nullptr || b == nullptr) return false;
  std::optional<ir::Tensor> x = constant_of(a), y = constant_of(b);
  return x && y && x->dtype() == y->dtype() && x->num_elements() == y->num_elements() && x->nbytes() == y->nbytes() &&
         std::memcmp(x->raw_data(), y->raw_data(), static_cast<size_t>(x->nbytes())) == 0;
}

// Ops that only select or move elements: on a quantized tensor they give the quantized result
// when their output has the input's scale and zero point (MaxPool too: dequantization is
// increasing, so the maximum commutes with it).
bool moves_elements(const ir::Node& n) {
  for (const char* op : {"MaxPool", "Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Slice"})
    if (is_onnx(n, op)) return true;
  return false;
}

// The QuantizeLinear (with a zero point, not blocked) that alone reads `y`, or nullptr.
ir::Node* sole_quantize(ir::Value* y) {
  if (y->uses().size() != 1 || is_any_output(*y)) return nullptr;
  ir::Node* q = y->uses()[0].node;
  if (!is_onnx(*q, "QuantizeLinear") || q->input(0) != y || q->inputs().size() < 3 || q->input(2) == nullptr ||
      q->attr_int("block_size", 0) != 0)
    return nullptr;
  return q;
}

// DequantizeLinear -> op -> QuantizeLinear with the same scalar scale and zero point on both
// sides becomes the op on the integer tensor.
bool fuse_data_movement(ir::Graph& g, ir::Node* op) {
  if (!moves_elements(*op) || op->input(0) == nullptr || op->output(0) == nullptr) return false;
  if (is_onnx(*op, "MaxPool") && op->outputs().size() > 1 && op->output(1) != nullptr) return false;
  std::optional<Dq> x = dq_of(op->input(0));
  if (!x || !scalar_8bit(*x)) return false;
  ir::Node* q = sole_quantize(op->output(0));
  if (q == nullptr) return false;
  if (!same_constant(q->input(1), x->scale) || x->zero == nullptr || !same_constant(q->input(2), x->zero)) return false;
  std::vector<ir::Value*> inputs = op->inputs();
  inputs[0] = x->q;
  replace_chain(g, {op, q}, op->op_type(), "", inputs, op->attributes());
  return true;
}

// Concat(DequantizeLinear(x_1), ..., DequantizeLinear(x_n)) -> QuantizeLinear, every x_i of the
// output's type with the output's scale and zero point (the same constants), becomes Concat of
// the integer tensors: each element is then dequantized and quantized with one scale, which
// gives it back.
bool fuse_concat(ir::Graph& g, ir::Node* op) {
  if (!is_onnx(*op, "Concat") || op->inputs().empty() || op->output(0) == nullptr) return false;
  ir::Node* q = sole_quantize(op->output(0));
  if (q == nullptr) return false;
  std::vector<ir::Value*> inputs;
  for (ir::Value* in : op->inputs()) {
    std::optional<Dq> x = in != nullptr ? dq_of(in) : std::nullopt;
    if (!x || !scalar_8bit(*x) || x->zero == nullptr || !same_constant(q->input(1), x->scale) ||
        !same_constant(q->input(2), x->zero))
      return false;
    inputs.push_back(x->q);
  }
  replace_chain(g, {op, q}, "Concat", "", inputs, op->attributes());
  return true;
}

// Same rank and every dim provably equal.
bool same_shape(const ir::Value& a, const ir::Value& b) {
  const ir::Shape& x = a.type().shape();
  const ir::Shape& y = b.type().shape();
  if (!x.has_rank() || !y.has_rank() || x.rank() != y.rank()) return false;
  for (size_t i = 0; i < x.rank(); ++i)
    if (!x[i].same_as(y[i])) return false;
  return true;
}

// Add(DequantizeLinear(a), DequantizeLinear(b)) [-> Relu] -> QuantizeLinear, a and b of one
// shape (a residual connection), becomes an ai.tether QLinearAdd; Mul of the same, a and b
// broadcasting (a gate: SiLU's x * sigmoid(x), squeeze-and-excitation's scale per channel), an
// ai.tether QLinearMul.
bool fuse_add(ir::Model& model, ir::Node* add) {
  ir::Graph& g = model.graph();
  const bool mul = is_onnx(*add, "Mul");
  if (!(mul || is_onnx(*add, "Add")) || add->inputs().size() != 2 || add->output(0) == nullptr) return false;
  std::optional<Dq> a = dq_of(add->input(0));
  std::optional<Dq> b = dq_of(add->input(1));
  if (!a || !b || !scalar_8bit(*a) || !scalar_8bit(*b) || (!mul && !same_shape(*a->q, *b->q))) return false;
  std::optional<Tail> t = tail_of(add->output(0), model.opset(""));
  if (!t || t->activation == "Clip") return false;
  const std::string base = add->name().empty() ? add->output(0)->name() : add->name();
  std::vector<ir::Value*> inputs = {a->q, a->scale, zero_or_new(g, *a, base + "_a_zero_point"),
                                    b->q, b->scale, zero_or_new(g, *b, base + "_b_zero_point"),
                                    t->q->input(1), t->q->input(2)};
  std::vector<ir::Attribute> attributes;
  if (!t->activation.empty()) attributes.push_back(ir::Attribute::s("activation", t->activation));
  std::vector<ir::Node*> chain = {add};
  chain.insert(chain.end(), t->nodes.begin(), t->nodes.end());
  replace_chain(g, chain, mul ? "QLinearMul" : "QLinearAdd", "ai.tether", inputs, attributes);
  import_tether_opset(model);
  return true;
}

}  // namespace

int fuse_qdq(ir::Model& model) {
  ir::Graph& g = model.graph();
  const int64_t opset = model.opset("");
  int fused = 0;
  // The candidates first: a rewrite removes the activation and QuantizeLinear after its op,
  // nodes later in the order, but never another candidate.
  std::vector<ir::Node*> candidates;
  for (ir::Node* op : g.topological_order())
    if (is_onnx(*op, "Conv") || is_onnx(*op, "MatMul") || is_onnx(*op, "Gemm")) candidates.push_back(op);
  for (ir::Node* op : candidates) {
    const bool conv = is_onnx(*op, "Conv"), matmul = is_onnx(*op, "MatMul");
    if (op->inputs().size() < 2 || op->output(0) == nullptr) continue;
    std::optional<Dq> x = dq_of(op->input(0));
    std::optional<Dq> w = dq_of(op->input(1));
    if (!x || !w || !scalar_8bit(*x)) continue;
    std::optional<ir::Tensor> wt = constant_of(w->q);
    if (!wt) continue;
    // Output channels and the axis of the weights that indexes them.
    int64_t channels = 0, axis = 0;
    bool trans_b = false;
    if (conv) {
      if (wt->rank() < 3) continue;
      channels = wt->dims()[0];
    } else if (matmul) {
      if (wt->rank() != 2 || x->q->type().shape().has_rank() == false || x->q->type().shape().rank() < 1) continue;
      channels = wt->dims()[1];
      axis = 1;
    } else {
      if (op->attr_int("transA", 0) != 0 || op->attr_float("alpha", 1.0f) != 1.0f || op->attr_float("beta", 1.0f) != 1.0f ||
          wt->rank() != 2)
        continue;
      trans_b = op->attr_int("transB", 0) != 0;
      channels = wt->dims()[trans_b ? 0 : 1];
      axis = trans_b ? 0 : 1;
    }
    if (!weights_8bit(*w, axis, channels)) continue;
    std::optional<Dq> bias;
    if (op->inputs().size() > 2 && op->input(2) != nullptr) {
      bias = dq_of(op->input(2));
      if (!bias || !bias_fits(*bias, *x, *w, channels)) continue;
    }
    std::optional<Tail> t = tail_of(op->output(0), opset);
    if (!t) continue;
    const std::string base = op->name().empty() ? op->output(0)->name() : op->name();
    std::vector<ir::Value*> inputs = {x->q, x->scale, zero_or_new(g, *x, base + "_x_zero_point"), nullptr, w->scale,
                                      zero_or_new(g, *w, base + "_w_zero_point"), t->q->input(1), t->q->input(2)};
    inputs[3] = trans_b ? transposed(g, *wt, base + "_w_t") : w->q;
    if (bias) inputs.push_back(bias->q);
    const bool tether_op = !t->activation.empty() || (bias && !conv);
    std::vector<ir::Attribute> attributes = conv ? op->attributes() : std::vector<ir::Attribute>{};
    if (!t->activation.empty()) attributes.push_back(ir::Attribute::s("activation", t->activation));
    if (!t->params.empty()) attributes.push_back(ir::Attribute::floats("activation_params", t->params));
    std::vector<ir::Node*> chain = {op};
    chain.insert(chain.end(), t->nodes.begin(), t->nodes.end());
    replace_chain(g, chain, conv ? "QLinearConv" : "QLinearMatMul", tether_op ? "ai.tether" : "", inputs, attributes);
    if (tether_op) import_tether_opset(model);
    ++fused;
  }
  // Then the element-moving ops between them (their QuantizeLinear is later in the order, and
  // no candidate is another's QuantizeLinear).
  std::vector<ir::Node*> movers, concats, adds;
  for (ir::Node* op : g.topological_order()) {
    if (moves_elements(*op)) movers.push_back(op);
    if (is_onnx(*op, "Concat")) concats.push_back(op);
    if (is_onnx(*op, "Add") || is_onnx(*op, "Mul")) adds.push_back(op);
  }
  for (ir::Node* op : movers) fused += fuse_data_movement(g, op) ? 1 : 0;
  for (ir::Node* op : concats) fused += fuse_concat(g, op) ? 1 : 0;
  for (ir::Node* op : adds) fused += fuse_add(model, op) ? 1 : 0;
  return fused;
}

}  // namespace tether::passes
