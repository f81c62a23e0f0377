// Conversion between ONNX TensorProto typed fields and tether's raw tensor storage.
#pragma once

#include <memory>
#include <string>

#include "tether/tensor.h"
#include "tether_onnx.pb.h"

namespace tether::ir::codec {

/// Raw storage (ONNX raw_data layout) for a tensor that keeps its `count` elements in
/// float_data, int32_data, int64_data, double_data or uint64_data. Throws ModelError naming
/// `where` when the field does not suit `dtype` or holds the wrong number of entries.
std::shared_ptr<Buffer> decode_typed_fields(const onnx_pb::TensorProto& p, DType dtype, int64_t count,
                                            const std::string& where);

/// True when `p` holds anything in a typed field.
bool has_typed_fields(const onnx_pb::TensorProto& p);

}  // namespace tether::ir::codec
