#include "engine/vulkan/pipeline_cache.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/vulkan/device.h"
#include "engine/vulkan/shaders.h"

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

  std::ifstream f(path_, std::ios::binary);
  if (!f) {
    load_note_ = "none yet at " + path_;
    return;
  }
  const std::vector<char> file((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
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
  if (path_.empty() || data == on_disk_) return;  // the driver added nothing: no write
  const std::string folder = path_.substr(0, path_.rfind('/'));
  const std::string tmp = path_ + ".tmp" + std::to_string(::getpid());
  auto fail = [&](const char* doing, const std::string& what) {
    save_note_ = "not written: " + std::string(doing) + " " + what + " failed (" + std::strerror(errno) +
                 "); pipelines are built anew by each process";
    std::remove(tmp.c_str());
  };
  if (!make_folders(folder)) return fail("making", folder);
  FileHeader h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.bytes = data.size();
  h.checksum = fnv1a(data.data(), data.size());
  h.shaders = shaders_;
  {
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    if (f == nullptr) return fail("opening", tmp);
    const bool ok = std::fwrite(&h, sizeof h, 1, f) == 1 &&
                    (data.empty() || std::fwrite(data.data(), data.size(), 1, f) == 1);
    if (std::fclose(f) != 0 || !ok) return fail("writing", tmp);
  }
  if (std::rename(tmp.c_str(), path_.c_str()) != 0) return fail("renaming", tmp + " to " + path_);
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
