// The Vulkan API as tether calls it: the headers give the types only, and every function is
// looked up at run time from the loader (libvulkan.so.1, opened by instance.cc), so that the
// library loads, and the CPU engine works, on a machine without Vulkan.
#pragma once

#ifndef VK_NO_PROTOTYPES
#define VK_NO_PROTOTYPES
#endif
#include <vulkan/vulkan.h>

// Functions by the object they are looked up from. Adding a call means adding its name here.
#define TETHER_VK_GLOBAL_FUNCTIONS(X) \
  X(vkCreateInstance)                 \
  X(vkEnumerateInstanceExtensionProperties) \
  X(vkEnumerateInstanceLayerProperties)     \
  X(vkEnumerateInstanceVersion)

#define TETHER_VK_INSTANCE_FUNCTIONS(X)       \
  X(vkDestroyInstance)                        \
  X(vkEnumeratePhysicalDevices)               \
  X(vkGetPhysicalDeviceProperties)            \
  X(vkGetPhysicalDeviceProperties2)           \
  X(vkGetPhysicalDeviceFeatures2)             \
  X(vkGetPhysicalDeviceMemoryProperties)      \
  X(vkGetPhysicalDeviceQueueFamilyProperties) \
  X(vkEnumerateDeviceExtensionProperties)     \
  X(vkCreateDevice)                           \
  X(vkGetDeviceProcAddr)

// Present only when the instance enables VK_EXT_debug_utils (validation on).
#define TETHER_VK_DEBUG_FUNCTIONS(X) \
  X(vkCreateDebugUtilsMessengerEXT)  \
  X(vkDestroyDebugUtilsMessengerEXT)

// Present only where a driver has VK_NV_cooperative_matrix (nullptr otherwise).
#define TETHER_VK_OPTIONAL_FUNCTIONS(X) X(vkGetPhysicalDeviceCooperativeMatrixPropertiesNV)

#define TETHER_VK_DEVICE_FUNCTIONS(X) \
  X(vkDestroyDevice)                  \
  X(vkGetDeviceQueue)                 \
  X(vkCreateBuffer)                   \
  X(vkDestroyBuffer)                  \
  X(vkGetBufferMemoryRequirements)    \
  X(vkAllocateMemory)                 \
  X(vkFreeMemory)                     \
  X(vkBindBufferMemory)               \
  X(vkMapMemory)                      \
  X(vkUnmapMemory)                    \
  X(vkFlushMappedMemoryRanges)        \
  X(vkInvalidateMappedMemoryRanges)   \
  X(vkCreateShaderModule)             \
  X(vkDestroyShaderModule)            \
  X(vkCreateDescriptorSetLayout)      \
  X(vkDestroyDescriptorSetLayout)     \
  X(vkCreatePipelineLayout)           \
  X(vkDestroyPipelineLayout)          \
  X(vkCreatePipelineCache)            \
  X(vkDestroyPipelineCache)           \
  X(vkGetPipelineCacheData)           \
  X(vkCreateComputePipelines)         \
  X(vkDestroyPipeline)                \
  X(vkCreateDescriptorPool)           \
  X(vkDestroyDescriptorPool)          \
  X(vkAllocateDescriptorSets)         \
  X(vkUpdateDescriptorSets)           \
  X(vkCreateCommandPool)              \
  X(vkDestroyCommandPool)             \
  X(vkAllocateCommandBuffers)         \
  X(vkBeginCommandBuffer)             \
  X(vkEndCommandBuffer)               \
  X(vkCmdBindPipeline)                \
  X(vkCmdBindDescriptorSets)          \
  X(vkCmdPushConstants)               \
  X(vkCmdDispatch)                    \
  X(vkCmdPipelineBarrier)             \
  X(vkCmdCopyBuffer)                  \
  X(vkCreateQueryPool)                \
  X(vkDestroyQueryPool)               \
  X(vkCmdResetQueryPool)              \
  X(vkCmdWriteTimestamp)              \
  X(vkGetQueryPoolResults)            \
  X(vkCreateFence)                    \
  X(vkDestroyFence)                   \
  X(vkResetFences)                    \
  X(vkWaitForFences)                  \
  X(vkQueueSubmit)                    \
  X(vkDeviceWaitIdle)

namespace tether::engine::vulkan {

#define TETHER_VK_MEMBER(name) PFN_##name name = nullptr;

/// Functions of the loader and of one instance.
struct InstanceApi {
  PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
  TETHER_VK_GLOBAL_FUNCTIONS(TETHER_VK_MEMBER)
  TETHER_VK_INSTANCE_FUNCTIONS(TETHER_VK_MEMBER)
  TETHER_VK_DEBUG_FUNCTIONS(TETHER_VK_MEMBER)
  TETHER_VK_OPTIONAL_FUNCTIONS(TETHER_VK_MEMBER)
};

/// Functions of one logical device (looked up through vkGetDeviceProcAddr: no loader dispatch).
struct DeviceApi {
  TETHER_VK_DEVICE_FUNCTIONS(TETHER_VK_MEMBER)
};

#undef TETHER_VK_MEMBER

/// The VkResult's name ("VK_ERROR_OUT_OF_DEVICE_MEMORY"), for messages.
const char* result_name(VkResult r);

}  // namespace tether::engine::vulkan
