// The process's Vulkan instance: the loader opened at run time, the physical devices, and
// (with TETHER_VULKAN_VALIDATION=1) the validation layer and a messenger recording its messages.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/vulkan/api.h"
#include "tether/engine.h"

namespace tether::engine::vulkan {

/// A physical device as the instance found it.
struct PhysicalDevice {
  VkPhysicalDevice handle = VK_NULL_HANDLE;
  DeviceInfo info;              ///< what devices() reports
  uint32_t api_version = 0;     ///< the version tether uses it with (instance and device, the lower)
  int queue_family = -1;        ///< a queue family with compute
  std::string unusable;         ///< why tether cannot compile for it ("" when it can)
  VkPhysicalDeviceProperties properties{};  ///< vendor, device and driver ids, pipeline cache UUID, limits
  VkPhysicalDeviceLimits limits{};
  std::string driver_name;      ///< "llvmpipe", "NVIDIA", ...
  std::string driver_version;   ///< the driver's description of its version
  bool storage16 = false;       ///< float16 and 16-bit integers in storage buffers (enabled when present)
  uint32_t timestamp_bits = 0;  ///< valid bits of timestamps on the compute queue (0: no timestamps)
  VkPhysicalDeviceMemoryProperties memory{};
  uint64_t max_allocation = UINT64_MAX;  ///< largest single memory allocation (maintenance3)
  /// Tensor cores for the float16 GEMMs (gemm_coop.glsl): VK_NV_cooperative_matrix with a
  /// float16 x float16 -> float32 16 x 16 x 16 subgroup shape, subgroups of 32, float16
  /// arithmetic, 16-bit storage and the Vulkan memory model; off under TETHER_VULKAN_NO_COOPMAT=1.
  bool cooperative_matrix = false;
  /// Float16 arithmetic (shaderFloat16) with 16-bit storage: what gemm_tiled.glsl's float16
  /// products need (enabled when present).
  bool float16 = false;
  /// Subgroup arithmetic (subgroupAdd, subgroupMax) in compute shaders: the row kernels'
  /// reductions (rows.glsl's SUBGROUP_ROWS). Core in Vulkan 1.1, nothing to enable.
  bool subgroup_arithmetic = false;
};

/// The instance, created on first use and kept for the life of the process.
class Instance {
 public:
  /// The instance, or nullptr when there is none: no loader (libvulkan.so.1, or the library
  /// TETHER_VULKAN_LIBRARY names), or a loader without a driver. `why` then says which.
  static Instance* get(std::string* why = nullptr);

  const InstanceApi& api() const { return api_; }
  VkInstance handle() const { return instance_; }
  const std::vector<PhysicalDevice>& devices() const { return devices_; }
  /// Whether the validation layer is on (TETHER_VULKAN_VALIDATION=1 and the layer installed).
  bool validation() const { return validation_; }

 private:
  Instance() = default;
  std::string create();
  void enumerate();

  InstanceApi api_;
  VkInstance instance_ = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  std::vector<PhysicalDevice> devices_;
  bool validation_ = false;
};

/// What the validation layer (and note_validation_message) recorded since the last call, one
/// line each; clears the list.
std::vector<std::string> take_validation_messages();

/// Records a message as validation would (tether's own checks of what it asks of Vulkan).
void note_validation_message(const std::string& message);

/// Whether environment variable `name` is "1": how the TETHER_VULKAN_NO_* switches and
/// TETHER_VULKAN_FP16_ARITHMETIC are read (each where its doc says: devices listed, model compiled).
/// Example: `const bool plain = env_is_one("TETHER_VULKAN_NO_INTEGER_DOT");`
bool env_is_one(const char* name);

/// "1.3.230" for a VK_MAKE_API_VERSION value.
std::string version_text(uint32_t version);

}  // namespace tether::engine::vulkan
