#include "tether/dtype.h"

#include <array>
#include <limits>

namespace tether::ir {

namespace {

struct DTypeInfo {
  std::string_view name;
  int bits;
};

// Indexed by the ONNX DataType number.
constexpr std::array<DTypeInfo, kMaxDType + 1> kInfo = {{
    {"undefined", 0},    {"float32", 32},     {"uint8", 8},          {"int8", 8},
    {"uint16", 16},      {"int16", 16},       {"int32", 32},         {"int64", 64},
    {"string", 0},       {"bool", 8},         {"float16", 16},       {"float64", 64},
    {"uint32", 32},      {"uint64", 64},      {"complex64", 64},     {"complex128", 128},
    {"bfloat16", 16},    {"float8e4m3fn", 8}, {"float8e4m3fnuz", 8}, {"float8e5m2", 8},
    {"float8e5m2fnuz", 8}, {"uint4", 4},      {"int4", 4},           {"float4e2m1", 4},
    {"float8e8m0", 8},   {"uint2", 2},        {"int2", 2},           {"float6e2m3", 6},
    {"float6e3m2", 6},
}};

const DTypeInfo& info(DType t) { return kInfo[static_cast<size_t>(t)]; }

}  // namespace

bool dtype_is_known(int32_t code) { return code >= 0 && code <= kMaxDType; }

std::string_view dtype_name(DType t) { return info(t).name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  if (name == "float") return DType::kFloat32;
  if (name == "double") return DType::kFloat64;
  for (size_t i = 0; i < kInfo.size(); ++i)
    if (kInfo[i].name == name) return static_cast<DType>(i);
  return std::nullopt;
}

int dtype_bits(DType t) { return info(t).bits; }

std::optional<int64_t> storage_bytes(DType t, int64_t count) {
  const int64_t bits = dtype_bits(t);
  if (count < 0) return std::nullopt;
  if (bits == 0 || count == 0) return 0;
  // Eight elements of `bits` bits fill exactly `bits` bytes; the remainder rounds up.
  const int64_t groups = count / 8;
  const int64_t rest = ((count % 8) * bits + 7) / 8;
  if (groups > (std::numeric_limits<int64_t>::max() - rest) / bits) return std::nullopt;
  return groups * bits + rest;
}

bool dtype_is_float(DType t) {
  switch (t) {
    case DType::kFloat32: case DType::kFloat16: case DType::kFloat64: case DType::kBFloat16:
    case DType::kFloat8E4M3FN: case DType::kFloat8E4M3FNUZ: case DType::kFloat8E5M2:
    case DType::kFloat8E5M2FNUZ: case DType::kFloat4E2M1: case DType::kFloat8E8M0:
    case DType::kFloat6E2M3: case DType::kFloat6E3M2:
      return true;
    default:
      return false;
  }
}

bool dtype_is_integer(DType t) {
  switch (t) {
    case DType::kUInt8: case DType::kInt8: case DType::kUInt16: case DType::kInt16:
    case DType::kInt32: case DType::kInt64: case DType::kUInt32: case DType::kUInt64:
    case DType::kUInt4: case DType::kInt4: case DType::kUInt2: case DType::kInt2:
      return true;
    default:
      return false;
  }
}

}  // namespace tether::ir
