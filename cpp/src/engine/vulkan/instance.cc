#include "engine/vulkan/instance.h"

#include "engine/vulkan/vulkan.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

namespace tether::engine::vulkan {

namespace {

std::mutex messages_mutex;
std::vector<std::string> messages;

VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                          VkDebugUtilsMessageTypeFlagsEXT, const VkDebugUtilsMessengerCallbackDataEXT* data,
                                          void*) {
  const char* level = severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT ? "error" : "warning";
  note_validation_message(std::string(level) + ": " + (data && data->pMessage ? data->pMessage : "(no text)"));
  return VK_FALSE;  // never abort the call that caused it
}

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

const char* device_type(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete_gpu";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated_gpu";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual_gpu";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
    default: return "other";
  }
}

bool has_extension(const std::vector<VkExtensionProperties>& list, const char* name) {
  return std::any_of(list.begin(), list.end(), [&](const VkExtensionProperties& e) { return std::strcmp(e.extensionName, name) == 0; });
}

// Whether the device multiplies float16 16 x 16 by 16 x 16 into float32 sums per subgroup on
// cooperative matrices (VK_NV_cooperative_matrix): the shape of gemm_coop.glsl.
bool has_half_coop_shape(const InstanceApi& api, VkPhysicalDevice device) {
  uint32_t n = 0;
  if (api.vkGetPhysicalDeviceCooperativeMatrixPropertiesNV(device, &n, nullptr) != VK_SUCCESS) return false;
  std::vector<VkCooperativeMatrixPropertiesNV> shapes(n, {VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV});
  if (api.vkGetPhysicalDeviceCooperativeMatrixPropertiesNV(device, &n, shapes.data()) != VK_SUCCESS) return false;
  shapes.resize(n);
  return std::any_of(shapes.begin(), shapes.end(), [](const VkCooperativeMatrixPropertiesNV& s) {
    return s.MSize == 16 && s.NSize == 16 && s.KSize == 16 && s.AType == VK_COMPONENT_TYPE_FLOAT16_NV &&
           s.BType == VK_COMPONENT_TYPE_FLOAT16_NV && s.CType == VK_COMPONENT_TYPE_FLOAT32_NV &&
           s.DType == VK_COMPONENT_TYPE_FLOAT32_NV && s.scope == VK_SCOPE_SUBGROUP_NV;
  });
}

// The driver manifests the loader reads: VK_DRIVER_FILES / VK_ICD_FILENAMES (files or folders,
// ':'-separated) when set, else the icd.d folders of the XDG configuration and data paths.
std::vector<std::filesystem::path> driver_manifests() {
  namespace fs = std::filesystem;
  auto split = [](const std::string& s) {
    std::vector<std::string> out;
    std::stringstream in(s);
    for (std::string item; std::getline(in, item, ':');)
      if (!item.empty()) out.push_back(item);
    return out;
  };
  auto env = [](const char* name, const char* fallback) {
    const char* v = std::getenv(name);
    return std::string(v != nullptr && *v != '\0' ? v : fallback);
  };
  std::vector<std::string> places;
  const std::string given = env("VK_DRIVER_FILES", std::getenv("VK_ICD_FILENAMES") ? std::getenv("VK_ICD_FILENAMES") : "");
  if (!given.empty()) {
    places = split(given);
  } else {
    const std::string home = env("HOME", "");
    std::vector<std::string> roots{env("XDG_CONFIG_HOME", (home + "/.config").c_str())};
    for (const std::string& d : split(env("XDG_CONFIG_DIRS", "/etc/xdg"))) roots.push_back(d);
    roots.push_back("/etc");
    roots.push_back(env("XDG_DATA_HOME", (home + "/.local/share").c_str()));
    for (const std::string& d : split(env("XDG_DATA_DIRS", "/usr/local/share:/usr/share"))) roots.push_back(d);
    for (const std::string& r : roots) places.push_back(r + "/vulkan/icd.d");
  }
  std::vector<fs::path> out;
  std::error_code ec;
  for (const std::string& p : places) {
    if (fs::is_directory(p, ec)) {
      for (const auto& entry : fs::directory_iterator(p, ec))
        if (entry.path().extension() == ".json") out.push_back(entry.path());
    } else if (fs::is_regular_file(p, ec)) {
      out.push_back(p);
    }
  }
  return out;
}

// A process may hold another copy of LLVM in its global symbol scope: TensorFlow opens its
// framework library RTLD_GLOBAL, exporting LLVM's symbols. A driver built on LLVM (Mesa's
// lavapipe and radv) that the Vulkan loader opens later would bind some of its LLVM calls to
// that copy, and crash. When such symbols are there, each driver's library is opened first
// with RTLD_DEEPBIND (its own dependencies before the global scope); the loader's dlopen of
// the same library then finds it open. Without such symbols, each driver is opened first with
// RTLD_NOW: every symbol it takes from its own LLVM is bound at once, so that a copy of LLVM a
// later import makes global (TensorFlow after tether's first Vulkan call) cannot capture the
// bindings the loader's lazy dlopen would leave for the first shader compile. Never closed,
// like the loader.
void isolate_drivers_from_a_global_llvm() {
  const bool global_llvm = dlsym(RTLD_DEFAULT, "_ZN4llvm11raw_ostream5writeEPKcm") != nullptr;
  for (const std::filesystem::path& manifest : driver_manifests()) {
    std::ifstream in(manifest);
    std::stringstream text;
    text << in.rdbuf();
    const std::string json = text.str();
    const size_t key = json.find("\"library_path\"");
    const size_t open = key == std::string::npos ? key : json.find('"', json.find(':', key) + 1);
    const size_t close = open == std::string::npos ? open : json.find('"', open + 1);
    if (close == std::string::npos) continue;
    std::string lib = json.substr(open + 1, close - open - 1);
    if (lib.find('/') != std::string::npos && lib.front() != '/') lib = (manifest.parent_path() / lib).string();
    dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL | (global_llvm ? RTLD_DEEPBIND : 0));
  }
}

}  // namespace

void note_validation_message(const std::string& message) {
  std::lock_guard<std::mutex> lock(messages_mutex);
  messages.push_back(message);
}

std::vector<std::string> take_validation_messages() {
  std::lock_guard<std::mutex> lock(messages_mutex);
  std::vector<std::string> out;
  out.swap(messages);
  return out;
}

bool env_is_one(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, "1") == 0;
}

std::string version_text(uint32_t v) {
  return std::to_string(VK_API_VERSION_MAJOR(v)) + "." + std::to_string(VK_API_VERSION_MINOR(v)) + "." +
         std::to_string(VK_API_VERSION_PATCH(v));
}

Instance* Instance::get(std::string* why) {
  // Created once; a failure is remembered (the loader and drivers do not change under a process).
  static Instance* instance = nullptr;
  static std::string failure;
  static std::once_flag once;
  std::call_once(once, [] {
    auto* made = new Instance();
    failure = made->create();
    if (failure.empty()) {
      instance = made;
    } else {
      delete made;
    }
  });
  if (why != nullptr) *why = failure;
  return instance;
}

std::string Instance::create() {
  isolate_drivers_from_a_global_llvm();
  const char* override_path = std::getenv("TETHER_VULKAN_LIBRARY");
  const char* path = override_path != nullptr && *override_path != '\0' ? override_path : "libvulkan.so.1";
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* err = dlerror();
    return std::string("the Vulkan loader ") + path + " could not be opened (" + (err ? err : "unknown error") + ")";
  }
  // The library stays open for the life of the process: the instance is never destroyed.
  api_.vkGetInstanceProcAddr = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(lib, "vkGetInstanceProcAddr"));
  if (api_.vkGetInstanceProcAddr == nullptr) return std::string(path) + " has no vkGetInstanceProcAddr";
#define TETHER_VK_LOAD(name) api_.name = reinterpret_cast<PFN_##name>(api_.vkGetInstanceProcAddr(nullptr, #name));
  TETHER_VK_GLOBAL_FUNCTIONS(TETHER_VK_LOAD)
#undef TETHER_VK_LOAD
  if (api_.vkCreateInstance == nullptr) return std::string(path) + " has no vkCreateInstance";
  uint32_t loader_version = VK_API_VERSION_1_0;
  if (api_.vkEnumerateInstanceVersion != nullptr) api_.vkEnumerateInstanceVersion(&loader_version);
  if (loader_version < VK_API_VERSION_1_1)
    return "the Vulkan loader supports Vulkan " + version_text(loader_version) + "; tether needs 1.1 or later";

  uint32_t count = 0;
  api_.vkEnumerateInstanceExtensionProperties(nullptr, &count, nullptr);
  std::vector<VkExtensionProperties> extensions(count);
  api_.vkEnumerateInstanceExtensionProperties(nullptr, &count, extensions.data());
  std::vector<const char*> enabled, layers;
  VkInstanceCreateFlags flags = 0;
  if (has_extension(extensions, VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME)) {
    enabled.push_back(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME);
    flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
  }

  // Validation: the Khronos layer, its messages recorded, synchronization checked too.
  VkDebugUtilsMessengerCreateInfoEXT messenger{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
  messenger.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  messenger.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                          VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
  messenger.pfnUserCallback = on_message;
  const VkValidationFeatureEnableEXT sync = VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT;
  VkValidationFeaturesEXT features{VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT};
  features.enabledValidationFeatureCount = 1;
  features.pEnabledValidationFeatures = &sync;
  const void* chain = nullptr;
  if (env_flag("TETHER_VULKAN_VALIDATION")) {
    constexpr const char* kLayer = "VK_LAYER_KHRONOS_validation";
    api_.vkEnumerateInstanceLayerProperties(&count, nullptr);
    std::vector<VkLayerProperties> available(count);
    api_.vkEnumerateInstanceLayerProperties(&count, available.data());
    const bool found = std::any_of(available.begin(), available.end(),
                                   [&](const VkLayerProperties& l) { return std::strcmp(l.layerName, kLayer) == 0; });
    if (found) {
      api_.vkEnumerateInstanceExtensionProperties(kLayer, &count, nullptr);
      std::vector<VkExtensionProperties> layer_ext(count);
      api_.vkEnumerateInstanceExtensionProperties(kLayer, &count, layer_ext.data());
      layers.push_back(kLayer);
      if (has_extension(extensions, VK_EXT_DEBUG_UTILS_EXTENSION_NAME) || has_extension(layer_ext, VK_EXT_DEBUG_UTILS_EXTENSION_NAME)) {
        enabled.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
        chain = &messenger;
        validation_ = true;
      }
      if (validation_ && has_extension(layer_ext, VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME)) {
        enabled.push_back(VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME);
        messenger.pNext = &features;
      }
    }
  }

  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "tether";
  app.pEngineName = "tether";
  app.apiVersion = std::min<uint32_t>(loader_version, VK_API_VERSION_1_3);
  VkInstanceCreateInfo info{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  info.pNext = chain;
  info.flags = flags;
  info.pApplicationInfo = &app;
  info.enabledLayerCount = static_cast<uint32_t>(layers.size());
  info.ppEnabledLayerNames = layers.data();
  info.enabledExtensionCount = static_cast<uint32_t>(enabled.size());
  info.ppEnabledExtensionNames = enabled.data();
  const VkResult r = api_.vkCreateInstance(&info, nullptr, &instance_);
  if (r == VK_ERROR_INCOMPATIBLE_DRIVER) return "the Vulkan loader found no driver (VK_ERROR_INCOMPATIBLE_DRIVER)";
  if (r != VK_SUCCESS) return std::string("vkCreateInstance failed (") + result_name(r) + ")";
#define TETHER_VK_LOAD(name) api_.name = reinterpret_cast<PFN_##name>(api_.vkGetInstanceProcAddr(instance_, #name));
  TETHER_VK_INSTANCE_FUNCTIONS(TETHER_VK_LOAD)
  TETHER_VK_OPTIONAL_FUNCTIONS(TETHER_VK_LOAD)
  if (validation_) {
    TETHER_VK_DEBUG_FUNCTIONS(TETHER_VK_LOAD)
  }
#undef TETHER_VK_LOAD
  if (validation_ && api_.vkCreateDebugUtilsMessengerEXT != nullptr) {
    messenger.pNext = nullptr;
    api_.vkCreateDebugUtilsMessengerEXT(instance_, &messenger, nullptr, &messenger_);
  }
  enumerate();
  if (devices_.empty()) return "the Vulkan loader found no device";
  return "";
}

void Instance::enumerate() {
  uint32_t count = 0;
  if (api_.vkEnumeratePhysicalDevices(instance_, &count, nullptr) != VK_SUCCESS) return;
  std::vector<VkPhysicalDevice> handles(count);
  if (api_.vkEnumeratePhysicalDevices(instance_, &count, handles.data()) != VK_SUCCESS) return;
  handles.resize(count);
  uint32_t instance_version = VK_API_VERSION_1_0;
  api_.vkEnumerateInstanceVersion(&instance_version);
  instance_version = std::min<uint32_t>(instance_version, VK_API_VERSION_1_3);
  for (size_t k = 0; k < handles.size(); ++k) {
    PhysicalDevice d;
    d.handle = handles[k];
    VkPhysicalDeviceProperties props{};
    api_.vkGetPhysicalDeviceProperties(d.handle, &props);
    d.api_version = std::min(props.apiVersion, instance_version);
    d.properties = props;
    d.limits = props.limits;
    api_.vkGetPhysicalDeviceMemoryProperties(d.handle, &d.memory);

    uint32_t n = 0;
    api_.vkEnumerateDeviceExtensionProperties(d.handle, nullptr, &n, nullptr);
    std::vector<VkExtensionProperties> ext(n);
    api_.vkEnumerateDeviceExtensionProperties(d.handle, nullptr, &n, ext.data());
    const bool v12 = d.api_version >= VK_API_VERSION_1_2;

    // Properties and features from chained structures, each only where the device has it.
    VkPhysicalDeviceSubgroupProperties subgroup{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceMaintenance3Properties maintenance3{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
    VkPhysicalDeviceDriverProperties driver{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
    VkPhysicalDeviceProperties2 props2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
    props2.pNext = &subgroup;
    subgroup.pNext = &maintenance3;
    if (v12 || has_extension(ext, VK_KHR_DRIVER_PROPERTIES_EXTENSION_NAME)) maintenance3.pNext = &driver;
    VkPhysicalDeviceShaderFloat16Int8Features f16i8{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
    VkPhysicalDevice16BitStorageFeatures storage16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
    VkPhysicalDeviceFeatures2 features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    features.pNext = &storage16;  // core in Vulkan 1.1
    if (v12 || has_extension(ext, VK_KHR_SHADER_FLOAT16_INT8_EXTENSION_NAME)) storage16.pNext = &f16i8;
    // What tensor cores need besides float16 arithmetic (cooperative_matrix below).
    VkPhysicalDeviceCooperativeMatrixFeaturesNV coop{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
    VkPhysicalDeviceVulkanMemoryModelFeatures memory_model{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES};
    const bool query_coop = has_extension(ext, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME) &&
                            (v12 || has_extension(ext, VK_KHR_VULKAN_MEMORY_MODEL_EXTENSION_NAME)) &&
                            storage16.pNext == &f16i8 && api_.vkGetPhysicalDeviceCooperativeMatrixPropertiesNV != nullptr;
    if (query_coop) {
      f16i8.pNext = &coop;
      coop.pNext = &memory_model;
    }
    if (d.api_version >= VK_API_VERSION_1_1) {
      api_.vkGetPhysicalDeviceProperties2(d.handle, &props2);
      api_.vkGetPhysicalDeviceFeatures2(d.handle, &features);
      if (maintenance3.maxMemoryAllocationSize > 0) d.max_allocation = maintenance3.maxMemoryAllocationSize;
    }

    if (query_coop && coop.cooperativeMatrix == VK_TRUE && memory_model.vulkanMemoryModel == VK_TRUE &&
        f16i8.shaderFloat16 == VK_TRUE && storage16.storageBuffer16BitAccess == VK_TRUE && subgroup.subgroupSize == 32 &&
        (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_BASIC_BIT) &&
        (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) && !env_is_one("TETHER_VULKAN_NO_COOPMAT"))
      d.cooperative_matrix = has_half_coop_shape(api_, d.handle);
    api_.vkGetPhysicalDeviceQueueFamilyProperties(d.handle, &n, nullptr);
    std::vector<VkQueueFamilyProperties> families(n);
    api_.vkGetPhysicalDeviceQueueFamilyProperties(d.handle, &n, families.data());
    for (uint32_t f = 0; f < n && d.queue_family < 0; ++f)
      if (families[f].queueFlags & VK_QUEUE_COMPUTE_BIT) {
        d.queue_family = static_cast<int>(f);
        d.timestamp_bits = families[f].timestampValidBits;
      }

    DeviceInfo& info = d.info;
    info.device = "vulkan:" + std::to_string(k);
    info.backend = "vulkan";
    info.index = static_cast<int>(k);
    info.name = props.deviceName;
    info.type = device_type(props.deviceType);
    d.driver_name = driver.driverName;
    d.driver_version = driver.driverInfo[0] != '\0' ? std::string(driver.driverInfo) : version_text(props.driverVersion);
    // TETHER_VULKAN_NO_FP16_STORAGE=1 treats every device as one without 16-bit storage.
    d.storage16 = storage16.storageBuffer16BitAccess == VK_TRUE && !env_is_one("TETHER_VULKAN_NO_FP16_STORAGE");
    d.float16 = d.storage16 && f16i8.shaderFloat16 == VK_TRUE;
    d.subgroup_arithmetic = (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT) &&
                            (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT);
    for (uint32_t h = 0; h < d.memory.memoryHeapCount; ++h)
      if (d.memory.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
        info.memory_bytes += static_cast<int64_t>(d.memory.memoryHeaps[h].size);
    info.properties = {{"driver_name", d.driver_name},
                       {"driver_version", d.driver_version},
                       {"api_version", version_text(props.apiVersion)},
                       {"fp16", f16i8.shaderFloat16 == VK_TRUE},
                       {"int8", f16i8.shaderInt8 == VK_TRUE},
                       {"fp16_storage", d.storage16},
                       {"subgroup_size", int64_t{subgroup.subgroupSize}},
                       {"subgroup_arithmetic", d.subgroup_arithmetic},
                       {"cooperative_matrix", d.cooperative_matrix}};
    if (d.api_version < VK_API_VERSION_1_1)
      d.unusable = "it supports Vulkan " + version_text(d.api_version) + "; tether needs 1.1 or later";
    else if (d.queue_family < 0)
      d.unusable = "it has no compute queue";
    devices_.push_back(std::move(d));
  }
}

const char* result_name(VkResult r) {
  switch (r) {
#define TETHER_VK_CASE(x) \
  case x: return #x;
    TETHER_VK_CASE(VK_SUCCESS)
    TETHER_VK_CASE(VK_NOT_READY)
    TETHER_VK_CASE(VK_TIMEOUT)
    TETHER_VK_CASE(VK_INCOMPLETE)
    TETHER_VK_CASE(VK_ERROR_OUT_OF_HOST_MEMORY)
    TETHER_VK_CASE(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    TETHER_VK_CASE(VK_ERROR_INITIALIZATION_FAILED)
    TETHER_VK_CASE(VK_ERROR_DEVICE_LOST)
    TETHER_VK_CASE(VK_ERROR_MEMORY_MAP_FAILED)
    TETHER_VK_CASE(VK_ERROR_LAYER_NOT_PRESENT)
    TETHER_VK_CASE(VK_ERROR_EXTENSION_NOT_PRESENT)
    TETHER_VK_CASE(VK_ERROR_FEATURE_NOT_PRESENT)
    TETHER_VK_CASE(VK_ERROR_INCOMPATIBLE_DRIVER)
    TETHER_VK_CASE(VK_ERROR_TOO_MANY_OBJECTS)
    TETHER_VK_CASE(VK_ERROR_FORMAT_NOT_SUPPORTED)
    TETHER_VK_CASE(VK_ERROR_FRAGMENTED_POOL)
    TETHER_VK_CASE(VK_ERROR_UNKNOWN)
    TETHER_VK_CASE(VK_ERROR_OUT_OF_POOL_MEMORY)
    TETHER_VK_CASE(VK_ERROR_INVALID_EXTERNAL_HANDLE)
    TETHER_VK_CASE(VK_ERROR_FRAGMENTATION)
    TETHER_VK_CASE(VK_ERROR_INVALID_SHADER_NV)
#undef TETHER_VK_CASE
    default: return "an unknown VkResult";
  }
}

}  // namespace tether::engine::vulkan
