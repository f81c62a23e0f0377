// GraphBuilder: a model built node by node, each node checked by its op's inference rule
// on the types known so far, so that a mistake is reported where it is made.
#include "tether/builder.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <unordered_set>

#include "ops/infer_context.h"
#include "tether/shape_inference.h"

namespace tether::ops {

namespace {

bool is_onnx_domain(std::string_view domain) { return domain.empty() || domain == "ai.onnx"; }

// The ONNX IR version released with an opset: runtimes refuse files whose IR version is
// newer than they know, so a file claims no more than its ops need.
int64_t ir_version_for(int64_t opset) {
  if (opset >= 21) return 10;
  if (opset >= 19) return 9;
  if (opset >= 15) return 8;
  if (opset >= 12) return 7;
  if (opset == 11) return 6;
  if (opset == 10) return 5;
  if (opset == 9) return 4;
  return 3;
}

// Where a value comes from, for messages about names already taken.
std::string origin(const ir::Value& v) {
  if (v.producer() != nullptr) return "an output of " + v.producer()->describe();
  if (v.has_initializer()) return "an initializer";
  if (v.is_input()) return "a graph input";
  return "a declared value";
}

// Attribute kinds of common ONNX ops, the union over opsets (Squeeze's `axes` was an
// attribute before opset 13, an input after). For these ops an attribute of another name or
// kind is refused; other ops get the checks their inference rules make.
using AttrKinds = std::map<std::string, ir::AttrKind, std::less<>>;

const std::map<std::string, AttrKinds, std::less<>>& known_attributes() {
  using K = ir::AttrKind;
  static const auto* table = [] {
    auto* t = new std::map<std::string, AttrKinds, std::less<>>();
    const AttrKinds conv = {{"auto_pad", K::kString}, {"dilations", K::kInts}, {"group", K::kInt},
                            {"kernel_shape", K::kInts}, {"pads", K::kInts},    {"strides", K::kInts}};
    (*t)["Conv"] = conv;
    (*t)["ConvTranspose"] = conv;
    (*t)["ConvTranspose"]["output_padding"] = K::kInts;
    (*t)["ConvTranspose"]["output_shape"] = K::kInts;
    (*t)["MaxPool"] = {{"auto_pad", K::kString}, {"ceil_mode", K::kInt},    {"dilations", K::kInts},
                       {"kernel_shape", K::kInts}, {"pads", K::kInts},      {"storage_order", K::kInt},
                       {"strides", K::kInts}};
    (*t)["AveragePool"] = {{"auto_pad", K::kString}, {"ceil_mode", K::kInt},     {"count_include_pad", K::kInt},
                           {"dilations", K::kInts},  {"kernel_shape", K::kInts}, {"pads", K::kInts},
                           {"strides", K::kInts}};
    (*t)["Gemm"] = {{"alpha", K::kFloat}, {"beta", K::kFloat}, {"transA", K::kInt}, {"transB", K::kInt}};
    for (const char* op : {"Softmax", "LogSoftmax", "Hardmax", "Flatten", "Concat", "Gather", "GatherElements"})
      (*t)[op] = {{"axis", K::kInt}};
    (*t)["Transpose"] = {{"perm", K::kInts}};
    (*t)["Reshape"] = {{"allowzero", K::kInt}};
    (*t)["BatchNormalization"] = {{"epsilon", K::kFloat}, {"momentum", K::kFloat}, {"training_mode", K::kInt}};
    (*t)["LayerNormalization"] = {{"axis", K::kInt}, {"epsilon", K::kFloat}, {"stash_type", K::kInt}};
    (*t)["InstanceNormalization"] = {{"epsilon", K::kFloat}};
    for (const char* op : {"LeakyRelu", "Elu", "Celu"}) (*t)[op] = {{"alpha", K::kFloat}};
    (*t)["Selu"] = {{"alpha", K::kFloat}, {"gamma", K::kFloat}};
    (*t)["HardSigmoid"] = {{"alpha", K::kFloat}, {"beta", K::kFloat}};
    (*t)["Gelu"] = {{"approximate", K::kString}};
    (*t)["Cast"] = {{"to", K::kInt}, {"saturate", K::kInt}};
    (*t)["Constant"] = {{"value", K::kTensor},         {"value_float", K::kFloat},  {"value_floats", K::kFloats},
                        {"value_int", K::kInt},        {"value_ints", K::kInts},    {"value_string", K::kString},
                        {"value_strings", K::kStrings}, {"sparse_value", K::kSparseTensor}};
    (*t)["ConstantOfShape"] = {{"value", K::kTensor}};
    (*t)["Split"] = {{"axis", K::kInt}, {"num_outputs", K::kInt}, {"split", K::kInts}};
    for (const char* op : {"Squeeze", "Unsqueeze"}) (*t)[op] = {{"axes", K::kInts}};
    for (const char* op : {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                           "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"})
      (*t)[op] = {{"axes", K::kInts}, {"keepdims", K::kInt}, {"noop_with_empty_axes", K::kInt}};
    for (const char* op : {"ArgMax", "ArgMin"})
      (*t)[op] = {{"axis", K::kInt}, {"keepdims", K::kInt}, {"select_last_index", K::kInt}};
    (*t)["Pad"] = {{"mode", K::kString}, {"pads", K::kInts}, {"value", K::kFloat}};
    (*t)["Dropout"] = {{"ratio", K::kFloat}, {"seed", K::kInt}};
    (*t)["Clip"] = {{"min", K::kFloat}, {"max", K::kFloat}};
    (*t)["Shape"] = {{"start", K::kInt}, {"end", K::kInt}};
    (*t)["CumSum"] = {{"exclusive", K::kInt}, {"reverse", K::kInt}};
    (*t)["TopK"] = {{"axis", K::kInt}, {"largest", K::kInt}, {"sorted", K::kInt}};
    for (const char* op : {"Relu", "Sigmoid", "Tanh", "Add", "Sub", "Mul", "Div", "MatMul", "Identity", "Exp", "Log",
                           "Sqrt", "Neg", "Abs", "Erf", "Reciprocal", "Pow", "GlobalAveragePool", "GlobalMaxPool",
                           "Expand", "Tile", "Where", "Equal", "Less", "Greater", "Not", "And", "Or", "Softplus",
                           "Min", "Max", "Sum", "Mean", "PRelu"})
      (*t)[op] = {};
    return t;
  }();
  return *table;
}

// An int where the op takes a float (Python's `alpha=1`) is the float it names; an empty
// list is a list of whatever kind the op takes.
std::optional<ir::Attribute> widen(const ir::Attribute& a, ir::AttrKind expected) {
  using K = ir::AttrKind;
  if (a.kind() == K::kInt && expected == K::kFloat) return ir::Attribute::f(a.name(), static_cast<float>(a.as_int()));
  if (a.kind() == K::kInts && expected == K::kFloats)
    return ir::Attribute::floats(a.name(), std::vector<float>(a.as_ints().begin(), a.as_ints().end()));
  if (a.kind() == K::kInts && a.as_ints().empty() && expected == K::kStrings) return ir::Attribute::strings(a.name(), {});
  return std::nullopt;
}

void check_attributes(ir::Node& node, const std::string& where) {
  const auto& table = known_attributes();
  auto op = table.find(node.op_type());
  if (!node.domain().empty() || op == table.end()) return;
  for (const ir::Attribute& a : std::vector<ir::Attribute>(node.attributes())) {
    auto it = op->second.find(a.name());
    if (it == op->second.end()) {
      std::string names;
      for (const auto& [n, k] : op->second) names += (names.empty() ? "" : ", ") + n;
      throw ArgumentError(where + ": " + node.op_type() + " has no attribute '" + a.name() + "' (" +
                          (names.empty() ? "it takes none" : "it takes " + names) + ")");
    }
    if (it->second == a.kind()) continue;
    if (auto w = widen(a, it->second)) {
      node.set_attr(std::move(*w));
      continue;
    }
    throw ArgumentError(where + ": attribute '" + a.name() + "' must be " + std::string(ir::attr_kind_name(it->second)) +
                        ", got " + std::string(ir::attr_kind_name(a.kind())));
  }
}

}  // namespace

struct GraphBuilder::Impl {
  ir::Model model;
  InferState state;
  std::unordered_set<std::string> node_names;

  std::string label() const { return "graph '" + model.graph().name() + "'"; }

  void check_free(const std::string& name, const std::string& who) const {
    if (name.empty()) throw ArgumentError(label() + ": " + who + " needs a non-empty name");
    if (const ir::Value* v = model.graph().find(name))
      throw GraphError(label() + ": " + who + " '" + name + "': the name is taken by " + origin(*v));
  }

  std::string fresh_node_name(const std::string& op_type) const {
    for (size_t k = node_names.size();; ++k) {
      std::string name = op_type + "_" + std::to_string(k);
      if (!node_names.count(name)) return name;
    }
  }

  const ir::Value& value(const std::string& name) const {
    const ir::Value* v = model.graph().find(name);
    if (v == nullptr) throw ArgumentError(label() + ": no value is called '" + name + "'");
    return *v;
  }

  // Runs the op's rule on the node just added and stores the output types.
  void infer(ir::Node& node, InferFn rule, const std::string& where) {
    InferContext ctx(node, state);
    try {
      rule(ctx);
    } catch (const ShapeError&) {
      throw;
    } catch (const ModelError& e) {  // an attribute of the wrong kind and the like
      throw ArgumentError(where + ": " + e.what());
    }
    for (size_t i = 0; i < ctx.outputs().size(); ++i)
      if (ir::Value* out = node.output(i); out != nullptr && !ctx.outputs()[i].is_unknown())
        out->set_type(ctx.outputs()[i]);
  }

  void forget(const ir::Node& node) {
    for (const ir::Value* v : node.outputs()) {
      state.constants.erase(v);
      state.shape_values.erase(v);
    }
  }
};

GraphBuilder::GraphBuilder(std::string graph_name, const std::map<std::string, int64_t>& opsets)
    : impl_(std::make_unique<Impl>()) {
  impl_->model.graph().set_name(std::move(graph_name));
  impl_->model.set_opset("", kDefaultBuilderOpset);
  for (const auto& [domain, version] : opsets) {
    if (version < 1)
      throw ArgumentError("GraphBuilder: opset version of domain '" + domain + "' must be >= 1, got " +
                          std::to_string(version));
    impl_->model.set_opset(is_onnx_domain(domain) ? "" : domain, version);
  }
  impl_->state.opset = impl_->model.opset("");
  impl_->model.ir_version = ir_version_for(impl_->state.opset);
  impl_->model.producer_name = "tether";
}

GraphBuilder::~GraphBuilder() = default;
GraphBuilder::GraphBuilder(GraphBuilder&&) noexcept = default;
GraphBuilder& GraphBuilder::operator=(GraphBuilder&&) noexcept = default;

std::string GraphBuilder::input(std::string name, ir::DType dtype, ir::Shape shape) {
  impl_->check_free(name, "input");
  if (dtype == ir::DType::kUndefined)
    throw ArgumentError(impl_->label() + ": input '" + name + "' needs a data type, got undefined");
  impl_->model.graph().add_input(name, ir::ValueType::tensor(dtype, std::move(shape)));
  return name;
}

std::string GraphBuilder::initializer(std::string name, ir::Tensor tensor) {
  impl_->check_free(name, "initializer");
  if (!tensor.is_valid()) throw ArgumentError(impl_->label() + ": initializer '" + name + "' has no data");
  tensor.set_name(name);
  impl_->model.graph().add_initializer(std::move(tensor), name);
  return name;
}

std::string GraphBuilder::initializer_ints(std::string name, const std::vector<int64_t>& values) {
  const auto n = static_cast<int64_t>(values.size());
  return initializer(std::move(name), ir::Tensor::copy_of(ir::DType::kInt64, {n}, values.data(), n * 8));
}

std::string GraphBuilder::initializer_scalar(std::string name, float value) {
  return initializer(std::move(name), ir::Tensor::copy_of(ir::DType::kFloat32, {}, &value, sizeof(float)));
}

std::vector<std::string> GraphBuilder::node(const std::string& op_type, const std::vector<std::string>& inputs,
                                            std::vector<ir::Attribute> attributes, NodeOptions options) {
  Impl& s = *impl_;
  ir::Graph& g = s.model.graph();
  if (op_type.empty()) throw ArgumentError(s.label() + ": node needs an op type");
  const std::string domain = is_onnx_domain(options.domain) ? "" : options.domain;
  std::string name = options.name.empty() ? s.fresh_node_name(op_type) : options.name;
  const std::string where = s.label() + ": " + (domain.empty() ? op_type : domain + ":" + op_type) + " '" + name + "'";
  if (s.node_names.count(name)) throw GraphError(where + ": a node called '" + name + "' exists already");

  InferFn rule = registry().find(domain, op_type);
  if (rule == nullptr && domain.empty())
    throw ArgumentError(where + ": tether knows no ONNX op '" + op_type +
                        "'; check the spelling, or give a domain of your own for a custom op");

  std::vector<ir::Value*> in;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].empty()) {
      in.push_back(nullptr);
      continue;
    }
    ir::Value* v = g.find(inputs[i]);
    if (v == nullptr)
      throw GraphError(where + ": input " + std::to_string(i) + " '" + inputs[i] +
                       "' names no value; add it first with input(), initializer() or node()");
    in.push_back(v);
  }

  std::vector<std::string> outs = options.outputs;
  if (outs.empty()) {
    if (options.num_outputs == 0) throw ArgumentError(where + ": a node needs at least one output");
    for (size_t i = 0; i < options.num_outputs; ++i) outs.push_back(name + "_output_" + std::to_string(i));
  }
  std::set<std::string> seen;
  for (const std::string& o : outs) {
    if (o.empty()) continue;
    if (const ir::Value* v = g.find(o))
      throw GraphError(where + ": output '" + o + "' is taken by " + origin(*v) + "; values are defined once");
    if (!seen.insert(o).second) throw GraphError(where + ": output '" + o + "' is listed twice");
  }
  std::set<std::string> attr_names;
  for (const ir::Attribute& a : attributes)
    if (!attr_names.insert(a.name()).second) throw ArgumentError(where + ": attribute '" + a.name() + "' is given twice");

  ir::Node* node = g.add_node(op_type, in, outs, name, domain);
  try {
    for (ir::Attribute& a : attributes) node->set_attr(std::move(a));
    check_attributes(*node, where);
    if (rule != nullptr) s.infer(*node, rule, where);
  } catch (...) {
    s.forget(*node);
    g.remove_node(node);
    throw;
  }
  if (!domain.empty() && s.model.opset(domain) < 0) s.model.set_opset(domain, 1);
  s.node_names.insert(name);
  return outs;
}

void GraphBuilder::output(const std::string& name) {
  ir::Graph& g = impl_->model.graph();
  ir::Value* v = g.find(name);
  if (v == nullptr)
    throw GraphError(impl_->label() + ": output '" + name + "' names no value; outputs must be inputs, initializers " +
                     "or node outputs added before");
  if (v->is_output()) throw ArgumentError(impl_->label() + ": '" + name + "' is an output already");
  g.add_output(v);
}

const ir::ValueType& GraphBuilder::type(const std::string& name) const { return impl_->value(name).type(); }

const ir::Shape& GraphBuilder::shape(const std::string& name) const { return impl_->value(name).type().shape(); }

ir::Model GraphBuilder::build() const {
  if (impl_->model.graph().outputs().empty())
    throw GraphError(impl_->label() + " has no outputs; mark the values the model returns with output(name)");
  ir::Model m = impl_->model.clone();
  m.graph().validate();
  infer_shapes(m);
  return m;
}

ir::SaveResult GraphBuilder::save(const std::string& path, const ir::SaveOptions& options) const {
  return ir::save_model(build(), path, options);
}

}  // namespace tether::ops
