// DType names, bit widths and storage sizes, checked against ONNX's TensorProto.DataType table.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <set>
#include <string>

#include "tether/dtype.h"

namespace {

using tether::ir::DType;
using tether::ir::dtype_bits;
using tether::ir::dtype_from_name;
using tether::ir::dtype_name;
using tether::ir::storage_bytes;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// ONNX's DataType numbers with the names and widths tether documents, written out by hand.
struct Expected {
  int code;
  const char* name;
  int bits;
};
constexpr Expected kTable[] = {
    {0, "undefined", 0},       {1, "float32", 32},        {2, "uint8", 8},          {3, "int8", 8},
    {4, "uint16", 16},         {5, "int16", 16},          {6, "int32", 32},         {7, "int64", 64},
    {8, "string", 0},          {9, "bool", 8},            {10, "float16", 16},      {11, "float64", 64},
    {12, "uint32", 32},        {13, "uint64", 64},        {14, "complex64", 64},    {15, "complex128", 128},
    {16, "bfloat16", 16},      {17, "float8e4m3fn", 8},   {18, "float8e4m3fnuz", 8}, {19, "float8e5m2", 8},
    {20, "float8e5m2fnuz", 8}, {21, "uint4", 4},          {22, "int4", 4},          {23, "float4e2m1", 4},
    {24, "float8e8m0", 8},     {25, "uint2", 2},          {26, "int2", 2},          {27, "float6e2m3", 6},
    {28, "float6e3m2", 6},
};

TEST(DType, TableCoversEveryKnownCode) {
  EXPECT_EQ(std::size(kTable), static_cast<size_t>(tether::ir::kMaxDType) + 1);
  for (int code = 0; code <= tether::ir::kMaxDType; ++code) EXPECT_TRUE(tether::ir::dtype_is_known(code)) << code;
  EXPECT_FALSE(tether::ir::dtype_is_known(-1));
  EXPECT_FALSE(tether::ir::dtype_is_known(tether::ir::kMaxDType + 1));
}

TEST(DType, NameAndBitsMatchOnnxTableForEveryCode) {
  for (const Expected& e : kTable) {
    const auto t = static_cast<DType>(e.code);
    EXPECT_EQ(dtype_name(t), e.name) << "code " << e.code;
    EXPECT_EQ(dtype_bits(t), e.bits) << "code " << e.code;
  }
}

TEST(DType, NameRoundTripsForEveryCode) {
  std::set<std::string> names;
  for (int code = 0; code <= tether::ir::kMaxDType; ++code) {
    const auto t = static_cast<DType>(code);
    const std::string name(dtype_name(t));
    EXPECT_TRUE(names.insert(name).second) << "duplicate name " << name;
    const auto back = dtype_from_name(name);
    ASSERT_TRUE(back.has_value()) << name;
    EXPECT_EQ(static_cast<int>(*back), code) << name;
  }
}

TEST(DType, FromNameAcceptsAliasesAndRejectsUnknownNames) {
  EXPECT_EQ(dtype_from_name("float"), DType::kFloat32);
  EXPECT_EQ(dtype_from_name("double"), DType::kFloat64);
  EXPECT_FALSE(dtype_from_name("").has_value());
  EXPECT_FALSE(dtype_from_name("Float32").has_value());
  EXPECT_FALSE(dtype_from_name("float128").has_value());
}

TEST(DType, StorageBytesRoundsPackedTypesUpToWholeBytes) {
  EXPECT_EQ(storage_bytes(DType::kInt4, 3), 2);      // 12 bits
  EXPECT_EQ(storage_bytes(DType::kUInt4, 4), 2);     // 16 bits
  EXPECT_EQ(storage_bytes(DType::kFloat4E2M1, 1), 1);
  EXPECT_EQ(storage_bytes(DType::kInt2, 5), 2);      // 10 bits
  EXPECT_EQ(storage_bytes(DType::kUInt2, 4), 1);     // 8 bits
  EXPECT_EQ(storage_bytes(DType::kFloat6E2M3, 4), 3);  // 24 bits
  EXPECT_EQ(storage_bytes(DType::kFloat6E3M2, 1), 1);  // 6 bits
  EXPECT_EQ(storage_bytes(DType::kFloat6E3M2, 5), 4);  // 30 bits
  EXPECT_EQ(storage_bytes(DType::kFloat6E2M3, 11), 9);  // 66 bits
  EXPECT_EQ(storage_bytes(DType::kInt4, 0), 0);
}

TEST(DType, StorageBytesOfWholeByteTypesIsCountTimesWidth) {
  EXPECT_EQ(storage_bytes(DType::kFloat32, 3), 12);
  EXPECT_EQ(storage_bytes(DType::kBool, 5), 5);
  EXPECT_EQ(storage_bytes(DType::kFloat16, 7), 14);
  EXPECT_EQ(storage_bytes(DType::kComplex128, 3), 48);
  EXPECT_EQ(storage_bytes(DType::kString, 10), 0);
}

TEST(DType, StorageBytesReturnsNulloptOnOverflow) {
  // The largest counts that still fit, worked out by hand: ceil(count * bits / 8).
  EXPECT_EQ(storage_bytes(DType::kFloat32, kMax / 4), kMax / 4 * 4);
  EXPECT_FALSE(storage_bytes(DType::kFloat32, kMax / 4 + 1).has_value());
  EXPECT_FALSE(storage_bytes(DType::kInt64, kMax).has_value());
  EXPECT_FALSE(storage_bytes(DType::kComplex128, kMax / 16 + 1).has_value());
  EXPECT_EQ(storage_bytes(DType::kUInt8, kMax), kMax);
  EXPECT_EQ(storage_bytes(DType::kInt4, kMax), int64_t{4611686018427387904});
  EXPECT_EQ(storage_bytes(DType::kInt2, kMax), int64_t{2305843009213693952});
  EXPECT_EQ(storage_bytes(DType::kFloat6E2M3, kMax), int64_t{6917529027641081856});
}

TEST(DType, FloatAndIntegerPredicatesSplitTheTypes) {
  EXPECT_TRUE(tether::ir::dtype_is_float(DType::kBFloat16));
  EXPECT_TRUE(tether::ir::dtype_is_float(DType::kFloat8E5M2));
  EXPECT_FALSE(tether::ir::dtype_is_float(DType::kInt8));
  EXPECT_TRUE(tether::ir::dtype_is_integer(DType::kUInt64));
  EXPECT_TRUE(tether::ir::dtype_is_integer(DType::kInt4));
  EXPECT_FALSE(tether::ir::dtype_is_integer(DType::kBool));
  EXPECT_FALSE(tether::ir::dtype_is_integer(DType::kString));
  EXPECT_FALSE(tether::ir::dtype_is_float(DType::kComplex64));
}

}  // namespace
