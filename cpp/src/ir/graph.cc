#include "tether/graph.h"

#include <algorithm>
#include <functional>
#include <queue>
#include <unordered_set>

#include "tether/error.h"

namespace tether::ir {

namespace {

std::string graph_label(const Graph& g) { return "graph '" + g.name() + "'"; }

// Graphs held by a node's attributes.
std::vector<Graph*> subgraphs_of(const Node& node) {
  std::vector<Graph*> out;
  for (const Attribute& a : node.attributes()) {
    if (a.kind() == AttrKind::kGraph && std::holds_alternative<Attribute::GraphPtr>(a.storage())) {
      if (a.as_graph()) out.push_back(a.as_graph().get());
    } else if (a.kind() == AttrKind::kGraphs &&
               std::holds_alternative<std::vector<Attribute::GraphPtr>>(a.storage())) {
      for (const auto& g : a.as_graphs())
        if (g) out.push_back(g.get());
    }
  }
  return out;
}

// Values of `owner` that nodes inside `sub` (at any depth) read.
void collect_captures(const Graph& sub, const Graph& owner, std::vector<Value*>& out) {
  for (Node* n : sub.nodes()) {
    for (Value* v : n->inputs())
      if (v != nullptr && v->graph() == &owner) out.push_back(v);
    for (Graph* g : subgraphs_of(*n)) collect_captures(*g, owner, out);
  }
  for (Value* v : sub.outputs())
    if (v != nullptr && v->graph() == &owner) out.push_back(v);
}

// True when a graph held by a node of `g` (at any depth) lists `v` among its outputs. ONNX
// lets a branch return an enclosing graph's value directly, with no node reading it, so
// such an output is a use that Value::uses() does not record.
bool is_nested_output(const Graph& g, const Value* v) {
  for (Node* n : g.nodes())
    for (Graph* sub : subgraphs_of(*n)) {
      const auto& outs = sub->outputs();
      if (std::find(outs.begin(), outs.end(), v) != outs.end() || is_nested_output(*sub, v)) return true;
    }
  return false;
}

// Points the outputs of graphs held by nodes of `g` (at any depth) that are `from` at `to`.
void replace_nested_outputs(const Graph& g, Value* from, Value* to) {
  for (Node* n : g.nodes())
    for (Graph* sub : subgraphs_of(*n)) {
      std::vector<Value*> outs = sub->outputs();
      if (std::find(outs.begin(), outs.end(), from) != outs.end()) {
        std::replace(outs.begin(), outs.end(), from, to);
        sub->set_outputs(std::move(outs));
      }
      replace_nested_outputs(*sub, from, to);
    }
}

}  // namespace

// ---- Value ---------------------------------------------------------------------------------

bool Value::is_output() const {
  const auto& outs = graph_->outputs();
  return std::find(outs.begin(), outs.end(), this) != outs.end();
}

const Tensor& Value::initializer() const {
  TETHER_CHECK(initializer_.has_value(), "value '" + name_ + "' has no initializer");
  return *initializer_;
}

Tensor& Value::mutable_initializer() {
  TETHER_CHECK(initializer_.has_value(), "value '" + name_ + "' has no initializer");
  return *initializer_;
}

const SparseTensor& Value::sparse_initializer() const {
  TETHER_CHECK(sparse_initializer_.has_value(), "value '" + name_ + "' has no sparse initializer");
  return *sparse_initializer_;
}

bool Value::is_defined() const {
  return is_input_ || initializer_.has_value() || sparse_initializer_.has_value() || producer_ != nullptr;
}

// ---- Node ----------------------------------------------------------------------------------

Node::~Node() {
  // Last input first: uses are appended as inputs are set, so each one is found at the end.
  for (size_t i = inputs_.size(); i-- > 0;) detach_input(i);
}

void Node::detach_input(size_t i) {
  Value* v = inputs_[i];
  if (v == nullptr) return;
  auto& uses = v->uses_;
  // Searched from the end, where the latest uses are: tearing down a graph removes them in
  // the reverse of the order they were added, so each removal is then quick.
  auto it = std::find_if(uses.rbegin(), uses.rend(), [&](const Use& u) { return u.node == this && u.index == i; });
  if (it != uses.rend()) uses.erase(std::next(it).base());
  inputs_[i] = nullptr;
}

void Node::set_input(size_t i, Value* value) {
  if (value != nullptr && !graph_->is_visible(value))
    throw GraphError(describe() + " in " + graph_label(*graph_) + ": input value '" + value->name() +
                     "' belongs to " + graph_label(*value->graph()) + ", which this graph cannot see");
  if (i >= inputs_.size()) inputs_.resize(i + 1, nullptr);
  detach_input(i);
  inputs_[i] = value;
  if (value != nullptr) value->uses_.push_back({this, i});
}

void Node::add_input(Value* value) { set_input(inputs_.size(), value); }

const Attribute* Node::attr(std::string_view name) const {
  for (const Attribute& a : attributes_)
    if (a.name() == name) return &a;
  return nullptr;
}

void Node::set_attr(Attribute attribute) {
  if (attribute.kind() == AttrKind::kGraph && std::holds_alternative<Attribute::GraphPtr>(attribute.storage())) {
    if (attribute.as_graph()) attribute.as_graph()->set_parent(graph_);
  } else if (attribute.kind() == AttrKind::kGraphs &&
             std::holds_alternative<std::vector<Attribute::GraphPtr>>(attribute.storage())) {
    for (const auto& g : attribute.as_graphs())
      if (g) g->set_parent(graph_);
  }
  for (Attribute& a : attributes_) {
    if (a.name() == attribute.name()) {
      a = std::move(attribute);
      return;
    }
  }
  attributes_.push_back(std::move(attribute));
}

bool Node::remove_attr(std::string_view name) {
  auto it = std::find_if(attributes_.begin(), attributes_.end(), [&](const Attribute& a) { return a.name() == name; });
  if (it == attributes_.end()) return false;
  attributes_.erase(it);
  return true;
}

int64_t Node::attr_int(std::string_view name, int64_t fallback) const {
  const Attribute* a = attr(name);
  return a ? a->as_int() : fallback;
}

float Node::attr_float(std::string_view name, float fallback) const {
  const Attribute* a = attr(name);
  return a ? a->as_float() : fallback;
}

std::string Node::attr_string(std::string_view name, std::string fallback) const {
  const Attribute* a = attr(name);
  return a ? a->as_string() : fallback;
}

std::vector<int64_t> Node::attr_ints(std::string_view name, std::vector<int64_t> fallback) const {
  const Attribute* a = attr(name);
  return a ? a->as_ints() : fallback;
}

std::string Node::describe() const {
  std::string op = domain_.empty() ? op_type_ : domain_ + ":" + op_type_;
  if (!name_.empty()) return op + " '" + name_ + "'";
  const auto& nodes = graph_->nodes_;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].get() == this) return op + " #" + std::to_string(i);
  return op;
}

// ---- Graph: values -------------------------------------------------------------------------

Graph::Graph(std::string name) : name_(std::move(name)) {}

Graph::~Graph() {
  // Nodes go first: each detaches its uses from values that are still alive, here and in
  // enclosing graphs. Last node first, so that each finds its uses at the end of the values'
  // lists: in order, a value read by n nodes took n^2 steps to tear down.
  while (!nodes_.empty()) nodes_.pop_back();
}

Value* Graph::new_value(std::string name, ValueType type) {
  if (name.empty()) throw GraphError(graph_label(*this) + ": a value needs a non-empty name");
  auto value = std::unique_ptr<Value>(new Value(this, std::move(name), std::move(type)));
  Value* v = value.get();
  by_name_.emplace(v->name_, v);
  values_.push_back(std::move(value));
  return v;
}

Value* Graph::add_input(std::string name, ValueType type) {
  if (Value* v = find(name)) {
    if (v->is_input_ || v->producer_ != nullptr)
      throw GraphError(graph_label(*this) + ": input '" + name + "' is defined twice");
    v->is_input_ = true;
    if (!type.is_unknown()) v->type_ = std::move(type);
    inputs_.push_back(v);
    return v;
  }
  Value* v = new_value(std::move(name), std::move(type));
  v->is_input_ = true;
  inputs_.push_back(v);
  return v;
}

Value* Graph::add_initializer(Tensor tensor, std::string name) {
  if (name.empty()) name = tensor.name();
  if (name.empty()) throw GraphError(graph_label(*this) + ": an initializer needs a name");
  tensor.set_name(name);
  Value* v = find(name);
  if (v != nullptr && (v->initializer_ || v->sparse_initializer_ || v->producer_))
    throw GraphError(graph_label(*this) + ": initializer '" + name + "' is defined twice");
  if (v == nullptr) v = new_value(name, ValueType());
  if (v->type_.is_unknown()) v->type_ = ValueType::tensor(tensor.dtype(), Shape::of(tensor.dims()));
  v->initializer_ = std::move(tensor);
  initializers_.push_back(v);
  return v;
}

Value* Graph::add_sparse_initializer(SparseTensor tensor, std::string name) {
  if (name.empty()) name = tensor.values.name();
  if (name.empty()) throw GraphError(graph_label(*this) + ": a sparse initializer needs a name");
  // ONNX names a sparse initializer by its values tensor: that is where the writer looks.
  tensor.values.set_name(name);
  Value* v = find(name);
  if (v != nullptr && (v->initializer_ || v->sparse_initializer_ || v->producer_))
    throw GraphError(graph_label(*this) + ": sparse initializer '" + name + "' is defined twice");
  if (v == nullptr) v = new_value(std::move(name), ValueType());
  if (v->type_.is_unknown()) v->type_ = ValueType::tensor(tensor.values.dtype(), Shape::of(tensor.dims));
  v->sparse_initializer_ = std::move(tensor);
  sparse_initializers_.push_back(v);
  return v;
}

Value* Graph::declare(std::string name, ValueType type) {
  Value* v = find(name);
  if (v == nullptr) v = new_value(std::move(name), std::move(type));
  else if (!type.is_unknown()) v->type_ = std::move(type);
  v->declared_ = true;
  return v;
}

void Graph::add_output(Value* value) {
  TETHER_CHECK(value != nullptr, "add_output(nullptr)");
  if (!is_visible(value))
    throw GraphError(graph_label(*this) + ": output '" + value->name() + "' belongs to " +
                     graph_label(*value->graph()) + ", which this graph cannot see");
  outputs_.push_back(value);
}

void Graph::set_outputs(std::vector<Value*> outputs) {
  outputs_.clear();
  for (Value* v : outputs) add_output(v);
}

std::vector<Value*> Graph::initializers() const { return initializers_; }
std::vector<Value*> Graph::sparse_initializers() const { return sparse_initializers_; }

std::vector<Value*> Graph::values() const {
  std::vector<Value*> out;
  out.reserve(values_.size());
  for (const auto& v : values_) out.push_back(v.get());
  return out;
}

Value* Graph::find(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? nullptr : it->second;
}

Value* Graph::resolve(std::string_view name) const {
  for (const Graph* g = this; g != nullptr; g = g->parent_)
    if (Value* v = g->find(name)) return v;
  return nullptr;
}

bool Graph::is_visible(const Value* value) const {
  for (const Graph* g = this; g != nullptr; g = g->parent_)
    if (value->graph() == g) return true;
  return false;
}

void Graph::remove_value(Value* value) {
  TETHER_CHECK(value != nullptr && value->graph() == this, "remove_value of a value from another graph");
  if (!value->uses_.empty() || value->producer_ != nullptr || value->is_output() || is_nested_output(*this, value))
    throw GraphError(graph_label(*this) + ": cannot remove value '" + value->name() +
                     "': it is still produced, used or a graph output");
  auto drop = [&](std::vector<Value*>& list) { list.erase(std::remove(list.begin(), list.end(), value), list.end()); };
  drop(inputs_);
  drop(initializers_);
  drop(sparse_initializers_);
  by_name_.erase(value->name());
  values_.erase(std::find_if(values_.begin(), values_.end(), [&](const auto& p) { return p.get() == value; }));
}

void Graph::replace_all_uses(Value* from, Value* to) {
  TETHER_CHECK(from != nullptr && to != nullptr, "replace_all_uses with nullptr");
  if (from == to) return;
  const std::vector<Use> uses = from->uses_;
  for (const Use& u : uses) u.node->set_input(u.index, to);
  for (Value*& out : outputs_)
    if (out == from) out = to;
  replace_nested_outputs(*this, from, to);
}

// ---- Graph: nodes --------------------------------------------------------------------------

Node* Graph::add_node(std::string op_type, const std::vector<Value*>& inputs,
                      const std::vector<std::string>& outputs, std::string name, std::string domain,
                      Node* before) {
  // Check everything before changing anything, so a failed call leaves the graph as it was.
  auto node = std::unique_ptr<Node>(new Node(this, std::move(op_type), std::move(domain), std::move(name)));
  for (Value* v : inputs)
    if (v != nullptr && !is_visible(v))
      throw GraphError(node->op_type() + " '" + node->name() + "' in " + graph_label(*this) + ": input '" +
                       v->name() + "' belongs to " + graph_label(*v->graph()) + ", which this graph cannot see");
  std::unordered_set<std::string> seen;
  for (const std::string& out : outputs) {
    if (out.empty()) continue;
    Value* existing = find(out);
    if ((existing != nullptr && existing->is_defined()) || !seen.insert(out).second)
      throw GraphError(node->op_type() + " '" + node->name() + "' in " + graph_label(*this) + ": output '" + out +
                       "' is already defined (ONNX values are assigned once)");
  }
  auto pos = nodes_.end();
  if (before != nullptr) {
    pos = std::find_if(nodes_.begin(), nodes_.end(), [&](const auto& p) { return p.get() == before; });
    TETHER_CHECK(pos != nodes_.end(), "add_node: `before` is not a node of this graph");
  }

  Node* n = node.get();
  nodes_.insert(pos, std::move(node));
  for (size_t i = 0; i < outputs.size(); ++i) {
    Value* v = nullptr;
    if (!outputs[i].empty()) {
      v = find(outputs[i]);
      if (v == nullptr) v = new_value(outputs[i], ValueType());
      v->producer_ = n;
      v->producer_index_ = i;
    }
    n->outputs_.push_back(v);
  }
  for (Value* v : inputs) n->add_input(v);
  return n;
}

void Graph::remove_node(Node* node) {
  TETHER_CHECK(node != nullptr && node->graph() == this, "remove_node of a node from another graph");
  for (Value* v : node->outputs_) {
    if (v == nullptr) continue;
    if (!v->uses_.empty() || v->is_output() || is_nested_output(*this, v))
      throw GraphError(graph_label(*this) + ": cannot remove " + node->describe() + ": its output '" + v->name() +
                       "' is still used or is a graph output");
  }
  for (Value* v : node->outputs_) {
    if (v == nullptr) continue;
    v->producer_ = nullptr;
    remove_value(v);
  }
  nodes_.erase(std::find_if(nodes_.begin(), nodes_.end(), [&](const auto& p) { return p.get() == node; }));
}

std::vector<Node*> Graph::nodes() const {
  std::vector<Node*> out;
  out.reserve(nodes_.size());
  for (const auto& n : nodes_) out.push_back(n.get());
  return out;
}

std::vector<Node*> Graph::topological_order() const {
  const size_t n = nodes_.size();
  std::unordered_map<const Node*, size_t> pos;
  pos.reserve(n);
  for (size_t i = 0; i < n; ++i) pos.emplace(nodes_[i].get(), i);

  // deps[i]: positions of nodes that node i reads from (unique); users[j]: the reverse.
  std::vector<std::vector<size_t>> users(n);
  std::vector<size_t> indegree(n, 0);
  std::vector<std::vector<size_t>> deps(n);
  for (size_t i = 0; i < n; ++i) {
    std::vector<Value*> reads(nodes_[i]->inputs_.begin(), nodes_[i]->inputs_.end());
    for (Graph* g : subgraphs_of(*nodes_[i])) collect_captures(*g, *this, reads);
    for (Value* v : reads) {
      if (v == nullptr || v->producer_ == nullptr || v->graph() != this) continue;
      deps[i].push_back(pos.at(v->producer_));
    }
    std::sort(deps[i].begin(), deps[i].end());
    deps[i].erase(std::unique(deps[i].begin(), deps[i].end()), deps[i].end());
    indegree[i] = deps[i].size();
    for (size_t d : deps[i]) users[d].push_back(i);
  }

  // Kahn's algorithm, always taking the earliest ready node: a valid stored order is kept.
  std::priority_queue<size_t, std::vector<size_t>, std::greater<>> ready;
  for (size_t i = 0; i < n; ++i)
    if (indegree[i] == 0) ready.push(i);
  std::vector<Node*> order;
  order.reserve(n);
  while (!ready.empty()) {
    size_t i = ready.top();
    ready.pop();
    order.push_back(nodes_[i].get());
    for (size_t u : users[i])
      if (--indegree[u] == 0) ready.push(u);
  }
  if (order.size() == n) return order;

  // Walk back along unfinished dependencies until a node repeats: that walk is a cycle.
  size_t start = 0;
  while (indegree[start] == 0) ++start;
  std::vector<size_t> path;
  std::vector<int> seen_at(n, -1);
  size_t cur = start;
  while (seen_at[cur] < 0) {
    seen_at[cur] = static_cast<int>(path.size());
    path.push_back(cur);
    for (size_t d : deps[cur])
      if (indegree[d] > 0) {
        cur = d;
        break;
      }
  }
  // The path runs against the data flow, so it is written back to front, and the cycle
  // closes on the node written first: the last one on the path.
  std::string cycle;
  for (size_t k = static_cast<size_t>(seen_at[cur]); k < path.size(); ++k)
    cycle = nodes_[path[k]]->describe() + (cycle.empty() ? "" : " -> " + cycle);
  cycle += " -> " + nodes_[path.back()]->describe();
  throw GraphError(graph_label(*this) + " has a cycle: " + cycle + " (" + std::to_string(n - order.size()) +
                   " nodes cannot be ordered)");
}

void Graph::sort_topologically() {
  std::vector<Node*> order = topological_order();
  std::unordered_map<const Node*, size_t> rank;
  for (size_t i = 0; i < order.size(); ++i) rank.emplace(order[i], i);
  std::stable_sort(nodes_.begin(), nodes_.end(),
                   [&](const auto& a, const auto& b) { return rank.at(a.get()) < rank.at(b.get()); });
}

void Graph::validate() const {
  for (const auto& node : nodes_) {
    for (size_t i = 0; i < node->inputs_.size(); ++i) {
      const Value* v = node->inputs_[i];
      if (v != nullptr && !v->is_defined())
        throw GraphError(graph_label(*this) + ": " + node->describe() + " input " + std::to_string(i) + " '" +
                         v->name() + "' is not defined by any graph input, initializer or node output");
    }
    for (Graph* g : subgraphs_of(*node)) g->validate();
  }
  for (const Value* v : outputs_)
    if (!v->is_defined())
      throw GraphError(graph_label(*this) + ": output '" + v->name() +
                       "' is not defined by any graph input, initializer or node output");
  topological_order();
}

}  // namespace tether::ir
