// Writing a file so that readers see either the old file or the complete new one.
#pragma once

#include <cstdint>
#include <string>

namespace tether::util {

/// Writes to a temporary file beside `path`; commit() flushes it to disk and renames it over
/// `path`. Destroyed without commit(), it removes the temporary file and leaves `path` as it
/// was. Every failure throws WriteError naming the file and the reason.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, int64_t size);
  /// Writes `size` zero bytes.
  void pad(int64_t size);
  int64_t position() const { return position_; }
  /// Flushes and syncs the file, without renaming it yet.
  void finish();
  /// Renames the finished file into place. Precondition: finish() was called.
  void commit();

 private:
  [[noreturn]] void fail(const std::string& what) const;
  std::string path_;
  std::string temp_;
  int fd_ = -1;
  int64_t position_ = 0;
  bool finished_ = false;
  bool committed_ = false;
};

}  // namespace tether::util
