// prepare(), profiles and plan(): which tensors a QDQ model quantizes and which share parameters.
#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <set>

#include "passes/passes.h"
#include "passes/rewrite.h"
#include "tether/engine.h"
#include "tether/quant.h"
#include "tether/shape_inference.h"

namespace tether::quant {

namespace {

// How a quantized op treats its tensors.
enum class Role {
  kCompute,  // Conv, Gemm, MatMul: activation inputs, a weight, a bias; its output its own range
  kShared,   // data movement: the output keeps the input's parameters (one group), no requantization
  kOwn,      // Add, Mul, pooling by averaging, activations: inputs and output each their own range
};

std::optional<Role> role_of(const ir::Node& n) {
  if (!(n.domain().empty() || n.domain() == "ai.onnx")) return std::nullopt;
  static const std::map<std::string, Role, std::less<>> kRoles = {
      {"Conv", Role::kCompute},       {"ConvTranspose", Role::kCompute}, {"Gemm", Role::kCompute},
      {"MatMul", Role::kCompute},     {"Reshape", Role::kShared},        {"Transpose", Role::kShared},
      {"Squeeze", Role::kShared},     {"Unsqueeze", Role::kShared},      {"Flatten", Role::kShared},
      {"MaxPool", Role::kShared},     {"GlobalMaxPool", Role::kShared},  {"AveragePool", Role::kShared},
      {"Slice", Role::kShared},       {"Split", Role::kShared},          {"Gather", Role::kShared},
      {"GatherElements", Role::kShared}, {"Resize", Role::kShared},      {"Pad", Role::kShared},
      {"DepthToSpace", Role::kShared}, {"SpaceToDepth", Role::kShared},  {"Concat", Role::kShared},
      {"Add", Role::kOwn},            {"Mul", Role::kOwn},               {"GlobalAveragePool", Role::kOwn},
      {"Sigmoid", Role::kOwn},        {"Softmax", Role::kOwn},           {"LeakyRelu", Role::kOwn},
      {"Relu", Role::kOwn},           {"Clip", Role::kOwn},
  };
  auto it = kRoles.find(n.op_type());
  return it == kRoles.end() ? std::nullopt : std::optional<Role>(it->second);
}

const std::vector<std::string> kOnnxruntimeOps = {
    "Conv", "ConvTranspose", "Gemm", "MatMul", "Add", "Mul", "Concat", "Relu", "Clip", "LeakyRelu", "Sigmoid",
    "Softmax", "MaxPool", "AveragePool", "GlobalAveragePool", "Reshape", "Transpose", "Squeeze", "Unsqueeze",
    "Flatten", "Resize", "Slice", "Pad", "Split", "Gather", "GatherElements"};
const std::vector<std::string> kTensorrtOps = {"Conv",    "ConvTranspose", "Gemm",
                                               "MatMul",  "MaxPool",       "AveragePool",
                                               "GlobalAveragePool", "Add"};
const std::vector<std::string> kNcnnOps = {"Conv", "Gemm", "MatMul"};

// Ops whose output holds exactly the input's values, rearranged.
bool moves_values_only(const ir::Node& n) {
  for (const char* op : {"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "DepthToSpace", "SpaceToDepth"})
    if (passes::is_onnx(n, op)) return true;
  return false;
}

bool is_float_activation(const ir::Value* v) {
  return v != nullptr && !passes::constant_of(v) && v->type().dtype() == ir::DType::kFloat32;
}

std::optional<ir::Tensor> float_constant(const ir::Value* v) {
  if (v == nullptr || v->type().dtype() != ir::DType::kFloat32) return std::nullopt;
  return passes::constant_of(v);
}

// Ops whose tensors are laid out channels first (N, C, ...).
bool channels_first(const ir::Node& n) {
  static const std::set<std::string, std::less<>> kOps = {
      "Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
      "BatchNormalization", "InstanceNormalization", "Resize", "DepthToSpace", "SpaceToDepth"};
  return (n.domain().empty() || n.domain() == "ai.onnx") && kOps.count(n.op_type()) > 0;
}

// The axis along which a tensor's channels lie: 1 for channels-first tensors, else the last.
int channel_axis_of(const ir::Value& v) {
  const ir::Shape& s = v.type().shape();
  if (!s.has_rank() || s.rank() < 2) return -1;
  bool first = s.rank() >= 4 || (v.producer() != nullptr && channels_first(*v.producer()));
  for (const ir::Use& u : v.uses()) first = first || channels_first(*u.node);
  return first ? 1 : static_cast<int>(s.rank()) - 1;
}

class UnionFind {
 public:
  int add() {
    parent_.push_back(static_cast<int>(parent_.size()));
    return parent_.back();
  }
  int find(int i) {
    while (parent_[static_cast<size_t>(i)] != i) i = parent_[static_cast<size_t>(i)] = parent_[static_cast<size_t>(parent_[static_cast<size_t>(i)])];
    return i;
  }
  void unite(int a, int b) {
    a = find(a);
    b = find(b);
    if (a != b) parent_[static_cast<size_t>(std::max(a, b))] = std::min(a, b);
  }

 private:
  std::vector<int> parent_;
};

class Planner {
 public:
  Planner(const ir::Model& model, const QuantizeOptions& options) : model_(model), options_(options) {
    const std::vector<std::string>& ops = options.op_types.empty() ? profile_options(options.profile).op_types : options.op_types;
    op_types_.insert(ops.begin(), ops.end());
    excluded_.insert(options.exclude_nodes.begin(), options.exclude_nodes.end());
    per_channel_ = options.per_channel;
    if (per_channel_ && model.opset("") < 13) {
      per_channel_ = false;
      plan_.notes.push_back("opset " + std::to_string(model.opset("")) +
                            " has no per-axis DequantizeLinear (it came in opset 13): weights are quantized per tensor");
    }
  }

  Plan run() {
    const ir::Graph& g = model_.graph();
    for (const ir::Node* n : g.topological_order()) {
      if (absorbed_.count(n) > 0) continue;
      const std::optional<Role> role = role_of(*n);
      if (!role || op_types_.count(n->op_type()) == 0 || excluded_.count(n->name()) > 0) continue;
      switch (*role) {
        case Role::kCompute: compute(*n); break;
        case Role::kShared: shared(*n); break;
        case Role::kOwn: own(*n); break;
      }
    }
    if (plan_.tensors.empty()) {
      std::string list;
      for (const std::string& op : op_types_) list += (list.empty() ? "" : ", ") + op;
      throw ModelError("nothing to quantize: no node of the quantized op types (" + list +
                       ") reads a float32 value computed from the inputs");
    }
    // Groups numbered in order of first appearance.
    std::map<int, int> ids;
    for (Plan::Tensor& t : plan_.tensors) {
      const int root = sets_.find(t.group);
      t.group = ids.emplace(root, static_cast<int>(ids.size())).first->second;
    }
    return std::move(plan_);
  }

 private:
  // The index of `v` in the plan, added when new; all_readers once set stays set.
  int tensor(const ir::Value& v, bool all_readers) {
    auto it = index_.find(v.name());
    if (it == index_.end()) {
      const int set = sets_.add();
      it = index_.emplace(v.name(), static_cast<int>(plan_.tensors.size())).first;
      plan_.tensors.push_back({v.name(), channel_axis_of(v), set, all_readers, ""});
    }
    Plan::Tensor& t = plan_.tensors[static_cast<size_t>(it->second)];
    t.all_readers = t.all_readers || all_readers;
    return it->second;
  }
  bool quantized(const ir::Value* v) const { return v != nullptr && index_.count(v->name()) > 0; }

  // The value a quantized node's output is quantized as: the output of a Relu or Clip that is
  // its only reader (the activation then runs inside the int8 kernel), else the output itself.
  const ir::Value* output_of(const ir::Node& n) {
    const ir::Value* out = n.output(0);
    if (!options_.quantize_outputs || out == nullptr || out->uses().size() != 1 ||
        !passes::only_reader(*out, *out->uses()[0].node))
      return out;
    const ir::Node& reader = *out->uses()[0].node;
    const bool act = passes::is_onnx(reader, "Relu") ||
                     (passes::is_onnx(reader, "Clip") && (reader.inputs().size() < 2 || passes::constant_of(reader.input(1))) &&
                      (reader.inputs().size() < 3 || passes::constant_of(reader.input(2))));
    if (!act || excluded_.count(reader.name()) > 0 || !is_float_activation(reader.output(0))) return out;
    absorbed_.insert(&reader);
    return reader.output(0);
  }

  PlannedNode& add_node(const ir::Node& n) {
    plan_.nodes.push_back({n.name(), n.op_type(), {}, {}, "", -1, ""});
    return plan_.nodes.back();
  }

  void input(PlannedNode& p, const ir::Value& v) {
    tensor(v, false);
    p.inputs.push_back(v.name());
  }

  void output(PlannedNode& p, const ir::Value* v, int share_with) {
    if (!options_.quantize_outputs || !is_float_activation(v)) return;
    const int t = tensor(*v, true);
    if (share_with >= 0) sets_.unite(plan_.tensors[static_cast<size_t>(t)].group, plan_.tensors[static_cast<size_t>(share_with)].group);
    p.outputs.push_back(v->name());
  }

  void compute(const ir::Node& n) {
    const std::string& op = n.op_type();
    const ir::Value* x = n.input(0);
    if (!is_float_activation(x)) {
      plan_.notes.push_back(n.describe() + " stays float: its input is not a float32 value computed from the inputs");
      return;
    }
    const ir::Value* w = n.input(1);
    std::optional<ir::Tensor> weight = float_constant(w);
    if (weight && (op == "MatMul" || op == "Gemm") && weight->rank() < 1) weight.reset();
    if (!weight && !is_float_activation(w)) {
      plan_.notes.push_back(n.describe() + " stays float: its second input is neither a float32 weight nor a float32 activation");
      return;
    }
    PlannedNode& p = add_node(n);
    input(p, *x);
    if (!weight) {
      input(p, *w);  // a product of two activations (attention)
    } else {
      p.weight = w->name();
      p.weight_axis = per_channel_ ? weight_axis(n, *weight) : -1;
      p.bias = bias_of(n, *weight);
    }
    output(p, output_of(n), -1);
  }

  int weight_axis(const ir::Node& n, const ir::Tensor& w) const {
    const std::string& op = n.op_type();
    if (op == "Conv") return 0;
    if (op == "ConvTranspose") return 1;
    if (op == "Gemm") return n.attr_int("transB", 0) != 0 ? 0 : 1;
    return w.rank() >= 2 ? static_cast<int>(w.rank()) - 1 : -1;  // MatMul: the output features
  }

  std::string bias_of(const ir::Node& n, const ir::Tensor& weight) {
    const std::string& op = n.op_type();
    if (!options_.quantize_bias || op == "MatMul" || n.inputs().size() < 3 || n.input(2) == nullptr) return "";
    std::optional<ir::Tensor> b = float_constant(n.input(2));
    const int64_t channels = op == "ConvTranspose" ? weight.dims()[1] * n.attr_int("group", 1)
                             : op == "Gemm"        ? weight.dims()[n.attr_int("transB", 0) != 0 ? 0 : 1]
                                                   : weight.dims()[0];
    const bool plain = op != "Gemm" || (n.attr_float("alpha", 1.0f) == 1.0f && n.attr_float("beta", 1.0f) == 1.0f);
    if (!b || b->rank() != 1 || b->dims()[0] != channels || !plain) {
      plan_.notes.push_back(n.describe() + ": bias '" + n.input(2)->name() + "' stays float (" +
                            (!b ? "not a float32 constant" : !plain ? "Gemm alpha or beta is not 1" : "not one value per output channel") + ")");
      return "";
    }
    return n.input(2)->name();
  }

  void shared(const ir::Node& n) {
    std::vector<const ir::Value*> ins;
    if (passes::is_onnx(n, "Concat")) {
      for (const ir::Value* v : n.inputs())
        if (!is_float_activation(v)) return;  // a constant piece would need its own parameters
      ins.assign(n.inputs().begin(), n.inputs().end());
    } else {
      if (!is_float_activation(n.input(0))) return;
      ins.push_back(n.input(0));
    }
    // With outputs quantized, data movement follows quantized inputs only (as onnxruntime
    // does): it then runs on int8 without changing parameters.
    if (options_.quantize_outputs && !std::all_of(ins.begin(), ins.end(), [&](const ir::Value* v) { return quantized(v); }))
      return;
    PlannedNode& p = add_node(n);
    int first = -1;
    for (const ir::Value* v : ins) {
      const int t = tensor(*v, false);
      p.inputs.push_back(v->name());
      if (first < 0) first = t;
      sets_.unite(plan_.tensors[static_cast<size_t>(first)].group, plan_.tensors[static_cast<size_t>(t)].group);
    }
    for (const ir::Value* out : n.outputs()) output(p, out, first);
    // Outputs of pure data movement hold the input's values: its statistics serve both.
    if (moves_values_only(n) && n.output(0) != nullptr && index_.count(n.output(0)->name()) > 0) {
      const Plan::Tensor& in = plan_.tensors[static_cast<size_t>(first)];
      Plan::Tensor& out = plan_.tensors[static_cast<size_t>(index_.at(n.output(0)->name()))];
      out.same_values_as = in.same_values_as.empty() ? in.name : in.same_values_as;
    }
  }

  void own(const ir::Node& n) {
    std::vector<const ir::Value*> ins;
    // Clip's bounds (inputs 1 and 2) are parameters, not data.
    const size_t data_inputs = passes::is_onnx(n, "Clip") ? 1 : n.inputs().size();
    for (size_t i = 0; i < data_inputs; ++i)
      if (is_float_activation(n.input(i))) ins.push_back(n.input(i));
    if (ins.empty() || n.output(0) == nullptr || n.output(0)->type().dtype() != ir::DType::kFloat32) return;
    // A Relu or Clip not absorbed by its producer runs int8 only after an int8 producer (its
    // output is then quantized anyway); on a float input it stays float, so that excluding a
    // node never asks for a tensor the plan without exclusions did not calibrate.
    if (options_.quantize_outputs && (passes::is_onnx(n, "Relu") || passes::is_onnx(n, "Clip")) && !quantized(ins[0])) return;
    PlannedNode& p = add_node(n);
    for (const ir::Value* v : ins) input(p, *v);
    output(p, output_of(n), -1);
  }

  const ir::Model& model_;
  const QuantizeOptions& options_;
  std::set<std::string, std::less<>> op_types_;
  std::set<std::string, std::less<>> excluded_;
  bool per_channel_ = true;
  std::set<const ir::Node*> absorbed_;
  std::map<std::string, int> index_;
  UnionFind sets_;
  Plan plan_;
};

}  // namespace

const std::vector<std::string>& profile_names() {
  static const std::vector<std::string> kNames = {"onnxruntime", "tensorrt", "ncnn"};
  return kNames;
}

QuantizeOptions profile_options(const std::string& profile) {
  QuantizeOptions o;
  o.profile = profile;
  if (profile == "onnxruntime") {
    o.op_types = kOnnxruntimeOps;
    return o;
  }
  if (profile == "tensorrt" || profile == "ncnn") {
    o.activations = {ir::DType::kInt8, true, false};
    o.weights = {ir::DType::kInt8, true, false};
    o.quantize_bias = false;
    o.quantize_outputs = false;
    o.op_types = profile == "tensorrt" ? kTensorrtOps : kNcnnOps;
    return o;
  }
  std::string names;
  for (const std::string& n : profile_names()) names += (names.empty() ? "" : ", ") + n;
  throw ArgumentError("unknown quantization profile '" + profile + "'; profiles: " + names);
}

std::vector<std::pair<std::string, int>> Plan::observed() const {
  std::vector<std::pair<std::string, int>> out;
  out.reserve(tensors.size());
  for (const Tensor& t : tensors)
    if (t.same_values_as.empty()) out.emplace_back(t.name, t.channel_axis);
  return out;
}

namespace {

// Plans, exclusions and reports name nodes: every node gets a name of its own, "<op>_<k>" for
// an unnamed one and "<name>_<k>" for a repeated one.
void name_nodes(ir::Graph& g) {
  std::set<std::string> taken;
  for (const ir::Node* n : g.nodes()) taken.insert(n->name());
  std::set<std::string> seen;
  for (ir::Node* n : g.nodes()) {
    if (!n->name().empty() && seen.insert(n->name()).second) continue;
    const std::string base = n->name().empty() ? n->op_type() : n->name();
    std::string name;
    for (int k = 0; name.empty() || taken.count(name) > 0; ++k) name = base + "_" + std::to_string(k);
    taken.insert(name);
    seen.insert(name);
    n->set_name(name);
  }
}

}  // namespace

Plan restrict_plan(const Plan& plan, const std::vector<std::string>& nodes) {
  Plan out;
  std::set<std::string> wanted(nodes.begin(), nodes.end()), listed;
  for (const PlannedNode& p : plan.nodes) {
    if (wanted.erase(p.node) == 0) continue;
    out.nodes.push_back(p);
    out.nodes.back().outputs.clear();
    listed.insert(p.inputs.begin(), p.inputs.end());
  }
  if (!wanted.empty()) throw ArgumentError("restrict_plan: '" + *wanted.begin() + "' is not a node of the plan");
  for (const Plan::Tensor& t : plan.tensors)
    if (listed.count(t.name) > 0) {
      out.tensors.push_back(t);
      out.tensors.back().all_readers = false;  // read quantized by the nodes kept only
    }
  return out;
}

ir::Model prepare(const ir::Model& model) {
  ir::Model m = model.clone();
  m.source_path.clear();  // a new model: the file it came from no longer holds it
  ir::Graph& g = m.graph();
  g.validate();
  name_nodes(g);
  passes::remove_identities(g);
  ops::infer_shapes(m);
  passes::fold_constants(m, &engine::constant_evaluator());
  passes::fold_conv_batchnorm(g);
  passes::remove_dead_nodes(g);
  passes::remove_unused_initializers(g);
  ops::infer_shapes(m);
  return m;
}

Plan plan(const ir::Model& prepared, const QuantizeOptions& options) {
  if (prepared.opset("") < 10)
    throw ModelError("the model imports ONNX opset " + std::to_string(prepared.opset("")) +
                     ", which has no QuantizeLinear (opset 10 and later; 13 for per-channel weights): convert or re-export it");
  std::vector<std::string> unknown;
  for (const std::string& name : options.exclude_nodes) {
    bool found = false;
    for (const ir::Node* n : prepared.graph().nodes()) found = found || n->name() == name;
    if (!found) unknown.push_back(name);
  }
  if (!unknown.empty()) {
    std::string list;
    for (const std::string& u : unknown) list += (list.empty() ? "'" : ", '") + u + "'";
    throw ArgumentError("exclude_nodes names no node of the model: " + list);
  }
  return Planner(prepared, options).run();
}

}  // namespace tether::quant
