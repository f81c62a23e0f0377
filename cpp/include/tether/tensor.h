// tether/tensor.h: Buffer (bytes and what keeps them alive) and Tensor (typed, shaped data).
//
// Buffers tether allocates are 64-byte aligned. A Buffer may also borrow memory it does not
// own (a memory-mapped weight file, a caller's array); its owner handle keeps that memory
// alive. Tensors share Buffers: copying a Tensor is cheap, and mutable_data() copies the
// bytes first when they are shared or read-only (copy on write).
//
//   auto t = tether::ir::Tensor::zeros(tether::ir::DType::kFloat32, {2, 3});
//   float* p = t.mutable_data<float>();
//   p[0] = 1.0f;
//   t.num_elements();   // 6
//   t.nbytes();         // 24
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tether/dtype.h"

namespace tether::ir {

/// Alignment of every buffer tether allocates, in bytes.
inline constexpr size_t kBufferAlignment = 64;

/// A block of bytes and the handle that keeps them alive.
class Buffer {
 public:
  /// A new zero-filled buffer of `nbytes`, 64-byte aligned. Throws ArgumentError when the
  /// size is negative and std::bad_alloc when memory runs out.
  static std::shared_ptr<Buffer> allocate(int64_t nbytes);

  /// The first `nbytes` of `whole`, a buffer tether allocated, writable and keeping `whole`
  /// alive: a larger buffer reused for a smaller tensor. Throws ArgumentError when `whole` is
  /// null or not writable, or `nbytes` is negative or past its size.
  ///
  ///   auto room = Buffer::allocate(1 << 20);
  ///   Tensor t = Tensor::from_buffer(DType::kFloat32, {1000}, Buffer::prefix(room, 4000));
  static std::shared_ptr<Buffer> prefix(std::shared_ptr<Buffer> whole, int64_t nbytes);

  /// A buffer that borrows `nbytes` at `data`, kept alive by `owner`. It is read-only:
  /// writers copy it first.
  static std::shared_ptr<Buffer> borrow(const void* data, int64_t nbytes,
                                        std::shared_ptr<const void> owner);
  /// As borrow, for bytes of a read-only file mapping that `owner` keeps: such bytes can be
  /// dropped from memory and read again from the file (release_pages).
  static std::shared_ptr<Buffer> map_view(const void* data, int64_t nbytes, std::shared_ptr<const void> owner);

  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  const std::byte* data() const { return data_; }
  /// Writable bytes. Precondition: writable() (else InternalError).
  std::byte* mutable_data();
  int64_t size() const { return size_; }
  /// True for buffers tether allocated; false for borrowed ones.
  bool writable() const { return owned_; }
  /// True for a view of a file mapping (map_view).
  bool mapped() const { return mapped_; }
  /// For a mapped buffer: tells the OS its whole pages may leave memory now (a later read
  /// faults them in from the file again, unchanged). Nothing for other buffers. For a reader
  /// done with bytes it copied elsewhere (packed weights), so that they do not count twice.
  void release_pages() const;

 private:
  Buffer() = default;
  std::byte* data_ = nullptr;
  int64_t size_ = 0;
  bool owned_ = false;
  bool mapped_ = false;
  std::shared_ptr<const void> owner_;
};

/// A dense tensor: element type, concrete sizes, and either raw bytes (every type but
/// kString) or a list of strings (kString). Raw bytes follow ONNX raw_data layout:
/// little-endian, bool as one byte, 2/4/6-bit types packed from the least significant bit.
class Tensor {
 public:
  /// An empty float32 scalar with no storage; is_valid() is false.
  Tensor() = default;

  /// A zero-filled tensor of `dtype` and `dims`. Throws ArgumentError for a negative dim,
  /// kString / kUndefined, or a byte count that overflows.
  static Tensor zeros(DType dtype, std::vector<int64_t> dims);

  /// A tensor over `buffer` (shared, not copied). Throws ArgumentError when the buffer size
  /// differs from what dtype and dims need.
  static Tensor from_buffer(DType dtype, std::vector<int64_t> dims, std::shared_ptr<Buffer> buffer);

  /// A tensor that copies `nbytes` from `data` into a new aligned buffer.
  static Tensor copy_of(DType dtype, std::vector<int64_t> dims, const void* data, int64_t nbytes);

  /// A string tensor. Throws ArgumentError when the count differs from the dims' product.
  static Tensor strings(std::vector<int64_t> dims, std::vector<std::string> values);

  bool is_valid() const { return buffer_ != nullptr || dtype_ == DType::kString; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& dims() const { return dims_; }
  size_t rank() const { return dims_.size(); }
  /// Product of the dims (1 for a scalar).
  int64_t num_elements() const;
  /// Bytes of raw storage (0 for strings).
  int64_t nbytes() const;

  /// Raw bytes. Precondition: dtype() != kString.
  const void* raw_data() const;
  /// Writable raw bytes; copies them first when the buffer is shared or borrowed.
  void* mutable_raw_data();
  template <typename T>
  const T* data() const { return static_cast<const T*>(raw_data()); }
  template <typename T>
  T* mutable_data() { return static_cast<T*>(mutable_raw_data()); }
  /// The buffer behind raw_data() (shared with other Tensors).
  const std::shared_ptr<Buffer>& buffer() const { return buffer_; }

  /// The values of a string tensor.
  const std::vector<std::string>& string_values() const { return strings_; }

  /// Name (the initializer's value name when it is one).
  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  const std::string& doc_string() const { return doc_string_; }
  void set_doc_string(std::string doc) { doc_string_ = std::move(doc); }
  /// ONNX TensorProto.metadata_props, kept for round trips.
  std::vector<std::pair<std::string, std::string>>& metadata() { return metadata_; }
  const std::vector<std::pair<std::string, std::string>>& metadata() const { return metadata_; }

  /// True when the raw bytes of both tensors are equal, and so are dtype, dims and strings.
  bool same_data(const Tensor& other) const;

 private:
  DType dtype_ = DType::kFloat32;
  std::vector<int64_t> dims_;
  std::shared_ptr<Buffer> buffer_;
  std::vector<std::string> strings_;
  std::string name_;
  std::string doc_string_;
  std::vector<std::pair<std::string, std::string>> metadata_;
};

/// An ONNX sparse tensor: the non-zero values, their indices, and the dense dims.
struct SparseTensor {
  Tensor values;
  Tensor indices;
  std::vector<int64_t> dims;
};

/// Product of `dims` with overflow and sign checks; nullopt when a dim is negative or the
/// product overflows int64.
std::optional<int64_t> checked_num_elements(const std::vector<int64_t>& dims);

}  // namespace tether::ir
