// onnxruntime's QOperator format writes quantized activations, pooling and joins as contrib ops
// (com.microsoft QLinearSigmoid, QLinearLeakyRelu, QLinearMul, QLinearConcat,
// QLinearAveragePool, QLinearSoftmax), each defined as its float op between DequantizeLinear
// and QuantizeLinear. expand_qoperator_ops writes each as exactly that: DequantizeLinear of each
// quantized operand, the float op with the contrib op's attributes, QuantizeLinear to the output
// scale and zero point. The QuantizeLinear keeps the node's name and its output's name, the
// other nodes are named after it. Every backend then runs these models with the kernels it has
// for the standard ops, and the result is the definition's (onnxruntime's own kernels compute
// Sigmoid and Softmax through approximate lookup tables, within one quantization step of it).
#include "passes/passes.h"
#include "passes/rewrite.h"
#include "tether/error.h"
#include "tether/shape_inference.h"

namespace tether::passes {

namespace {

// A quantized operand: the values, scale and zero point (nullptr when absent) of one input.
struct Quantized {
  ir::Value* x;
  ir::Value* scale;
  ir::Value* zero;
};

ir::Value* input_or_null(const ir::Node& n, size_t i) { return i < n.inputs().size() ? n.input(i) : nullptr; }

// The element type of quantized `x`: its own where inference knows it, else its zero point's
// (which has x's type), else uint8 (the type a QuantizeLinear without zero point writes).
ir::DType quantized_type(const ir::Value* x, const ir::Value* zero) {
  if (x->type().dtype() != ir::DType::kUndefined) return x->type().dtype();
  if (zero != nullptr && zero->type().dtype() != ir::DType::kUndefined) return zero->type().dtype();
  return ir::DType::kUInt8;
}

class Expander {
 public:
  Expander(ir::Model& model, ir::Node* node) : g_(model.graph()), node_(node), opset_(model.opset("")) {
    base_ = node->name().empty() ? node->output(0)->name() : node->name();
  }

  // DequantizeLinear of `q`, before the node.
  ir::Value* dequantize(const Quantized& q, const std::string& suffix) {
    std::vector<ir::Value*> in = {q.x, q.scale};
    if (q.zero != nullptr) in.push_back(q.zero);
    return add("DequantizeLinear", in, {}, suffix)->output(0);
  }

  // A node before the contrib node, named `<node>/<suffix>`, its one output likewise.
  ir::Node* add(std::string op, const std::vector<ir::Value*>& in, const std::vector<ir::Attribute>& attrs,
                const std::string& suffix) {
    const std::string name = unique_name(g_, base_ + "/" + suffix);
    ir::Node* n = g_.add_node(std::move(op), in, {name}, name, "", node_);
    for (const ir::Attribute& a : attrs) n->set_attr(a);
    return n;
  }

  // Ends the expansion: the contrib node becomes the QuantizeLinear of `v` (its name, output and
  // the readers of it), with `zero` or, when absent, a zero point of `type` 0.
  void quantize(ir::Value* v, ir::Value* scale, ir::Value* zero, ir::DType type) {
    if (zero == nullptr) zero = g_.add_initializer(ir::Tensor::zeros(type, {}), unique_name(g_, base_ + "/zero_point"));
    replace_chain(g_, {node_}, "QuantizeLinear", "", {v, scale, zero}, {});
  }

  int64_t opset() const { return opset_; }
  ir::Node* node() const { return node_; }

 private:
  ir::Graph& g_;
  ir::Node* node_;
  int64_t opset_;
  std::string base_;
};

// The attributes of `n` but those named in `drop`.
std::vector<ir::Attribute> attributes_but(const ir::Node& n, std::initializer_list<const char*> drop) {
  std::vector<ir::Attribute> out;
  for (const ir::Attribute& a : n.attributes()) {
    bool keep = true;
    for (const char* d : drop) keep = keep && a.name() != d;
    if (keep) out.push_back(a);
  }
  return out;
}

// QLinearSigmoid / QLinearLeakyRelu(X, X_scale, X_zero_point?, Y_scale, Y_zero_point?).
void expand_unary(Expander& e, const char* op) {
  const ir::Node& n = *e.node();
  ir::Value* x = e.dequantize({n.input(0), n.input(1), input_or_null(n, 2)}, "dequantize");
  ir::Value* v = e.add(op, {x}, attributes_but(n, {}), op)->output(0);
  e.quantize(v, n.input(3), input_or_null(n, 4), quantized_type(n.input(0), input_or_null(n, 2)));
}

// QLinearMul(A, A_scale, A_zero_point?, B, B_scale, B_zero_point?, C_scale, C_zero_point?).
void expand_mul(Expander& e) {
  const ir::Node& n = *e.node();
  ir::Value* a = e.dequantize({n.input(0), n.input(1), input_or_null(n, 2)}, "dequantize_a");
  ir::Value* b = e.dequantize({n.input(3), n.input(4), input_or_null(n, 5)}, "dequantize_b");
  ir::Value* v = e.add("Mul", {a, b}, {}, "Mul")->output(0);
  e.quantize(v, n.input(6), input_or_null(n, 7), quantized_type(n.input(0), input_or_null(n, 2)));
}

// QLinearConcat(Y_scale, Y_zero_point, X0, X0_scale, X0_zero_point, X1, ...), axis.
void expand_concat(Expander& e) {
  const ir::Node& n = *e.node();
  std::vector<ir::Value*> parts;
  for (size_t i = 2; i + 2 < n.inputs().size(); i += 3)
    parts.push_back(e.dequantize({n.input(i), n.input(i + 1), n.input(i + 2)}, "dequantize_" + std::to_string((i - 2) / 3)));
  ir::Value* v = e.add("Concat", parts, {ir::Attribute::i("axis", n.attr_int("axis", 0))}, "Concat")->output(0);
  ir::Value* zero = input_or_null(n, 1);
  e.quantize(v, n.input(0), zero, zero != nullptr ? zero->type().dtype() : ir::DType::kUInt8);
}

// QLinearAveragePool(X, x_scale, x_zero_point?, y_scale, y_zero_point?), AveragePool's
// attributes and channels_last (X then [N, ..., C]: transposed to [N, C, ...] and back).
void expand_average_pool(Expander& e) {
  const ir::Node& n = *e.node();
  ir::Value* x = e.dequantize({n.input(0), n.input(1), input_or_null(n, 2)}, "dequantize");
  const bool last = n.attr_int("channels_last", 0) != 0;
  const ir::Shape& shape = n.input(0)->type().shape();
  std::vector<int64_t> to_first, to_last;
  if (last) {
    const auto rank = static_cast<int64_t>(shape.rank());
    to_first = {0, rank - 1};
    to_last = {0};
    for (int64_t d = 1; d + 1 < rank; ++d) {
      to_first.push_back(d);
      to_last.push_back(d + 1);
    }
    to_last.push_back(1);
    x = e.add("Transpose", {x}, {ir::Attribute::ints("perm", to_first)}, "channels_first")->output(0);
  }
  ir::Value* v = e.add("AveragePool", {x}, attributes_but(n, {"channels_last"}), "AveragePool")->output(0);
  if (last) v = e.add("Transpose", {v}, {ir::Attribute::ints("perm", to_last)}, "channels_last")->output(0);
  e.quantize(v, n.input(3), input_or_null(n, 4), quantized_type(n.input(0), input_or_null(n, 2)));
}

// QLinearSoftmax(X, X_scale, x_zero_point?, y_scale, y_zero_point), axis and the opset of the
// Softmax it replaced: from opset 13 over `axis` alone, before it over the dims from `axis` on
// (X seen as 2-D). Written so that the model's own opset reads it the same way.
void expand_softmax(Expander& e) {
  const ir::Node& n = *e.node();
  const ir::Shape& shape = n.input(0)->type().shape();
  const int64_t from = n.attr_int("opset", 13);
  int64_t axis = n.attr_int("axis", from >= 13 ? -1 : 1);
  const auto rank = static_cast<int64_t>(shape.rank());
  if (axis < -rank || axis >= rank)
    throw ModelError(n.describe() + ": axis " + std::to_string(axis) + " is out of range for X of rank " + std::to_string(rank));
  if (axis < 0) axis += rank;
  ir::Value* x = e.dequantize({n.input(0), n.input(1), input_or_null(n, 2)}, "dequantize");
  ir::Value* v = nullptr;
  if (axis == rank - 1 || (from >= 13) == (e.opset() >= 13)) {
    // The last axis means the same to both definitions; else the model's opset reads `axis` as the contrib node did.
    v = e.add("Softmax", {x}, {ir::Attribute::i("axis", axis)}, "Softmax")->output(0);
  } else if (from < 13) {  // rows of the dims from axis on, under a model of opset 13 or later
    ir::Value* rows = e.add("Flatten", {x}, {ir::Attribute::i("axis", axis)}, "Flatten")->output(0);
    ir::Value* s = e.add("Softmax", {rows}, {ir::Attribute::i("axis", 1)}, "Softmax")->output(0);
    ir::Value* dims = e.add("Shape", {x}, {}, "Shape")->output(0);
    v = e.add("Reshape", {s, dims}, {}, "Reshape")->output(0);
  } else {  // over one axis, under a model older than opset 13: that axis moved last and back
    std::vector<int64_t> perm;
    for (int64_t d = 0; d < rank; ++d)
      if (d != axis) perm.push_back(d);
    perm.push_back(axis);
    std::vector<int64_t> back(static_cast<size_t>(rank));
    for (int64_t d = 0; d < rank; ++d) back[static_cast<size_t>(perm[static_cast<size_t>(d)])] = d;
    ir::Value* t = e.add("Transpose", {x}, {ir::Attribute::ints("perm", perm)}, "axis_last")->output(0);
    ir::Value* s = e.add("Softmax", {t}, {ir::Attribute::i("axis", rank - 1)}, "Softmax")->output(0);
    v = e.add("Transpose", {s}, {ir::Attribute::ints("perm", back)}, "axis_back")->output(0);
  }
  e.quantize(v, n.input(3), input_or_null(n, 4), quantized_type(n.input(0), input_or_null(n, 2)));
}

}  // namespace

const std::vector<QOperatorExpansion>& qoperator_expansions() {
  static const std::vector<QOperatorExpansion> kAll = {
      {"QLinearSigmoid", {"DequantizeLinear", "Sigmoid", "QuantizeLinear"}},
      {"QLinearLeakyRelu", {"DequantizeLinear", "LeakyRelu", "QuantizeLinear"}},
      {"QLinearMul", {"DequantizeLinear", "Mul", "QuantizeLinear"}},
      {"QLinearConcat", {"DequantizeLinear", "Concat", "QuantizeLinear"}},
      {"QLinearAveragePool", {"DequantizeLinear", "Transpose", "AveragePool", "QuantizeLinear"}},
      {"QLinearSoftmax", {"DequantizeLinear", "Transpose", "Flatten", "Shape", "Reshape", "Softmax", "QuantizeLinear"}},
  };
  return kAll;
}

bool is_qoperator(const ir::Node& n) {
  if (n.domain() != "com.microsoft" || n.outputs().empty() || n.output(0) == nullptr) return false;
  for (const QOperatorExpansion& e : qoperator_expansions())
    if (n.op_type() == e.op) return true;
  return false;
}

int expand_qoperator_ops(ir::Model& model) {
  ir::Graph& g = model.graph();
  bool any = false;
  for (const ir::Node* n : g.nodes()) any = any || is_qoperator(*n);
  if (!any) return 0;
  // Types and ranks of the operands, which the expansion reads; one expanded node lets
  // inference through to the next, so inference runs again where a rank is still unknown.
  ops::infer_shapes(model);
  int expanded = 0;
  for (ir::Node* n : g.topological_order()) {
    if (!is_qoperator(*n)) continue;
    const std::string op = n->op_type();
    const bool reads_rank = op == "QLinearSoftmax" || (op == "QLinearAveragePool" && n->attr_int("channels_last", 0) != 0);
    if (reads_rank && !n->input(0)->type().shape().has_rank()) ops::infer_shapes(model);
    const size_t in = n->inputs().size();
    auto needs = [&](size_t count, const char* what) {
      if (in < count)
        throw ModelError(n->describe() + ": takes " + what + ", got " + std::to_string(in) + " inputs");
    };
    auto needs_rank = [&](const char* what) {
      if (!n->input(0)->type().shape().has_rank())
        throw UnsupportedError(n->describe() + ": X's rank is not known; " + what + " needs it");
    };
    Expander e(model, n);
    if (op == "QLinearSigmoid" || op == "QLinearLeakyRelu") {
      needs(4, "X, X_scale, X_zero_point, Y_scale and Y_zero_point");
      expand_unary(e, op == "QLinearSigmoid" ? "Sigmoid" : "LeakyRelu");
    } else if (op == "QLinearMul") {
      needs(7, "A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale and C_zero_point");
      expand_mul(e);
    } else if (op == "QLinearConcat") {
      if (in < 5 || (in - 2) % 3 != 0)
        throw ModelError(n->describe() + ": takes Y_scale, Y_zero_point and (X, X_scale, X_zero_point) per input, got " +
                         std::to_string(in) + " inputs");
      expand_concat(e);
    } else if (op == "QLinearAveragePool") {
      needs(4, "X, x_scale, x_zero_point, y_scale and y_zero_point");
      if (n->attr_int("channels_last", 0) != 0) needs_rank("channels_last");
      expand_average_pool(e);
    } else if (op == "QLinearSoftmax") {
      needs(4, "X, X_scale, x_zero_point, y_scale and y_zero_point");
      needs_rank("its axis");
      expand_softmax(e);
    } else {
      continue;
    }
    ++expanded;
  }
  return expanded;
}

}  // namespace tether::passes
