#include "tether/tensor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include <sys/mman.h>

#include "tether/error.h"
#include "util/file_map.h"

namespace tether::ir {

namespace {

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

int64_t required_bytes(DType dtype, const std::vector<int64_t>& dims) {
  if (dtype == DType::kString || dtype == DType::kUndefined)
    throw ArgumentError("a raw tensor cannot have dtype " + std::string(dtype_name(dtype)));
  auto n = checked_num_elements(dims);
  if (!n) throw ArgumentError("tensor dims " + dims_text(dims) + " are negative or overflow int64");
  auto bytes = storage_bytes(dtype, *n);
  if (!bytes) throw ArgumentError("tensor of " + std::string(dtype_name(dtype)) + dims_text(dims) + " overflows int64 bytes");
  return *bytes;
}

}  // namespace

// Buffers from this size on are pages mapped from the kernel instead of heap blocks: freeing one
// gives its memory back at once. A session that plans for many input sizes allocates and frees
// arenas of many sizes; from the heap, glibc would keep the freed ones (its threshold for mapping
// rises after each large free) and the process's memory would grow by the fragments.
constexpr size_t kAnonymousThreshold = size_t{1} << 20;

std::optional<int64_t> checked_num_elements(const std::vector<int64_t>& dims) {
  if (std::any_of(dims.begin(), dims.end(), [](int64_t d) { return d < 0; })) return std::nullopt;
  if (std::find(dims.begin(), dims.end(), 0) != dims.end()) return 0;  // empty, however large the rest
  int64_t n = 1;
  for (int64_t d : dims) {
    if (__builtin_mul_overflow(n, d, &n)) return std::nullopt;
  }
  return n;
}

// ---- Buffer -------------------------------------------------------------------------------

std::shared_ptr<Buffer> Buffer::allocate(int64_t nbytes) {
  if (nbytes < 0) throw ArgumentError("buffer size must be >= 0, got " + std::to_string(nbytes));
  const size_t rounded = (static_cast<size_t>(nbytes) + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
  std::shared_ptr<Buffer> b(new Buffer());
  if (rounded >= kAnonymousThreshold) {
    // Zero pages, page-aligned (past kBufferAlignment), committed only when touched.
    void* p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    b->data_ = static_cast<std::byte*>(p);
    // The pages' owner unmaps them; an owned buffer with an owner is never freed itself.
    b->owner_ = std::shared_ptr<void>(p, [rounded](void* q) { munmap(q, rounded); });
  } else {
    void* p = std::aligned_alloc(kBufferAlignment, rounded == 0 ? kBufferAlignment : rounded);
    if (p == nullptr) throw std::bad_alloc();
    std::memset(p, 0, rounded);
    b->data_ = static_cast<std::byte*>(p);
  }
  b->size_ = nbytes;
  b->owned_ = true;
  return b;
}

std::shared_ptr<Buffer> Buffer::prefix(std::shared_ptr<Buffer> whole, int64_t nbytes) {
  if (whole == nullptr || !whole->writable())
    throw ArgumentError("Buffer::prefix takes a buffer tether allocated (writable), got " +
                        std::string(whole == nullptr ? "none" : "a borrowed one"));
  if (nbytes < 0 || nbytes > whole->size())
    throw ArgumentError("Buffer::prefix of " + std::to_string(nbytes) + " bytes of a buffer of " + std::to_string(whole->size()));
  std::shared_ptr<Buffer> b(new Buffer());
  b->data_ = whole->data_;
  b->size_ = nbytes;
  b->owned_ = true;  // writable; with an owner, never freed itself (see ~Buffer)
  b->owner_ = std::move(whole);
  return b;
}

std::shared_ptr<Buffer> Buffer::borrow(const void* data, int64_t nbytes, std::shared_ptr<const void> owner) {
  if (nbytes < 0) throw ArgumentError("buffer size must be >= 0, got " + std::to_string(nbytes));
  std::shared_ptr<Buffer> b(new Buffer());
  b->data_ = const_cast<std::byte*>(static_cast<const std::byte*>(data));
  b->size_ = nbytes;
  b->owned_ = false;
  b->owner_ = std::move(owner);
  return b;
}

std::shared_ptr<Buffer> Buffer::map_view(const void* data, int64_t nbytes, std::shared_ptr<const void> owner) {
  std::shared_ptr<Buffer> b = borrow(data, nbytes, std::move(owner));
  b->mapped_ = true;
  return b;
}

void Buffer::release_pages() const {
  if (mapped_) util::drop_mapped_pages(data_, size_);
}

Buffer::~Buffer() {
  if (owned_ && owner_ == nullptr) std::free(data_);
}

std::byte* Buffer::mutable_data() {
  TETHER_CHECK(owned_, "writing to a borrowed, read-only buffer");
  return data_;
}

// ---- Tensor -------------------------------------------------------------------------------

Tensor Tensor::zeros(DType dtype, std::vector<int64_t> dims) {
  const int64_t bytes = required_bytes(dtype, dims);
  Tensor t;
  t.dtype_ = dtype;
  t.dims_ = std::move(dims);
  t.buffer_ = Buffer::allocate(bytes);
  return t;
}

Tensor Tensor::from_buffer(DType dtype, std::vector<int64_t> dims, std::shared_ptr<Buffer> buffer) {
  const int64_t bytes = required_bytes(dtype, dims);
  if (buffer == nullptr || buffer->size() != bytes)
    throw ArgumentError("tensor of " + std::string(dtype_name(dtype)) + dims_text(dims) + " needs " +
                        std::to_string(bytes) + " bytes, the buffer holds " +
                        std::to_string(buffer ? buffer->size() : 0));
  Tensor t;
  t.dtype_ = dtype;
  t.dims_ = std::move(dims);
  t.buffer_ = std::move(buffer);
  return t;
}

Tensor Tensor::copy_of(DType dtype, std::vector<int64_t> dims, const void* data, int64_t nbytes) {
  const int64_t bytes = required_bytes(dtype, dims);
  if (nbytes != bytes)
    throw ArgumentError("tensor of " + std::string(dtype_name(dtype)) + dims_text(dims) + " needs " +
                        std::to_string(bytes) + " bytes, got " + std::to_string(nbytes));
  auto buffer = Buffer::allocate(bytes);
  if (bytes > 0) std::memcpy(buffer->mutable_data(), data, static_cast<size_t>(bytes));
  return from_buffer(dtype, std::move(dims), std::move(buffer));
}

Tensor Tensor::strings(std::vector<int64_t> dims, std::vector<std::string> values) {
  auto n = checked_num_elements(dims);
  if (!n) throw ArgumentError("tensor dims " + dims_text(dims) + " are negative or overflow int64");
  if (static_cast<int64_t>(values.size()) != *n)
    throw ArgumentError("string tensor of dims " + dims_text(dims) + " needs " + std::to_string(*n) +
                        " strings, got " + std::to_string(values.size()));
  Tensor t;
  t.dtype_ = DType::kString;
  t.dims_ = std::move(dims);
  t.strings_ = std::move(values);
  return t;
}

int64_t Tensor::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;  // validated when the tensor was made
  return n;
}

int64_t Tensor::nbytes() const { return buffer_ ? buffer_->size() : 0; }

const void* Tensor::raw_data() const {
  TETHER_CHECK(buffer_ != nullptr, "raw_data() of tensor '" + name_ + "' without raw storage");
  return buffer_->data();
}

void* Tensor::mutable_raw_data() {
  TETHER_CHECK(buffer_ != nullptr, "mutable_raw_data() of tensor '" + name_ + "' without raw storage");
  if (!buffer_->writable() || buffer_.use_count() > 1) {
    auto copy = Buffer::allocate(buffer_->size());
    if (buffer_->size() > 0) std::memcpy(copy->mutable_data(), buffer_->data(), static_cast<size_t>(buffer_->size()));
    buffer_ = std::move(copy);
  }
  return buffer_->mutable_data();
}

bool Tensor::same_data(const Tensor& other) const {
  if (dtype_ != other.dtype_ || dims_ != other.dims_) return false;
  if (dtype_ == DType::kString) return strings_ == other.strings_;
  if (nbytes() != other.nbytes()) return false;
  return nbytes() == 0 || std::memcmp(raw_data(), other.raw_data(), static_cast<size_t>(nbytes())) == 0;
}

}  // namespace tether::ir
