#include "util/file_map.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tether/error.h"
#include "util/regular_file.h"

namespace tether::util {

std::shared_ptr<const FileMap> FileMap::open(const std::string& path) {
  ReadableFile file(path);
  if (file.missing()) throw ModelNotFoundError(file.error());
  if (!file.ok()) throw ModelError(file.error());

  std::shared_ptr<FileMap> map(new FileMap());
  map->path_ = path;
  map->size_ = file.size();
  if (map->size_ == 0) return map;
  void* p = ::mmap(nullptr, static_cast<size_t>(map->size_), PROT_READ, MAP_PRIVATE, file.fd(), 0);
  if (p == MAP_FAILED) throw ModelError("'" + path + "': cannot map: " + std::strerror(errno));
  map->data_ = static_cast<std::byte*>(p);
  return map;
}

void drop_mapped_pages(const void* data, int64_t size) {
  if (size <= 0) return;
  static const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const auto end = (reinterpret_cast<uintptr_t>(data) + static_cast<uintptr_t>(size)) / page * page;
  // The mapping is private and never written, so its pages are clean copies of the file:
  // dropping them loses nothing.
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

FileMap::~FileMap() {
  if (data_ != nullptr) ::munmap(data_, static_cast<size_t>(size_));
}

}  // namespace tether::util
