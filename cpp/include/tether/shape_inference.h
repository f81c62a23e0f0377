// tether/shape_inference.h: shape and type inference over a model, symbolic dims included.
//
// Inference walks the graph in topological order and gives each node output a type from its
// inputs' types, its attributes and any constant inputs. Small integer tensors that hold
// shapes (Shape -> Gather -> Concat -> Reshape chains) are tracked by value, symbolic entries
// included, so a dynamic batch dim survives Reshape. An op without an inference rule leaves
// its outputs' types as they were; it never fails the model.
//
//   tether::ir::Model m = tether::ir::load_model("bert.onnx");
//   tether::ops::InferenceReport r = tether::ops::infer_shapes(m);
//   r.ops_without_inference;   // e.g. {"com.microsoft:FusedMatMul"}
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "tether/model.h"

namespace tether::ops {

struct InferenceOptions {
  /// Replace types already on values instead of merging with them.
  bool overwrite = false;
  /// Values of graph inputs known for this inference (by input name), used like constants:
  /// an engine binding a run's shape-carrying inputs ("shape tensors") passes them here. The
  /// tensors must outlive the call.
  std::unordered_map<std::string, const ir::Tensor*> input_values;
  /// Values of node outputs known from a run, by value name: after its node's inference, each
  /// such value takes the tensor's type and is used like a constant downstream. An engine that
  /// has run a graph up to an op whose output sizes depend on data passes what that op gave.
  std::unordered_map<std::string, const ir::Tensor*> output_values;
  /// Sizes of node outputs known from a run, by value name: after its node's inference, each
  /// such value takes these sizes (its element type stays as inferred).
  std::unordered_map<std::string, std::vector<int64_t>> output_dims;
  /// A subgraph whose inference fails (the branch of an If not taken for these shapes) leaves
  /// its node's outputs as they were instead of failing the model.
  bool tolerate_subgraph_errors = false;
};

struct InferenceReport {
  int64_t nodes_inferred = 0;
  int64_t nodes_skipped = 0;                     ///< nodes whose op has no inference rule
  std::vector<std::string> ops_without_inference;  ///< sorted, unique, "domain:Op" outside ONNX
};

/// Infers the types of every node output in `model` (subgraphs included) and stores them on
/// the values. Throws ShapeError naming the node when its inputs contradict the op (ranks or
/// dims that cannot match) or an inferred type contradicts a type already declared.
InferenceReport infer_shapes(ir::Model& model, const InferenceOptions& options = {});

}  // namespace tether::ops
