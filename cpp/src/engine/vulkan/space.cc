// The Vulkan backend's Space: its kernels made and prepared, weights uploaded once, the compile
// report's Vulkan lines, and device stretches run (uploads, one submission, downloads).
#include "engine/vulkan/space.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <sstream>

#include "engine/executor.h"
#include "engine/session.h"
#include "engine/vulkan/record.h"
#include "engine/vulkan/vulkan.h"
#include "util/float16.h"

namespace tether::engine::vulkan {

namespace {

// Destroys what a one-shot submission created, however it ends.
struct OneShot {
  const Device& device;
  VkCommandPool pool = VK_NULL_HANDLE;
  VkFence fence = VK_NULL_HANDLE;
  ~OneShot() {
    if (pool != VK_NULL_HANDLE) device.api().vkDestroyCommandPool(device.handle(), pool, nullptr);
    if (fence != VK_NULL_HANDLE) device.api().vkDestroyFence(device.handle(), fence, nullptr);
  }
};

// Prepares a Vulkan kernel and, when inference gave every tensor of its node static dims, asks
// it whether it takes them: "" when it does (or cannot tell yet: plans ask again), else why
// not, with what it added to the weight buffer taken back.
std::string prepare_for_shapes(GpuKernel& kernel, Gpu& gpu, const KernelInit& init) {
  const size_t weights = gpu.weights.size();
  kernel.prepare(gpu);
  std::vector<GpuTensor> ins, outs;
  auto add = [](std::vector<GpuTensor>& to, const ir::ValueType* type) {
    GpuTensor t;
    if (type != nullptr) {
      const std::optional<std::vector<int64_t>> dims = type->shape().static_sizes();
      if (!dims) return false;
      t.dtype = type->dtype();
      t.dims = *dims;
    }
    to.push_back(std::move(t));
    return true;
  };
  for (size_t k = 0; k < init.node.inputs().size(); ++k)
    if (!add(ins, init.node.input(k) != nullptr && k < init.input_types.size() ? &init.input_types[k] : nullptr)) return "";
  bool empty = true;
  for (size_t k = 0; k < init.node.outputs().size(); ++k) {
    if (!add(outs, init.node.output(k) != nullptr && k < init.output_types.size() ? &init.output_types[k] : nullptr)) return "";
    empty = empty && (init.node.output(k) == nullptr || outs.back().numel() == 0);
  }
  std::string why;
  try {
    if (!empty) why = kernel.refuses(gpu.device, ins, outs);
  } catch (const Error&) {
    return "";  // a fault of the data (an index out of range): each run with these shapes reports it
  }
  if (!why.empty()) {
    gpu.weights.resize(weights);
    const std::string own = init.node.describe() + ": ";
    if (why.compare(0, own.size(), own) == 0) why.erase(0, own.size());
    why = "for its shapes: " + why;
  }
  return why;
}

void to_half(const float* src, int64_t n, std::byte* dst) {
  for (int64_t k = 0; k < n; ++k) {
    const uint16_t h = util::float_to_half(src[k]);
    std::memcpy(dst + k * 2, &h, 2);
  }
}

void from_half(const std::byte* src, int64_t n, float* dst) {
  for (int64_t k = 0; k < n; ++k) {
    uint16_t h;
    std::memcpy(&h, src + k * 2, 2);
    dst[k] = util::half_to_float(h);
  }
}

}  // namespace

namespace {

class VulkanDeviceBackend final : public NamedBackend {
 public:
  std::vector<DeviceInfo> devices() const override {
    std::vector<DeviceInfo> out;
    if (const Instance* instance = Instance::get())
      for (const PhysicalDevice& d : instance->devices()) out.push_back(d.info);
    return out;
  }

  std::vector<std::string> op_types() const override { return vulkan_backend().op_types(); }

  // One session for every device: the Vulkan backend first, the CPU for what it does not run.
  std::unique_ptr<Session> compile(const ir::Model& model, const CompileOptions& options) const override {
    return compile_on(model, options, {&vulkan_backend(), &cpu_backend()});
  }

  BackendDiagnostics take_diagnostics() const override {
    BackendDiagnostics d;
    d.backend = "vulkan";
    const Instance* instance = Instance::get();
    d.enabled = instance != nullptr && instance->validation();
    d.messages = take_validation_messages();
    return d;
  }
};

}  // namespace

const DeviceBackend& device_backend() {
  static const VulkanDeviceBackend backend;
  return backend;
}

std::unique_ptr<Space> open_space(const CompileOptions& options) {
  return std::make_unique<VulkanSpace>(options, Device::open(options.device));
}

bool VulkanSpace::half(size_t i) const {
  return fp16_ && values_[i].value->type().dtype() == ir::DType::kFloat32;
}

VulkanSpace::VulkanSpace(const CompileOptions& options, std::shared_ptr<Device> device)
    : device_(std::move(device)), profile_(options.profile), strict_(options.strict), fp16_(options.precision == "fp16") {
  if (fp16_ && !device_->physical().storage16)
    throw UnsupportedError("precision 'fp16': Vulkan device " + device_->physical().info.device + " '" + device_->name() +
                           "' does not support 16-bit storage buffers (storageBuffer16BitAccess), which tether's "
                           "float16 storage needs; compile with precision='fp32'");
  gpu_timestamps_ = profile_ && device_->physical().timestamp_bits > 0 && device_->limits().timestampPeriod > 0;
  unused_ = device_->buffer(16, Memory::kDevice, "an unused binding");
  pipelines_before_ = device_->pipeline_stats();
  gpu_ = std::make_unique<Gpu>(*device_);
  gpu_->fp16 = fp16_;
}

VulkanSpace::~VulkanSpace() = default;

void VulkanSpace::drain() {
  // A run that timed out may leave work on the device: it must finish before plans go.
  if (!broken_.empty()) device_->api().vkDeviceWaitIdle(device_->handle());
}

void VulkanSpace::check_usable() const {
  if (!broken_.empty()) throw DeviceError("this Vulkan session cannot run any more: " + broken_);
}

std::unique_ptr<Kernel> VulkanSpace::create(const KernelInit& init, std::string& why) {
  std::unique_ptr<Kernel> kernel = vulkan_backend().create(init);
  why = prepare_for_shapes(static_cast<GpuKernel&>(*kernel), *gpu_, init);
  if (!why.empty()) kernel.reset();
  return kernel;
}

// The steps as the executor ordered them; constants read on the device join the weight
// buffer as they are (float ones as float16 under precision fp16), then every weight goes up.
void VulkanSpace::finish(const Program& program) {
  for (const ProgramValue& pv : program.values) {
    ValueEntry e;
    e.value = pv.value;
    e.constant = pv.constant;
    e.is_constant = pv.is_constant;
    e.input = pv.input;
    e.output = pv.output;
    e.producer = pv.producer;
    values_.push_back(e);
  }
  for (const ProgramStep& ps : program.steps) {
    Step& step = steps_.emplace_back();
    step.node = ps.node;
    step.gpu = static_cast<const GpuKernel*>(ps.kernel);
    step.inputs = ps.inputs;
    step.outputs = ps.outputs;
    step.dims_only = ps.dims_only;
    if (step.gpu == nullptr) continue;
    for (size_t k = 0; k < step.inputs.size(); ++k)
      if (step.inputs[k] >= 0 && step.gpu->reads_on_device(k)) values_[static_cast<size_t>(step.inputs[k])].gpu_reads = true;
  }
  Gpu& gpu = *gpu_;
  for (size_t i = 0; i < values_.size(); ++i) {
    ValueEntry& e = values_[i];
    if (!(e.is_constant && e.input < 0 && e.gpu_reads && e.constant != nullptr)) continue;
    if (!half(i)) {
      e.weight = gpu.add_weight_view(e.constant->raw_data(), e.constant->nbytes());
      continue;
    }
    const int64_t n = e.constant->num_elements();
    std::vector<std::byte> bytes(static_cast<size_t>(n) * sizeof(uint16_t));
    to_half(e.constant->data<float>(), n, bytes.data());
    e.weight = gpu.add_weight(std::move(bytes));
  }
  upload_weights(gpu);
  gpu_.reset();
  device_->save_pipeline_cache();
  pipelines_after_ = device_->pipeline_stats();
}

std::string VulkanSpace::report(const Program& program) const {
  std::ostringstream report;
  const DeviceInfo& info = device_->physical().info;
  int on_gpu = 0, shapes = 0;
  for (const ProgramStep& s : program.steps) {
    on_gpu += s.kernel != nullptr;
    shapes += s.kernel == nullptr && s.shapes_only;
  }
  const int on_cpu = static_cast<int>(program.steps.size()) - on_gpu - shapes;
  const PhysicalDevice& phys = device_->physical();
  report << "vulkan: device " << info.device << " '" << info.name << "' (" << info.type << ", " << phys.driver_name << " "
         << phys.driver_version << ", Vulkan " << version_text(phys.properties.apiVersion) << ")"
         << (Instance::get()->validation() ? ", validation layer on" : "") << "\n";
  int segments = 0;
  for (size_t s = 0; s < program.steps.size(); ++s)
    segments += s == 0 || (program.steps[s].kernel != nullptr) != (program.steps[s - 1].kernel != nullptr);
  report << "vulkan: " << on_gpu << " kernels on vulkan, " << on_cpu << " on cpu (" << program.threads << " threads), "
         << shapes << " shape computations on cpu, in " << segments << " stretch" << (segments == 1 ? "" : "es") << "; "
         << bytes_text(weight_bytes_) << " of weights in device memory"
         << (fp16_ ? "; precision fp16: float values and weights stored as float16, arithmetic in float32" : "") << "\n";
  const int built = pipelines_after_.built - pipelines_before_.built;
  report << "vulkan: ";
  if (built > 0) {
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.2f", pipelines_after_.seconds - pipelines_before_.seconds);
    report << built << " pipeline" << (built == 1 ? "" : "s") << " built in " << seconds << " s";
    if (pipelines_after_.hits_known)
      report << " (" << pipelines_after_.cache_hits - pipelines_before_.cache_hits << " found in the pipeline cache)";
  } else {
    report << "every pipeline reused from earlier sessions in this process";
  }
  report << "; pipeline cache: " << device_->pipeline_cache_note() << "\n";
  if (profile_)
    report << "vulkan: profiling " << (gpu_timestamps_ ? "times each kernel by timestamps on the device"
                                                       : "times stretches only (the device's compute queue has no timestamps)")
           << "\n";
  if (on_cpu > 0) {
    report << "cpu fallback: " << on_cpu << " node" << (on_cpu > 1 ? "s" : "") << " the Vulkan backend does not run:\n";
    for (const ProgramStep& s : program.steps)
      if (s.kernel == nullptr && !s.shapes_only) report << "  " << s.node->describe() << ": " << s.why << "\n";
  }
  return report.str();
}

// Every weight in one device buffer (each at an offset shaders may bind), copied there once
// through a staging buffer.
void VulkanSpace::upload_weights(Gpu& gpu) {
  const int64_t align = std::max<int64_t>(64, static_cast<int64_t>(device_->limits().minStorageBufferOffsetAlignment));
  std::vector<int64_t> offsets;
  int64_t total = 0;
  for (const Gpu::Weight& w : gpu.weights) {
    offsets.push_back(total);
    total += (std::max<int64_t>(w.bytes, 16) + align - 1) / align * align;
  }
  weight_bytes_ = total;
  if (gpu.weights.empty()) return;
  weights_ = device_->buffer(total, Memory::kDevice, "the model's weights");
  Buffer staging = device_->buffer(total, Memory::kStaging, "uploading the model's weights");
  for (size_t k = 0; k < gpu.weights.size(); ++k) {
    const Gpu::Weight& w = gpu.weights[k];
    const void* src = w.data != nullptr ? w.data : w.owned.data();
    if (w.bytes > 0) std::memcpy(staging.mapped() + offsets[k], src, static_cast<size_t>(w.bytes));
    weight_ranges_.push_back(Range{weights_.handle(), offsets[k], w.bytes});
  }
  staging.flush();
  const DeviceApi& api = device_->api();
  OneShot shot{*device_};
  VkCommandPoolCreateInfo pool{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pool.queueFamilyIndex = device_->queue_family();
  device_->check(api.vkCreateCommandPool(device_->handle(), &pool, nullptr, &shot.pool), "uploading the model's weights");
  VkCommandBufferAllocateInfo alloc{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  alloc.commandPool = shot.pool;
  alloc.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  alloc.commandBufferCount = 1;
  VkCommandBuffer cmd = VK_NULL_HANDLE;
  device_->check(api.vkAllocateCommandBuffers(device_->handle(), &alloc, &cmd), "uploading the model's weights");
  VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  device_->check(api.vkBeginCommandBuffer(cmd, &begin), "uploading the model's weights");
  VkBufferCopy region{0, 0, static_cast<VkDeviceSize>(total)};
  api.vkCmdCopyBuffer(cmd, staging.handle(), weights_.handle(), 1, &region);
  VkMemoryBarrier barrier{VK_STRUCTURE_TYPE_MEMORY_BARRIER, nullptr, VK_ACCESS_TRANSFER_WRITE_BIT,
                          VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_TRANSFER_READ_BIT};
  api.vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                           0, 1, &barrier, 0, nullptr, 0, nullptr);
  device_->check(api.vkEndCommandBuffer(cmd), "uploading the model's weights");
  shot.fence = device_->fence();
  device_->submit_and_wait(cmd, shot.fence, "uploading the model's weights");
}

// Device stretch k: host values up through the staging buffer, one submission, what the host
// needs down.
void Plan::run(size_t stretch, const std::vector<void*>& data, std::vector<std::pair<int, int64_t>>& times) {
  const Segment& seg = segments[stretch];
  clear_faults(*this);
  std::byte* mapped = staging.mapped();
  for (const Transfer& t : seg.uploads) {
    if (t.half) to_half(reinterpret_cast<const float*>(data[static_cast<size_t>(t.value)]), t.bytes / 2, mapped + t.staging);
    else std::memcpy(mapped + t.staging, data[static_cast<size_t>(t.value)], static_cast<size_t>(t.bytes));
  }
  if (staging.handle() != VK_NULL_HANDLE) staging.flush();
  try {
    device->submit_and_wait(seg.cmd, fence, "running the model's Vulkan kernels");
  } catch (const DeviceError& e) {
    space.broken_ = e.what();  // the command buffer may still be pending, or the device is lost
    throw;
  }
  if (staging.handle() != VK_NULL_HANDLE) staging.invalidate();
  raise_faults(*this);  // invalid data a shader found (an index out of range)
  for (const Transfer& t : seg.downloads) {
    if (t.half) from_half(mapped + t.staging, t.bytes / 2, reinterpret_cast<float*>(data[static_cast<size_t>(t.value)]));
    else std::memcpy(data[static_cast<size_t>(t.value)], mapped + t.staging, static_cast<size_t>(t.bytes));
  }
  if (queries != VK_NULL_HANDLE) space.read_timestamps(*this, seg, times);
}

// Each Vulkan step's time on the device: the difference of the timestamps around it.
void VulkanSpace::read_timestamps(const Plan& plan, const Segment& seg, std::vector<std::pair<int, int64_t>>& times) const {
  const auto count = static_cast<uint32_t>(seg.stamp_steps.size() + 1);
  std::vector<uint64_t> ticks(count);
  const VkResult r = device_->api().vkGetQueryPoolResults(device_->handle(), plan.queries, seg.first_query, count,
                                                          count * sizeof(uint64_t), ticks.data(), sizeof(uint64_t),
                                                          VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT);
  device_->check(r, "reading the timestamps of a profiled run");
  const uint32_t bits = device_->physical().timestamp_bits;
  const uint64_t mask = bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
  const double period = device_->limits().timestampPeriod;  // nanoseconds per tick
  for (size_t k = 0; k < seg.stamp_steps.size(); ++k) {
    const uint64_t delta = ((ticks[k + 1] & mask) - (ticks[k] & mask)) & mask;
    times.emplace_back(seg.stamp_steps[k], static_cast<int64_t>(static_cast<double>(delta) * period));
  }
}

}  // namespace tether::engine::vulkan
