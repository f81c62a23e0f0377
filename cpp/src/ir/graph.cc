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

}  // namespace

// ---- Value ---------------------------------------------------------------------------------

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
  if (value != nullptr) graph_->check_visible(*this, value);
  if (i >= inputs_.size()) inputs_.resize(i + 1, nullptr);
  detach_input(i);
  inputs_[i] = value;
  if (value != nullptr) value->uses_.push_back({this, i});
}

void Node::add_input(Value* value) { set_input(inputs_.size(), value); }

namespace {

// A handful of attributes is found fastest by a scan; past this many a node indexes them.
constexpr size_t kIndexedAttributes = 16;

bool holds_graph(const Attribute& a) { return a.kind() == AttrKind::kGraph || a.kind() == AttrKind::kGraphs; }

}  // namespace

// attributes_.size() when there is none of that name.
size_t Node::attr_position(std::string_view name) const {
  if (attr_index_.empty()) {
    for (size_t i = 0; i < attributes_.size(); ++i)
      if (attributes_[i].name() == name) return i;
    return attributes_.size();
  }
  auto it = attr_index_.find(std::string(name));
  return it == attr_index_.end() ? attributes_.size() : it->second;
}

// Keeps holds_graphs_ and graph_->holders_ in step with the attributes.
void Node::note_graph_attributes() {
  const bool holds = std::any_of(attributes_.begin(), attributes_.end(), holds_graph);
  if (holds == holds_graphs_) return;
  holds_graphs_ = holds;
  auto& holders = graph_->holders_;
  if (holds) holders.push_back(this);
  else holders.erase(std::find(holders.begin(), holders.end(), this));
}

const Attribute* Node::attr(std::string_view name) const {
  const size_t i = attr_position(name);
  return i < attributes_.size() ? &attributes_[i] : nullptr;
}

void Node::set_attr(Attribute attribute) {
  if (attribute.kind() == AttrKind::kGraph && std::holds_alternative<Attribute::GraphPtr>(attribute.storage())) {
    if (attribute.as_graph()) attribute.as_graph()->set_parent(graph_);
  } else if (attribute.kind() == AttrKind::kGraphs &&
             std::holds_alternative<std::vector<Attribute::GraphPtr>>(attribute.storage())) {
    for (const auto& g : attribute.as_graphs())
      if (g) g->set_parent(graph_);
  }
  const bool adds_graph = holds_graph(attribute);
  const size_t i = attr_position(attribute.name());
  if (i < attributes_.size()) {
    const bool dropped_graph = holds_graph(attributes_[i]);
    attributes_[i] = std::move(attribute);
    if (adds_graph != dropped_graph) note_graph_attributes();
    return;
  }
  attributes_.push_back(std::move(attribute));
  if (!attr_index_.empty()) {
    attr_index_.emplace(attributes_.back().name(), i);
  } else if (attributes_.size() > kIndexedAttributes) {
    for (size_t k = 0; k < attributes_.size(); ++k) attr_index_.emplace(attributes_[k].name(), k);
  }
  if (adds_graph && !holds_graphs_) note_graph_attributes();
}

bool Node::remove_attr(std::string_view name) {
  const size_t i = attr_position(name);
  if (i == attributes_.size()) return false;
  const bool dropped_graph = holds_graph(attributes_[i]);
  attributes_.erase(attributes_.begin() + static_cast<std::ptrdiff_t>(i));
  attr_index_.clear();  // positions past i moved; rebuilt while still worth having
  if (attributes_.size() > kIndexedAttributes)
    for (size_t k = 0; k < attributes_.size(); ++k) attr_index_.emplace(attributes_[k].name(), k);
  if (dropped_graph) note_graph_attributes();
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
  return op + " #" + std::to_string(graph_->position_of(*this));
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
  v->self_ = std::prev(values_.end());
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
  v->listed_at_ = initializers_.insert(initializers_.end(), v);
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
  v->listed_at_ = sparse_initializers_.insert(sparse_initializers_.end(), v);
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
  if (value->graph_ == this) ++value->output_slots_;
}

void Graph::set_outputs(std::vector<Value*> outputs) {
  for (Value* v : outputs_)
    if (v->graph_ == this) --v->output_slots_;
  outputs_.clear();
  for (Value* v : outputs) add_output(v);
}

std::vector<Value*> Graph::initializers() const { return {initializers_.begin(), initializers_.end()}; }
std::vector<Value*> Graph::sparse_initializers() const {
  return {sparse_initializers_.begin(), sparse_initializers_.end()};
}

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

void Graph::check_visible(const Node& reader, const Value* value) const {
  if (!is_visible(value))
    throw GraphError(reader.describe() + " in " + graph_label(*this) + ": input value '" + value->name() +
                     "' belongs to " + graph_label(*value->graph()) + ", which this graph cannot see");
}

bool Graph::returned_by_subgraph(const Value* value) const {
  for (const Node* n : holders_)
    for (const Graph* sub : subgraphs_of(*n)) {
      const auto& outs = sub->outputs();
      if (std::find(outs.begin(), outs.end(), value) != outs.end() || sub->returned_by_subgraph(value)) return true;
    }
  return false;
}

// Points the outputs of graphs held by nodes of this graph (at any depth) that are `from` at `to`.
void Graph::replace_nested_outputs(Value* from, Value* to) {
  for (const Node* n : holders_)
    for (Graph* sub : subgraphs_of(*n)) {
      std::vector<Value*> outs = sub->outputs();
      if (std::find(outs.begin(), outs.end(), from) != outs.end()) {
        std::replace(outs.begin(), outs.end(), from, to);
        sub->set_outputs(std::move(outs));
      }
      sub->replace_nested_outputs(from, to);
    }
}

void Graph::remove_value(Value* value) {
  TETHER_CHECK(value != nullptr && value->graph() == this, "remove_value of a value from another graph");
  if (!value->uses_.empty() || value->producer_ != nullptr || value->is_output() || returned_by_subgraph(value))
    throw GraphError(graph_label(*this) + ": cannot remove value '" + value->name() +
                     "': it is still produced, used or a graph output");
  // Initializers go in constant time, so removing every unused one of many is linear.
  if (value->is_input_) inputs_.erase(std::remove(inputs_.begin(), inputs_.end(), value), inputs_.end());
  if (value->initializer_) initializers_.erase(value->listed_at_);
  if (value->sparse_initializer_) sparse_initializers_.erase(value->listed_at_);
  by_name_.erase(value->name());
  values_.erase(value->self_);
}

void Graph::replace_all_uses(Value* from, Value* to) {
  TETHER_CHECK(from != nullptr && to != nullptr, "replace_all_uses with nullptr");
  if (from == to) return;
  for (const Use& u : from->uses_) u.node->graph_->check_visible(*u.node, to);
  // Moved all at once: one by one, each would search `from`'s list of uses for its entry.
  for (const Use& u : from->uses_) {
    u.node->inputs_[u.index] = to;
    to->uses_.push_back(u);
  }
  from->uses_.clear();
  for (Value*& out : outputs_)
    if (out == from) {
      out = to;
      if (from->graph_ == this) --from->output_slots_;
      if (to->graph_ == this) ++to->output_slots_;
    }
  replace_nested_outputs(from, to);
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
  // Most nodes have one output: the set of names seen is only built for several.
  std::unordered_set<std::string> seen;
  for (const std::string& out : outputs) {
    if (out.empty()) continue;
    Value* existing = find(out);
    if ((existing != nullptr && existing->is_defined()) || (outputs.size() > 1 && !seen.insert(out).second))
      throw GraphError(node->op_type() + " '" + node->name() + "' in " + graph_label(*this) + ": output '" + out +
                       "' is already defined (ONNX values are assigned once)");
  }
  TETHER_CHECK(before == nullptr || before->graph_ == this, "add_node: `before` is not a node of this graph");

  Node* n = node.get();
  n->self_ = nodes_.insert(before != nullptr ? before->self_ : nodes_.end(), std::move(node));
  assign_order(n->self_);
  if (before != nullptr) positions_fresh_ = false;
  else n->position_ = nodes_.size() - 1;
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
    if (!v->uses_.empty() || v->is_output() || returned_by_subgraph(v))
      throw GraphError(graph_label(*this) + ": cannot remove " + node->describe() + ": its output '" + v->name() +
                       "' is still used or is a graph output");
  }
  for (Value* v : node->outputs_) {
    if (v == nullptr) continue;
    v->producer_ = nullptr;
    remove_value(v);
  }
  if (node->holds_graphs_) holders_.erase(std::find(holders_.begin(), holders_.end(), node));
  positions_fresh_ = positions_fresh_ && std::next(node->self_) == nodes_.end();
  nodes_.erase(node->self_);
}

std::vector<Node*> Graph::nodes() const {
  std::vector<Node*> out;
  out.reserve(nodes_.size());
  for (const auto& n : nodes_) out.push_back(n.get());
  return out;
}

Node* Graph::next_node(const Node* node) const {
  TETHER_CHECK(node != nullptr && node->graph_ == this, "next_node of a node from another graph");
  auto it = std::next(node->self_);
  return it == nodes_.end() ? nullptr : it->get();
}

bool Graph::stored_before(const Node* a, const Node* b) const {
  TETHER_CHECK(a != nullptr && b != nullptr && a->graph_ == this && b->graph_ == this,
               "stored_before of a node from another graph");
  return a->order_ < b->order_;
}

namespace {
// Room left between neighbouring order keys, so that most insertions find a key between them.
constexpr uint64_t kOrderGap = uint64_t{1} << 20;
}  // namespace

// Gives the node at `at` a key between its neighbours', renumbering every node when there is none.
void Graph::assign_order(std::list<std::unique_ptr<Node>>::iterator at) {
  const uint64_t lo = at == nodes_.begin() ? 0 : (*std::prev(at))->order_;
  const auto next = std::next(at);
  if (next == nodes_.end()) {
    if (lo <= UINT64_MAX - kOrderGap) {
      (*at)->order_ = lo + kOrderGap;
      return;
    }
  } else if ((*next)->order_ - lo >= 2) {
    (*at)->order_ = lo + ((*next)->order_ - lo) / 2;
    return;
  }
  renumber();
}

void Graph::renumber() {
  uint64_t key = 0;
  for (auto& n : nodes_) n->order_ = key += kOrderGap;
}

// Brings every node's position_ up to date, not only `node`'s.
size_t Graph::position_of(const Node& node) const {
  std::lock_guard<std::mutex> lock(positions_mutex_);
  if (!positions_fresh_) {
    size_t i = 0;
    for (const auto& n : nodes_) n->position_ = i++;
    positions_fresh_ = true;
  }
  return node.position_;
}

std::vector<Node*> Graph::topological_order() const {
  const std::vector<Node*> stored = nodes();
  const size_t n = stored.size();
  if (n > 0) position_of(*stored[0]);  // Node::position_ is then each node's index in `stored`

  // Node i reads from the nodes deps[dep_at[i] .. dep_at[i+1]) (unique, ascending); node j's
  // readers are users[user_at[j] .. user_at[j+1]). Flat arrays: a vector per node made this,
  // run by every pass, mostly allocation.
  std::vector<size_t> dep_at(n + 1, 0), deps;
  deps.reserve(n * 2);
  std::vector<size_t> indegree(n, 0), user_at(n + 1, 0);
  std::vector<Value*> captures;
  for (size_t i = 0; i < n; ++i) {
    auto add = [&](const Value* v) {
      if (v != nullptr && v->producer_ != nullptr && v->graph_ == this) deps.push_back(v->producer_->position_);
    };
    for (const Value* v : stored[i]->inputs_) add(v);
    if (stored[i]->holds_graphs_) {
      captures.clear();
      for (Graph* g : subgraphs_of(*stored[i])) collect_captures(*g, *this, captures);
      for (const Value* v : captures) add(v);
    }
    const auto first = deps.begin() + static_cast<std::ptrdiff_t>(dep_at[i]);
    std::sort(first, deps.end());
    deps.erase(std::unique(first, deps.end()), deps.end());
    dep_at[i + 1] = deps.size();
    indegree[i] = dep_at[i + 1] - dep_at[i];
    for (size_t k = dep_at[i]; k < dep_at[i + 1]; ++k) ++user_at[deps[k] + 1];
  }
  for (size_t j = 0; j < n; ++j) user_at[j + 1] += user_at[j];
  std::vector<size_t> users(deps.size()), filled(user_at.begin(), user_at.end() - 1);
  for (size_t i = 0; i < n; ++i)
    for (size_t k = dep_at[i]; k < dep_at[i + 1]; ++k) users[filled[deps[k]]++] = i;

  // Kahn's algorithm, always taking the earliest ready node: a valid stored order is kept.
  std::priority_queue<size_t, std::vector<size_t>, std::greater<>> ready;
  for (size_t i = 0; i < n; ++i)
    if (indegree[i] == 0) ready.push(i);
  std::vector<Node*> order;
  order.reserve(n);
  while (!ready.empty()) {
    size_t i = ready.top();
    ready.pop();
    order.push_back(stored[i]);
    for (size_t k = user_at[i]; k < user_at[i + 1]; ++k)
      if (--indegree[users[k]] == 0) ready.push(users[k]);
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
    for (size_t k = dep_at[cur]; k < dep_at[cur + 1]; ++k)
      if (indegree[deps[k]] > 0) {
        cur = deps[k];
        break;
      }
  }
  // The path runs against the data flow, so it is written back to front, and the cycle
  // closes on the node written first: the last one on the path.
  std::string cycle;
  for (size_t k = static_cast<size_t>(seen_at[cur]); k < path.size(); ++k)
    cycle = stored[path[k]]->describe() + (cycle.empty() ? "" : " -> " + cycle);
  cycle += " -> " + stored[path.back()]->describe();
  throw GraphError(graph_label(*this) + " has a cycle: " + cycle + " (" + std::to_string(n - order.size()) +
                   " nodes cannot be ordered)");
}

void Graph::sort_topologically() {
  std::vector<Node*> order = topological_order();
  std::unordered_map<const Node*, size_t> rank;
  for (size_t i = 0; i < order.size(); ++i) rank.emplace(order[i], i);
  // list::sort moves no node, so every Node::self_ stays valid.
  nodes_.sort([&](const auto& a, const auto& b) { return rank.at(a.get()) < rank.at(b.get()); });
  renumber();
  positions_fresh_ = false;
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
