// Opening a file for reading so that no step can block or run away: a path that names a FIFO,
// a device, a socket or a directory is refused before anything is read from it.
#pragma once

#include <cstdint>
#include <string>

namespace tether::util {

/// What a file of mode `mode` (st_mode) is, in words: "a regular file", "a directory",
/// "a FIFO", "a character device", "a block device", "a socket", "a symbolic link".
const char* file_kind_text(unsigned mode);

/// A regular file open for reading. Opening never blocks: the path is checked with stat()
/// first (so that a FIFO or device is not even opened), opened with O_NONBLOCK | O_CLOEXEC |
/// O_NOCTTY (so a FIFO swapped in meanwhile does not block the open), and then checked again
/// with fstat() on the descriptor itself, which is what every later read uses. Symbolic links
/// are followed. Construction never throws: callers throw the error type their layer uses.
class ReadableFile {
 public:
  /// Opens `path`. On failure ok() is false, missing() says whether nothing is there, and
  /// error() is a message naming the path and the reason, e.g.
  /// "'/tmp/m.onnx' is a FIFO, not a regular file".
  explicit ReadableFile(std::string path);
  ~ReadableFile();
  ReadableFile(const ReadableFile&) = delete;
  ReadableFile& operator=(const ReadableFile&) = delete;

  bool ok() const { return fd_ >= 0; }
  /// True when the path (or a folder on it, or a symbolic link's target) does not exist.
  bool missing() const { return missing_; }
  /// True when the path exists but is not a regular file (FIFO, device, socket, directory).
  bool not_regular() const { return not_regular_; }
  /// Why the file cannot be read; "" when ok().
  const std::string& error() const { return error_; }
  /// The open descriptor (blocking mode restored); -1 when !ok(). Owned by this object.
  int fd() const { return fd_; }
  /// The file's size when it was opened, from fstat().
  int64_t size() const { return size_; }
  const std::string& path() const { return path_; }

  /// Reads exactly `size` bytes at `offset` into `out`. False (error() says why) when the
  /// file is shorter now or a read fails. Precondition: ok().
  bool read_at(void* out, int64_t size, int64_t offset);

 private:
  void open_checked();
  void fail(const std::string& why);
  std::string path_;
  std::string error_;
  int fd_ = -1;
  int64_t size_ = 0;
  bool missing_ = false;
  bool not_regular_ = false;
};

}  // namespace tether::util
