// quantize_qdq(): the QDQ model a plan and its ranges describe; fold_dequantized_constants().
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "passes/passes.h"
#include "passes/rewrite.h"
#include "quant/rounding.h"
#include "tether/engine.h"
#include "tether/quant.h"
#include "tether/shape_inference.h"

namespace tether::quant {

namespace {

using ir::DType;

// x / scale in float32, rounded half to even, plus the zero point, saturated to [qmin, qmax]:
// onnxruntime's quantize_nparray and ONNX QuantizeLinear.
int64_t quantize_one(float x, float scale, int64_t zero_point, int64_t qmin, int64_t qmax) {
  const double q = round_half_even(static_cast<double>(x / scale)) + static_cast<double>(zero_point);
  return static_cast<int64_t>(std::min(std::max(q, static_cast<double>(qmin)), static_cast<double>(qmax)));
}

ir::Tensor integer_tensor(DType dtype, std::vector<int64_t> dims, const std::vector<int64_t>& values) {
  ir::Tensor t = ir::Tensor::zeros(dtype, std::move(dims));
  switch (dtype) {
    case DType::kInt8:
      for (size_t i = 0; i < values.size(); ++i) t.mutable_data<int8_t>()[i] = static_cast<int8_t>(values[i]);
      break;
    case DType::kUInt8:
      for (size_t i = 0; i < values.size(); ++i) t.mutable_data<uint8_t>()[i] = static_cast<uint8_t>(values[i]);
      break;
    case DType::kInt32:
      for (size_t i = 0; i < values.size(); ++i) t.mutable_data<int32_t>()[i] = static_cast<int32_t>(values[i]);
      break;
    default: throw InternalError("integer_tensor: unexpected dtype");
  }
  return t;
}

ir::Tensor float_tensor(std::vector<int64_t> dims, const std::vector<float>& values) {
  ir::Tensor t = ir::Tensor::zeros(DType::kFloat32, std::move(dims));
  std::copy(values.begin(), values.end(), t.mutable_data<float>());
  return t;
}

// Parameters as ONNX stores them: scalars per tensor, vectors per axis.
std::vector<int64_t> param_dims(const QParams& q) {
  return q.axis >= 0 ? std::vector<int64_t>{static_cast<int64_t>(q.scale.size())} : std::vector<int64_t>{};
}

class QdqWriter {
 public:
  QdqWriter(const ir::Model& prepared, const Plan& plan, const std::map<std::string, TensorRange>& ranges,
            const QuantizeOptions& options)
      : plan_(plan), ranges_(ranges), options_(options) {
    out_.model = prepared.clone();
    out_.model.source_path.clear();  // a new model: the file it came from no longer holds it
    for (ir::Node* n : graph().nodes()) {
      nodes_.emplace(n->name(), n);
      node_names_.insert(n->name());
    }
    excluded_.insert(options.exclude_nodes.begin(), options.exclude_nodes.end());
    for (const PlannedNode& p : plan.nodes)
      for (const std::string& a : p.inputs) readers_of_[a].insert(p.node);
  }

  QuantizedModel run() {
    check_plan();
    for (const Plan::Tensor& t : plan_.tensors) activation(t);
    for (const PlannedNode& p : plan_.nodes) {
      if (!p.weight.empty()) weight(p);
      if (!p.bias.empty()) bias(p);
    }
    passes::remove_unused_initializers(graph());  // float weights now read only through their DequantizeLinear
    graph().sort_topologically();
    ops::infer_shapes(out_.model);
    return std::move(out_);
  }

 private:
  ir::Graph& graph() { return out_.model.graph(); }

  // A plan names nodes, values and constants of the model it was made for; another model
  // (or the unprepared one, whose nodes may lack names) is refused before anything is written.
  void check_plan() {
    auto mismatch = [](const std::string& what) {
      return ArgumentError("the plan does not fit this model: " + what +
                           "; quantize the prepared model the plan was made for");
    };
    for (const PlannedNode& p : plan_.nodes) {
      if (nodes_.count(p.node) == 0) throw mismatch("it has no node '" + p.node + "'");
      for (const std::string* c : {&p.weight, &p.bias})
        if (!c->empty() && !passes::constant_of(graph().find(*c)))
          throw mismatch(p.op_type + " '" + p.node + "' reads '" + *c + "', which is no constant of it");
    }
    for (const Plan::Tensor& t : plan_.tensors)
      if (graph().find(t.name) == nullptr) throw mismatch("it has no value '" + t.name + "'");
  }

  // A node name not yet used: passes::unique_name looks at value names only, and one weight or
  // bias may get several DequantizeLinear nodes (one per axis, or per input scale).
  std::string node_name(const std::string& base) {
    std::string name = base;
    for (int i = 1; node_names_.count(name) > 0; ++i) name = base + "_" + std::to_string(i);
    node_names_.insert(name);
    return name;
  }

  ir::Value* constant(ir::Tensor t, const std::string& base) {
    return graph().add_initializer(std::move(t), passes::unique_name(graph(), base));
  }

  ir::Value* dequantize(const std::string& base, ir::Value* q, ir::Value* scale, ir::Value* zero_point, int axis) {
    std::vector<ir::Value*> ins = {q, scale};
    if (zero_point != nullptr) ins.push_back(zero_point);
    ir::Node* dq = graph().add_node("DequantizeLinear", ins, {passes::unique_name(graph(), base + "_dequantized")},
                                    node_name(base + "_DequantizeLinear"));
    if (axis >= 0) dq->set_attr(ir::Attribute::i("axis", axis));
    return dq->output(0);
  }

  // Which node inputs read the quantized form of `t`.
  std::vector<ir::Use> readers(const Plan::Tensor& t, const ir::Value& v) {
    std::vector<ir::Use> out;
    const auto planned = readers_of_.find(t.name);
    for (const ir::Use& u : v.uses()) {
      auto it = nodes_.find(u.node->name());
      if (it == nodes_.end() || it->second != u.node || excluded_.count(u.node->name()) > 0) continue;  // a subgraph's
      const bool listed = planned != readers_of_.end() && planned->second.count(u.node->name()) > 0;
      if (t.all_readers || listed) out.push_back(u);
    }
    return out;
  }

  void activation(const Plan::Tensor& t) {
    ir::Value* v = graph().find(t.name);
    const std::vector<ir::Use> uses = readers(t, *v);
    if (uses.empty()) return;  // read only as a graph output: that stays float
    auto r = ranges_.find(t.name);
    if (r == ranges_.end()) throw CalibrationError("no range for tensor '" + t.name + "': compute ranges for every planned tensor");
    const QParams q = qparams_for_range(r->second.range.min, r->second.range.max, options_.activations);
    out_.activations.emplace(t.name, q);
    ir::Value* scale = constant(float_tensor({}, q.scale), t.name + "_scale");
    ir::Value* zero_point = constant(integer_tensor(q.dtype, {}, q.zero_point), t.name + "_zero_point");
    ir::Node* quant = graph().add_node("QuantizeLinear", {v, scale, zero_point}, {passes::unique_name(graph(), t.name + "_quantized")},
                                       node_name(t.name + "_QuantizeLinear"));
    ir::Value* dq = dequantize(t.name, quant->output(0), scale, zero_point, -1);
    for (const ir::Use& u : uses) u.node->set_input(u.index, dq);
  }

  // A weight read along different axes (tied weights) is quantized once per axis.
  static std::string weight_key(const PlannedNode& p) { return p.weight + "@" + std::to_string(p.weight_axis); }

  void weight(const PlannedNode& p) {
    ir::Node* n = nodes_.at(p.node);
    const std::string key = weight_key(p);
    auto done = weight_dq_.find(key);
    if (done == weight_dq_.end()) {
      const std::optional<ir::Tensor> w = passes::constant_of(graph().find(p.weight));
      TETHER_CHECK(w.has_value(), "planned weight '" + p.weight + "' is not a constant");
      QParams q = weight_qparams(*w, p.weight_axis, options_.weights);
      const int64_t qmin = options_.weights.qmin(), qmax = options_.weights.qmax();
      const std::vector<int64_t>& dims = w->dims();
      int64_t outer = 1, inner = 1, channels = 1;
      if (p.weight_axis >= 0) {
        channels = dims[static_cast<size_t>(p.weight_axis)];
        for (int d = 0; d < p.weight_axis; ++d) outer *= dims[static_cast<size_t>(d)];
        for (size_t d = static_cast<size_t>(p.weight_axis) + 1; d < dims.size(); ++d) inner *= dims[d];
      } else {
        inner = w->num_elements();
      }
      std::vector<int64_t> values(static_cast<size_t>(w->num_elements()));
      const float* x = w->data<float>();
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t c = 0; c < channels; ++c)
          for (int64_t i = 0; i < inner; ++i) {
            const int64_t k = (o * channels + c) * inner + i;
            values[static_cast<size_t>(k)] = quantize_one(x[k], q.scale[static_cast<size_t>(c)], q.zero_point[static_cast<size_t>(c)], qmin, qmax);
          }
      ir::Value* data = constant(integer_tensor(q.dtype, dims, values), p.weight + "_quantized");
      ir::Value* scale = constant(float_tensor(param_dims(q), q.scale), p.weight + "_scale");
      ir::Value* zero_point = constant(integer_tensor(q.dtype, param_dims(q), q.zero_point), p.weight + "_zero_point");
      done = weight_dq_.emplace(key, dequantize(p.weight, data, scale, zero_point, q.axis)).first;
      weight_q_.emplace(key, q);
      out_.weights.emplace(p.weight, std::move(q));
    }
    n->set_input(1, done->second);
  }

  void bias(const PlannedNode& p) {
    ir::Node* n = nodes_.at(p.node);
    auto in = out_.activations.find(p.inputs.empty() ? "" : p.inputs[0]);
    auto w = weight_q_.find(weight_key(p));
    if (in == out_.activations.end() || w == weight_q_.end()) return;  // input or weight stayed float
    const std::string key = p.bias + "@" + p.inputs[0] + "@" + weight_key(p);
    auto done = bias_dq_.find(key);
    if (done == bias_dq_.end()) {
      const std::optional<ir::Tensor> b = passes::constant_of(graph().find(p.bias));
      TETHER_CHECK(b.has_value(), "planned bias '" + p.bias + "' is not a constant");
      const QParams& wq = w->second;
      QParams q;
      q.dtype = DType::kInt32;
      q.axis = wq.axis >= 0 ? 0 : -1;
      const auto n_out = static_cast<size_t>(b->num_elements());
      std::vector<int64_t> values(n_out);
      int64_t clipped = 0;
      const float in_scale = in->second.scale[0];
      // A product of scales below the normal floats cannot be a DequantizeLinear scale (and
      // would saturate every value): such a bias stays float.
      for (float s : wq.scale)
        if (!(in_scale * s >= std::numeric_limits<float>::min())) {
          out_.notes.push_back(n->describe() + ": bias '" + p.bias + "' stays float: input_scale * weight_scale = " +
                               std::to_string(in_scale * s) + " is below the normal float range");
          return;
        }
      // Output channel c reads weight channel c, but for a grouped ConvTranspose, whose weight
      // [C_in, C_out / group, ...] has C_out / group channels: c % (C_out / group).
      const size_t weight_channels = wq.scale.size();
      for (size_t c = 0; c < n_out; ++c) {
        if (!std::isfinite(b->data<float>()[c]))
          throw ArgumentError(n->describe() + ": bias '" + p.bias + "' holds " + std::to_string(b->data<float>()[c]) +
                              " at index " + std::to_string(c) + "; a quantized bias must be finite");
        const float s = in_scale * wq.scale[wq.axis >= 0 ? c % weight_channels : 0];
        if (c == 0 || q.axis >= 0) q.scale.push_back(s);
        const int64_t v = quantize_one(b->data<float>()[c], s, 0, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max());
        clipped += v == std::numeric_limits<int32_t>::min() || v == std::numeric_limits<int32_t>::max();
        values[c] = v;
      }
      if (clipped > 0)
        out_.notes.push_back(n->describe() + ": " + std::to_string(clipped) + " bias values of '" + p.bias +
                             "' exceed int32 at scale input_scale * weight_scale and were saturated");
      q.zero_point.assign(q.scale.size(), 0);
      ir::Value* data = constant(integer_tensor(DType::kInt32, b->dims(), values), p.bias + "_quantized");
      ir::Value* scale = constant(float_tensor(param_dims(q), q.scale), p.bias + "_scale");
      done = bias_dq_.emplace(key, dequantize(p.bias, data, scale, nullptr, q.axis)).first;
      out_.weights.emplace(p.bias, std::move(q));
    }
    n->set_input(2, done->second);
  }

  const Plan& plan_;
  const std::map<std::string, TensorRange>& ranges_;
  const QuantizeOptions& options_;
  QuantizedModel out_;
  std::map<std::string, ir::Node*> nodes_;
  std::set<std::string> node_names_;
  std::set<std::string> excluded_;
  std::map<std::string, std::set<std::string>> readers_of_;  // tensor -> planned nodes listing it
  std::map<std::string, ir::Value*> weight_dq_, bias_dq_;
  std::map<std::string, QParams> weight_q_;  // by weight_key()
};

}  // namespace

QuantizedModel quantize_qdq(const ir::Model& prepared, const Plan& plan, const std::map<std::string, TensorRange>& ranges,
                            const QuantizeOptions& options) {
  return QdqWriter(prepared, plan, ranges, options).run();
}

ir::Model fold_dequantized_constants(const ir::Model& qdq) {
  ir::Model m = qdq.clone();
  m.source_path.clear();
  ir::Graph& g = m.graph();
  for (ir::Node* n : g.nodes()) {
    if (!passes::is_onnx(*n, "DequantizeLinear")) continue;
    std::vector<ir::Tensor> values;
    std::vector<const ir::Tensor*> inputs;
    values.reserve(n->inputs().size());
    bool constant = true;
    for (const ir::Value* v : n->inputs()) {
      if (v == nullptr) {
        inputs.push_back(nullptr);
        continue;
      }
      std::optional<ir::Tensor> c = passes::constant_of(v);
      if (!c) {
        constant = false;
        break;
      }
      values.push_back(std::move(*c));
      inputs.push_back(&values.back());
    }
    if (!constant) continue;
    std::optional<std::vector<ir::Tensor>> outs =
        engine::constant_evaluator().evaluate(*n, inputs, m.opset(""), std::numeric_limits<int64_t>::max());
    if (outs) passes::replace_with_constants(g, n, std::move(*outs));
  }
  passes::remove_dead_nodes(g);
  passes::remove_unused_initializers(g);
  return m;
}

}  // namespace tether::quant
