// Channels-last integer convolutions. An integer convolution reads its input as rows of
// channels (one row per kernel position) and writes rows of output channels, so in NCHW each
// QLinearConv transposes its input in and its output back. This pass gives 2-D QLinearConv
// nodes (group 1 or depthwise, constant parameters) the ai.tether form with channels_last = 1,
// X and Y [N, H, W, C], between a Transpose to channels last and one back; moves QLinearAdd
// nodes (ai.tether, or com.microsoft on operands of one shape) whose two operands both come
// back from channels last, and 8-bit MaxPool nodes whose
// input does, to channels last too (ai.tether MaxPool, channels_last = 1); then drops
// each pair of Transposes that undo each other. A chain of integer convolutions and residual
// adds then runs channels last from its first node to its last, with one Transpose at each end.
//
// A value that is a graph output or kept (CompileOptions::keep) keeps its layout: those nodes
// are left as they are, so what callers read is always the ONNX layout.
#include "passes/passes.h"
#include "passes/rewrite.h"

namespace tether::passes {

namespace {

using ir::DType;

const std::vector<int64_t> kToLast = {0, 2, 3, 1};
const std::vector<int64_t> kToFirst = {0, 3, 1, 2};

bool is_8bit(DType t) { return t == DType::kInt8 || t == DType::kUInt8; }

bool is_transpose(const ir::Node* n, const std::vector<int64_t>& perm) {
  return n != nullptr && is_onnx(*n, "Transpose") && n->attr_ints("perm") == perm;
}

bool rank4(const ir::Value* v) {
  return v != nullptr && v->type().shape().has_rank() && v->type().shape().rank() == 4;
}

ir::ValueType permuted(const ir::ValueType& t, const std::vector<int64_t>& perm) {
  const ir::Shape& s = t.shape();
  if (!s.has_rank() || s.rank() != perm.size()) return ir::ValueType::tensor(t.dtype(), ir::Shape());
  std::vector<ir::Dim> d;
  for (int64_t p : perm) d.push_back(s[static_cast<size_t>(p)]);
  return ir::ValueType::tensor(t.dtype(), ir::Shape(std::move(d)));
}

// A new Transpose(perm) of `v`; returns its output.
ir::Value* transpose_of(ir::Graph& g, ir::Value* v, const std::vector<int64_t>& perm, const std::string& suffix) {
  const std::string name = unique_name(g, v->name() + suffix);
  ir::Node* t = g.add_node("Transpose", {v}, {name}, name);
  t->set_attr(ir::Attribute::ints("perm", perm));
  t->output(0)->set_type(permuted(v->type(), perm));
  return t->output(0);
}

// Output 0 of `n` becomes channels last; its readers read it through a Transpose back.
void output_last(ir::Graph& g, ir::Node* n) {
  ir::Value* y = n->output(0);
  const ir::ValueType nchw = y->type();
  y->set_type(permuted(nchw, kToLast));
  ir::Value* back = transpose_of(g, y, kToFirst, "_nchw");
  back->set_type(nchw);
  g.replace_all_uses(y, back);
  back->producer()->set_input(0, y);
}

// A 2-D QLinearConv the channels-last kernel runs: 8-bit output, group 1 or depthwise,
// constant parameters, and an output the caller does not read.
bool convertible(const ir::Node& n) {
  if (!(is_onnx(n, "QLinearConv") || (n.domain() == "ai.tether" && n.op_type() == "QLinearConv")))
    return false;
  if (n.attr_int("channels_last", 0) != 0 || n.inputs().size() < 8 || n.output(0) == nullptr) return false;
  const ir::Value* x = n.input(0);
  const ir::Value* y = n.output(0);
  if (!rank4(x) || !rank4(y) || !is_8bit(y->type().dtype()) || is_any_output(*y)) return false;
  for (size_t i = 1; i < n.inputs().size(); ++i)
    if (n.input(i) != nullptr && !constant_of(n.input(i))) return false;
  std::optional<ir::Tensor> w = constant_of(n.input(3));
  if (!w || w->rank() != 4) return false;
  const int64_t group = n.attr_int("group", 1);
  return group == 1 || (group == w->dims()[0] && w->dims()[1] == 1);
}

void convert_conv(ir::Model& model, ir::Node* n) {
  ir::Graph& g = model.graph();
  std::vector<ir::Attribute> attributes = n->attributes();
  attributes.push_back(ir::Attribute::i("channels_last", 1));
  std::vector<ir::Value*> inputs = n->inputs();
  inputs[0] = transpose_of(g, inputs[0], kToLast, "_nhwc");
  ir::Node* c = replace_chain(g, {n}, "QLinearConv", "ai.tether", inputs, attributes);
  import_tether_opset(model);
  output_last(g, c);
}

bool same_static_shape(const ir::Shape& a, const ir::Shape& b) {
  if (!a.is_static() || !b.is_static() || a.rank() != b.rank()) return false;
  for (size_t i = 0; i < a.rank(); ++i)
    if (a[i].value() != b[i].value()) return false;
  return true;
}

bool from_channels_last(const ir::Value* v) { return v != nullptr && is_transpose(v->producer(), kToFirst); }

// QLinearAdd of two operands that both come back from channels last, or an 8-bit MaxPool of
// one (no indices), whose output the caller does not read.
bool follows(const ir::Node& n) {
  if (!rank4(n.output(0)) || is_any_output(*n.output(0))) return false;
  if (n.domain() == "ai.tether" && n.op_type() == "QLinearAdd")
    return n.inputs().size() == 8 && from_channels_last(n.input(0)) && from_channels_last(n.input(3));
  // onnxruntime's QOperator form broadcasts: only operands of one shape follow.
  if (n.domain() == "com.microsoft" && n.op_type() == "QLinearAdd")
    return n.inputs().size() >= 7 && from_channels_last(n.input(0)) && from_channels_last(n.input(3)) &&
           same_static_shape(n.input(0)->type().shape(), n.input(3)->type().shape());
  if (is_onnx(n, "MaxPool"))
    return n.outputs().size() == 1 && is_8bit(n.output(0)->type().dtype()) && n.attr_int("storage_order", 0) == 0 &&
           from_channels_last(n.input(0));
  return false;
}

// Readers of Transpose(to last) of Transpose(to first) of v read v.
int drop_inverse_pairs(ir::Graph& g) {
  int dropped = 0;
  for (ir::Node* t : g.topological_order()) {
    if (!is_transpose(t, kToLast) || t->output(0) == nullptr || is_any_output(*t->output(0))) continue;
    const ir::Node* first = t->input(0) != nullptr ? t->input(0)->producer() : nullptr;
    if (!is_transpose(first, kToFirst)) continue;
    g.replace_all_uses(t->output(0), first->input(0));
    ++dropped;
  }
  return dropped;
}

}  // namespace

int channels_last_integer_convs(ir::Model& model) {
  ir::Graph& g = model.graph();
  int converted = 0;
  std::vector<ir::Node*> convs;
  for (ir::Node* n : g.topological_order())
    if (convertible(*n)) convs.push_back(n);
  for (ir::Node* n : convs) {
    convert_conv(model, n);
    ++converted;
  }
  if (converted == 0) return 0;
  g.sort_topologically();
  for (ir::Node* n : g.topological_order()) {
    if (!follows(*n)) continue;
    if (is_onnx(*n, "MaxPool")) {
      std::vector<ir::Attribute> attributes = n->attributes();
      attributes.push_back(ir::Attribute::i("channels_last", 1));
      n = replace_chain(g, {n}, "MaxPool", "ai.tether", {n->input(0)->producer()->input(0)}, attributes);
    } else {
      n->set_input(0, n->input(0)->producer()->input(0));
      n->set_input(3, n->input(3)->producer()->input(0));
    }
    output_last(g, n);
    ++converted;
  }
  g.sort_topologically();
  drop_inverse_pairs(g);
  return converted;
}

}  // namespace tether::passes
