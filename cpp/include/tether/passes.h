// tether/passes.h: the graph rewrites compile() applies before it prepares kernels.
//
// optimize() folds constants (Shape chains over static shapes included), folds inference
// BatchNormalization into the conv before it, turns MatMul + bias into Gemm or FusedMatMul,
// fuses attention written out into ai.tether Attention and activations into ai.tether
// FusedConv / FusedGemm / FusedMatMul, and removes dead
// nodes and weights. Values keep their names; a fused node is named after the last node it
// replaces and lists the replaced nodes in its metadata under "tether.fused_from".
//
//   tether::ir::Model m = tether::ir::load_model("resnet.onnx");
//   tether::passes::OptimizeOptions o;
//   o.evaluator = &tether::engine::constant_evaluator();  // tether/engine.h: fold with its kernels
//   std::string report = tether::passes::optimize(m, o);  // one line per pass, with counts
//   tether::ir::save_model(m, "resnet.opt.onnx");      // runs on tether, not onnxruntime
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tether/model.h"

namespace tether::passes {

/// Computes a node's outputs from constant inputs: what constant folding asks for. The passes
/// name no backend; tether::engine::constant_evaluator() computes with the kernels the engine
/// would run, and compile() and the Python tt.optimize() hand it in.
///
///   tether::passes::OptimizeOptions o;
///   o.evaluator = &tether::engine::constant_evaluator();   // tether/engine.h
///   tether::passes::optimize(m, o);
class ConstantEvaluator {
 public:
  virtual ~ConstantEvaluator() = default;
  /// `node`'s outputs on `inputs` (one per node input, nullptr where the input is omitted),
  /// one per node output (a default Tensor where the output is omitted); nullopt when it does not
  /// compute them: no kernel takes the node, an output size does not follow from the inputs, or
  /// the outputs together would take more than `max_output_bytes`. Throws ModelError or
  /// ShapeError when the inputs contradict the node.
  virtual std::optional<std::vector<ir::Tensor>> evaluate(const ir::Node& node,
                                                          const std::vector<const ir::Tensor*>& inputs,
                                                          int64_t opset, int64_t max_output_bytes) const = 0;
};

struct OptimizeOptions {
  /// Lay convolutions and the nodes around them out channels last (ai.tether ops with
  /// channels_last = 1), as tether's CPU engine runs them fastest. Engines with kernels for
  /// the ONNX layout only (Vulkan) turn it off.
  bool channels_last = true;
  /// Fuse attention written out (MatMul, scale, mask, Softmax, MatMul over per-head or
  /// repeated keys and values) into one ai.tether Attention node, which tether's CPU engine
  /// runs without copying keys or values. Engines without that kernel (Vulkan) turn it off.
  bool fuse_attention = true;
  /// Computes the nodes whose inputs are all constant during constant folding. Null: only
  /// Constant nodes, and Shape / Size of values with static shapes, are folded; no other node
  /// is computed. compile() sets tether::engine::constant_evaluator().
  const ConstantEvaluator* evaluator = nullptr;
};

/// Rewrites `model` in place and returns a report, one line per pass with its count. The
/// result may use tether's ai.tether ops (imported at version 1 when used). Throws ShapeError
/// when shape inference finds the model inconsistent. Constant folding computes nodes only
/// through options.evaluator (see OptimizeOptions).
std::string optimize(ir::Model& model, const OptimizeOptions& options = {});

}  // namespace tether::passes
