// The Vulkan pipeline cache on disk: what a device's driver made of tether's shaders, kept in a
// file per device and driver so that a later process builds its pipelines from it (a second
// compile of a model is fast). A file that is missing, corrupt, from another device, driver or
// tether build, over 64 MiB (its size is checked before anything is read), or a folder that
// cannot be written, never fails a compile: the cache is then started empty or not saved, and
// note() says so for the compile report. A path that holds something other than a regular file
// (a folder, a FIFO, a device, a link to one) is never opened for reading nor replaced.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "engine/vulkan/instance.h"

namespace tether::engine::vulkan {

/// The folder pipeline caches are kept in: $TETHER_CACHE_DIR/vulkan when TETHER_CACHE_DIR is
/// set (to "", disk caching is off and this returns ""), else $XDG_CACHE_HOME/tether/vulkan,
/// else $HOME/.cache/tether/vulkan ("" without a home).
std::string pipeline_cache_folder();

class PipelineCacheFile {
 public:
  /// Reads the cache file of `device` (named by its vendor, device, driver version and
  /// pipeline-cache UUID) when there is one that checks out: its own checksum, tether's set of
  /// shaders, and Vulkan's header for this very device.
  explicit PipelineCacheFile(const PhysicalDevice& device);

  /// The data to create the VkPipelineCache with (empty: none, or not to be trusted).
  const std::vector<uint8_t>& initial() const { return initial_; }
  /// Writes `data` (vkGetPipelineCacheData's) to the file, atomically (a temporary file
  /// renamed), unless the file already holds it; a failure is remembered in note(), never
  /// thrown.
  void save(const std::vector<uint8_t>& data);
  /// Records that the driver refused the data read (vkCreatePipelineCache failed with it).
  void refused();
  /// What happened to the file: read, ignored and why, written, not written and why.
  std::string note() const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::vector<uint8_t> initial_;
  std::vector<uint8_t> on_disk_;  // what the file holds as far as this process knows
  uint8_t header_[32] = {};  // Vulkan's pipeline cache header the data must begin with
  uint64_t shaders_ = 0;     // the hash of tether's embedded shaders
  mutable std::mutex mutex_;
  std::string load_note_, save_note_;
  bool skip_save_ = false;  // the path holds something that is not a regular file: left alone
};

}  // namespace tether::engine::vulkan
