#include "tether/summary.h"

#include <algorithm>
#include <map>

namespace tether::ir {

namespace {

int64_t tensor_bytes(const Tensor& t) {
  if (t.dtype() != DType::kString) return t.nbytes();
  int64_t n = 0;
  for (const auto& s : t.string_values()) n += static_cast<int64_t>(s.size());
  return n;
}

void count_graph(const Graph& g, std::map<std::string, int64_t>& ops, ModelSummary& s) {
  for (const Value* v : g.initializers()) {
    ++s.num_initializers;
    s.num_parameters += v->initializer().num_elements();
    s.weight_bytes += tensor_bytes(v->initializer());
  }
  for (const Value* v : g.sparse_initializers()) {
    const SparseTensor& sp = v->sparse_initializer();
    ++s.num_initializers;
    s.num_parameters += sp.values.num_elements();
    s.weight_bytes += tensor_bytes(sp.values) + tensor_bytes(sp.indices);
  }
  for (const Node* n : g.nodes()) {
    ++s.num_nodes;
    ++ops[n->domain().empty() || n->domain() == "ai.onnx" ? n->op_type() : n->domain() + ":" + n->op_type()];
    for (const Attribute& a : n->attributes()) {
      if (a.kind() == AttrKind::kGraph && std::holds_alternative<Attribute::GraphPtr>(a.storage())) {
        ++s.num_subgraphs;
        count_graph(*a.as_graph(), ops, s);
      } else if (a.kind() == AttrKind::kGraphs &&
                 std::holds_alternative<std::vector<Attribute::GraphPtr>>(a.storage())) {
        for (const auto& sub : a.as_graphs()) {
          ++s.num_subgraphs;
          count_graph(*sub, ops, s);
        }
      }
    }
  }
}

}  // namespace

ModelSummary summarize(const Model& model) {
  ModelSummary s;
  std::map<std::string, int64_t> ops;
  count_graph(model.graph(), ops, s);
  s.op_counts.assign(ops.begin(), ops.end());
  std::stable_sort(s.op_counts.begin(), s.op_counts.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return s;
}

}  // namespace tether::ir
