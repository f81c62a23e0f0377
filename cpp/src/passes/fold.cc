// Constant folding: nodes whose inputs are all known are computed once, at optimise time, by
// the CPU kernels that would otherwise compute them at every run.
#include <algorithm>
#include <unordered_map>

#include "ops/constant.h"
#include "passes/passes.h"
#include "passes/rewrite.h"
#include "tether/error.h"
#include "tether/shape_inference.h"

namespace tether::passes {

namespace {

// Ops whose result is not a function of their inputs, or whose form matters downstream:
// QuantizeLinear / DequantizeLinear pairs mark where the INT8 path applies, and folding a
// DequantizeLinear of int8 weights would store them as float.
bool never_fold(const ir::Node& n) {
  static const char* const kOps[] = {"RandomNormal",      "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                                     "Multinomial",       "Bernoulli",     "Dropout",          "QuantizeLinear",
                                     "DequantizeLinear", "DynamicQuantizeLinear"};
  for (const char* op : kOps)
    if (is_onnx(n, op)) return true;
  return false;
}

ir::Tensor int64_tensor(const std::vector<int64_t>& v, std::vector<int64_t> dims) {
  return ir::Tensor::copy_of(ir::DType::kInt64, std::move(dims), v.data(), static_cast<int64_t>(v.size() * sizeof(int64_t)));
}

// Shape and Size of a value whose (sliced) shape is static, from shape inference run on the
// graph inputs' declared shapes alone (`shapes`, by value name).
std::optional<ir::Tensor> fold_shape(const ir::Node& n, const std::unordered_map<std::string, ir::Shape>& shapes) {
  const bool is_shape = is_onnx(n, "Shape"), is_size = is_onnx(n, "Size");
  if ((!is_shape && !is_size) || n.input(0) == nullptr) return std::nullopt;
  auto it = shapes.find(n.input(0)->name());
  if (it == shapes.end() || !it->second.has_rank()) return std::nullopt;
  const ir::Shape& s = it->second;
  const auto rank = static_cast<int64_t>(s.rank());
  int64_t start = 0, end = rank;
  if (is_shape) {
    auto clamp = [&](int64_t v) { return std::clamp(v < 0 ? v + rank : v, int64_t{0}, rank); };
    start = clamp(n.attr_int("start", 0));
    end = clamp(n.attr_int("end", rank));
  }
  std::vector<int64_t> dims;
  for (int64_t d = start; d < end; ++d) {
    if (!s[static_cast<size_t>(d)].is_known()) return std::nullopt;
    dims.push_back(s[static_cast<size_t>(d)].value());
  }
  if (is_shape) return int64_tensor(dims, {static_cast<int64_t>(dims.size())});
  const std::optional<int64_t> count = ir::checked_num_elements(dims);  // declared dims can be absurd
  if (!count) return std::nullopt;
  return int64_tensor({*count}, {});
}

// Shapes as inference derives them from the graph inputs, ignoring what the model declares
// for intermediates: a Shape folded from a wrong declaration would be silently wrong.
std::unordered_map<std::string, ir::Shape> inferred_shapes(const ir::Model& model) {
  ir::Model probe = model.clone();
  ops::InferenceOptions o;
  o.overwrite = true;
  ops::infer_shapes(probe, o);
  std::unordered_map<std::string, ir::Shape> out;
  for (const ir::Value* v : probe.graph().values())
    if (v->type().is_tensor()) out.emplace(v->name(), v->type().shape());
  return out;
}

// The node's outputs when all its inputs are constant and the evaluator computes them within
// the size budget; nullopt otherwise.
std::optional<std::vector<ir::Tensor>> evaluate(const ConstantEvaluator& evaluator, const ir::Node& n, int64_t opset) {
  std::vector<ir::Tensor> held;
  held.reserve(n.inputs().size());
  std::vector<const ir::Tensor*> inputs;
  int64_t input_bytes = 0;
  for (const ir::Value* v : n.inputs()) {
    if (v == nullptr) {
      inputs.push_back(nullptr);
      continue;
    }
    std::optional<ir::Tensor> t = constant_of(v);
    if (!t) return std::nullopt;
    input_bytes += t->dtype() == ir::DType::kString ? 0 : t->nbytes();
    held.push_back(std::move(*t));
    inputs.push_back(&held.back());
  }
  try {
    return evaluator.evaluate(n, inputs, opset, std::max(kMaxFoldedBytes, input_bytes));
  } catch (const ModelError&) {
    // Inputs that contradict the node: compiling reports it, naming the model's own values.
  } catch (const UnsupportedError&) {
  }
  return std::nullopt;
}

}  // namespace

int fold_constants(ir::Model& model, const ConstantEvaluator* evaluator) {
  ir::Graph& g = model.graph();
  const int64_t opset = model.opset("") > 0 ? model.opset("") : 1;
  // Inference on a copy of the model is the costly part, and only Shape and Size read it.
  const std::vector<ir::Node*> order = g.topological_order();
  const bool reads_shapes =
      std::any_of(order.begin(), order.end(), [](const ir::Node* n) { return is_onnx(*n, "Shape") || is_onnx(*n, "Size"); });
  const std::unordered_map<std::string, ir::Shape> shapes =
      reads_shapes ? inferred_shapes(model) : std::unordered_map<std::string, ir::Shape>{};
  int folded = 0;
  for (ir::Node* n : order) {
    if (is_onnx(*n, "Constant")) {
      if (n->attr("sparse_value") != nullptr || n->output(0) == nullptr) continue;
      replace_with_constants(g, n, {ops::constant_value(*n)});
      ++folded;
      continue;
    }
    if (never_fold(*n)) continue;
    if (std::optional<ir::Tensor> s = fold_shape(*n, shapes)) {
      replace_with_constants(g, n, {std::move(*s)});
      ++folded;
      continue;
    }
    if (n->inputs().empty() || evaluator == nullptr) continue;  // a source node that is not Constant: leave it be
    if (std::optional<std::vector<ir::Tensor>> outs = evaluate(*evaluator, *n, opset)) {
      replace_with_constants(g, n, std::move(*outs));
      ++folded;
    }
  }
  return folded;
}

}  // namespace tether::passes
