// Transposes between the ONNX layout and channels last, shared by the channels-last passes.
#include "passes/layout.h"

#include "passes/rewrite.h"

namespace tether::passes {

namespace {

// A Transpose's perm (the reversed dims when it has none), or empty when `n` is no Transpose
// or its input's rank is unknown and it has no perm.
std::vector<int64_t> perm_of(const ir::Node& n) {
  if (!is_onnx(n, "Transpose")) return {};
  if (n.attr("perm") != nullptr) return n.attr_ints("perm");
  const ir::Value* x = n.input(0);
  if (x == nullptr || !x->type().shape().has_rank()) return {};
  std::vector<int64_t> p;
  for (size_t i = x->type().shape().rank(); i-- > 0;) p.push_back(static_cast<int64_t>(i));
  return p;
}

bool is_identity(const std::vector<int64_t>& p) {
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] != static_cast<int64_t>(i)) return false;
  return true;
}

}  // namespace

bool is_transpose(const ir::Node* n, const std::vector<int64_t>& perm) {
  return n != nullptr && is_onnx(*n, "Transpose") && n->attr_ints("perm") == perm;
}

bool rank4(const ir::Value* v) { return v != nullptr && v->type().shape().has_rank() && v->type().shape().rank() == 4; }

ir::ValueType permuted(const ir::ValueType& t, const std::vector<int64_t>& perm) {
  const ir::Shape& s = t.shape();
  if (!s.has_rank() || s.rank() != perm.size()) return ir::ValueType::tensor(t.dtype(), ir::Shape());
  std::vector<ir::Dim> d;
  for (int64_t p : perm) d.push_back(s[static_cast<size_t>(p)]);
  return ir::ValueType::tensor(t.dtype(), ir::Shape(std::move(d)));
}

ir::Value* transpose_of(ir::Graph& g, ir::Value* v, const std::vector<int64_t>& perm, const std::string& suffix) {
  const std::string name = unique_name(g, v->name() + suffix);
  ir::Node* t = g.add_node("Transpose", {v}, {name}, name);
  t->set_attr(ir::Attribute::ints("perm", perm));
  t->output(0)->set_type(permuted(v->type(), perm));
  return t->output(0);
}

void output_last(ir::Graph& g, ir::Node* n, size_t i) {
  ir::Value* y = n->output(i);
  const ir::ValueType nchw = y->type();
  y->set_type(permuted(nchw, kToLast));
  y->metadata().emplace_back(kChannelsLast, "1");
  ir::Value* back = transpose_of(g, y, kToFirst, "_nchw");
  back->set_type(nchw);
  g.replace_all_uses(y, back);
  back->producer()->set_input(0, y);
}

bool from_channels_last(const ir::Value* v) { return v != nullptr && is_transpose(v->producer(), kToFirst); }

int merge_transposes(ir::Graph& g) {
  int bypassed = 0;
  for (ir::Node* t : g.topological_order()) {
    if (t->output(0) == nullptr || t->input(0) == nullptr) continue;
    const ir::Node* first = t->input(0)->producer();
    if (first == nullptr || first->input(0) == nullptr) continue;
    const std::vector<int64_t> outer = perm_of(*t), inner = perm_of(*first);
    if (outer.empty() || inner.empty() || outer.size() != inner.size()) continue;
    // t's dim i is first's dim outer[i], which is first's input's dim inner[outer[i]].
    std::vector<int64_t> both(outer.size());
    for (size_t i = 0; i < outer.size(); ++i) both[i] = inner[static_cast<size_t>(outer[i])];
    if (is_identity(both)) {
      if (is_any_output(*t->output(0))) continue;
      g.replace_all_uses(t->output(0), first->input(0));
    } else {
      t->set_input(0, first->input(0));
      t->set_attr(ir::Attribute::ints("perm", both));
    }
    ++bypassed;
  }
  return bypassed;
}

}  // namespace tether::passes
