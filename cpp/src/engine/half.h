// float16 and bfloat16 models on a backend that computes in float32.
#pragma once

#include "engine/kernel.h"

namespace tether::engine {

/// Rewrites each node of `model`'s main graph that `backend` cannot run on its float16 or
/// bfloat16 data but can run in float32: it then reads float32 copies of its half inputs
/// (constants converted once, other values through a Cast) and its half outputs are Casts of
/// float32 results under their original names. Types must be inferred. Returns how many
/// nodes were rewritten.
///
///   ops::infer_shapes(m);
///   if (lower_half_precision(m, cpu_backend()) > 0) ops::infer_shapes(m);
int lower_half_precision(ir::Model& model, const Backend& backend);

}  // namespace tether::engine
