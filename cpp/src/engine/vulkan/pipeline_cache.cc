#include "engine/vulkan/pipeline_cache.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/vulkan/device.h"
#include "engine/vulkan/shaders.h"
#include "tether/error.h"
#include "util/atomic_file.h"
#include "util/regular_file.h"

namespace tether::engine::vulkan {

namespace {

// The file: this header, then the pipeline cache data as the driver gave it.
constexpr char kMagic[8] = {'t', 'e', 't', 'h', 'e', 'r', 'P', 'C'};
struct FileHeader {
  char magic[8];
  uint64_t bytes;     // of the data after the header
  uint64_t checksum;  // FNV-1a of that data
  uint64_t shaders;   // hash of the embedded shaders of the tether build that wrote it
};

// Far above what a driver makes of tether's shaders, far below what would strain memory: a
// larger file is not read at all.
constexpr int64_t kMaxFileBytes = int64_t{64} << 20;

uint64_t fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

uint64_t shaders_hash() {
  size_t count = 0;
  const Spirv* all = all_spirv(&count);
  uint64_t h = fnv1a("tether", 6);
  for (size_t i = 0; i < count; ++i) {
    h = fnv1a(all[i].name, std::strlen(all[i].name), h);
    h = fnv1a(all[i].words, all[i].count * sizeof(uint32_t), h);
  }
  return h;
}

std::string env(const char* name, bool* set = nullptr) {
  const char* v = std::getenv(name);
  if (set != nullptr) *set = v != nullptr;
  return v != nullptr ? v : "";
}

// mkdir -p; false (errno set) when a part cannot be made.
bool make_folders(const std::string& path) {
  for (size_t at = 1; at <= path.size(); ++at) {
    if (at != path.size() && path[at] != '/') continue;
    const std::string part = path.substr(0, at);
    if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) return false;
    struct stat st {};
    if (::stat(part.c_str(), &st) != 0) return false;
    if (!S_ISDIR(st.st_mode)) {
      errno = ENOTDIR;
      return false;
    }
  }
  return true;
}

std::string hex(const uint8_t* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += digits[p[i] >> 4];
    s += digits[p[i] & 15];
  }
  return s;
}

}  // namespace

std::string pipeline_cache_folder() {
  bool set = false;
  const std::string root = env("TETHER_CACHE_DIR", &set);
  if (set) return root.empty() ? "" : root + "/vulkan";
  const std::string xdg = env("XDG_CACHE_HOME");
  if (!xdg.empty()) return xdg + "/tether/vulkan";
  const std::string home = env("HOME");
  return home.empty() ? "" : home + "/.cache/tether/vulkan";
}

PipelineCacheFile::PipelineCacheFile(const PhysicalDevice& device) : shaders_(shaders_hash()) {
  // Vulkan's header (VK_PIPELINE_CACHE_HEADER_VERSION_ONE): length, version, vendor, device, UUID.
  const VkPhysicalDeviceProperties& p = device.properties;
  const uint32_t words[4] = {32, VK_PIPELINE_CACHE_HEADER_VERSION_ONE, p.vendorID, p.deviceID};
  std::memcpy(header_, words, sizeof words);
  std::memcpy(header_ + 16, p.pipelineCacheUUID, VK_UUID_SIZE);
  const std::string folder = pipeline_cache_folder();
  if (folder.empty()) {
    load_note_ = "off (TETHER_CACHE_DIR is empty, or there is no home folder)";
    return;
  }
  char name[64];
  std::snprintf(name, sizeof name, "%04x-%04x-%08x-", p.vendorID, p.deviceID, p.driverVersion);
  path_ = folder + "/pipelines-" + name + hex(p.pipelineCacheUUID, VK_UUID_SIZE) + ".bin";

  util::ReadableFile f(path_);
  if (f.missing()) {
    load_note_ = "none yet at " + path_;
    return;
  }
  if (!f.ok()) {
    // Something that is not a regular file (a folder, a FIFO, a device) is not tether's to
    // replace: it is left as it is and the cache is neither read nor written.
    skip_save_ = f.not_regular();
    load_note_ = f.error() + (skip_save_ ? "; ignored and left in place: pipelines are built anew by each process"
                                         : "; ignored, it will be replaced");
    return;
  }
  if (f.size() > kMaxFileBytes) {
    load_note_ = path_ + " ignored: it holds " + bytes_text(f.size()) + ", over the " + bytes_text(kMaxFileBytes) +
                 " a pipeline cache may take; it will be replaced";
    return;
  }
  std::vector<char> file(static_cast<size_t>(f.size()));
  if (!f.read_at(file.data(), f.size(), 0)) {
    load_note_ = f.error() + "; ignored, it will be replaced";
    return;
  }
  FileHeader h{};
  const char* why = nullptr;
  if (file.size() < sizeof h) {
    why = "it is shorter than its header";
  } else {
    std::memcpy(&h, file.data(), sizeof h);
    const size_t bytes = file.size() - sizeof h;
    const uint8_t* data = reinterpret_cast<const uint8_t*>(file.data()) + sizeof h;
    if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) why = "it is not a tether pipeline cache";
    else if (h.bytes != bytes) why = "its length is wrong (truncated?)";
    else if (h.checksum != fnv1a(data, bytes)) why = "its checksum is wrong";
    else if (h.shaders != shaders_) why = "it was written by a tether build with other shaders";
    else if (bytes < sizeof header_ || std::memcmp(data, header_, sizeof header_) != 0)
      why = "it is for another device or driver";
    else initial_.assign(data, data + bytes);
  }
  on_disk_ = initial_;
  load_note_ = why == nullptr ? "read " + bytes_text(static_cast<int64_t>(initial_.size())) + " from " + path_
                              : path_ + " ignored: " + why + "; it will be replaced";
}

void PipelineCacheFile::save(const std::vector<uint8_t>& data) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (path_.empty() || skip_save_ || data == on_disk_) return;  // nothing new, or not tether's file to replace
  if (static_cast<int64_t>(sizeof(FileHeader) + data.size()) > kMaxFileBytes) {
    save_note_ = "not written: " + bytes_text(static_cast<int64_t>(data.size())) + " is over the " +
                 bytes_text(kMaxFileBytes) + " a pipeline cache may take; pipelines are built anew by each process";
    return;
  }
  const std::string folder = path_.substr(0, path_.rfind('/'));
  if (!make_folders(folder)) {
    save_note_ = "not written: making " + folder + " failed (" + std::strerror(errno) +
                 "); pipelines are built anew by each process";
    return;
  }
  FileHeader h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.bytes = data.size();
  h.checksum = fnv1a(data.data(), data.size());
  h.shaders = shaders_;
  try {
    // A temporary file of a fresh name (never one that exists, so never a FIFO or a link
    // planted there) renamed over the path: a reader sees the old file or the whole new one.
    util::AtomicFile out(path_);
    out.write(&h, sizeof h);
    out.write(data.data(), static_cast<int64_t>(data.size()));
    out.commit();
  } catch (const WriteError& e) {
    save_note_ = std::string("not written: ") + e.what() + "; pipelines are built anew by each process";
    return;
  }
  on_disk_ = data;
  save_note_ = "wrote " + bytes_text(static_cast<int64_t>(data.size())) + " to " + path_;
}

void PipelineCacheFile::refused() {
  std::lock_guard<std::mutex> lock(mutex_);
  load_note_ = path_ + " ignored: the driver refused its data; it will be replaced";
  initial_.clear();
  on_disk_.clear();
}

std::string PipelineCacheFile::note() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return save_note_.empty() ? load_note_ : load_note_ + "; " + save_note_;
}

}  // namespace tether::engine::vulkan
