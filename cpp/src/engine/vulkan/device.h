// One Vulkan device as tether uses it: a compute queue, buffers with memory of their own,
// compute pipelines built from the embedded SPIR-V (cached by shader and specialisation), and
// submission. Every Vulkan failure becomes a DeviceError a user can act on.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "engine/vulkan/api.h"
#include "engine/vulkan/instance.h"
#include "engine/vulkan/pipeline_cache.h"

namespace tether::engine::vulkan {

class Device;

/// Where a buffer's memory lives: device-local (the arena, weights), or host-visible and
/// mapped (staging for transfers).
enum class Memory { kDevice, kStaging };

/// A buffer with its own memory allocation. Move-only; frees both when destroyed.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Buffer&& other) noexcept { *this = std::move(other); }
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }

  VkBuffer handle() const { return buffer_; }
  int64_t bytes() const { return bytes_; }
  /// Host address of a staging buffer's memory (nullptr for device memory).
  std::byte* mapped() const { return mapped_; }
  /// Makes host writes visible to the device (nothing to do on coherent memory).
  void flush() const;
  /// Makes device writes visible to the host (nothing to do on coherent memory).
  void invalidate() const;
  void reset();

 private:
  friend class Device;
  const Device* device_ = nullptr;
  VkBuffer buffer_ = VK_NULL_HANDLE;
  VkDeviceMemory memory_ = VK_NULL_HANDLE;
  std::byte* mapped_ = nullptr;
  int64_t bytes_ = 0;
  bool coherent_ = true;
};

/// A compute pipeline: one shader, `bindings` storage buffers in set 0 (bindings 0..n-1),
/// `push_bytes` of push constants, its specialisation constants fixed.
struct Pipeline {
  std::string shader;
  VkPipeline pipeline = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  uint32_t bindings = 0;
  uint32_t push_bytes = 0;
};

/// What names a pipeline: the shader, its interface, and the value of each specialisation
/// constant (constant_id i is spec[i], a 32-bit int, uint or float's bits).
struct PipelineKey {
  std::string shader;
  uint32_t bindings = 0;
  uint32_t push_bytes = 0;
  std::vector<uint32_t> spec;
  bool operator<(const PipelineKey& o) const {
    return std::tie(shader, bindings, push_bytes, spec) < std::tie(o.shader, o.bindings, o.push_bytes, o.spec);
  }
};

/// A float's bits, for a float specialisation constant.
uint32_t float_bits(float v);

class Device {
 public:
  /// The device `name` ("vulkan": the first discrete GPU, else integrated, virtual, then any;
  /// "vulkan:N": device N of devices()), opened once per process and shared by sessions.
  /// Throws UnsupportedError when Vulkan has no device (saying how to install one) or the
  /// device cannot be used, ArgumentError for an index out of range (listing the devices).
  static std::shared_ptr<Device> open(const std::string& name);

  Device(const Instance& instance, const PhysicalDevice& physical);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const DeviceApi& api() const { return api_; }
  VkDevice handle() const { return device_; }
  const PhysicalDevice& physical() const { return physical_; }
  const VkPhysicalDeviceLimits& limits() const { return physical_.limits; }
  const std::string& name() const { return physical_.info.name; }
  uint32_t queue_family() const { return static_cast<uint32_t>(physical_.queue_family); }
  /// Largest workgroup (invocations) the kernels use on this device: at most 256.
  uint32_t max_workgroup() const;
  /// Whether shaders may load and store 8-bit integers in storage buffers
  /// (storageBuffer8BitAccess, enabled where the device has it): what the INT8 kernels need.
  bool storage8() const { return storage8_; }
  /// Whether shaders may take dot products of packed 4 x 8-bit vectors
  /// (VK_KHR_shader_integer_dot_product, core in Vulkan 1.3; enabled where the device has it).
  bool integer_dot() const { return integer_dot_; }
  /// Whether the float16 GEMMs run on tensor cores (gemm_coop.glsl; PhysicalDevice::cooperative_matrix,
  /// whose features are then enabled).
  bool cooperative_matrix() const { return cooperative_matrix_; }
  /// Whether shaders may compute in float16 (shaderFloat16, with 16-bit storage; enabled where
  /// the device has both): the GPU tiles' float16 products (TETHER_VULKAN_FP16_ARITHMETIC=1).
  bool float16_arithmetic() const { return float16_arithmetic_; }
  /// Whether compute shaders have subgroup arithmetic (PhysicalDevice::subgroup_arithmetic).
  bool subgroup_arithmetic() const { return subgroup_arithmetic_; }

  /// Throws DeviceError saying what failed (`what`) and why, unless `r` is VK_SUCCESS. A lost
  /// device is remembered: lost() is true from then on.
  void check(VkResult r, const std::string& what) const;
  bool lost() const { return lost_.load(); }

  /// A buffer of `bytes` (at least 16) usable as storage and transfer source and destination.
  /// Throws DeviceError when the device has not the memory (naming `what`).
  Buffer buffer(int64_t bytes, Memory memory, const std::string& what) const;

  /// The pipeline for `key`, built on first use (thread-safe). Throws DeviceError when the
  /// driver cannot build it, InternalError for a shader tether does not embed.
  const Pipeline& pipeline(const PipelineKey& key);

  /// Pipelines this device built so far: how many, how many the driver found in the pipeline
  /// cache (when it reports it: VK_EXT_pipeline_creation_feedback), and the time it took.
  struct PipelineStats {
    int built = 0;
    int cache_hits = 0;
    bool hits_known = false;
    double seconds = 0;
  };
  PipelineStats pipeline_stats() const;
  /// Writes the pipeline cache to its file when pipelines were built since it was last
  /// written. Never throws: a failure is in pipeline_cache_note().
  void save_pipeline_cache();
  /// What became of the pipeline cache file (read, ignored and why, written, not written).
  std::string pipeline_cache_note() const { return disk_cache_.note(); }

  /// Submits one command buffer that signals `fence` (the queue is shared: submission is
  /// serialised), then waits for the fence and resets it. Throws DeviceError when the device
  /// is lost or the work does not finish within TETHER_VULKAN_TIMEOUT seconds (default 600).
  void submit_and_wait(VkCommandBuffer cmd, VkFence fence, const std::string& what) const;

  /// A fence, unsignalled.
  VkFence fence() const;

 private:
  uint32_t memory_type(uint32_t allowed, Memory memory, bool* coherent) const;
  VkShaderModule module(const std::string& shader);

  const PhysicalDevice& physical_;
  DeviceApi api_;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  VkPipelineCache cache_ = VK_NULL_HANDLE;
  mutable std::mutex queue_mutex_;
  mutable std::atomic<bool> lost_{false};
  bool storage8_ = false;
  bool integer_dot_ = false;
  bool cooperative_matrix_ = false;
  bool float16_arithmetic_ = false;
  bool subgroup_arithmetic_ = false;

  PipelineCacheFile disk_cache_;
  mutable std::mutex pipelines_mutex_;
  PipelineStats stats_;
  int unsaved_ = 0;  // pipelines built since the cache was last written
  std::map<std::string, VkShaderModule> modules_;
  std::map<std::pair<uint32_t, uint32_t>, std::pair<VkDescriptorSetLayout, VkPipelineLayout>> layouts_;
  std::map<PipelineKey, std::unique_ptr<Pipeline>> pipelines_;
};

/// "12.0 MB", for messages.
std::string bytes_text(int64_t bytes);

}  // namespace tether::engine::vulkan
