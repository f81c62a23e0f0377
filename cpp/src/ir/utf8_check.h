// Every ONNX `string` field must hold UTF-8; tether checks a parsed model once, up front, so
// that names can be shown and compared safely everywhere after.
#pragma once

#include <string>

#include "tether_onnx.pb.h"

namespace tether::ir {

/// Throws ModelError naming the first string field that is not valid UTF-8 (`label` is the
/// file). Attribute values of kind string are bytes in ONNX and are not checked.
void check_utf8(const onnx_pb::ModelProto& model, const std::string& label);

}  // namespace tether::ir
