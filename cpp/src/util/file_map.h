// Read-only memory mapping of a whole file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace tether::util {

/// A file mapped read-only into memory. Shared ownership: buffers that borrow bytes from the
/// mapping hold a shared_ptr to it, so the mapping lives as long as any of them.
class FileMap {
 public:
  /// Maps `path`. Throws ModelNotFoundError when the file does not exist, ModelError when it
  /// cannot be opened or mapped (no permission) or is not a regular file (a folder, a FIFO, a
  /// device: refused before anything is read, see ReadableFile, so that a FIFO never blocks).
  static std::shared_ptr<const FileMap> open(const std::string& path);

  ~FileMap();
  FileMap(const FileMap&) = delete;
  FileMap& operator=(const FileMap&) = delete;

  const std::byte* data() const { return data_; }
  int64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  FileMap() = default;
  std::byte* data_ = nullptr;
  int64_t size_ = 0;
  std::string path_;
};

/// Tells the OS that the whole pages inside [data, data + size) of a private read-only file
/// mapping may leave memory now; a later read faults them in from the file again, unchanged.
/// For bytes that were copied elsewhere (parsed, packed), so that they do not count twice in
/// the process's resident memory. The partial pages at either end stay.
void drop_mapped_pages(const void* data, int64_t size);

}  // namespace tether::util
