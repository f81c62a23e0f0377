// Pieces every session kind shares (see session.h).
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <cstring>
#include <map>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "engine/half.h"
#include "engine/session.h"
#include "passes/passes.h"
#include "passes/rewrite.h"
#include "util/thread_pool.h"

namespace tether::engine {

using Dims = std::vector<int64_t>;

std::string dims_text(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

Dims value_key(ir::DType dtype, const void* data, size_t nbytes) {
  Dims words(2 + (nbytes + 7) / 8, 0);
  words[0] = static_cast<int64_t>(dtype);
  words[1] = static_cast<int64_t>(nbytes);
  if (nbytes > 0) std::memcpy(words.data() + 2, data, nbytes);
  return words;
}

int64_t physical_memory() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), size = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || size <= 0) return std::numeric_limits<int64_t>::max();
  return static_cast<int64_t>(pages) * static_cast<int64_t>(size);
}

int64_t memory_limit(const CompileOptions& options) {
  return options.max_memory > 0 ? options.max_memory : physical_memory();
}

int64_t checked_value_bytes(const ir::Node& node, const std::string& value, ir::DType dtype, const Dims& dims, int64_t limit) {
  const std::optional<int64_t> n = ir::checked_num_elements(dims);
  const std::optional<int64_t> bytes = n ? ir::storage_bytes(dtype, *n) : std::nullopt;
  if (!bytes || *bytes > limit)
    throw MemoryLimitError(node.describe() + ": output '" + value + "' of shape " + dims_text(dims) + " (" +
                           std::string(ir::dtype_name(dtype)) + ") would take " +
                           (bytes ? std::to_string(*bytes) + " bytes" : std::string("more bytes than int64 counts")) +
                           "; a run of this session may take " + std::to_string(limit) + " bytes (compile's max_memory)");
  return *bytes;
}

std::string prepare_model(ir::Model& model, const CompileOptions& options, const Backend& backend,
                          const passes::OptimizeOptions& passes) {
  model.graph().validate();
  for (const std::string& name : options.keep) {
    ir::Value* v = model.graph().find(name);
    if (v == nullptr) throw ArgumentError("keep: the model has no value named '" + name + "'");
    v->metadata().emplace_back(passes::kKeep, "1");
  }
  std::ostringstream report;
  // Not an optimization (optimize() runs it first): no backend has kernels of these contrib
  // ops, whose definitions are standard ops between DequantizeLinear and QuantizeLinear.
  if (!options.optimize)
    if (const int expanded = passes::expand_qoperator_ops(model); expanded > 0)
      report << "pass expand_qoperator_ops: " << expanded
             << " onnxruntime QOperator nodes written as DequantizeLinear -> op -> QuantizeLinear\n";
  if (options.optimize) {
    passes::OptimizeOptions with_evaluator = passes;
    if (with_evaluator.evaluator == nullptr) with_evaluator.evaluator = &constant_evaluator();
    report << passes::optimize(model, with_evaluator);
  }
  ops::infer_shapes(model);
  if (const int lowered = lower_half_precision(model, backend); lowered > 0) {
    ops::infer_shapes(model);
    report << backend.name() << ": " << lowered << " float16/bfloat16 node" << (lowered > 1 ? "s" : "")
           << " computed in float32\n";
  }
  return report.str();
}

// A session input is a shape tensor when its values reach a shape slot (directly, or through
// nodes computing on it other than Shape and Size, which read only shapes). Plans are then
// keyed by its values as well as by the input shapes.
std::vector<bool> find_shape_inputs(const ir::Graph& g) {
  std::unordered_map<const ir::Value*, bool> decides;
  const std::vector<ir::Node*> order = g.topological_order();
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const ir::Node& n = **it;
    const bool reads_shape_only = ops::reads_dims_only(n);
    bool output_decides = false;
    for (const ir::Value* o : n.outputs()) output_decides = output_decides || (o != nullptr && decides[o]);
    for (size_t i = 0; i < n.inputs().size(); ++i) {
      const ir::Value* in = n.input(i);
      if (in == nullptr) continue;
      if (ops::is_shape_slot(n, i) || (output_decides && !reads_shape_only)) decides[in] = true;
    }
  }
  std::vector<bool> out;
  for (const ir::Value* v : g.inputs()) out.push_back(decides[v]);
  return out;
}

std::vector<const ir::Tensor*> bind_inputs(const std::vector<TensorInfo>& inputs, const std::vector<const ir::Value*>& values,
                                           const std::vector<std::pair<std::string, ir::Tensor>>& named) {
  std::vector<const ir::Tensor*> bound(inputs.size(), nullptr);
  auto names = [&] {
    std::string s;
    for (const auto& i : inputs) s += (s.empty() ? "" : ", ") + i.name;
    return s;
  };
  for (const auto& entry : named) {
    const std::string& name = entry.first;  // not a structured binding: lambdas capture it (clang 14)
    const ir::Tensor& tensor = entry.second;
    auto it = std::find_if(inputs.begin(), inputs.end(), [&](const TensorInfo& i) { return i.name == name; });
    if (it == inputs.end()) throw ArgumentError("unknown input '" + name + "'; the model's inputs are: " + names());
    const auto k = static_cast<size_t>(it - inputs.begin());
    if (bound[k] != nullptr) throw ArgumentError("input '" + name + "' is given twice");
    bound[k] = &tensor;
  }
  std::map<std::string, std::pair<int64_t, std::string>> symbols;  // symbol -> (size, input that set it)
  for (size_t k = 0; k < inputs.size(); ++k) {
    const TensorInfo& info = inputs[k];
    if (bound[k] == nullptr) {
      bound[k] = values[k]->has_initializer() ? &values[k]->initializer() : nullptr;
      if (bound[k] == nullptr) throw ArgumentError("input '" + info.name + "' is missing; the model's inputs are: " + names());
      continue;
    }
    const ir::Tensor& t = *bound[k];
    if (info.dtype != ir::DType::kUndefined && t.dtype() != info.dtype)
      throw ArgumentError("input '" + info.name + "' is " + std::string(ir::dtype_name(t.dtype())) + ", the model expects " +
                          std::string(ir::dtype_name(info.dtype)));
    if (!info.shape.has_rank()) continue;
    if (t.rank() != info.shape.rank())
      throw ArgumentError("input '" + info.name + "' has rank " + std::to_string(t.rank()) + " (shape " +
                          dims_text(t.dims()) + "), the model expects rank " + std::to_string(info.shape.rank()) + " " +
                          info.shape.to_string());
    for (size_t d = 0; d < t.rank(); ++d) {
      const ir::Dim& want = info.shape[d];
      const int64_t got = t.dims()[d];
      if (want.is_known() && want.value() != got)
        throw ArgumentError("input '" + info.name + "' has shape " + dims_text(t.dims()) + ", but dim " + std::to_string(d) +
                            " must be " + std::to_string(want.value()) + " (the model expects " + info.shape.to_string() + ")");
      if (want.is_symbolic() && want.factors().size() == 1 && want.coefficient() == 1 && want.factors()[0].second == 1) {
        auto [it, fresh] = symbols.emplace(want.param(), std::make_pair(got, info.name));
        if (!fresh && it->second.first != got)
          throw ArgumentError("dim '" + want.param() + "' is " + std::to_string(it->second.first) + " in input '" +
                              it->second.second + "' but " + std::to_string(got) + " in input '" + info.name + "'");
      }
    }
  }
  return bound;
}

std::vector<Dims> plan_key(const std::vector<const ir::Tensor*>& bound, const std::vector<bool>& shape_input,
                           const std::vector<TensorInfo>& inputs, const std::string& engine) {
  std::vector<Dims> key;
  key.reserve(bound.size() * 2);
  for (const ir::Tensor* t : bound) key.push_back(t->dims());
  for (size_t k = 0; k < bound.size(); ++k) {
    if (!shape_input[k]) continue;
    const ir::Tensor& t = *bound[k];
    if (t.dtype() == ir::DType::kString || t.num_elements() > kMaxShapeTensorElements)
      throw UnsupportedError("input '" + inputs[k].name + "' decides output shapes by its values, and has " +
                             std::to_string(t.num_elements()) + " elements; the " + engine + " engine takes such inputs up to " +
                             std::to_string(kMaxShapeTensorElements) + " elements of a numeric type");
    key.push_back(value_key(t.dtype(), t.raw_data(), static_cast<size_t>(t.nbytes())));
  }
  return key;
}

namespace {

// Inference for a run's inputs: every type follows from them (none merged with the compiled
// ones), and the values of shape tensors are known.
ops::InferenceOptions for_inputs(ops::InferenceOptions opts, const std::vector<TensorInfo>& inputs,
                                 const std::vector<const ir::Tensor*>& bound, const std::vector<bool>& shape_input) {
  opts.overwrite = true;
  opts.tolerate_subgraph_errors = true;  // a branch these shapes do not take may not fit them
  for (size_t k = 0; k < inputs.size(); ++k)
    if (shape_input[k]) opts.input_values.emplace(inputs[k].name, bound[k]);
  return opts;
}

}  // namespace

void infer_for_inputs(const ir::Model& model, const std::vector<TensorInfo>& inputs, const std::vector<const ir::Tensor*>& bound,
                      const std::vector<bool>& shape_input, ops::InferenceOptions opts, ops::TypeOverlay& types,
                      ops::InferenceMemo* memo) {
  for (size_t k = 0; k < inputs.size(); ++k) {
    const ir::Value* v = model.graph().find(inputs[k].name);
    types.set(*v, ir::ValueType::tensor(v->type().dtype(), ir::Shape::of(bound[k]->dims())));
  }
  if (memo != nullptr) ops::infer_shapes(model, for_inputs(std::move(opts), inputs, bound, shape_input), types, *memo);
  else ops::infer_shapes(model, for_inputs(std::move(opts), inputs, bound, shape_input), types);
}

NodeInit kernel_init(const ir::Node& n, const ir::Model& model, std::shared_ptr<util::ThreadPool> pool,
                     const std::function<const ir::Tensor*(const ir::Value*)>& constant_of) {
  const int threads = pool != nullptr ? pool->threads() : 1;
  NodeInit out{KernelInit{n, {}, {}, {}, model.opset(""), threads, &model, std::move(pool)}, {}};
  KernelInit& init = out.init;
  // A node's own inputs, then the values its subgraphs read from this graph.
  out.inputs.assign(n.inputs().begin(), n.inputs().end());
  for (const ir::Value* v : captured_values(n)) out.inputs.push_back(v);
  for (const ir::Value* in : out.inputs) {
    init.input_types.push_back(in ? in->type() : ir::ValueType());
    init.constants.push_back(in ? constant_of(in) : nullptr);
  }
  for (const ir::Value* o : n.outputs()) init.output_types.push_back(o ? o->type() : ir::ValueType());
  return out;
}

std::string qualified_op(const ir::Node& n) {
  const std::string& d = n.domain();
  return d.empty() || d == "ai.onnx" ? n.op_type() : d + ":" + n.op_type();
}

StepInfo step_info(const ir::Node& n) {
  StepInfo info;
  info.name = n.name();
  info.op_type = qualified_op(n);
  for (const auto& [key, value] : n.metadata())
    if (key == passes::kFusedFrom) {
      for (size_t begin = 0; begin <= value.size();) {
        const size_t end = std::min(value.find(',', begin), value.size());
        if (end > begin) info.fused_from.push_back(value.substr(begin, end - begin));
        begin = end + 1;
      }
    }
  if (info.fused_from.empty()) info.fused_from.push_back(n.name().empty() && n.output(0) ? n.output(0)->name() : n.name());
  for (const ir::Value* v : n.inputs()) info.inputs.push_back(v ? v->name() : "");
  for (const ir::Value* v : n.outputs()) info.outputs.push_back(v ? v->name() : "");
  return info;
}

}  // namespace tether::engine
