#include "util/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tether::util {

const char* file_kind_text(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    case S_IFLNK: return "a symbolic link";
    default: return "not a file of a known kind";
  }
}

void ReadableFile::fail(const std::string& why) {
  error_ = "'" + path_ + "'" + why;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

ReadableFile::ReadableFile(std::string path) : path_(std::move(path)) { open_checked(); }

void ReadableFile::open_checked() {
  auto refuse_kind = [&](unsigned mode) {
    not_regular_ = true;
    fail(std::string(" is ") + file_kind_text(mode) + ", not a regular file");
  };
  // stat() first, so that a FIFO or a device is never opened at all: opening one can have
  // effects of its own (a writer blocked on a FIFO would go on into a pipe nobody reads).
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) return refuse_kind(st.st_mode);
  fd_ = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd_ < 0) {
    const int err = errno;
    missing_ = err == ENOENT || err == ENOTDIR;
    return fail(missing_ ? ": no such file" : std::string(": cannot open: ") + std::strerror(err));
  }
  // The descriptor, not the path, is what gets read: check what it is, not what the path was.
  if (::fstat(fd_, &st) != 0) return fail(std::string(": cannot stat: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return refuse_kind(st.st_mode);
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags >= 0 && (flags & O_NONBLOCK) != 0) ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK);
  size_ = static_cast<int64_t>(st.st_size);
}

ReadableFile::~ReadableFile() {
  if (fd_ >= 0) ::close(fd_);
}

bool ReadableFile::read_at(void* out, int64_t size, int64_t offset) {
  auto* p = static_cast<char*>(out);
  while (size > 0) {
    const size_t step = static_cast<size_t>(size < (int64_t{1} << 30) ? size : (int64_t{1} << 30));
    const ssize_t n = ::pread(fd_, p, step, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error_ = "'" + path_ + "': " + (n == 0 ? std::string("shorter than when it was opened") : std::strerror(errno));
      return false;
    }
    p += n;
    size -= n;
    offset += n;
  }
  return true;
}

}  // namespace tether::util
