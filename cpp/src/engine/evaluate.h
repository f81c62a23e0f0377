// Runs single nodes on constant tensors with the CPU kernels: what constant folding uses
// (through constant_evaluator(), tether/engine.h), so that a folded value is computed by the
// same code that would have computed it at run time.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tether/graph.h"

namespace tether::engine {

/// What evaluate_node() gives: the outputs, or why it did not compute them.
struct Evaluation {
  std::vector<ir::Tensor> outputs;  ///< per node output; invalid where the output is omitted
  std::string why_not;              ///< "" when outputs are set
  bool ok() const { return why_not.empty(); }
};

/// Runs `node` once, single-threaded, on `inputs` (one per node input; nullptr where the input
/// is omitted) with the CPU backend's kernel. Output sizes come from shape inference on the
/// constant inputs. Nothing is computed (why_not says why) when the CPU backend cannot run the
/// node, an output size does not follow from the inputs, or the outputs together would take
/// more than `max_output_bytes`. Throws ShapeError / ModelError when the inputs contradict the
/// node (as compiling it would).
Evaluation evaluate_node(const ir::Node& node, const std::vector<const ir::Tensor*>& inputs, int64_t opset,
                         int64_t max_output_bytes = std::numeric_limits<int64_t>::max());


}  // namespace tether::engine
