// tether/graph.h: Value, Node and Graph, the core of tether's IR.
//
// A Graph owns its Values and Nodes. Values are in single static assignment form: each is
// defined once, as a graph input, an initializer or a node output, and knows its producer and
// every use. Subgraphs (the bodies of If, Loop, Scan) are Graphs held by node attributes; a
// subgraph's nodes may use values of enclosing graphs by name, and those uses are recorded on
// the outer values, so no rewrite can silently break a captured value.
//
//   using namespace tether::ir;
//   Graph g("mlp");
//   Value* x = g.add_input("x", ValueType::tensor(DType::kFloat32, Shape({Dim::symbol("batch"), Dim(4)})));
//   Value* w = g.add_initializer(Tensor::zeros(DType::kFloat32, {4, 2}), "w");
//   Node* mm = g.add_node("MatMul", {x, w}, {"y"});
//   g.add_output(mm->output(0));
//   g.topological_order();   // {mm}
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tether/attribute.h"
#include "tether/tensor.h"
#include "tether/type.h"

namespace tether::ir {

class Graph;
class Node;

/// Key-value metadata as ONNX stores it (metadata_props), in order.
using Metadata = std::vector<std::pair<std::string, std::string>>;

/// One use of a value: input `index` of `node`.
struct Use {
  Node* node;
  size_t index;
};

/// A named value: a graph input, an initializer, a node output, or (before anything defines
/// it) a declaration that only carries type information.
class Value {
 public:
  Value(const Value&) = delete;
  Value& operator=(const Value&) = delete;

  const std::string& name() const { return name_; }
  Graph* graph() const { return graph_; }

  const ValueType& type() const { return type_; }
  /// Sets the type; the value then counts as declared (it is written to ONNX value_info).
  void set_type(ValueType type) {
    type_ = std::move(type);
    declared_ = !type_.is_unknown();
  }

  /// The node whose output this is, or nullptr.
  Node* producer() const { return producer_; }
  /// Which output of producer() this is.
  size_t producer_index() const { return producer_index_; }
  /// Every node input (in this graph or its subgraphs) that reads this value.
  const std::vector<Use>& uses() const { return uses_; }

  bool is_input() const { return is_input_; }
  /// True when this value's own graph lists it among its outputs.
  bool is_output() const { return output_slots_ > 0; }
  bool has_initializer() const { return initializer_.has_value(); }
  /// The constant value. Precondition: has_initializer() (else InternalError).
  const Tensor& initializer() const;
  Tensor& mutable_initializer();
  bool has_sparse_initializer() const { return sparse_initializer_.has_value(); }
  const SparseTensor& sparse_initializer() const;
  /// True when something defines the value: an input, an initializer or a producer.
  bool is_defined() const;
  /// True when the model declared this value's type (ONNX value_info) or inference set it.
  bool is_declared() const { return declared_; }

  const std::string& doc_string() const { return doc_string_; }
  void set_doc_string(std::string doc) { doc_string_ = std::move(doc); }
  Metadata& metadata() { return metadata_; }
  const Metadata& metadata() const { return metadata_; }

 private:
  friend class Graph;
  friend class Node;
  Value(Graph* graph, std::string name, ValueType type)
      : graph_(graph), name_(std::move(name)), type_(std::move(type)) {}

  Graph* graph_;
  std::string name_;
  ValueType type_;
  Node* producer_ = nullptr;
  size_t producer_index_ = 0;
  std::vector<Use> uses_;
  std::list<std::unique_ptr<Value>>::iterator self_;  // where the graph holds it: removal is O(1)
  std::list<Value*>::iterator listed_at_;              // its entry among the (sparse) initializers
  size_t output_slots_ = 0;                            // entries of graph_->outputs() that are this
  bool is_input_ = false;
  bool declared_ = false;
  std::optional<Tensor> initializer_;
  std::optional<SparseTensor> sparse_initializer_;
  std::string doc_string_;
  Metadata metadata_;
};

/// An operator application: op type and domain, inputs, outputs, attributes.
class Node {
 public:
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  ~Node();

  const std::string& op_type() const { return op_type_; }
  /// Operator set domain: "" (the default ONNX domain), "ai.onnx.ml", "com.microsoft", ...
  const std::string& domain() const { return domain_; }
  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  const std::string& overload() const { return overload_; }
  void set_overload(std::string overload) { overload_ = std::move(overload); }
  Graph* graph() const { return graph_; }

  /// Inputs in order; nullptr marks an omitted optional input (ONNX's "").
  const std::vector<Value*>& inputs() const { return inputs_; }
  /// Input i, or nullptr when it is omitted or i is past the end.
  Value* input(size_t i) const { return i < inputs_.size() ? inputs_[i] : nullptr; }
  /// Outputs in order; nullptr marks an omitted optional output.
  const std::vector<Value*>& outputs() const { return outputs_; }
  Value* output(size_t i) const { return i < outputs_.size() ? outputs_[i] : nullptr; }

  /// Replaces input i (growing the list with omitted inputs as needed); keeps uses in step.
  /// Throws GraphError when `value` is not visible from this node's graph.
  void set_input(size_t i, Value* value);
  /// Appends an input.
  void add_input(Value* value);

  const std::vector<Attribute>& attributes() const { return attributes_; }
  /// The attribute called `name`, or nullptr.
  const Attribute* attr(std::string_view name) const;
  /// Adds or replaces an attribute. A graph-valued attribute's graphs become subgraphs of
  /// this node's graph.
  void set_attr(Attribute attribute);
  /// Removes the attribute called `name`; returns whether there was one.
  bool remove_attr(std::string_view name);
  /// Attribute accessors with defaults, for the common scalar kinds.
  int64_t attr_int(std::string_view name, int64_t fallback) const;
  float attr_float(std::string_view name, float fallback) const;
  std::string attr_string(std::string_view name, std::string fallback) const;
  std::vector<int64_t> attr_ints(std::string_view name, std::vector<int64_t> fallback = {}) const;

  const std::string& doc_string() const { return doc_string_; }
  void set_doc_string(std::string doc) { doc_string_ = std::move(doc); }
  Metadata& metadata() { return metadata_; }
  const Metadata& metadata() const { return metadata_; }
  /// ONNX device configurations of the node, kept as encoded bytes for round trips.
  std::vector<std::string>& device_configurations() { return device_configurations_; }
  const std::vector<std::string>& device_configurations() const { return device_configurations_; }

  /// "Conv 'stem.conv'" (or "Conv #12" when unnamed): how error messages name the node.
  std::string describe() const;

 private:
  friend class Graph;
  Node(Graph* graph, std::string op_type, std::string domain, std::string name)
      : graph_(graph), op_type_(std::move(op_type)), domain_(std::move(domain)), name_(std::move(name)) {}
  void detach_input(size_t i);
  size_t attr_position(std::string_view name) const;
  void note_graph_attributes();

  Graph* graph_;
  std::string op_type_;
  std::string domain_;
  std::string name_;
  std::string overload_;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
  std::vector<Attribute> attributes_;
  // Attribute positions by name, kept once a node has more attributes than a scan finds
  // quickly, so that reading or setting n attributes takes time linear in n.
  std::unordered_map<std::string, size_t> attr_index_;
  bool holds_graphs_ = false;  // some attribute holds a graph: listed in graph_->holders_
  std::string doc_string_;
  Metadata metadata_;
  std::vector<std::string> device_configurations_;
  std::list<std::unique_ptr<Node>>::iterator self_;  // where the graph holds it
  uint64_t order_ = 0;                               // increases along the stored order
  mutable size_t position_ = 0;                      // index in the stored order, when fresh
};

/// ONNX quantization annotation of a tensor: names of its scale and zero-point tensors.
struct TensorAnnotation {
  std::string tensor_name;
  Metadata quant_parameter_tensor_names;
};

/// A graph: inputs, initializers, nodes, outputs, and the values between them.
class Graph {
 public:
  explicit Graph(std::string name = "");
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  const std::string& doc_string() const { return doc_string_; }
  void set_doc_string(std::string doc) { doc_string_ = std::move(doc); }
  Metadata& metadata() { return metadata_; }
  const Metadata& metadata() const { return metadata_; }
  std::vector<TensorAnnotation>& quantization_annotations() { return quant_annotations_; }
  const std::vector<TensorAnnotation>& quantization_annotations() const { return quant_annotations_; }

  /// The graph whose node holds this one as an attribute, or nullptr for a top-level graph.
  Graph* parent() const { return parent_; }
  /// Sets the enclosing graph, whose values this graph's nodes may read. Node::set_attr sets
  /// it for graph attributes; set it yourself only to build a subgraph before attaching it.
  void set_parent(Graph* parent) { parent_ = parent; }

  // ---- values -------------------------------------------------------------------------
  /// Adds a graph input. Throws GraphError when the name is taken in this graph.
  Value* add_input(std::string name, ValueType type);
  /// Adds an initializer named `name` (or the tensor's own name when empty); the value's
  /// type is taken from the tensor. Throws GraphError when the name is defined already,
  /// unless it is a graph input without an initializer (ONNX's overridable default).
  Value* add_initializer(Tensor tensor, std::string name = "");
  /// Adds a sparse initializer. Same naming rules as add_initializer.
  Value* add_sparse_initializer(SparseTensor tensor, std::string name);
  /// Declares a value's type before (or without) a definition, as ONNX value_info does.
  /// Returns the existing value when the name is known in this graph.
  Value* declare(std::string name, ValueType type);
  /// Appends a graph output. The value must be visible from this graph (GraphError).
  void add_output(Value* value);
  /// Replaces the output list.
  void set_outputs(std::vector<Value*> outputs);

  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  /// Initializer values in the order they were added.
  std::vector<Value*> initializers() const;
  /// Sparse initializer values in the order they were added.
  std::vector<Value*> sparse_initializers() const;
  /// Every value of this graph, in the order it was created.
  std::vector<Value*> values() const;

  /// The value called `name` in this graph, or nullptr.
  Value* find(std::string_view name) const;
  /// The value called `name` in this graph or the nearest enclosing graph that has it.
  Value* resolve(std::string_view name) const;

  /// Removes a value that nothing produces, uses or outputs (this graph's outputs and those
  /// of its subgraphs, which may return it directly). Throws GraphError otherwise.
  void remove_value(Value* value);
  /// Points every use of `from` (node inputs here and in subgraphs, outputs of this graph and
  /// of its subgraphs) at `to`.
  void replace_all_uses(Value* from, Value* to);

  // ---- nodes --------------------------------------------------------------------------
  /// Adds a node with new output values named `outputs` ("" for an omitted output). The
  /// node goes before `before`, or at the end when it is nullptr. Throws GraphError when an
  /// output name is taken, or an input is not visible from this graph.
  Node* add_node(std::string op_type, const std::vector<Value*>& inputs,
                 const std::vector<std::string>& outputs, std::string name = "",
                 std::string domain = "", Node* before = nullptr);
  /// Removes a node and its output values. Throws GraphError when an output is still used
  /// or is an output of this graph or of one of its subgraphs.
  void remove_node(Node* node);
  /// Nodes in their stored order.
  std::vector<Node*> nodes() const;
  size_t num_nodes() const { return nodes_.size(); }
  /// The node stored right after `node` (a node of this graph), or nullptr for the last one.
  Node* next_node(const Node* node) const;
  /// True when node `a` is stored before node `b` (both nodes of this graph); constant time.
  bool stored_before(const Node* a, const Node* b) const;

  /// True when a graph held by a node of this graph (at any depth) lists `value` among its
  /// outputs: ONNX lets a branch return an enclosing graph's value directly, with no node
  /// reading it. Costs time in the number of such nodes, not in the size of this graph.
  bool returned_by_subgraph(const Value* value) const;

  /// Nodes in a topological order: stable (it keeps the stored order wherever that order
  /// is valid). Counts uses inside subgraphs as dependencies of the node holding them.
  /// Throws GraphError naming the nodes on a cycle.
  std::vector<Node*> topological_order() const;
  /// Reorders the stored nodes into topological_order().
  void sort_topologically();

  /// Checks that every node input and graph output is defined (here or in an enclosing
  /// graph), recursively into subgraphs. Throws GraphError naming the node and input.
  void validate() const;

 private:
  friend class Node;
  Value* new_value(std::string name, ValueType type);
  bool is_visible(const Value* value) const;
  void check_visible(const Node& reader, const Value* value) const;
  void replace_nested_outputs(Value* from, Value* to);
  void assign_order(std::list<std::unique_ptr<Node>>::iterator at);
  void renumber();
  size_t position_of(const Node& node) const;

  std::string name_;
  std::string doc_string_;
  Metadata metadata_;
  std::vector<TensorAnnotation> quant_annotations_;
  Graph* parent_ = nullptr;
  // Lists, so that rewrites insert and remove nodes and values in constant time each.
  std::list<std::unique_ptr<Node>> nodes_;
  std::list<std::unique_ptr<Value>> values_;
  std::vector<Node*> holders_;  // nodes with graph attributes, so subgraph scans skip the rest
  // Node::position_ is fresh while positions_fresh_; describe() renumbers lazily, under a lock
  // since it is a const call.
  mutable std::mutex positions_mutex_;
  mutable bool positions_fresh_ = true;
  std::unordered_map<std::string, Value*> by_name_;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
  std::list<Value*> initializers_;
  std::list<Value*> sparse_initializers_;
};

/// A deep copy of `graph` (a top-level graph: nothing in it may read enclosing graphs).
/// Tensors share their buffers.
std::unique_ptr<Graph> clone_graph(const Graph& graph);

/// Copies a subgraph into the empty graph `into` as a standalone graph: the subgraph's inputs,
/// then one input per value of `captured` (the enclosing graphs' values its nodes read, same
/// names and types), then its initializers, nodes and outputs. Tensors share their buffers.
///
///   ir::Graph body_alone;
///   ir::copy_subgraph(*if_node->attr("then_branch")->as_graph(), {x}, body_alone);
void copy_subgraph(const Graph& graph, const std::vector<const Value*>& captured, Graph& into);

}  // namespace tether::ir
