#include "util/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "tether/error.h"

namespace tether::util {

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  std::vector<char> name(path_.begin(), path_.end());
  const std::string suffix = ".tmp-XXXXXX";
  name.insert(name.end(), suffix.begin(), suffix.end());
  name.push_back('\0');
  fd_ = ::mkstemp(name.data());
  if (fd_ < 0) fail("cannot create a file beside it");
  temp_ = name.data();
  ::fchmod(fd_, 0644);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
}

void AtomicFile::fail(const std::string& what) const {
  throw WriteError("'" + path_ + "': " + what + ": " + std::strerror(errno));
}

void AtomicFile::write(const void* data, int64_t size) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const size_t step = static_cast<size_t>(std::min<int64_t>(size, int64_t{1} << 30));
    const ssize_t n = ::write(fd_, p, step);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write failed");
    }
    p += n;
    size -= n;
    position_ += n;
  }
}

void AtomicFile::pad(int64_t size) {
  static const char zeros[4096] = {};
  while (size > 0) {
    const int64_t step = std::min<int64_t>(size, sizeof(zeros));
    write(zeros, step);
    size -= step;
  }
}

void AtomicFile::finish() {
  if (::fsync(fd_) != 0) fail("flushing to disk failed");
  if (::close(fd_) != 0) {
    fd_ = -1;
    fail("closing failed");
  }
  fd_ = -1;
  finished_ = true;
}

void AtomicFile::commit() {
  if (!finished_) finish();
  if (::rename(temp_.c_str(), path_.c_str()) != 0) fail("cannot rename the finished file into place");
  committed_ = true;
}

}  // namespace tether::util
