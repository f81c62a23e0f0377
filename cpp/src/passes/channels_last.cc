// Channels-last integer convolutions. An integer convolution reads its input as rows of
// channels (one row per kernel position) and writes rows of output channels, so in NCHW each
// QLinearConv transposes its input in and its output back. This pass gives 2-D QLinearConv
// nodes (group 1 or depthwise, constant parameters) the ai.tether form with channels_last = 1,
// X and Y [N, H, W, C], between a Transpose to channels last and one back; moves QLinearAdd
// nodes (ai.tether, or com.microsoft on operands of one shape) whose two operands both come
// back from channels last, and 8-bit MaxPool nodes (ai.tether MaxPool, channels_last = 1) and
// QLinearLookup nodes (element-wise) whose input does, to channels last too; then drops
// each pair of Transposes that undo each other. A chain of integer convolutions and residual
// adds then runs channels last from its first node to its last, with one Transpose at each end.
//
// A value that is a graph output or kept (CompileOptions::keep) keeps its layout: those nodes
// are left as they are, so what callers read is always the ONNX layout.
#include "passes/layout.h"
#include "passes/passes.h"
#include "passes/rewrite.h"

namespace tether::passes {

namespace {

using ir::DType;

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

// QLinearAdd or QLinearMul of two operands that both come back from channels last, or an 8-bit
// MaxPool (no indices) or QLinearLookup of one, whose output the caller does not read.
bool follows(const ir::Node& n) {
  if (!rank4(n.output(0)) || is_any_output(*n.output(0))) return false;
  if (n.domain() == "ai.tether" && n.op_type() == "QLinearAdd")
    return n.inputs().size() == 8 && from_channels_last(n.input(0)) && from_channels_last(n.input(3));
  // Broadcasting between two 4-D operands reads the same in either layout.
  if (n.domain() == "ai.tether" && n.op_type() == "QLinearMul")
    return n.inputs().size() == 8 && from_channels_last(n.input(0)) && from_channels_last(n.input(3)) &&
           rank4(n.input(0)) && rank4(n.input(3));
  // onnxruntime's QOperator form broadcasts: only operands of one shape follow.
  if (n.domain() == "com.microsoft" && n.op_type() == "QLinearAdd")
    return n.inputs().size() >= 7 && from_channels_last(n.input(0)) && from_channels_last(n.input(3)) &&
           same_static_shape(n.input(0)->type().shape(), n.input(3)->type().shape());
  if (is_onnx(n, "MaxPool"))
    return n.outputs().size() == 1 && is_8bit(n.output(0)->type().dtype()) && n.attr_int("storage_order", 0) == 0 &&
           from_channels_last(n.input(0));
  // Element-wise: any layout.
  if (n.domain() == "ai.tether" && n.op_type() == "QLinearLookup") return from_channels_last(n.input(0));
  return false;
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
    } else if (n->op_type() == "QLinearLookup") {
      n->set_input(0, n->input(0)->producer()->input(0));
    } else {
      n->set_input(0, n->input(0)->producer()->input(0));
      n->set_input(3, n->input(3)->producer()->input(0));
    }
    output_last(g, n);
    ++converted;
  }
  g.sort_topologically();
  merge_transposes(g);
  return converted;
}

}  // namespace tether::passes
