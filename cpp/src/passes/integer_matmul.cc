// Dynamic quantization's products: MatMulInteger (or ConvInteger) -> Cast(float) -> Mul(scale)
// (-> Add(bias)), as onnxruntime's quantize_dynamic writes them (the scale is the product of the
// activation's scale from DynamicQuantizeLinear and the weights' constant scale), become one
// ai.tether MatMulIntegerToFloat (ConvIntegerToFloat)(A, B, scale, a_zero_point, b_zero_point,
// bias), B a constant or, for a MatMul, computed at run time. The integer GEMM then converts, scales and adds the bias while the sums are in
// registers, instead of writing int32 sums and reading them three more times; and no int32 sum
// is ever stored as a float tensor, which under float16 storage would overflow past 65504. The
// float operations are the unfused nodes' own, in their order (float(sum) * scale + bias, each
// rounded), so the result is the same bit for bit. An activation after it is fused by
// fuse_activations.
#include "passes/passes.h"
#include "passes/rewrite.h"

namespace tether::passes {

namespace {

using ir::DType;

// The single reader of `v` (read once, no graph output), or nullptr.
ir::Node* sole_reader(ir::Value* v) {
  if (v == nullptr || v->uses().size() != 1 || is_any_output(*v)) return nullptr;
  return v->uses()[0].node;
}

// `v` broadcasts over one axis of an output of rank `rank` only, with `n` or 1 values: the last
// axis ([n], [1, ..., n]) for a MatMul, axis 1 ([n, 1, ...], [1, n, 1, ...]) for a convolution,
// or a scalar.
bool per_column(const ir::Value& v, int64_t n, bool allow_scalar, bool conv, size_t rank) {
  const ir::Shape& s = v.type().shape();
  if (!s.has_rank() || s.rank() > rank) return false;
  // The axis of v that lines up with the output's column axis (v's dims align to the right).
  const size_t lead = rank - s.rank();
  const size_t axis = conv ? 1 : rank - 1;
  int64_t count = 1;
  for (size_t i = 0; i < s.rank(); ++i) {
    if (!s[i].is_known()) return false;
    if (lead + i != axis && s[i].value() != 1) return false;
    count *= s[i].value();
  }
  return count == n || (allow_scalar && count == 1);
}

// The other operand of a binary `node` than `v`.
ir::Value* other_operand(const ir::Node& node, const ir::Value* v) {
  if (node.inputs().size() != 2) return nullptr;
  if (node.input(0) == v) return node.input(1);
  if (node.input(1) == v) return node.input(0);
  return nullptr;
}

bool fuse(ir::Model& model, ir::Node* mm) {
  ir::Graph& g = model.graph();
  const bool conv = is_onnx(*mm, "ConvInteger");
  if (!(conv || is_onnx(*mm, "MatMulInteger")) || mm->output(0) == nullptr || mm->inputs().size() < 2) return false;
  std::optional<ir::Tensor> b = constant_of(mm->input(1));
  // Columns: B's last dim, or the convolution's output channels. A MatMul's B may also be
  // computed at run time (both operands quantized by DynamicQuantizeLinear), its zero point
  // with it, when its columns are known.
  int64_t n = 0;
  if (b) {
    if (conv ? b->rank() < 3 : b->rank() != 2) return false;
    n = conv ? b->dims()[0] : b->dims()[1];
    if (mm->inputs().size() > 3 && mm->input(3) != nullptr && !constant_of(mm->input(3))) return false;
  } else {
    const ir::Shape& bs = mm->input(1)->type().shape();
    if (conv || !bs.has_rank() || bs.rank() < 2 || !bs[bs.rank() - 1].is_known()) return false;
    n = bs[bs.rank() - 1].value();
  }
  const ir::Shape& out = mm->output(0)->type().shape();
  if (!out.has_rank()) return false;
  ir::Node* cast = sole_reader(mm->output(0));
  if (cast == nullptr || !is_onnx(*cast, "Cast") || cast->attr_int("to", 0) != static_cast<int64_t>(DType::kFloat32))
    return false;
  ir::Node* mul = sole_reader(cast->output(0));
  if (mul == nullptr || !is_onnx(*mul, "Mul") || mul->output(0) == nullptr) return false;
  ir::Value* scale = other_operand(*mul, cast->output(0));
  // The scale must not broadcast the product to more dims than it has.
  if (scale == nullptr || scale->type().dtype() != DType::kFloat32 || !per_column(*scale, n, true, conv, out.rank()) ||
      !mul->output(0)->type().shape().has_rank() || mul->output(0)->type().shape().rank() != out.rank())
    return false;
  std::vector<ir::Node*> chain = {mm, cast, mul};
  std::vector<ir::Value*> inputs = {mm->input(0), mm->input(1), scale, mm->input(2), mm->input(3)};
  inputs.resize(5);
  ir::Node* add = sole_reader(mul->output(0));
  if (add != nullptr && is_onnx(*add, "Add")) {
    ir::Value* bias = other_operand(*add, mul->output(0));
    std::optional<ir::Tensor> t = bias != nullptr ? constant_of(bias) : std::nullopt;
    if (t && t->dtype() == DType::kFloat32 && per_column(*bias, n, false, conv, out.rank())) {
      chain.push_back(add);
      ir::Value* row = bias;
      if (t->rank() != 1 || !bias->has_initializer())
        row = g.add_initializer(ir::Tensor::copy_of(DType::kFloat32, {n}, t->raw_data(), t->nbytes()),
                                unique_name(g, bias->name() + "_row"));
      inputs.push_back(row);
    }
  }
  // ConvInteger keeps its attributes (kernel, strides, pads, dilations, group).
  std::vector<ir::Attribute> attributes = conv ? mm->attributes() : std::vector<ir::Attribute>{};
  replace_chain(g, chain, conv ? "ConvIntegerToFloat" : "MatMulIntegerToFloat", "ai.tether", inputs, std::move(attributes));
  import_tether_opset(model);
  return true;
}

}  // namespace

int fuse_integer_to_float(ir::Model& model) {
  // The candidates first: a rewrite removes the Cast, Mul and Add after its integer product,
  // never another product.
  std::vector<ir::Node*> candidates;
  for (ir::Node* n : model.graph().topological_order())
    if (is_onnx(*n, "MatMulInteger") || is_onnx(*n, "ConvInteger")) candidates.push_back(n);
  int fused = 0;
  for (ir::Node* n : candidates) fused += fuse(model, n) ? 1 : 0;
  return fused;
}

}  // namespace tether::passes
