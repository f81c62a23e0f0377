// What a Constant node holds: the op's definition, which shape inference, constant folding and
// every backend read alike.
#pragma once

#include "tether/graph.h"

namespace tether::ops {

/// The tensor a Constant node holds (value, value_float(s), value_int(s), value_string(s)).
/// Throws UnsupportedError for a sparse value and ModelError when no value attribute is set.
///
///   ir::Tensor t = ops::constant_value(*node);   // node->op_type() == "Constant"
ir::Tensor constant_value(const ir::Node& node);

}  // namespace tether::ops
