// Shared helpers of the rewrite rules.
#include "passes/rewrite.h"

#include <algorithm>

#include "ops/constant.h"

namespace tether::passes {

bool is_onnx(const ir::Node& n, const char* op) {
  return n.op_type() == op && (n.domain().empty() || n.domain() == "ai.onnx");
}

std::optional<ir::Tensor> constant_of(const ir::Value* v) {
  if (v == nullptr) return std::nullopt;
  if (v->has_initializer()) {
    if (v->is_input()) return std::nullopt;  // a default the caller may override
    return v->initializer();
  }
  const ir::Node* p = v->producer();
  if (p == nullptr || !is_onnx(*p, "Constant") || p->attr("sparse_value") != nullptr) return std::nullopt;
  return ops::constant_value(*p);
}

bool is_kept(const ir::Value& v) {
  for (const auto& [key, value] : v.metadata())
    if (key == kKeep) return true;
  return false;
}

bool is_any_output(const ir::Value& v) {
  return v.is_output() || is_kept(v) || v.graph()->returned_by_subgraph(&v);
}

bool only_reader(const ir::Value& v, const ir::Node& reader) {
  return v.uses().size() == 1 && v.uses()[0].node == &reader && !is_any_output(v);
}

std::string trace_names(const std::vector<const ir::Node*>& nodes) {
  std::string out;
  for (const ir::Node* n : nodes) {
    std::string name = n->name();
    for (const auto& [k, v] : n->metadata())
      if (k == kFusedFrom) name = v;
    if (name.empty() && n->output(0) != nullptr) name = n->output(0)->name();
    out += (out.empty() ? "" : ",") + name;
  }
  return out;
}

std::string unique_name(const ir::Graph& g, const std::string& base) {
  if (g.resolve(base) == nullptr) return base;
  for (int i = 1;; ++i) {
    std::string name = base + "_" + std::to_string(i);
    if (g.resolve(name) == nullptr) return name;
  }
}

// Moves every reader of `v` to a fresh placeholder, so that `v` and its name can go away while
// its readers wait for the value that takes its place.
ir::Value* park_uses(ir::Graph& g, ir::Value* v) {
  ir::Value* tmp = g.declare(unique_name(g, v->name() + "__tether_parked"), v->type());
  g.replace_all_uses(v, tmp);
  return tmp;
}

void unpark(ir::Graph& g, ir::Value* tmp, ir::Value* v) {
  g.replace_all_uses(tmp, v);
  g.remove_value(tmp);
}

ir::Node* replace_chain(ir::Graph& g, const std::vector<ir::Node*>& chain, std::string op_type,
                        std::string domain, std::vector<ir::Value*> inputs,
                        std::vector<ir::Attribute> attributes) {
  ir::Node* last = chain.back();
  const std::vector<const ir::Node*> traced(chain.begin(), chain.end());
  const std::string fused_from = trace_names(traced);
  const std::string name = last->name();

  // Where the new node goes: where the last node was (the next node that survives).
  ir::Node* before = g.next_node(last);
  while (before != nullptr && std::find(chain.begin(), chain.end(), before) != chain.end()) before = g.next_node(before);

  std::vector<std::string> out_names;
  std::vector<ir::ValueType> out_types;
  std::vector<ir::Metadata> out_metadata;  // kKeep marks among them
  std::vector<ir::Value*> parked;
  for (ir::Value* v : last->outputs()) {
    out_names.push_back(v ? v->name() : "");
    out_types.push_back(v ? v->type() : ir::ValueType());
    out_metadata.push_back(v ? v->metadata() : ir::Metadata());
    parked.push_back(v ? park_uses(g, v) : nullptr);
  }
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) g.remove_node(*it);

  ir::Node* n = g.add_node(op_type, inputs, out_names, name, domain, before);
  for (const ir::Attribute& a : attributes) n->set_attr(a);
  n->metadata().emplace_back(kFusedFrom, fused_from);
  for (size_t i = 0; i < parked.size(); ++i) {
    if (parked[i] == nullptr) continue;
    n->output(i)->set_type(out_types[i]);
    n->output(i)->metadata() = out_metadata[i];
    unpark(g, parked[i], n->output(i));
  }
  return n;
}

void replace_with_constants(ir::Graph& g, ir::Node* node, std::vector<ir::Tensor> values) {
  std::vector<std::string> names;
  std::vector<ir::Value*> parked;
  for (size_t i = 0; i < node->outputs().size(); ++i) {
    ir::Value* v = node->output(i);
    const bool read = v != nullptr && (!v->uses().empty() || is_any_output(*v));
    names.push_back(read ? v->name() : "");
    parked.push_back(read ? park_uses(g, v) : nullptr);
  }
  g.remove_node(node);
  for (size_t i = 0; i < parked.size(); ++i) {
    if (parked[i] == nullptr) continue;
    unpark(g, parked[i], g.add_initializer(std::move(values[i]), names[i]));
  }
}

std::optional<MatMulBias> match_matmul_bias(ir::Node& add) {
  if (!is_onnx(add, "Add") || add.inputs().size() != 2 || add.output(0) == nullptr) return std::nullopt;
  for (size_t side = 0; side < 2; ++side) {
    ir::Value* mm_out = add.input(side);
    ir::Value* bias = add.input(1 - side);
    ir::Node* mm = mm_out ? mm_out->producer() : nullptr;
    if (mm == nullptr || !is_onnx(*mm, "MatMul") || !only_reader(*mm_out, add)) continue;
    const ir::ValueType& t = mm_out->type();
    const ir::Value* a = mm->input(0);
    const ir::Value* b = mm->input(1);
    if (t.dtype() != ir::DType::kFloat32 || !t.shape().has_rank() || t.shape().rank() < 2 || !t.shape().dims().back().is_known())
      continue;
    if (!a || !b || !a->type().shape().has_rank() || !b->type().shape().has_rank() || a->type().shape().rank() < 2 ||
        b->type().shape().rank() < 2)
      continue;
    const int64_t n = t.shape().dims().back().value();
    std::optional<ir::Tensor> c = constant_of(bias);
    if (!c || c->dtype() != ir::DType::kFloat32 || c->rank() > t.shape().rank() || n == 0) continue;
    const std::vector<int64_t>& d = c->dims();
    bool row_only = d.empty() || d.back() == 1 || d.back() == n;
    for (size_t i = 0; i + 1 < d.size(); ++i) row_only = row_only && d[i] == 1;
    if (!row_only) continue;
    MatMulBias m{mm, &add, bias, ir::Tensor::zeros(ir::DType::kFloat32, {n})};
    const float* src = c->data<float>();
    float* dst = m.row.mutable_data<float>();
    const bool one = c->num_elements() == 1;
    for (int64_t j = 0; j < n; ++j) dst[j] = one ? src[0] : src[j];
    return m;
  }
  return std::nullopt;
}

ir::Value* bias_row_value(ir::Graph& g, const MatMulBias& m) {
  if (m.bias->has_initializer() && m.bias->initializer().dims() == m.row.dims()) return m.bias;
  return g.add_initializer(m.row, unique_name(g, m.bias->name() + "_row"));
}

ir::Node* sole_producer(ir::Value* v, const char* op, const ir::Node& reader) {
  ir::Node* p = v != nullptr ? v->producer() : nullptr;
  if (p == nullptr || !is_onnx(*p, op) || p->output(0) != v || !only_reader(*v, reader)) return nullptr;
  return p;
}

const std::vector<ir::Dim>* dims_of(const ir::Value* v, size_t rank) {
  if (v == nullptr || !v->type().is_tensor()) return nullptr;
  const ir::Shape& s = v->type().shape();
  return s.has_rank() && s.rank() == rank ? &s.dims() : nullptr;
}

std::optional<std::vector<int64_t>> unsqueeze_axes(const ir::Node& n) {
  if (n.inputs().size() >= 2 && n.input(1) != nullptr) {
    std::optional<ir::Tensor> t = constant_of(n.input(1));
    if (!t || t->dtype() != ir::DType::kInt64) return std::nullopt;
    return std::vector<int64_t>(t->data<int64_t>(), t->data<int64_t>() + t->num_elements());
  }
  if (n.attr("axes") == nullptr) return std::nullopt;
  return n.attr_ints("axes");
}

std::optional<KvRepeat> match_kv_repeat(ir::Value* v, const ir::Node& reader) {
  ir::Node* reshape = sole_producer(v, "Reshape", reader);
  ir::Node* expand = reshape != nullptr ? sole_producer(reshape->input(0), "Expand", *reshape) : nullptr;
  ir::Node* unsq = expand != nullptr ? sole_producer(expand->input(0), "Unsqueeze", *expand) : nullptr;
  if (unsq == nullptr) return std::nullopt;
  std::optional<std::vector<int64_t>> axes = unsqueeze_axes(*unsq);
  if (!axes || axes->size() != 1 || ((*axes)[0] != 2 && (*axes)[0] != -3)) return std::nullopt;
  ir::Value* kv = unsq->input(0);
  const std::vector<ir::Dim>* k = dims_of(kv, 4);
  const std::vector<ir::Dim>* e = dims_of(expand->output(0), 5);
  const std::vector<ir::Dim>* r = dims_of(v, 4);
  if (k == nullptr || e == nullptr || r == nullptr) return std::nullopt;
  const ir::Dim &heads = (*k)[1], &group = (*e)[2];
  if (!heads.is_known() || !group.is_known() || heads.value() < 1 || group.value() < 1) return std::nullopt;
  // The Expand grows the new axis only; every other dim stays kv's.
  if (!((*e)[0] == (*k)[0] && (*e)[1] == heads && (*e)[3] == (*k)[2] && (*e)[4] == (*k)[3])) return std::nullopt;
  // The Reshape merges heads and group, nothing else.
  const ir::Dim& merged = (*r)[1];
  if (!merged.is_known() || merged.value() != heads.value() * group.value()) return std::nullopt;
  if (!((*r)[0] == (*k)[0] && (*r)[2] == (*k)[2] && (*r)[3] == (*k)[3])) return std::nullopt;
  return KvRepeat{kv, heads.value(), group.value(), {unsq, expand, reshape}};
}

void import_tether_opset(ir::Model& model) {
  if (model.opset("ai.tether") < 1) model.set_opset("ai.tether", 1);
}

}  // namespace tether::passes
