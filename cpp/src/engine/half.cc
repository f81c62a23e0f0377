// float16 and bfloat16 arithmetic by way of float32: a node the backend cannot run on half
// precision data but can run on float32 reads float32 copies of its half inputs (constants
// converted once at compile time, other values through a Cast) and writes float32 values that a
// Cast rounds back to the half type under the original names. Every op's result is rounded to
// the model's type, as a half precision engine would store it.
#include "engine/half.h"

#include "passes/rewrite.h"
#include "util/float16.h"

namespace tether::engine {

namespace {

bool is_half(ir::DType t) { return t == ir::DType::kFloat16 || t == ir::DType::kBFloat16; }

ir::ValueType as_float(const ir::ValueType& t) { return ir::ValueType::tensor(ir::DType::kFloat32, t.shape()); }

// Ops whose output type an attribute or a subgraph decides, constants, and quantization ops
// (whose rounding of x / scale has no single float16 answer: onnxruntime divides in float32,
// the reference in float16), and ops of other domains: left as they are.
bool keeps_its_types(const ir::Node& n) {
  const std::string& op = n.op_type();
  if (!(n.domain().empty() || n.domain() == "ai.onnx") || op == "Constant" ||
      op.find("Quantize") != std::string::npos || op.find("Integer") != std::string::npos || op.rfind("QLinear", 0) == 0)
    return true;
  for (const ir::Attribute& a : n.attributes()) {
    const std::string& name = a.name();
    if (name == "to" || name == "dtype" || name == "output_dtype" || a.kind() == ir::AttrKind::kTensor ||
        a.kind() == ir::AttrKind::kGraph || a.kind() == ir::AttrKind::kGraphs)
      return true;
  }
  return false;
}

ir::Tensor to_float(const ir::Tensor& t) {
  const int64_t n = t.num_elements();
  ir::Tensor out = ir::Tensor::zeros(ir::DType::kFloat32, t.dims());
  if (n == 0) return out;
  float* dst = out.mutable_data<float>();
  const auto* src = t.data<uint16_t>();
  for (int64_t i = 0; i < n; ++i)
    dst[i] = t.dtype() == ir::DType::kFloat16 ? util::half_to_float(src[i]) : util::bfloat16_to_float(src[i]);
  return out;
}

}  // namespace

int lower_half_precision(ir::Model& model, const Backend& backend) {
  ir::Graph& g = model.graph();
  std::unordered_map<const ir::Value*, ir::Value*> float_of;  // a half value -> its float32 copy
  std::vector<std::unique_ptr<ir::Tensor>> converted;           // constants as float32, for checks
  std::unordered_map<const ir::Value*, const ir::Tensor*> converted_of;
  int lowered = 0;
  for (ir::Node* n : g.topological_order()) {
    bool half = false;
    for (const ir::Value* v : n->inputs()) half = half || (v != nullptr && is_half(v->type().dtype()));
    for (const ir::Value* v : n->outputs()) half = half || (v != nullptr && is_half(v->type().dtype()));
    if (!half || keeps_its_types(*n)) continue;

    // Runs as it is? Then it stays.
    KernelInit as_is{*n, {}, {}, {}, model.opset(""), 1, &model, nullptr};
    KernelInit as_float32{*n, {}, {}, {}, model.opset(""), 1, &model, nullptr};
    std::vector<std::optional<ir::Tensor>> constants;
    for (const ir::Value* v : n->inputs()) {
      std::optional<ir::Tensor> c = passes::constant_of(v);
      const ir::Tensor* kept = nullptr;
      if (c) {
        converted.push_back(std::make_unique<ir::Tensor>(*c));
        kept = converted.back().get();
      }
      as_is.input_types.push_back(v ? v->type() : ir::ValueType());
      as_is.constants.push_back(kept);
      const bool h = v != nullptr && is_half(v->type().dtype());
      as_float32.input_types.push_back(h ? as_float(v->type()) : as_is.input_types.back());
      const ir::Tensor* kept32 = kept;
      if (h && c) {
        auto it = converted_of.find(v);
        if (it == converted_of.end()) {
          converted.push_back(std::make_unique<ir::Tensor>(to_float(*c)));
          it = converted_of.emplace(v, converted.back().get()).first;
        }
        kept32 = it->second;
      }
      as_float32.constants.push_back(kept32);
    }
    for (const ir::Value* v : n->outputs()) {
      as_is.output_types.push_back(v ? v->type() : ir::ValueType());
      as_float32.output_types.push_back(v && is_half(v->type().dtype()) ? as_float(v->type()) : as_is.output_types.back());
    }
    if (backend.supports(as_is).empty() || !backend.supports(as_float32).empty()) continue;

    // Inputs: float32 copies (a converted initializer for a constant, else a Cast).
    std::vector<ir::Value*> inputs;
    for (size_t i = 0; i < n->inputs().size(); ++i) {
      ir::Value* v = n->input(i);
      if (v == nullptr || !is_half(v->type().dtype())) {
        inputs.push_back(v);
        continue;
      }
      auto it = float_of.find(v);
      if (it == float_of.end()) {
        const std::string name = passes::unique_name(g, v->name() + "_float32");
        ir::Value* f = nullptr;
        if (auto c = converted_of.find(v); c != converted_of.end()) {
          f = g.add_initializer(*c->second, name);
        } else {
          ir::Node* cast = g.add_node("Cast", {v}, {name}, passes::unique_name(g, name), "", n);
          cast->set_attr(ir::Attribute::i("to", static_cast<int64_t>(ir::DType::kFloat32)));
          f = cast->output(0);
          f->set_type(as_float(v->type()));
        }
        it = float_of.emplace(v, f).first;
      }
      inputs.push_back(it->second);
    }
    // Outputs: the node writes float32 values; Casts give the half values their names back.
    const std::string node_name = n->name();
    const std::string op = n->op_type(), domain = n->domain();
    const std::vector<ir::Attribute> attributes = n->attributes();
    const ir::Metadata metadata = n->metadata();
    std::vector<std::string> names, float_names;
    std::vector<ir::ValueType> types;
    std::vector<ir::Metadata> value_metadata;
    std::vector<ir::Value*> parked;
    for (ir::Value* v : n->outputs()) {
      names.push_back(v ? v->name() : "");
      types.push_back(v ? v->type() : ir::ValueType());
      value_metadata.push_back(v ? v->metadata() : ir::Metadata());
      parked.push_back(v ? passes::park_uses(g, v) : nullptr);
    }
    g.remove_node(n);
    for (size_t k = 0; k < names.size(); ++k)
      float_names.push_back(names[k].empty() || !is_half(types[k].dtype()) ? names[k]
                                                                           : passes::unique_name(g, names[k] + "_float32"));
    ir::Node* m = g.add_node(op, inputs, float_names, node_name, domain);
    for (const ir::Attribute& a : attributes) m->set_attr(a);
    m->metadata() = metadata;
    for (size_t k = 0; k < names.size(); ++k) {
      if (names[k].empty()) continue;
      ir::Value* out = m->output(k);
      if (is_half(types[k].dtype())) {
        out->set_type(as_float(types[k]));
        ir::Node* cast = g.add_node("Cast", {out}, {names[k]}, passes::unique_name(g, names[k] + "_cast"));
        cast->set_attr(ir::Attribute::i("to", static_cast<int64_t>(types[k].dtype())));
        out = cast->output(0);
      }
      out->set_type(types[k]);
      out->metadata() = value_metadata[k];
      passes::unpark(g, parked[k], out);
    }
    ++lowered;
  }
  return lowered;
}

}  // namespace tether::engine
