// Buffer and Tensor: alignment, zero fill, copy on write, size checks.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "tether/error.h"
#include "tether/tensor.h"

namespace {

using tether::ir::Buffer;
using tether::ir::DType;
using tether::ir::Tensor;

bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; }

TEST(Buffer, AllocationsAre64ByteAligned) {
  EXPECT_EQ(tether::ir::kBufferAlignment, 64u);
  std::vector<std::shared_ptr<Buffer>> keep;
  for (int64_t n : {0, 1, 3, 63, 64, 65, 100, 4097}) {
    keep.push_back(Buffer::allocate(n));
    EXPECT_TRUE(aligned(keep.back()->data())) << n;
    EXPECT_EQ(keep.back()->size(), n);
    EXPECT_TRUE(keep.back()->writable());
  }
  EXPECT_TRUE(aligned(Tensor::zeros(DType::kInt8, {5}).raw_data()));
  const char bytes[3] = {1, 2, 3};
  EXPECT_TRUE(aligned(Tensor::copy_of(DType::kUInt8, {3}, bytes, 3).raw_data()));
}

TEST(Buffer, AllocationsAreZeroFilledEvenWhenMemoryIsReused) {
  // Dirty some freed memory of the same size first, so that a missing memset would show.
  for (int round = 0; round < 4; ++round) {
    auto dirty = Buffer::allocate(1000);
    std::memset(dirty->mutable_data(), 0xAB, 1000);
  }
  for (int round = 0; round < 4; ++round) {
    auto b = Buffer::allocate(1000);
    for (int64_t i = 0; i < b->size(); ++i) ASSERT_EQ(b->data()[i], std::byte{0}) << i;
    std::memset(b->mutable_data(), 0xCD, 1000);
  }
  Tensor t = Tensor::zeros(DType::kFloat32, {3, 5});
  for (int i = 0; i < 15; ++i) EXPECT_EQ(t.data<float>()[i], 0.0f);
}

TEST(Buffer, NegativeSizeThrowsArgumentError) {
  EXPECT_THROW(Buffer::allocate(-1), tether::ArgumentError);
  EXPECT_THROW(Buffer::borrow(nullptr, -1, nullptr), tether::ArgumentError);
}

TEST(Buffer, BorrowedBufferIsReadOnly) {
  std::vector<uint8_t> host{1, 2, 3};
  auto b = Buffer::borrow(host.data(), 3, nullptr);
  EXPECT_FALSE(b->writable());
  EXPECT_EQ(static_cast<const void*>(b->data()), static_cast<const void*>(host.data()));
  EXPECT_THROW(b->mutable_data(), tether::InternalError);
}

TEST(Buffer, BorrowKeepsItsOwnerAlive) {
  auto owner = std::make_shared<std::vector<uint8_t>>(std::vector<uint8_t>{9, 8, 7});
  std::weak_ptr<std::vector<uint8_t>> watch = owner;
  auto b = Buffer::borrow(owner->data(), 3, owner);
  owner.reset();
  EXPECT_FALSE(watch.expired());
  EXPECT_EQ(b->data()[2], std::byte{7});
  b.reset();
  EXPECT_TRUE(watch.expired());
}

TEST(Buffer, APrefixSharesItsWholesBytesAndKeepsItAlive) {
  for (int64_t size : {int64_t{256}, int64_t{2} << 20}) {  // heap and anonymous pages
    auto whole = Buffer::allocate(size);
    std::weak_ptr<Buffer> watch = whole;
    auto part = Buffer::prefix(whole, 100);
    EXPECT_EQ(part->size(), 100);
    EXPECT_TRUE(part->writable());
    part->mutable_data()[99] = std::byte{42};
    EXPECT_EQ(whole->data()[99], std::byte{42});
    Tensor t = Tensor::from_buffer(DType::kFloat32, {25}, part);
    whole.reset();
    part.reset();
    EXPECT_FALSE(watch.expired());
    t.mutable_data<float>()[0] = 1.5f;  // the only holder: written in place, not copied
    EXPECT_EQ(t.buffer()->data()[99], std::byte{42});
    t = Tensor();
    EXPECT_TRUE(watch.expired());
  }
}

TEST(Buffer, APrefixPastTheBufferOrOfABorrowedOneIsRefused) {
  auto whole = Buffer::allocate(64);
  EXPECT_THROW(Buffer::prefix(whole, 65), tether::ArgumentError);
  EXPECT_THROW(Buffer::prefix(whole, -1), tether::ArgumentError);
  EXPECT_THROW(Buffer::prefix(nullptr, 0), tether::ArgumentError);
  std::vector<uint8_t> host(8);
  EXPECT_THROW(Buffer::prefix(Buffer::borrow(host.data(), 8, nullptr), 4), tether::ArgumentError);
}

TEST(Tensor, ZerosHasTheSizeItsDtypeNeeds) {
  Tensor t = Tensor::zeros(DType::kFloat32, {2, 3});
  EXPECT_TRUE(t.is_valid());
  EXPECT_EQ(t.num_elements(), 6);
  EXPECT_EQ(t.nbytes(), 24);
  EXPECT_EQ(t.rank(), 2u);
  EXPECT_EQ(Tensor::zeros(DType::kInt4, {3}).nbytes(), 2);
  EXPECT_EQ(Tensor::zeros(DType::kFloat6E2M3, {4}).nbytes(), 3);
  EXPECT_EQ(Tensor::zeros(DType::kFloat64, {}).num_elements(), 1);
  EXPECT_EQ(Tensor::zeros(DType::kFloat64, {}).nbytes(), 8);
  EXPECT_EQ(Tensor::zeros(DType::kFloat32, {4, 0}).nbytes(), 0);
}

TEST(Tensor, ZerosRejectsStringsNegativeDimsAndOverflow) {
  EXPECT_THROW(Tensor::zeros(DType::kString, {2}), tether::ArgumentError);
  EXPECT_THROW(Tensor::zeros(DType::kUndefined, {2}), tether::ArgumentError);
  EXPECT_THROW(Tensor::zeros(DType::kFloat32, {2, -1}), tether::ArgumentError);
  const int64_t big = int64_t{1} << 40;
  EXPECT_THROW(Tensor::zeros(DType::kFloat32, {big, big}), tether::ArgumentError);
  // Elements fit in int64 but their bytes do not.
  EXPECT_THROW(Tensor::zeros(DType::kFloat32, {std::numeric_limits<int64_t>::max() / 2}), tether::ArgumentError);
}

TEST(Tensor, WritingAUniqueTensorDoesNotCopy) {
  Tensor t = Tensor::zeros(DType::kInt32, {4});
  const void* before = t.raw_data();
  t.mutable_data<int32_t>()[1] = 5;
  EXPECT_EQ(t.raw_data(), before);
  EXPECT_EQ(t.data<int32_t>()[1], 5);
}

TEST(Tensor, WritingASharedTensorCopiesFirst) {
  Tensor a = Tensor::zeros(DType::kFloat32, {3});
  a.mutable_data<float>()[0] = 1.0f;
  Tensor b = a;  // shares a's buffer
  EXPECT_EQ(a.buffer(), b.buffer());
  b.mutable_data<float>()[0] = 2.0f;
  EXPECT_NE(a.buffer(), b.buffer());
  EXPECT_EQ(a.data<float>()[0], 1.0f);
  EXPECT_EQ(b.data<float>()[0], 2.0f);
  EXPECT_TRUE(aligned(b.raw_data()));
}

TEST(Tensor, WritingABorrowedTensorCopiesAndLeavesTheBorrowedBytesAlone) {
  std::vector<float> host{1.0f, 2.0f, 3.0f};
  auto owner = std::shared_ptr<const void>(&host, [](const void*) {});
  Tensor t = Tensor::from_buffer(DType::kFloat32, {3}, Buffer::borrow(host.data(), 12, owner));
  EXPECT_EQ(t.raw_data(), static_cast<const void*>(host.data()));  // no copy to read
  t.mutable_data<float>()[1] = 42.0f;
  EXPECT_NE(t.raw_data(), static_cast<const void*>(host.data()));
  EXPECT_TRUE(t.buffer()->writable());
  EXPECT_EQ(host, (std::vector<float>{1.0f, 2.0f, 3.0f}));
  EXPECT_EQ(t.data<float>()[0], 1.0f);
  EXPECT_EQ(t.data<float>()[1], 42.0f);
  EXPECT_EQ(t.data<float>()[2], 3.0f);
}

TEST(Tensor, FromBufferSharesTheBufferAndChecksItsSize) {
  auto buf = Buffer::allocate(12);
  Tensor t = Tensor::from_buffer(DType::kFloat32, {3}, buf);
  EXPECT_EQ(t.buffer(), buf);
  EXPECT_THROW(Tensor::from_buffer(DType::kFloat32, {4}, buf), tether::ArgumentError);
  EXPECT_THROW(Tensor::from_buffer(DType::kFloat64, {2}, buf), tether::ArgumentError);
  EXPECT_THROW(Tensor::from_buffer(DType::kFloat32, {3}, nullptr), tether::ArgumentError);
  EXPECT_THROW(Tensor::from_buffer(DType::kString, {3}, buf), tether::ArgumentError);
  EXPECT_NO_THROW(Tensor::from_buffer(DType::kInt4, {24}, buf));  // 24 nibbles = 12 bytes
}

TEST(Tensor, CopyOfCopiesTheBytesAndChecksTheCount) {
  std::vector<int16_t> src{1, -2, 3};
  Tensor t = Tensor::copy_of(DType::kInt16, {3}, src.data(), 6);
  src[0] = 99;
  EXPECT_EQ(t.data<int16_t>()[0], 1);
  EXPECT_EQ(t.data<int16_t>()[1], -2);
  EXPECT_THROW(Tensor::copy_of(DType::kInt16, {3}, src.data(), 4), tether::ArgumentError);
}

TEST(Tensor, StringsTensorChecksTheCount) {
  Tensor t = Tensor::strings({2}, {"a", std::string("b\0c", 3)});
  EXPECT_EQ(t.dtype(), DType::kString);
  EXPECT_TRUE(t.is_valid());
  EXPECT_EQ(t.string_values()[1].size(), 3u);
  EXPECT_EQ(t.nbytes(), 0);
  EXPECT_THROW(Tensor::strings({3}, {"a", "b"}), tether::ArgumentError);
  EXPECT_THROW(Tensor::strings({}, {}), tether::ArgumentError);  // a scalar holds one string
  EXPECT_THROW(Tensor::strings({-1}, {}), tether::ArgumentError);
  EXPECT_NO_THROW(Tensor::strings({2, 0}, {}));
}

TEST(Tensor, SameDataComparesDtypeDimsAndBytes) {
  const float v[4] = {1, 2, 3, 4};
  Tensor a = Tensor::copy_of(DType::kFloat32, {2, 2}, v, 16);
  Tensor b = Tensor::copy_of(DType::kFloat32, {2, 2}, v, 16);
  EXPECT_TRUE(a.same_data(b));
  EXPECT_FALSE(a.same_data(Tensor::copy_of(DType::kFloat32, {4}, v, 16)));
  EXPECT_FALSE(a.same_data(Tensor::copy_of(DType::kInt32, {2, 2}, v, 16)));
  b.mutable_data<float>()[3] = 5;
  EXPECT_FALSE(a.same_data(b));
  EXPECT_TRUE(Tensor::strings({1}, {"x"}).same_data(Tensor::strings({1}, {"x"})));
  EXPECT_FALSE(Tensor::strings({1}, {"x"}).same_data(Tensor::strings({1}, {"y"})));
}

TEST(Tensor, DefaultTensorIsInvalid) {
  Tensor t;
  EXPECT_FALSE(t.is_valid());
  EXPECT_THROW(t.raw_data(), tether::InternalError);
}

TEST(Tensor, CheckedNumElementsRejectsNegativeAndOverflow) {
  EXPECT_EQ(tether::ir::checked_num_elements({}), 1);
  EXPECT_EQ(tether::ir::checked_num_elements({2, 3, 4}), 24);
  EXPECT_EQ(tether::ir::checked_num_elements({5, 0}), 0);
  EXPECT_FALSE(tether::ir::checked_num_elements({2, -1}).has_value());
  EXPECT_FALSE(tether::ir::checked_num_elements({int64_t{1} << 32, int64_t{1} << 32}).has_value());
}

}  // namespace
