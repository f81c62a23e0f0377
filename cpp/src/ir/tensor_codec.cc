#include "ir/tensor_codec.h"

#include <bit>
#include <cstring>

#include "tether/error.h"

namespace tether::ir::codec {

static_assert(std::endian::native == std::endian::little, "tether's raw storage is little-endian");

namespace {

enum class Field { kFloat, kInt32, kInt64, kDouble, kUInt64, kNone };

const char* field_name(Field f) {
  switch (f) {
    case Field::kFloat: return "float_data";
    case Field::kInt32: return "int32_data";
    case Field::kInt64: return "int64_data";
    case Field::kDouble: return "double_data";
    case Field::kUInt64: return "uint64_data";
    case Field::kNone: break;
  }
  return "no typed field";
}

// The typed field ONNX uses for `dtype`, and how many entries `count` elements take in it.
Field field_for(DType dtype, int64_t count, int64_t* entries) {
  *entries = count;
  switch (dtype) {
    case DType::kFloat32: return Field::kFloat;
    case DType::kComplex64: *entries = 2 * count; return Field::kFloat;
    case DType::kInt64: return Field::kInt64;
    case DType::kFloat64: return Field::kDouble;
    case DType::kComplex128: *entries = 2 * count; return Field::kDouble;
    case DType::kUInt32: case DType::kUInt64: return Field::kUInt64;
    // Rounded up without (count + 1) / 2, which overflows for a count near 2^63.
    case DType::kUInt4: case DType::kInt4: case DType::kFloat4E2M1: *entries = count / 2 + count % 2; return Field::kInt32;
    case DType::kUInt2: case DType::kInt2: *entries = count / 4 + (count % 4 != 0 ? 1 : 0); return Field::kInt32;
    case DType::kString: case DType::kUndefined: return Field::kNone;
    default: return Field::kInt32;  // int32, 16-bit, 8-bit, bool, float8, float6 types
  }
}

int64_t field_size(const onnx_pb::TensorProto& p, Field f) {
  switch (f) {
    case Field::kFloat: return p.float_data_size();
    case Field::kInt32: return p.int32_data_size();
    case Field::kInt64: return p.int64_data_size();
    case Field::kDouble: return p.double_data_size();
    case Field::kUInt64: return p.uint64_data_size();
    case Field::kNone: break;
  }
  return 0;
}

// Packs 6-bit codes, four into three bytes, least significant bits first.
void pack6(const onnx_pb::TensorProto& p, std::byte* out) {
  uint32_t acc = 0;
  int bits = 0;
  size_t o = 0;
  for (int32_t v : p.int32_data()) {
    acc |= (static_cast<uint32_t>(v) & 0x3f) << bits;
    bits += 6;
    while (bits >= 8) {
      out[o++] = static_cast<std::byte>(acc & 0xff);
      acc >>= 8;
      bits -= 8;
    }
  }
  if (bits > 0) out[o] = static_cast<std::byte>(acc & 0xff);
}

}  // namespace

bool has_typed_fields(const onnx_pb::TensorProto& p) {
  return p.float_data_size() || p.int32_data_size() || p.int64_data_size() || p.double_data_size() ||
         p.uint64_data_size();
}

std::shared_ptr<Buffer> decode_typed_fields(const onnx_pb::TensorProto& p, DType dtype, int64_t count,
                                            const std::string& where) {
  int64_t entries = 0;
  const Field field = field_for(dtype, count, &entries);
  const int64_t found = field_size(p, field);
  // Values in another field are an error even when the right one holds enough: ONNX allows
  // one value field per tensor, and an empty tensor would otherwise pass with stray values.
  for (Field other : {Field::kFloat, Field::kInt32, Field::kInt64, Field::kDouble, Field::kUInt64})
    if (other != field && field_size(p, other) > 0)
      throw ModelError(where + ": holds values in " + field_name(other) + ", but " + std::string(dtype_name(dtype)) +
                       " tensors use " + field_name(field));
  if (found != entries) {
    throw ModelError(where + ": " + std::string(dtype_name(dtype)) + " tensor of " + std::to_string(count) +
                     " elements needs " + std::to_string(entries) + " entries in " + field_name(field) + ", found " +
                     std::to_string(found));
  }
  auto buffer = Buffer::allocate(*storage_bytes(dtype, count));
  std::byte* out = buffer->mutable_data();
  switch (field) {
    case Field::kFloat: std::memcpy(out, p.float_data().data(), sizeof(float) * entries); break;
    case Field::kInt64: std::memcpy(out, p.int64_data().data(), sizeof(int64_t) * entries); break;
    case Field::kDouble: std::memcpy(out, p.double_data().data(), sizeof(double) * entries); break;
    case Field::kUInt64:
      if (dtype == DType::kUInt64) {
        std::memcpy(out, p.uint64_data().data(), sizeof(uint64_t) * entries);
      } else {
        auto* dst = reinterpret_cast<uint32_t*>(out);
        for (int64_t i = 0; i < entries; ++i) dst[i] = static_cast<uint32_t>(p.uint64_data(static_cast<int>(i)));
      }
      break;
    case Field::kInt32: {
      const int bits = dtype_bits(dtype);
      if (bits == 6) {
        pack6(p, out);
      } else if (bits == 32) {
        std::memcpy(out, p.int32_data().data(), sizeof(int32_t) * entries);
      } else if (bits == 16) {
        auto* dst = reinterpret_cast<uint16_t*>(out);
        for (int64_t i = 0; i < entries; ++i) dst[i] = static_cast<uint16_t>(p.int32_data(static_cast<int>(i)));
      } else {  // 8-bit types, and 4- and 2-bit types whose entries are already packed bytes
        for (int64_t i = 0; i < entries; ++i) out[i] = static_cast<std::byte>(p.int32_data(static_cast<int>(i)) & 0xff);
        if (dtype == DType::kBool)
          for (int64_t i = 0; i < entries; ++i) out[i] = out[i] != std::byte{0} ? std::byte{1} : std::byte{0};
      }
      break;
    }
    case Field::kNone: TETHER_CHECK(false, "decode_typed_fields for " + std::string(dtype_name(dtype)));
  }
  return buffer;
}

}  // namespace tether::ir::codec
