// Grouped-query attention as exporters write it repeats each key/value head for its group of
// query heads before the products:
//
//   kv [B, Hkv, T, D] -> Unsqueeze(axis 2) -> Expand [B, Hkv, G, T, D] -> Reshape [B, Hkv*G, T, D]
//     scores = MatMul(Q [B, H, S, D], Transpose(that, perm 0 1 3 2))       H = Hkv * G
//     output = MatMul(P [B, H, S, T], that)
//
// which copies the whole cache G times on every decoding step. Query head h reads key/value
// head h / G, so the G query heads of one group are consecutive: Q viewed as
// [B, Hkv, G * S, D] (a Reshape: the same elements in the same order) multiplies kv itself, and
// the result viewed as [B, H, S, ...] is what the repeated form computes, with the same sums:
//
//   scores = Reshape(MatMul(Reshape(Q, [0, Hkv, -1, 0]), Transpose(kv)), [0, H, -1, 0])
//   output = Reshape(MatMul(Reshape(P, [0, Hkv, -1, 0]), kv), [0, H, -1, 0])
//
// The match rests on inferred shapes: the Expand must grow only the unsqueezed axis (its other
// dims the same as kv's, symbol for symbol) and the Reshape merge exactly the head and group
// axes. Each node of the repeat must be read by the chain alone, so the copy really goes. The
// Reshapes infer one axis (-1), so an empty Q or P (no query rows) is refused as the exporter's
// own Reshapes of it are, with a ShapeError.
#include "passes/passes.h"
#include "passes/rewrite.h"

namespace tether::passes {

namespace {

ir::Value* shape_constant(ir::Graph& g, const std::string& base, const std::vector<int64_t>& entries) {
  ir::Tensor t = ir::Tensor::copy_of(ir::DType::kInt64, {static_cast<int64_t>(entries.size())}, entries.data(),
                                     static_cast<int64_t>(entries.size() * sizeof(int64_t)));
  return g.add_initializer(std::move(t), unique_name(g, base));
}

// [d0, d1, d2, d3] as [d0, heads, group * d2, d3]: a view of the groups' rows together.
ir::ValueType grouped_type(const ir::Value* v, int64_t heads, int64_t group) {
  const std::vector<ir::Dim>& d = v->type().shape().dims();
  return ir::ValueType::tensor(v->type().dtype(), ir::Shape({d[0], ir::Dim(heads), d[2] * ir::Dim(group), d[3]}));
}

// Rewrites `mm` = MatMul(a, repeated [or its transpose]) over kv directly.
void rewrite(ir::Graph& g, ir::Node* mm, const KvRepeat& rep, ir::Node* transpose) {
  ir::Value* a = mm->input(0);
  const std::string base = mm->output(0)->name();
  ir::Value* to_groups = shape_constant(g, base + "_grouped_shape", {0, rep.kv_heads, -1, 0});
  ir::Value* to_heads = shape_constant(g, base + "_heads_shape", {0, rep.kv_heads * rep.group, -1, 0});
  ir::Node* view = g.add_node("Reshape", {a, to_groups}, {unique_name(g, base + "_grouped_in")},
                              unique_name(g, mm->name() + "_grouped_in"), "", mm);
  view->output(0)->set_type(grouped_type(a, rep.kv_heads, rep.group));
  ir::Value* rhs = rep.kv;
  if (transpose != nullptr) {
    ir::Node* t = g.add_node("Transpose", {rep.kv}, {unique_name(g, base + "_kv_t")},
                             unique_name(g, mm->name() + "_kv_t"), "", mm);
    t->set_attr(ir::Attribute::ints("perm", {0, 1, 3, 2}));
    const std::vector<ir::Dim>& k = rep.kv->type().shape().dims();
    t->output(0)->set_type(ir::ValueType::tensor(rep.kv->type().dtype(), ir::Shape({k[0], k[1], k[3], k[2]})));
    rhs = t->output(0);
  }
  ir::Node* product = g.add_node("MatMul", {view->output(0), rhs}, {unique_name(g, base + "_grouped")},
                                 unique_name(g, mm->name() + "_grouped"), "", mm);
  product->output(0)->set_type(grouped_type(mm->output(0), rep.kv_heads, rep.group));
  replace_chain(g, {mm}, "Reshape", "", {product->output(0), to_heads}, {});
}

}  // namespace

int fold_grouped_kv_repeat(ir::Model& model) {
  ir::Graph& g = model.graph();
  int folded = 0;
  for (ir::Node* mm : g.topological_order()) {
    if (!is_onnx(*mm, "MatMul") || mm->inputs().size() != 2) continue;
    const std::vector<ir::Dim>* a = dims_of(mm->input(0), 4);
    if (a == nullptr || dims_of(mm->output(0), 4) == nullptr) continue;
    ir::Node* transpose = sole_producer(mm->input(1), "Transpose", *mm);
    if (transpose != nullptr && transpose->attr_ints("perm") != std::vector<int64_t>{0, 1, 3, 2}) transpose = nullptr;
    ir::Value* repeated = transpose != nullptr ? transpose->input(0) : mm->input(1);
    std::optional<KvRepeat> rep = match_kv_repeat(repeated, transpose != nullptr ? *transpose : *mm);
    // The left operand must hold every query head (a broadcast head axis would pair rows with
    // the wrong group).
    if (!rep || !(*a)[1].is_known() || (*a)[1].value() != rep->kv_heads * rep->group) continue;
    rewrite(g, mm, *rep, transpose);
    ++folded;
  }
  return folded;
}

}  // namespace tether::passes
