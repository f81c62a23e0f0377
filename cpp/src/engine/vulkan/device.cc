#include "engine/vulkan/device.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "engine/vulkan/shaders.h"
#include "tether/error.h"

namespace tether::engine::vulkan {

namespace {

std::string device_list(const std::vector<PhysicalDevice>& list) {
  std::string s;
  for (const PhysicalDevice& d : list)
    s += (s.empty() ? "" : ", ") + d.info.device + " '" + d.info.name + "' (" + d.info.type + ")";
  return s;
}

// "vulkan" picks by type: discrete, integrated, virtual, then any other usable device.
int preferred(const std::vector<PhysicalDevice>& list) {
  for (const char* type : {"discrete_gpu", "integrated_gpu", "virtual_gpu", "cpu", "other"})
    for (size_t k = 0; k < list.size(); ++k)
      if (list[k].unusable.empty() && list[k].info.type == type) return static_cast<int>(k);
  return 0;
}

double timeout_seconds() {
  const char* v = std::getenv("TETHER_VULKAN_TIMEOUT");
  const double t = v != nullptr ? std::atof(v) : 0.0;
  return t > 0 ? t : 600.0;
}

}  // namespace

std::string bytes_text(int64_t bytes) {
  char buf[32];
  if (bytes >= (int64_t{1} << 30)) std::snprintf(buf, sizeof buf, "%.2f GB", static_cast<double>(bytes) / (1 << 30));
  else if (bytes >= (int64_t{1} << 20)) std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(bytes) / (1 << 20));
  else if (bytes >= 1024) std::snprintf(buf, sizeof buf, "%.1f KB", static_cast<double>(bytes) / 1024);
  else std::snprintf(buf, sizeof buf, "%lld bytes", static_cast<long long>(bytes));
  return buf;
}

uint32_t float_bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
}

// ---- Buffer ------------------------------------------------------------------------------------

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    reset();
    device_ = other.device_;
    buffer_ = other.buffer_;
    memory_ = other.memory_;
    mapped_ = other.mapped_;
    bytes_ = other.bytes_;
    coherent_ = other.coherent_;
    other.device_ = nullptr;
    other.buffer_ = VK_NULL_HANDLE;
    other.memory_ = VK_NULL_HANDLE;
    other.mapped_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

void Buffer::reset() {
  if (device_ == nullptr) return;
  const DeviceApi& api = device_->api();
  if (buffer_ != VK_NULL_HANDLE) api.vkDestroyBuffer(device_->handle(), buffer_, nullptr);
  if (memory_ != VK_NULL_HANDLE) api.vkFreeMemory(device_->handle(), memory_, nullptr);  // unmaps too
  device_ = nullptr;
  buffer_ = VK_NULL_HANDLE;
  memory_ = VK_NULL_HANDLE;
  mapped_ = nullptr;
  bytes_ = 0;
}

void Buffer::flush() const {
  if (coherent_ || mapped_ == nullptr) return;
  VkMappedMemoryRange range{VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE, nullptr, memory_, 0, VK_WHOLE_SIZE};
  device_->check(device_->api().vkFlushMappedMemoryRanges(device_->handle(), 1, &range), "flushing a staging buffer");
}

void Buffer::invalidate() const {
  if (coherent_ || mapped_ == nullptr) return;
  VkMappedMemoryRange range{VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE, nullptr, memory_, 0, VK_WHOLE_SIZE};
  device_->check(device_->api().vkInvalidateMappedMemoryRanges(device_->handle(), 1, &range), "reading a staging buffer");
}

// ---- Device ------------------------------------------------------------------------------------

std::shared_ptr<Device> Device::open(const std::string& name) {
  std::string why;
  Instance* instance = Instance::get(&why);
  if (instance == nullptr)
    throw UnsupportedError("no Vulkan device was found: " + why +
                           ". For a Vulkan device on the CPU, install Mesa's lavapipe driver and the loader "
                           "(apt-get install mesa-vulkan-drivers libvulkan1), or install your GPU's Vulkan driver; "
                           "tt.devices() lists what tether finds. Or compile with device='cpu'.");
  const std::vector<PhysicalDevice>& list = instance->devices();
  int index = 0;
  if (name == "vulkan") {
    index = preferred(list);
  } else {
    const std::string n = name.substr(7);  // after "vulkan:"
    const bool digits = !n.empty() && n.size() < 6 && std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; });
    index = digits ? std::stoi(n) : -1;
    if (index < 0 || index >= static_cast<int>(list.size()))
      throw ArgumentError("device '" + name + "' does not exist; the Vulkan devices are: " + device_list(list) +
                          " (\"vulkan\" picks one, \"vulkan:N\" device N)");
  }
  const PhysicalDevice& physical = list[static_cast<size_t>(index)];
  if (!physical.unusable.empty())
    throw UnsupportedError("Vulkan device " + physical.info.device + " '" + physical.info.name + "' cannot run tether: " +
                           physical.unusable);
  // Devices live for the process (their pipelines are reused by later sessions); one that was
  // lost is replaced, while sessions that hold it keep it until they go.
  static std::mutex mutex;
  static auto* open_devices = new std::map<int, std::shared_ptr<Device>>();
  std::lock_guard<std::mutex> lock(mutex);
  std::shared_ptr<Device>& slot = (*open_devices)[index];
  if (slot == nullptr || slot->lost()) slot = std::make_shared<Device>(*instance, physical);
  return slot;
}

Device::Device(const Instance& instance, const PhysicalDevice& physical) : physical_(physical), disk_cache_(physical) {
  const InstanceApi& ia = instance.api();
  const float priority = 1.0f;
  VkDeviceQueueCreateInfo queue{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  queue.queueFamilyIndex = queue_family();
  queue.queueCount = 1;
  queue.pQueuePriorities = &priority;
  uint32_t n = 0;
  ia.vkEnumerateDeviceExtensionProperties(physical.handle, nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> ext(n);
  ia.vkEnumerateDeviceExtensionProperties(physical.handle, nullptr, &n, ext.data());
  std::vector<const char*> enabled;
  for (const VkExtensionProperties& e : ext)  // a portability device requires it enabled
    if (std::strcmp(e.extensionName, "VK_KHR_portability_subset") == 0) enabled.push_back("VK_KHR_portability_subset");
  VkDeviceCreateInfo info{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  info.queueCreateInfoCount = 1;
  info.pQueueCreateInfos = &queue;
  info.enabledExtensionCount = static_cast<uint32_t>(enabled.size());
  info.ppEnabledExtensionNames = enabled.data();
  // 16-bit storage buffers for precision "fp16" (Vulkan 1.1 core), enabled where present.
  VkPhysicalDevice16BitStorageFeatures storage16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
  storage16.storageBuffer16BitAccess = physical.storage16 ? VK_TRUE : VK_FALSE;
  if (physical.storage16) info.pNext = &storage16;
  // 8-bit storage buffers and integer dot products for the INT8 kernels (quant.cc), where present.
  const bool v12 = physical.api_version >= VK_API_VERSION_1_2, v13 = physical.api_version >= VK_API_VERSION_1_3;
  auto has = [&ext](const char* name) {
    return std::any_of(ext.begin(), ext.end(), [name](const VkExtensionProperties& e) { return std::strcmp(e.extensionName, name) == 0; });
  };
  VkPhysicalDevice8BitStorageFeatures storage8{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES};
  VkPhysicalDeviceShaderIntegerDotProductFeatures dot{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES};
  VkPhysicalDeviceShaderFloat16Int8Features int8{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
  const bool query8 = (v12 || has(VK_KHR_8BIT_STORAGE_EXTENSION_NAME)) && (v12 || has(VK_KHR_SHADER_FLOAT16_INT8_EXTENSION_NAME));
  const bool query_dot = v13 || has(VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);
  if (physical.api_version >= VK_API_VERSION_1_1 && (query8 || query_dot)) {
    VkPhysicalDeviceFeatures2 features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    features.pNext = query8 ? static_cast<void*>(&storage8) : static_cast<void*>(&dot);
    storage8.pNext = &int8;
    if (query_dot) int8.pNext = &dot;
    ia.vkGetPhysicalDeviceFeatures2(physical.handle, &features);
  }
  // Storing a byte converts to an 8-bit type, which takes shaderInt8 besides the storage.
  storage8_ = query8 && storage8.storageBuffer8BitAccess == VK_TRUE && int8.shaderInt8 == VK_TRUE;
  integer_dot_ = query_dot && dot.shaderIntegerDotProduct == VK_TRUE;
  // Enable only what is used: the chain after the 16-bit storage features, built back to front.
  void* chain = nullptr;
  if (integer_dot_) {
    dot = VkPhysicalDeviceShaderIntegerDotProductFeatures{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES};
    dot.shaderIntegerDotProduct = VK_TRUE;
    chain = &dot;
    if (!v13) enabled.push_back(VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);
  }
  cooperative_matrix_ = physical.cooperative_matrix;
  float16_arithmetic_ = physical.float16;
  subgroup_arithmetic_ = physical.subgroup_arithmetic;
  if (storage8_ || cooperative_matrix_ || float16_arithmetic_) {
    int8 = VkPhysicalDeviceShaderFloat16Int8Features{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
    int8.shaderInt8 = storage8_ ? VK_TRUE : VK_FALSE;
    int8.shaderFloat16 = cooperative_matrix_ || float16_arithmetic_ ? VK_TRUE : VK_FALSE;
    int8.pNext = chain;
    chain = &int8;
    if (!v12) enabled.push_back(VK_KHR_SHADER_FLOAT16_INT8_EXTENSION_NAME);
  }
  if (storage8_) {
    storage8 = VkPhysicalDevice8BitStorageFeatures{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_8BIT_STORAGE_FEATURES};
    storage8.storageBuffer8BitAccess = VK_TRUE;
    storage8.pNext = chain;
    chain = &storage8;
    if (!v12) enabled.push_back(VK_KHR_8BIT_STORAGE_EXTENSION_NAME);
  }
  // Tensor cores (gemm_coop.glsl): cooperative matrices, whose SPIR-V needs the Vulkan memory
  // model, and the float16 arithmetic enabled above.
  VkPhysicalDeviceCooperativeMatrixFeaturesNV coop{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV};
  VkPhysicalDeviceVulkanMemoryModelFeatures memory_model{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES};
  if (cooperative_matrix_) {
    coop.cooperativeMatrix = VK_TRUE;
    coop.pNext = chain;
    memory_model.vulkanMemoryModel = VK_TRUE;
    memory_model.pNext = &coop;
    chain = &memory_model;
    enabled.push_back(VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
    if (!v12) enabled.push_back(VK_KHR_VULKAN_MEMORY_MODEL_EXTENSION_NAME);
  }
  if (physical.storage16) storage16.pNext = chain;
  else info.pNext = chain;
  info.enabledExtensionCount = static_cast<uint32_t>(enabled.size());
  info.ppEnabledExtensionNames = enabled.data();
  const VkResult r = ia.vkCreateDevice(physical.handle, &info, nullptr, &device_);
  if (r != VK_SUCCESS)
    throw DeviceError("opening Vulkan device " + physical.info.device + " '" + physical.info.name + "' failed (" +
                      result_name(r) + ")");
#define TETHER_VK_LOAD(name) api_.name = reinterpret_cast<PFN_##name>(ia.vkGetDeviceProcAddr(device_, #name));
  TETHER_VK_DEVICE_FUNCTIONS(TETHER_VK_LOAD)
#undef TETHER_VK_LOAD
  api_.vkGetDeviceQueue(device_, queue_family(), 0, &queue_);
  VkPipelineCacheCreateInfo cache{VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
  cache.initialDataSize = disk_cache_.initial().size();
  cache.pInitialData = disk_cache_.initial().data();
  // Data the driver refuses after all is no reason to fail: start empty.
  if (cache.initialDataSize == 0 || api_.vkCreatePipelineCache(device_, &cache, nullptr, &cache_) != VK_SUCCESS) {
    if (cache.initialDataSize != 0) disk_cache_.refused();
    cache.initialDataSize = 0;
    cache.pInitialData = nullptr;
    check(api_.vkCreatePipelineCache(device_, &cache, nullptr, &cache_), "creating a pipeline cache");
  }
}

Device::~Device() {
  api_.vkDeviceWaitIdle(device_);
  for (auto& [key, p] : pipelines_) api_.vkDestroyPipeline(device_, p->pipeline, nullptr);
  for (auto& [key, l] : layouts_) {
    api_.vkDestroyPipelineLayout(device_, l.second, nullptr);
    api_.vkDestroyDescriptorSetLayout(device_, l.first, nullptr);
  }
  for (auto& [key, m] : modules_) api_.vkDestroyShaderModule(device_, m, nullptr);
  if (cache_ != VK_NULL_HANDLE) api_.vkDestroyPipelineCache(device_, cache_, nullptr);
  api_.vkDestroyDevice(device_, nullptr);
}

uint32_t Device::max_workgroup() const {
  return std::min<uint32_t>({256u, limits().maxComputeWorkGroupInvocations, limits().maxComputeWorkGroupSize[0]});
}

void Device::check(VkResult r, const std::string& what) const {
  if (r == VK_SUCCESS) return;
  const std::string dev = "Vulkan device '" + name() + "'";
  switch (r) {
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
    case VK_ERROR_OUT_OF_HOST_MEMORY:
      throw DeviceError(what + ": " + dev + " is out of memory (" + result_name(r) +
                        "); free other sessions, use smaller inputs, or compile with device='cpu'");
    case VK_ERROR_DEVICE_LOST:
      lost_ = true;
      throw DeviceError(what + ": " + dev + " was lost (VK_ERROR_DEVICE_LOST: the driver reset or crashed); this "
                        "session cannot run again; compile the model again to open the device anew");
    default: throw DeviceError(what + " failed on " + dev + " (" + result_name(r) + ")");
  }
}

uint32_t Device::memory_type(uint32_t allowed, Memory memory, bool* coherent) const {
  const VkPhysicalDeviceMemoryProperties& mp = physical_.memory;
  int best = -1, best_score = -1;
  for (uint32_t t = 0; t < mp.memoryTypeCount; ++t) {
    if (!(allowed & (1u << t))) continue;
    const VkMemoryPropertyFlags f = mp.memoryTypes[t].propertyFlags;
    int score = 0;
    if (memory == Memory::kDevice) {
      score = f & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT ? 2 : 1;
    } else {
      if (!(f & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT)) continue;
      score = 1 + (f & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT ? 2 : 0) + (f & VK_MEMORY_PROPERTY_HOST_CACHED_BIT ? 1 : 0);
    }
    if (score > best_score) {
      best = static_cast<int>(t);
      best_score = score;
    }
  }
  if (best < 0) throw DeviceError("Vulkan device '" + name() + "' has no host-visible memory for staging buffers");
  *coherent = (mp.memoryTypes[best].propertyFlags & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT) != 0;
  return static_cast<uint32_t>(best);
}

Buffer Device::buffer(int64_t bytes, Memory memory, const std::string& what) const {
  bytes = std::max<int64_t>(bytes, 16);
  const std::string doing = "allocating " + bytes_text(bytes) + " for " + what;
  if (static_cast<uint64_t>(bytes) > physical_.max_allocation)
    throw DeviceError(doing + ": Vulkan device '" + name() + "' allocates at most " +
                      bytes_text(static_cast<int64_t>(physical_.max_allocation)) +
                      " at once; use smaller inputs or compile with device='cpu'");
  Buffer b;
  b.device_ = this;
  b.bytes_ = bytes;
  VkBufferCreateInfo info{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  info.size = static_cast<VkDeviceSize>(bytes);
  info.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  check(api_.vkCreateBuffer(device_, &info, nullptr, &b.buffer_), doing);
  VkMemoryRequirements req{};
  api_.vkGetBufferMemoryRequirements(device_, b.buffer_, &req);
  const uint32_t type = memory_type(req.memoryTypeBits, memory, &b.coherent_);
  const VkDeviceSize heap = physical_.memory.memoryHeaps[physical_.memory.memoryTypes[type].heapIndex].size;
  if (req.size > heap)
    throw DeviceError(doing + ": more than the " + bytes_text(static_cast<int64_t>(heap)) + " memory heap of Vulkan device '" +
                      name() + "'; use smaller inputs or compile with device='cpu'");
  VkMemoryAllocateInfo alloc{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  alloc.allocationSize = req.size;
  alloc.memoryTypeIndex = type;
  check(api_.vkAllocateMemory(device_, &alloc, nullptr, &b.memory_), doing);
  check(api_.vkBindBufferMemory(device_, b.buffer_, b.memory_, 0), doing);
  if (memory == Memory::kStaging) {
    void* p = nullptr;
    check(api_.vkMapMemory(device_, b.memory_, 0, VK_WHOLE_SIZE, 0, &p), doing);
    b.mapped_ = static_cast<std::byte*>(p);
  }
  return b;
}

VkShaderModule Device::module(const std::string& shader) {
  auto it = modules_.find(shader);
  if (it != modules_.end()) return it->second;
  const Spirv* code = find_spirv(shader);
  if (code == nullptr) throw InternalError("no embedded shader named '" + shader + "'");
  VkShaderModuleCreateInfo info{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  info.codeSize = code->count * sizeof(uint32_t);
  info.pCode = code->words;
  VkShaderModule m = VK_NULL_HANDLE;
  check(api_.vkCreateShaderModule(device_, &info, nullptr, &m), "creating shader module '" + shader + "'");
  modules_.emplace(shader, m);
  return m;
}

const Pipeline& Device::pipeline(const PipelineKey& key) {
  std::lock_guard<std::mutex> lock(pipelines_mutex_);
  auto it = pipelines_.find(key);
  if (it != pipelines_.end()) return *it->second;
  auto p = std::make_unique<Pipeline>();
  p->shader = key.shader;
  p->bindings = key.bindings;
  p->push_bytes = key.push_bytes;
  auto& layout = layouts_[{key.bindings, key.push_bytes}];
  if (layout.first == VK_NULL_HANDLE) {
    std::vector<VkDescriptorSetLayoutBinding> bindings(key.bindings);
    for (uint32_t b = 0; b < key.bindings; ++b)
      bindings[b] = {b, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
    VkDescriptorSetLayoutCreateInfo set{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
    set.bindingCount = key.bindings;
    set.pBindings = bindings.data();
    check(api_.vkCreateDescriptorSetLayout(device_, &set, nullptr, &layout.first), "creating a descriptor set layout");
    VkPushConstantRange push{VK_SHADER_STAGE_COMPUTE_BIT, 0, key.push_bytes};
    VkPipelineLayoutCreateInfo info{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
    info.setLayoutCount = 1;
    info.pSetLayouts = &layout.first;
    info.pushConstantRangeCount = key.push_bytes > 0 ? 1 : 0;
    info.pPushConstantRanges = &push;
    check(api_.vkCreatePipelineLayout(device_, &info, nullptr, &layout.second), "creating a pipeline layout");
  }
  p->set_layout = layout.first;
  p->layout = layout.second;
  std::vector<VkSpecializationMapEntry> entries(key.spec.size());
  for (uint32_t i = 0; i < entries.size(); ++i) entries[i] = {i, i * 4, 4};
  VkSpecializationInfo spec{static_cast<uint32_t>(entries.size()), entries.data(), key.spec.size() * 4, key.spec.data()};
  VkComputePipelineCreateInfo info{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  info.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
  info.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  info.stage.module = module(key.shader);
  info.stage.pName = "main";
  info.stage.pSpecializationInfo = key.spec.empty() ? nullptr : &spec;
  info.layout = p->layout;
  // Whether the driver found the pipeline in the cache (core in Vulkan 1.3).
  VkPipelineCreationFeedback whole{}, stage{};
  VkPipelineCreationFeedbackCreateInfo feedback{VK_STRUCTURE_TYPE_PIPELINE_CREATION_FEEDBACK_CREATE_INFO};
  feedback.pPipelineCreationFeedback = &whole;
  feedback.pipelineStageCreationFeedbackCount = 1;
  feedback.pPipelineStageCreationFeedbacks = &stage;
  const bool ask = physical_.api_version >= VK_API_VERSION_1_3;
  if (ask) info.pNext = &feedback;
  const auto t0 = std::chrono::steady_clock::now();
  check(api_.vkCreateComputePipelines(device_, cache_, 1, &info, nullptr, &p->pipeline),
        "building the compute pipeline of shader '" + key.shader + "'");
  stats_.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++stats_.built;
  ++unsaved_;
  if (ask && (whole.flags & VK_PIPELINE_CREATION_FEEDBACK_VALID_BIT)) {
    stats_.hits_known = true;
    stats_.cache_hits += (whole.flags & VK_PIPELINE_CREATION_FEEDBACK_APPLICATION_PIPELINE_CACHE_HIT_BIT) != 0;
  }
  return *pipelines_.emplace(key, std::move(p)).first->second;
}

Device::PipelineStats Device::pipeline_stats() const {
  std::lock_guard<std::mutex> lock(pipelines_mutex_);
  return stats_;
}

void Device::save_pipeline_cache() {
  std::lock_guard<std::mutex> lock(pipelines_mutex_);
  if (unsaved_ == 0 || disk_cache_.path().empty()) return;
  size_t bytes = 0;
  std::vector<uint8_t> data;
  if (api_.vkGetPipelineCacheData(device_, cache_, &bytes, nullptr) != VK_SUCCESS) return;
  data.resize(bytes);
  if (api_.vkGetPipelineCacheData(device_, cache_, &bytes, data.data()) != VK_SUCCESS) return;
  data.resize(bytes);
  disk_cache_.save(data);
  unsaved_ = 0;
}

VkFence Device::fence() const {
  VkFenceCreateInfo info{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  VkFence f = VK_NULL_HANDLE;
  check(api_.vkCreateFence(device_, &info, nullptr, &f), "creating a fence");
  return f;
}

void Device::submit_and_wait(VkCommandBuffer cmd, VkFence fence, const std::string& what) const {
  if (lost()) check(VK_ERROR_DEVICE_LOST, what);
  VkSubmitInfo submit{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  submit.commandBufferCount = 1;
  submit.pCommandBuffers = &cmd;
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    check(api_.vkQueueSubmit(queue_, 1, &submit, fence), what);
  }
  const double seconds = timeout_seconds();
  const VkResult r = api_.vkWaitForFences(device_, 1, &fence, VK_TRUE, static_cast<uint64_t>(seconds * 1e9));
  if (r == VK_TIMEOUT)
    throw DeviceError(what + ": Vulkan device '" + name() + "' did not finish within " + std::to_string(static_cast<int>(seconds)) +
                      " s (TETHER_VULKAN_TIMEOUT); this session cannot run again");
  check(r, what);
  check(api_.vkResetFences(device_, 1, &fence), what);
}

}  // namespace tether::engine::vulkan
