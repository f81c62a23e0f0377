// constant_evaluator(): one node, constant inputs, the CPU kernels, for constant folding, so that
// a folded value is computed by the same code that would have computed it at run time.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/kernel.h"
#include "tether/engine.h"
#include "tether/model.h"
#include "tether/shape_inference.h"

namespace tether::engine {

namespace {

// Kernels treat a null data pointer as an omitted input, so empty tensors point here.
alignas(64) std::byte kEmpty[64];

void* data_of(const ir::Tensor& t) {
  return t.nbytes() == 0 ? kEmpty : const_cast<void*>(t.raw_data());
}

bool has_subgraph(const ir::Node& node) {
  for (const ir::Attribute& a : node.attributes())
    if (a.kind() == ir::AttrKind::kGraph || a.kind() == ir::AttrKind::kGraphs) return true;
  return false;
}

// Runs `node` once, single-threaded, on `inputs` (one per node input; nullptr where omitted)
// with the CPU backend's kernel; output sizes from shape inference on the constant inputs.
// nullopt when the CPU backend cannot run the node, an output size does not follow from the
// inputs, or the outputs together would take more than `max_output_bytes`. Throws ShapeError /
// ModelError when the inputs contradict the node (as compiling it would).
std::optional<std::vector<ir::Tensor>> evaluate_node(const ir::Node& node, const std::vector<const ir::Tensor*>& inputs,
                                                     int64_t opset, int64_t max_output_bytes) {
  if (has_subgraph(node)) {
    return std::nullopt;
  }
  for (const ir::Tensor* t : inputs)
    if (t != nullptr && t->dtype() == ir::DType::kString) {
      return std::nullopt;
    }

  // A one-node model over the constants: shape inference then gives the output sizes, with
  // the node's own rules reading its constant inputs (Reshape targets, Range bounds, ...).
  ir::Model model;
  model.set_opset("", opset);
  if (!node.domain().empty() && node.domain() != "ai.onnx") model.set_opset(node.domain(), 1);
  ir::Graph& g = model.graph();
  std::vector<ir::Value*> ins;
  for (size_t i = 0; i < node.inputs().size(); ++i) {
    const ir::Tensor* t = i < inputs.size() ? inputs[i] : nullptr;
    ins.push_back(node.input(i) != nullptr && t != nullptr ? g.add_initializer(*t, "in" + std::to_string(i)) : nullptr);
  }
  std::vector<std::string> outs;
  for (size_t i = 0; i < node.outputs().size(); ++i) outs.push_back(node.output(i) ? "out" + std::to_string(i) : "");
  ir::Node* n = g.add_node(node.op_type(), ins, outs, node.name(), node.domain());
  for (const ir::Attribute& a : node.attributes()) n->set_attr(a);
  ops::infer_shapes(model);

  KernelInit init{*n, {}, {}, {}, opset};
  for (ir::Value* v : ins) {
    init.input_types.push_back(v ? v->type() : ir::ValueType());
    init.constants.push_back(v ? &v->initializer() : nullptr);
  }
  int64_t total = 0;
  std::vector<std::vector<int64_t>> dims(outs.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    const ir::Value* v = n->output(i);
    init.output_types.push_back(v ? v->type() : ir::ValueType());
    if (v == nullptr) continue;
    auto sizes = v->type().is_tensor() ? v->type().shape().static_sizes() : std::nullopt;
    const ir::DType dt = v->type().dtype();
    if (!sizes || dt == ir::DType::kUndefined || dt == ir::DType::kString) {
      return std::nullopt;
    }
    const auto bytes = ir::storage_bytes(dt, ir::checked_num_elements(*sizes).value_or(-1));
    if (!bytes || *bytes < 0 || total > max_output_bytes - *bytes) {
      return std::nullopt;
    }
    total += *bytes;
    dims[i] = *sizes;
  }
  const Backend& cpu = cpu_backend();
  if (std::string why = cpu.supports(init); !why.empty()) {
    return std::nullopt;
  }
  std::unique_ptr<HostKernel> kernel = create_host_kernel(init);

  std::vector<View> in_views, out_views;
  for (size_t i = 0; i < ins.size(); ++i)
    in_views.push_back(ins[i] ? View{init.input_dtype(i), ins[i]->initializer().dims(), data_of(ins[i]->initializer())}
                              : View{});
  std::vector<ir::Tensor> outputs(outs.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    if (n->output(i) == nullptr) {
      out_views.push_back(View{});
      continue;
    }
    outputs[i] = ir::Tensor::zeros(init.output_dtype(i), dims[i]);
    void* data = outputs[i].nbytes() == 0 ? kEmpty : outputs[i].mutable_raw_data();
    out_views.push_back(View{init.output_dtype(i), dims[i], data});
  }
  auto scratch = ir::Buffer::allocate(kernel->scratch_bytes(in_views, out_views));
  RunContext ctx{nullptr, scratch->mutable_data()};
  kernel->run(ctx, in_views, out_views);
  return outputs;
}

}  // namespace

namespace {

// The CPU kernels as constant folding's evaluator (passes::ConstantEvaluator).
class KernelEvaluator final : public passes::ConstantEvaluator {
 public:
  std::optional<std::vector<ir::Tensor>> evaluate(const ir::Node& node, const std::vector<const ir::Tensor*>& inputs,
                                                  int64_t opset, int64_t max_output_bytes) const override {
    return evaluate_node(node, inputs, opset, max_output_bytes);
  }
};

}  // namespace

const passes::ConstantEvaluator& constant_evaluator() {
  static const KernelEvaluator evaluator;
  return evaluator;
}

}  // namespace tether::engine
