// Deep copies of graphs and models. Tensor buffers are shared (tensors are copy on write),
// so a clone costs the structure, not the weights.
#include <unordered_map>

#include "tether/error.h"
#include "tether/model.h"

namespace tether::ir {

namespace {

using ValueMap = std::unordered_map<const Value*, Value*>;

void copy_graph(const Graph& src, Graph& dst, ValueMap& map, const std::vector<const Value*>& captured = {});

Attribute copy_attribute(const Attribute& a, Graph& owner, ValueMap& map) {
  if (!a.ref_attr_name().empty()) return a;
  auto copy_sub = [&](const Attribute::GraphPtr& g) {
    auto sub = std::make_shared<Graph>(g->name());
    sub->set_parent(&owner);
    copy_graph(*g, *sub, map);
    return sub;
  };
  Attribute out;
  if (a.kind() == AttrKind::kGraph) {
    out = Attribute::graph(a.name(), copy_sub(a.as_graph()));
  } else if (a.kind() == AttrKind::kGraphs) {
    std::vector<Attribute::GraphPtr> gs;
    for (const auto& g : a.as_graphs()) gs.push_back(copy_sub(g));
    out = Attribute::graphs(a.name(), std::move(gs));
  } else {
    return a;
  }
  out.set_doc_string(a.doc_string());
  return out;
}

void copy_value_details(const Value& from, Value& to) {
  to.set_doc_string(from.doc_string());
  to.metadata() = from.metadata();
}

// Values are created in the source's order (inputs, initializers, node outputs, declarations),
// nodes before their inputs are wired, so unsorted graphs and captured outer values copy too.
void copy_graph(const Graph& src, Graph& dst, ValueMap& map, const std::vector<const Value*>& captured) {
  dst.set_name(src.name());
  dst.set_doc_string(src.doc_string());
  dst.metadata() = src.metadata();
  dst.quantization_annotations() = src.quantization_annotations();
  for (const Value* v : src.inputs()) map[v] = dst.add_input(v->name(), v->type());
  for (const Value* v : captured) map[v] = dst.add_input(v->name(), v->type());
  for (const Value* v : src.initializers()) map[v] = dst.add_initializer(v->initializer(), v->name());
  for (const Value* v : src.sparse_initializers()) map[v] = dst.add_sparse_initializer(v->sparse_initializer(), v->name());
  std::vector<std::pair<const Node*, Node*>> nodes;
  for (const Node* n : src.nodes()) {
    std::vector<std::string> outs;
    for (const Value* o : n->outputs()) outs.push_back(o ? o->name() : std::string());
    Node* c = dst.add_node(n->op_type(), {}, outs, n->name(), n->domain());
    for (size_t i = 0; i < outs.size(); ++i)
      if (n->output(i) != nullptr) map[n->output(i)] = c->output(i);
    nodes.emplace_back(n, c);
  }
  for (const Value* v : src.values()) {
    Value* c = map.count(v) ? map[v] : dst.declare(v->name(), v->type());
    map[v] = c;
    if (v->is_declared()) c->set_type(v->type());
    copy_value_details(*v, *c);
  }
  // An enclosing graph's initializer that a standalone copy of a subgraph reads (copy_subgraph)
  // becomes an initializer of the copy.
  auto lookup = [&](const Value* v) -> Value* {
    auto it = map.find(v);
    if (it != map.end()) return it->second;
    if (!v->has_initializer() || v->is_input()) return map.at(v);  // throws: an unmapped outer value
    return map[v] = dst.add_initializer(v->initializer(), v->name());
  };
  for (auto& [n, c] : nodes) {
    for (const Value* in : n->inputs()) c->add_input(in ? lookup(in) : nullptr);
    for (const Attribute& a : n->attributes()) c->set_attr(copy_attribute(a, dst, map));
    c->set_overload(n->overload());
    c->set_doc_string(n->doc_string());
    c->metadata() = n->metadata();
    c->device_configurations() = n->device_configurations();
  }
  for (const Value* v : src.outputs()) dst.add_output(lookup(v));
}

}  // namespace

std::unique_ptr<Graph> clone_graph(const Graph& graph) {
  auto out = std::make_unique<Graph>(graph.name());
  ValueMap map;
  copy_graph(graph, *out, map);
  return out;
}

void copy_subgraph(const Graph& graph, const std::vector<const Value*>& captured, Graph& into) {
  ValueMap map;
  copy_graph(graph, into, map, captured);
}

Model Model::clone() const {
  Model m;
  m.ir_version = ir_version;
  m.producer_name = producer_name;
  m.producer_version = producer_version;
  m.domain = domain;
  m.model_version = model_version;
  m.doc_string = doc_string;
  m.metadata = metadata;
  m.opset_imports = opset_imports;
  m.training_info = training_info;
  m.device_configurations = device_configurations;
  m.source_path = source_path;
  ValueMap map;
  copy_graph(graph(), m.graph(), map);
  for (const Function& f : functions) {
    Function c;
    c.name = f.name;
    c.domain = f.domain;
    c.overload = f.overload;
    c.attribute_names = f.attribute_names;
    c.attribute_defaults = f.attribute_defaults;
    c.opset_imports = f.opset_imports;
    c.doc_string = f.doc_string;
    c.metadata = f.metadata;
    ValueMap fmap;
    copy_graph(*f.body, *c.body, fmap);
    m.functions.push_back(std::move(c));
  }
  return m;
}

}  // namespace tether::ir
