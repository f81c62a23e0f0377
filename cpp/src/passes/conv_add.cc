// Conv + residual Add: the convolution adds the summand to each output tile while it is in
// cache, instead of a separate Add reading and writing the whole tensor again.
#include "passes/passes.h"
#include "passes/rewrite.h"

namespace tether::passes {

namespace {

// Same rank and every dim provably equal (known and equal, or the same symbol): the Add then
// broadcasts nothing.
bool same_shape(const ir::ValueType& a, const ir::ValueType& b) {
  const ir::Shape& x = a.shape();
  const ir::Shape& y = b.shape();
  if (!x.has_rank() || !y.has_rank() || x.rank() != y.rank()) return false;
  for (size_t i = 0; i < x.rank(); ++i)
    if (!x[i].same_as(y[i])) return false;
  return true;
}

// A Conv, or a FusedConv with neither an activation nor a summand yet.
bool conv_without_epilogue(const ir::Node& n) {
  if (is_onnx(n, "Conv")) return true;
  return n.domain() == "ai.tether" && n.op_type() == "FusedConv" && n.attr_string("activation", "").empty() &&
         (n.inputs().size() < 4 || n.input(3) == nullptr);
}

}  // namespace

int fuse_conv_add(ir::Model& model) {
  ir::Graph& g = model.graph();
  int fused = 0;
  for (ir::Node* add : g.topological_order()) {
    if (!is_onnx(*add, "Add") || add->inputs().size() != 2 || add->output(0) == nullptr) continue;
    for (size_t side = 0; side < 2; ++side) {
      ir::Value* y = add->input(side);
      ir::Value* sum = add->input(1 - side);
      ir::Node* conv = y != nullptr ? y->producer() : nullptr;
      if (conv == nullptr || sum == nullptr || !conv_without_epilogue(*conv) || !only_reader(*y, *add)) continue;
      const ir::ValueType& t = y->type();
      if (t.dtype() != ir::DType::kFloat32 || sum->type().dtype() != ir::DType::kFloat32) continue;
      if (!same_shape(t, sum->type()) || !same_shape(t, add->output(0)->type())) continue;
      std::vector<ir::Value*> inputs = conv->inputs();
      inputs.resize(3, nullptr);  // the bias slot stays empty when the conv has none
      inputs.push_back(sum);
      replace_chain(g, {conv, add}, "FusedConv", "ai.tether", inputs, conv->attributes());
      import_tether_opset(model);
      ++fused;
      break;
    }
  }
  return fused;
}

}  // namespace tether::passes
