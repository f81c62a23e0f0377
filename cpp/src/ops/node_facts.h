// Facts about ONNX ops that the executor, every backend and the passes read alike: which inputs
// decide an output's shape by their values, and which ops only relabel their input's bytes.
#pragma once

#include <cstddef>

#include "tether/graph.h"

namespace tether::ops {

/// True when input i of `n` is read by value to decide an output's shape (a Reshape's target,
/// a Slice's bounds, a TopK's k): a "shape slot".
///
///   ops::is_shape_slot(reshape_node, 1);   // true
bool is_shape_slot(const ir::Node& n, size_t i);

/// True for ops whose output is their input's bytes unchanged (Reshape, Flatten, Squeeze,
/// Unsqueeze, Identity): views.
///
///   ops::keeps_bytes(flatten_node);   // true
bool keeps_bytes(const ir::Node& n);

/// True for ops that read their inputs' dims, never their data (Shape, Size): a step of one
/// need not wait for its input's producer when that producer's sizes are planned.
///
///   ops::reads_dims_only(shape_node);   // true
bool reads_dims_only(const ir::Node& n);

}  // namespace tether::ops
