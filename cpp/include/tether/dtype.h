// tether/dtype.h: element types of tensors, numbered as in ONNX TensorProto.DataType.
//
//   tether::ir::DType t = tether::ir::DType::kFloat16;
//   tether::ir::dtype_name(t);        // "float16"
//   tether::ir::dtype_bits(t);        // 16
//   tether::ir::storage_bytes(t, 3);  // 6
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tether::ir {

/// Element type of a tensor. The values are ONNX's TensorProto.DataType numbers, so a DType
/// converts to and from the file format by a cast (after dtype_is_known()).
enum class DType : int32_t {
  kUndefined = 0,
  kFloat32 = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kUInt16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kFloat64 = 11,
  kUInt32 = 12,
  kUInt64 = 13,
  kComplex64 = 14,
  kComplex128 = 15,
  kBFloat16 = 16,
  kFloat8E4M3FN = 17,
  kFloat8E4M3FNUZ = 18,
  kFloat8E5M2 = 19,
  kFloat8E5M2FNUZ = 20,
  kUInt4 = 21,
  kInt4 = 22,
  kFloat4E2M1 = 23,
  kFloat8E8M0 = 24,
  kUInt2 = 25,
  kInt2 = 26,
  kFloat6E2M3 = 27,
  kFloat6E3M2 = 28,
};

/// The largest DType number tether knows.
inline constexpr int32_t kMaxDType = 28;

/// True when `code` is a DType number tether knows (kUndefined included).
bool dtype_is_known(int32_t code);

/// Lower-case name, numpy-style where numpy has the type: "float32", "int64", "bool",
/// "bfloat16", "float8e4m3fn", "string". kUndefined gives "undefined".
std::string_view dtype_name(DType t);

/// The DType named `name` (as dtype_name prints it; "float" and "double" are accepted too),
/// or nullopt when the name is unknown.
std::optional<DType> dtype_from_name(std::string_view name);

/// Bits one element occupies in raw storage: 1..64 for numbers, 2/4/6 for packed types,
/// 0 for kString and kUndefined (strings are not stored as raw bytes).
int dtype_bits(DType t);

/// Bytes that `count` elements occupy in raw storage (packed types round up to whole bytes).
/// Returns nullopt for a negative count and when the byte count would overflow int64.
std::optional<int64_t> storage_bytes(DType t, int64_t count);

/// True for float types (float16/32/64, bfloat16, the float8/6/4 families).
bool dtype_is_float(DType t);

/// True for signed and unsigned integer types (bool excluded).
bool dtype_is_integer(DType t);

}  // namespace tether::ir
