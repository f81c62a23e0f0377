// tether/passes.h: the graph rewrites compile() applies before it prepares kernels.
//
// optimize() folds constants (Shape chains over static shapes included), folds inference
// BatchNormalization into the conv before it, turns MatMul + bias into Gemm or FusedMatMul,
// fuses activations into ai.tether FusedConv / FusedGemm / FusedMatMul, and removes dead
// nodes and weights. Values keep their names; a fused node is named after the last node it
// replaces and lists the replaced nodes in its metadata under "tether.fused_from".
//
//   tether::ir::Model m = tether::ir::load_model("resnet.onnx");
//   std::string report = tether::passes::optimize(m);  // one line per pass, with counts
//   tether::ir::save_model(m, "resnet.opt.onnx");      // runs on tether, not onnxruntime
#pragma once

#include <string>

#include "tether/model.h"

namespace tether::passes {

struct OptimizeOptions {
  /// Lay convolutions and the nodes around them out channels last (ai.tether ops with
  /// channels_last = 1), as tether's CPU engine runs them fastest. Engines with kernels for
  /// the ONNX layout only (Vulkan) turn it off.
  bool channels_last = true;
};

/// Rewrites `model` in place and returns a report, one line per pass with its count. The
/// result may use tether's ai.tether ops (imported at version 1 when used). Throws ShapeError
/// when shape inference finds the model inconsistent.
std::string optimize(ir::Model& model, const OptimizeOptions& options = {});

}  // namespace tether::passes
