// The Vulkan session: compile (steps on a backend each, weights uploaded once), runs
// (serialised; plans made once per input shapes and replayed), capture, steps, report.
#include "engine/vulkan/session.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <new>
#include <optional>
#include <sstream>

#include "engine/executor.h"
#include "engine/session.h"
#include "engine/vulkan/record.h"
#include "engine/vulkan/vulkan.h"
#include "ops/constant.h"
#include "util/float16.h"
#include "util/thread_pool.h"

namespace tether::engine::vulkan {

namespace {

// Shape and Size read their input's dims, never its data.
bool reads_dims_only(const ir::Node& n) {
  return (n.domain().empty() || n.domain() == "ai.onnx") && (n.op_type() == "Shape" || n.op_type() == "Size");
}

// Where an empty tensor's data points.
alignas(64) std::byte kEmpty[64];

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

  std::unique_ptr<Session> compile(const ir::Model& model, const CompileOptions& options) const override {
    std::shared_ptr<Device> device = Device::open(options.device);
    return std::make_unique<VulkanSession>(model, options, std::move(device));
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

bool VulkanSession::half(size_t i) const {
  return fp16_ && values_[i].value->type().dtype() == ir::DType::kFloat32;
}

VulkanSession::VulkanSession(const ir::Model& model, const CompileOptions& options, std::shared_ptr<Device> device)
    : device_(std::move(device)),
      model_(model.clone()),
      profile_(options.profile),
      strict_(options.strict),
      max_memory_(memory_limit(options)),
      fp16_(options.precision == "fp16") {
  if (fp16_ && !device_->physical().storage16)
    throw UnsupportedError("precision 'fp16': Vulkan device " + device_->physical().info.device + " '" + device_->name() +
                           "' does not support 16-bit storage buffers (storageBuffer16BitAccess), which tether's "
                           "float16 storage needs; compile with precision='fp32'");
  std::ostringstream report;
  // Vulkan's kernels take the ONNX layout: no channels-last rewrites (a CPU-engine choice).
  passes::OptimizeOptions layout;
  layout.channels_last = false;
  report << prepare_model(model_, options, cpu_backend(), layout);
  index_values();
  shape_input_ = find_shape_inputs(model_.graph());
  pool_ = std::make_shared<util::ThreadPool>(options.threads);
  gpu_timestamps_ = profile_ && device_->physical().timestamp_bits > 0 && device_->limits().timestampPeriod > 0;
  unused_ = device_->buffer(16, Memory::kDevice, "an unused binding");
  const Device::PipelineStats before = device_->pipeline_stats();
  create_steps(options);
  device_->save_pipeline_cache();
  const Device::PipelineStats after = device_->pipeline_stats();
  step_runs_.assign(steps_.size(), 0);
  step_ns_.assign(steps_.size(), 0);

  const DeviceInfo& info = device_->physical().info;
  int on_gpu = 0, shapes = 0;
  for (const Step& s : steps_) {
    on_gpu += s.gpu != nullptr;
    shapes += s.shapes_only;
  }
  const int on_cpu = static_cast<int>(steps_.size()) - on_gpu - shapes;
  const PhysicalDevice& phys = device_->physical();
  report << "vulkan: device " << info.device << " '" << info.name << "' (" << info.type << ", " << phys.driver_name << " "
         << phys.driver_version << ", Vulkan " << version_text(phys.properties.apiVersion) << ")"
         << (Instance::get()->validation() ? ", validation layer on" : "") << "\n";
  int segments = 0;
  for (size_t s = 0; s < steps_.size(); ++s) segments += s == 0 || (steps_[s].gpu != nullptr) != (steps_[s - 1].gpu != nullptr);
  report << "vulkan: " << on_gpu << " kernels on vulkan, " << on_cpu << " on cpu (" << pool_->threads() << " threads), "
         << shapes << " shape computations on cpu, in " << segments << " stretch" << (segments == 1 ? "" : "es") << "; "
         << bytes_text(weight_bytes_) << " of weights in device memory"
         << (fp16_ ? "; precision fp16: float values and weights stored as float16, arithmetic in float32" : "") << "\n";
  const int built = after.built - before.built;
  report << "vulkan: ";
  if (built > 0) {
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.2f", after.seconds - before.seconds);
    report << built << " pipeline" << (built == 1 ? "" : "s") << " built in " << seconds << " s";
    if (after.hits_known) report << " (" << after.cache_hits - before.cache_hits << " found in the pipeline cache)";
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
    for (const Step& s : steps_)
      if (s.gpu == nullptr && !s.shapes_only) report << "  " << s.node->describe() << ": " << s.why_cpu << "\n";
  }
  report_ = report.str();
}

VulkanSession::~VulkanSession() {
  // A run that timed out may leave work on the device: it must finish before plans go.
  if (!broken_.empty()) device_->api().vkDeviceWaitIdle(device_->handle());
  plans_.clear();
}

void VulkanSession::index_values() {
  ir::Graph& g = model_.graph();
  for (ir::Value* v : g.values()) {
    index_[v] = static_cast<int>(values_.size());
    ValueEntry e;
    e.value = v;
    if (v->has_initializer()) {
      e.constant = &v->initializer();
      e.is_constant = true;
    }
    values_.push_back(e);
  }
  for (ir::Value* v : g.inputs()) {
    ValueEntry& e = values_[static_cast<size_t>(index_.at(v))];
    e.is_constant = false;  // an initializer here is the input's default
    e.input = static_cast<int>(inputs_.size());
    input_values_.push_back(index_.at(v));
    inputs_.push_back({v->name(), v->type().dtype(), v->type().shape()});
  }
  for (ir::Value* v : g.outputs()) {
    ValueEntry& e = values_[static_cast<size_t>(index_.at(v))];
    if (e.output < 0) e.output = static_cast<int>(outputs_.size());
    output_values_.push_back(index_.at(v));
    outputs_.push_back({v->name(), v->type().dtype(), v->type().shape()});
  }
}

// Each node goes to the Vulkan backend when it supports it (a view op only when its data is
// not computed on the CPU, so that it stays with its data), else to the CPU backend.
void VulkanSession::create_steps(const CompileOptions& options) {
  const std::vector<ir::Node*> order = model_.graph().topological_order();
  constants_.reserve(order.size());  // stable addresses for the pointers taken below
  Gpu gpu(*device_);
  gpu.fp16 = fp16_;
  std::vector<std::string> unsupported, fallback, dynamic;
  auto on_shapes_alone = [&](const ir::Node& n) {
    for (const ir::Value* out : n.outputs()) {
      const ir::DType t = out != nullptr ? out->type().dtype() : ir::DType::kInt64;
      if (t != ir::DType::kInt64 && t != ir::DType::kInt32) return false;  // data, not a shape
    }
    bool shapes = false;
    for (const ir::Value* in : n.inputs()) {
      if (in == nullptr) continue;
      const ValueEntry& e = values_[static_cast<size_t>(index_.at(in))];
      const bool computed = e.producer >= 0 && steps_[static_cast<size_t>(e.producer)].shapes_only;
      if (!computed && !e.is_constant) return false;
      shapes = shapes || computed;
    }
    return shapes;
  };
  for (const ir::Node* n : order) {
    if (n->op_type() == "Constant" && (n->domain().empty() || n->domain() == "ai.onnx")) {
      constants_.push_back(ops::constant_value(*n));
      ValueEntry& e = values_[static_cast<size_t>(index_.at(n->output(0)))];
      e.constant = &constants_.back();
      e.is_constant = true;
      continue;
    }
    const NodeInit made = kernel_init(*n, model_, pool_, [&](const ir::Value* in) -> const ir::Tensor* {
      const ValueEntry& e = values_[static_cast<size_t>(index_.at(in))];
      return e.is_constant ? e.constant : nullptr;
    });
    const KernelInit& init = made.init;
    std::string why = vulkan_backend().supports(init);
    if (why.empty() && ops::keeps_bytes(*n) && n->input(0) != nullptr) {
      const int producer = values_[static_cast<size_t>(index_.at(n->input(0)))].producer;
      if (producer >= 0 && steps_[static_cast<size_t>(producer)].gpu == nullptr)
        why = "its data is computed on the CPU, where the view stays";
    }
    // A node computing integers from shape computations and constants alone (a Range over a
    // Shape's dims, a Concat of them) is one too: it stays on the host rather than pull shapes
    // onto the device.
    if (why.empty() && on_shapes_alone(*n) && cpu_backend().supports(init).empty()) why = "it computes on shapes alone";
    std::unique_ptr<Kernel> vulkan_kernel;
    if (why.empty()) {
      vulkan_kernel = vulkan_backend().create(init);
      why = prepare_for_shapes(static_cast<GpuKernel&>(*vulkan_kernel), gpu, init);
      if (!why.empty()) vulkan_kernel.reset();
    }
    const std::string why_cpu = why.empty() ? "" : cpu_backend().supports(init);
    if (!why_cpu.empty()) {
      unsupported.push_back(n->describe() + ": " + why_cpu + " (vulkan: " + why + ")");
      continue;
    }
    Step& step = steps_.emplace_back();
    step.node = n;
    step.dims_only = reads_dims_only(*n);
    if (why.empty()) {
      step.kernel = std::move(vulkan_kernel);
      step.gpu = static_cast<GpuKernel*>(step.kernel.get());
    } else {
      std::unique_ptr<HostKernel> host = create_host_kernel(init);
      step.host = host.get();
      step.kernel = std::move(host);
      step.why_cpu = why;
      if (step.kernel->allocates_outputs()) dynamic.push_back(n->describe());
    }
    const int index = static_cast<int>(steps_.size()) - 1;
    // A CPU step computes on shapes alone when it reads dims only (Shape, Size) or values
    // that are constants or computed on shapes alone.
    step.shapes_only = step.gpu == nullptr;
    for (size_t k = 0; k < made.inputs.size(); ++k) {
      const ir::Value* in = made.inputs[k];
      step.inputs.push_back(in ? index_.at(in) : -1);
      if (in == nullptr) continue;
      ValueEntry& e = values_[static_cast<size_t>(index_.at(in))];
      if (step.gpu == nullptr && !reads_dims_only(*n)) {
        e.cpu_reads = true;
        step.shapes_only = step.shapes_only && (e.is_constant || (e.producer >= 0 && steps_[static_cast<size_t>(e.producer)].shapes_only));
      } else if (step.gpu != nullptr && step.gpu->reads_on_device(k)) {
        e.gpu_reads = true;
      }
    }
    if (step.gpu == nullptr && !step.shapes_only) fallback.push_back(n->describe() + ": " + why);
    for (const ir::Value* out : n->outputs()) {
      step.outputs.push_back(out ? index_.at(out) : -1);
      if (out != nullptr) values_[static_cast<size_t>(index_.at(out))].producer = index;
    }
  }
  auto listing = [](const std::vector<std::string>& items) {
    std::string s;
    for (const auto& u : items) s += "\n  " + u;
    return s;
  };
  if (!unsupported.empty())
    throw UnsupportedError("neither vulkan nor cpu can run " + std::to_string(unsupported.size()) + " node" +
                           (unsupported.size() > 1 ? "s" : "") + " of this model:" + listing(unsupported));
  if (options.strict && !fallback.empty())
    throw UnsupportedError("strict: the Vulkan backend cannot run " + std::to_string(fallback.size()) + " node" +
                           (fallback.size() > 1 ? "s" : "") + " of this model (without strict they run on the cpu):" +
                           listing(fallback));
  if (!dynamic.empty())
    throw UnsupportedError("the Vulkan engine needs every shape to follow from the input shapes, and these nodes size "
                           "their outputs from data:" + listing(dynamic) + "\ncompile with device='cpu'");
  // Constants read on the device join the weight buffer as they are (float ones as float16
  // under precision fp16).
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
  schedule_steps();
}

// Orders the steps so that each backend runs as long a stretch as it can: a topological order
// (by what each step reads: Shape and Size read no data, Vulkan steps only what they read on
// the device) that keeps to the current backend while it has a step ready. Fewer stretches
// are fewer submissions and waits per run. The ordering is the executor's (order_by_backend).
void VulkanSession::schedule_steps() {
  const size_t n = steps_.size();
  std::vector<int> backend(n);
  std::vector<std::vector<size_t>> after(n);
  for (size_t s = 0; s < n; ++s) {
    const Step& step = steps_[s];
    backend[s] = step.gpu != nullptr;
    if (step.gpu == nullptr && reads_dims_only(*step.node)) continue;
    for (size_t k = 0; k < step.inputs.size(); ++k) {
      const int in = step.inputs[k];
      if (in < 0 || (step.gpu != nullptr && !step.gpu->reads_on_device(k))) continue;
      const int producer = values_[static_cast<size_t>(in)].producer;
      if (producer >= 0) after[s].push_back(static_cast<size_t>(producer));
    }
  }
  const std::vector<size_t> order = order_by_backend(backend, after);
  std::deque<Step> sorted;
  for (size_t s : order) sorted.push_back(std::move(steps_[s]));
  steps_ = std::move(sorted);
  for (ValueEntry& e : values_) e.producer = -1;
  for (size_t s = 0; s < n; ++s)
    for (int o : steps_[s].outputs)
      if (o >= 0) values_[static_cast<size_t>(o)].producer = static_cast<int>(s);
}

// Every weight in one device buffer (each at an offset shaders may bind), copied there once
// through a staging buffer.
void VulkanSession::upload_weights(Gpu& gpu) {
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

Plan& VulkanSession::plan_for(const std::vector<const ir::Tensor*>& bound, bool capture) const {
  auto key = std::make_pair(plan_key(bound, shape_input_, inputs_, "vulkan"), capture);
  bool made = false;
  Plan& p = *plans_.get(std::move(key), [&] { return make_plan(bound, capture); }, &made);
  if (made) {
    last_.arena_bytes = p.arena_bytes;
    last_.intermediate_bytes = p.intermediate_bytes;
    last_.scratch_bytes = p.host_bytes + p.scratch_bytes;
    last_.staging_bytes = p.staging_bytes;
    last_.device_weight_bytes = weight_bytes_;
    last_.plans = static_cast<int64_t>(plans_.size());
    last_.arenas = last_.plans;
  }
  return p;
}

std::vector<ir::Tensor> VulkanSession::run(const std::vector<std::pair<std::string, ir::Tensor>>& inputs) const {
  return run_plan(inputs, false, nullptr);
}

std::vector<ir::Tensor> VulkanSession::run_capture(const std::vector<std::pair<std::string, ir::Tensor>>& inputs,
                                                   const std::vector<std::string>& names,
                                                   std::vector<std::pair<std::string, ir::Tensor>>& captured) const {
  std::vector<bool> wanted(values_.size(), names.empty());
  for (const std::string& name : names)
    if (const ir::Value* v = model_.graph().find(name)) wanted[static_cast<size_t>(index_.at(v))] = true;
  std::vector<std::pair<std::string, ir::Tensor>> out;
  const OnValue copy = [&](int v, const void* data) {
    if (!wanted[static_cast<size_t>(v)]) return;
    const ValueEntry& e = values_[static_cast<size_t>(v)];
    const std::vector<int64_t>& dims = last_dims_[static_cast<size_t>(v)];
    const auto bytes = ir::storage_bytes(e.value->type().dtype(), ir::checked_num_elements(dims).value_or(0)).value_or(0);
    out.emplace_back(e.value->name(), ir::Tensor::copy_of(e.value->type().dtype(), dims, data, bytes));
  };
  std::vector<ir::Tensor> result = run_plan(inputs, true, &copy);
  for (auto& c : out) captured.push_back(std::move(c));
  return result;
}

std::vector<ir::Tensor> VulkanSession::run_observe(const std::vector<std::pair<std::string, ir::Tensor>>& inputs,
                                                   const std::vector<std::string>& names, const Observer& observer) const {
  std::vector<int> slot(values_.size(), -1);
  std::vector<int> watched_inputs;
  for (size_t k = 0; k < names.size(); ++k) {
    const ir::Value* v = model_.graph().find(names[k]);
    const int i = v != nullptr ? index_.at(v) : -1;
    if (i < 0 || !(values_[static_cast<size_t>(i)].producer >= 0 || values_[static_cast<size_t>(i)].input >= 0))
      throw ArgumentError("cannot observe '" + names[k] + "': " +
                          (v == nullptr ? std::string("the compiled model has no value of that name (fused away? compile with keep)")
                                        : std::string("no kernel writes it (a constant)")));
    if (slot[static_cast<size_t>(i)] >= 0) throw ArgumentError("cannot observe '" + names[k] + "' twice in one run");
    slot[static_cast<size_t>(i)] = static_cast<int>(k);
    if (values_[static_cast<size_t>(i)].input >= 0) watched_inputs.push_back(i);
  }
  const OnValue call = [&](int v, const void* data) {
    const int k = slot[static_cast<size_t>(v)];
    if (k < 0) return;
    const ValueEntry& e = values_[static_cast<size_t>(v)];
    observer(ObservedValue{static_cast<size_t>(k), e.value->name(), e.value->type().dtype(), last_dims_[static_cast<size_t>(v)], data});
  };
  return run_plan(inputs, true, &call, &watched_inputs);
}

std::vector<ir::Tensor> VulkanSession::run_plan(const std::vector<std::pair<std::string, ir::Tensor>>& named, bool capture,
                                                const OnValue* on_value, const std::vector<int>* watch_inputs) const {
  std::lock_guard<std::mutex> lock(run_mutex_);
  if (!broken_.empty()) throw DeviceError("this Vulkan session cannot run any more: " + broken_);
  std::vector<const ir::Value*> input_values;
  for (int v : input_values_) input_values.push_back(values_[static_cast<size_t>(v)].value);
  const std::vector<const ir::Tensor*> bound = bind_inputs(inputs_, input_values, named);
  Plan& plan = plan_for(bound, capture);
  last_dims_ = plan.dims;

  const size_t n = values_.size();
  std::vector<ir::Tensor> outputs(outputs_.size());
  std::vector<ir::Tensor> captures(capture ? n : 0);
  std::vector<void*> data(n, nullptr);
  std::byte* host = plan.host->mutable_data();
  auto storage = [](ir::Tensor& t) { return t.nbytes() == 0 ? static_cast<void*>(kEmpty) : t.mutable_raw_data(); };
  // Within max_memory (the plan checked), yet the process may not get the memory (an
  // address-space limit, other processes): a typed error naming the value, not a bad_alloc.
  auto fresh = [&](size_t i) {
    try {
      return ir::Tensor::zeros(values_[i].value->type().dtype(), plan.dims[i]);
    } catch (const std::bad_alloc&) {
      const ir::Node& node = *steps_[static_cast<size_t>(values_[i].producer)].node;
      const ir::DType dtype = values_[i].value->type().dtype();
      throw MemoryLimitError(node.describe() + ": output '" + values_[i].value->name() + "' of shape " +
                             dims_text(plan.dims[i]) + " (" + std::string(ir::dtype_name(dtype)) + ", " +
                             std::to_string(ir::storage_bytes(dtype, ir::checked_num_elements(plan.dims[i]).value_or(0)).value_or(0)) +
                             " bytes) could not be allocated: the process did not get the memory "
                             "(the machine's, or an address-space limit), though within the session's " +
                             std::to_string(max_memory_) + " bytes (compile's max_memory)");
    }
  };
  for (size_t i = 0; i < n; ++i) {
    const ValueEntry& e = values_[i];
    if (e.input >= 0) {
      data[i] = const_cast<void*>(bound[static_cast<size_t>(e.input)]->raw_data());
    } else if (e.is_constant) {
      data[i] = e.constant->nbytes() == 0 ? static_cast<void*>(kEmpty) : const_cast<void*>(e.constant->raw_data());
    } else if (e.producer >= 0) {
      if (e.output >= 0) {
        outputs[static_cast<size_t>(e.output)] = fresh(i);
        data[i] = storage(outputs[static_cast<size_t>(e.output)]);
      } else if (plan.capture[i]) {
        captures[i] = fresh(i);
        data[i] = storage(captures[i]);
      } else if (plan.host_offset[i] >= 0) {
        data[i] = host + plan.host_offset[i];
      }
    }
  }
  if (on_value != nullptr && watch_inputs != nullptr)
    for (int v : *watch_inputs) (*on_value)(v, data[static_cast<size_t>(v)]);
  const RunContext ctx{pool_.get(), host + plan.host_bytes};
  clear_faults(plan);
  for (const Segment& seg : plan.segments) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!seg.gpu) {
      for (int s = seg.begin; s < seg.end; ++s) {
        InterruptScope::poll();  // between kernels, as on the CPU engine
        const Step& step = steps_[static_cast<size_t>(s)];
        std::vector<View> ins, outs;
        for (int in : step.inputs) {
          const auto i = static_cast<size_t>(in);
          ins.push_back(in >= 0 ? View{values_[i].value->type().dtype(), plan.dims[i], data[i]} : View{});
        }
        for (int o : step.outputs) {
          const auto i = static_cast<size_t>(o);
          outs.push_back(o >= 0 ? View{values_[i].value->type().dtype(), plan.dims[i], data[i]} : View{});
        }
        const auto s0 = std::chrono::steady_clock::now();
        (step.gpu != nullptr ? *step.fallback : *step.host).run(ctx, ins, outs);
        if (profile_) {
          ++step_runs_[static_cast<size_t>(s)];
          step_ns_[static_cast<size_t>(s)] +=
              std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - s0).count();
        }
        if (on_value != nullptr)
          for (int o : step.outputs)
            if (o >= 0) (*on_value)(o, data[static_cast<size_t>(o)]);
      }
      continue;
    }
    // Before a stretch is submitted, never while the device works on one: the session stays usable.
    InterruptScope::poll();
    std::byte* staging = plan.staging.mapped();
    for (const Transfer& t : seg.uploads) {
      if (t.half) to_half(reinterpret_cast<const float*>(data[static_cast<size_t>(t.value)]), t.bytes / 2, staging + t.staging);
      else std::memcpy(staging + t.staging, data[static_cast<size_t>(t.value)], static_cast<size_t>(t.bytes));
    }
    if (plan.staging.handle() != VK_NULL_HANDLE) plan.staging.flush();
    try {
      device_->submit_and_wait(seg.cmd, plan.fence, "running the model's Vulkan kernels");
    } catch (const DeviceError& e) {
      broken_ = e.what();  // the command buffer may still be pending, or the device is lost
      throw;
    }
    if (plan.staging.handle() != VK_NULL_HANDLE) plan.staging.invalidate();
    raise_faults(plan);  // invalid data a shader found (an index out of range)
    for (const Transfer& t : seg.downloads) {
      if (t.half) from_half(staging + t.staging, t.bytes / 2, reinterpret_cast<float*>(data[static_cast<size_t>(t.value)]));
      else std::memcpy(data[static_cast<size_t>(t.value)], staging + t.staging, static_cast<size_t>(t.bytes));
    }
    if (plan.queries != VK_NULL_HANDLE) read_timestamps(plan, seg);
    if (profile_) {
      auto& [runs, ns] = segment_time_[seg.begin];
      ++runs;
      ns += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
    }
    if (on_value != nullptr)
      for (int s = seg.begin; s < seg.end; ++s)
        for (int o : steps_[static_cast<size_t>(s)].outputs)
          if (o >= 0 && data[static_cast<size_t>(o)] != nullptr) (*on_value)(o, data[static_cast<size_t>(o)]);
  }
  // Outputs no step writes (an input or a constant passed through), and outputs listed twice.
  for (size_t k = 0; k < outputs_.size(); ++k) {
    const ValueEntry& e = values_[static_cast<size_t>(output_values_[k])];
    if (e.producer >= 0 && e.output == static_cast<int>(k)) continue;
    const ir::Tensor* src = e.input >= 0 ? bound[static_cast<size_t>(e.input)]
                            : e.is_constant ? e.constant
                                            : &outputs[static_cast<size_t>(e.output)];
    outputs[k] = src->dtype() == ir::DType::kString ? *src : ir::Tensor::copy_of(src->dtype(), src->dims(), src->raw_data(), src->nbytes());
  }
  return outputs;
}

std::vector<StepInfo> VulkanSession::steps() const {
  std::vector<StepInfo> out;
  for (const Step& s : steps_) {
    StepInfo info = step_info(*s.node);
    info.backend = s.gpu != nullptr ? "vulkan" : "cpu";
    out.push_back(std::move(info));
  }
  return out;
}

MemoryStats VulkanSession::memory() const {
  std::lock_guard<std::mutex> lock(run_mutex_);
  MemoryStats m = last_;
  m.device_weight_bytes = weight_bytes_;
  return m;
}

int VulkanSession::threads() const { return pool_->threads(); }

// Each Vulkan step's time on the device: the difference of the timestamps around it.
void VulkanSession::read_timestamps(const Plan& plan, const Segment& seg) const {
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
    const auto s = static_cast<size_t>(seg.stamp_steps[k]);
    ++step_runs_[s];
    step_ns_[s] += static_cast<int64_t>(static_cast<double>(delta) * period);
  }
}

// CPU steps by node (wall time); each Vulkan stretch as one entry (op type vulkan:segment: the
// wall time of its uploads, submission, wait and downloads) followed by its kernels, each with
// its time on the device (timestamps around it). Views, and steps no run dispatched (folded
// into their readers, fold.cc), have no entry.
std::vector<NodeProfile> VulkanSession::profile() const {
  std::lock_guard<std::mutex> lock(run_mutex_);
  std::vector<NodeProfile> out;
  if (!profile_) return out;
  for (size_t s = 0; s < steps_.size(); ++s) {
    const Step& step = steps_[s];
    if (step.gpu != nullptr)
      if (auto it = segment_time_.find(static_cast<int>(s)); it != segment_time_.end()) {
        size_t end = s;
        while (end < steps_.size() && steps_[end].gpu != nullptr) ++end;
        out.push_back({"vulkan: " + std::to_string(end - s) + " kernels from " + step.node->name(), "vulkan:segment",
                       it->second.first, static_cast<double>(it->second.second) * 1e-9});
      }
    // A Vulkan step some plan ran on the CPU (shapes its kernel refused) has wall time too.
    if (step.gpu == nullptr || step.fallback != nullptr || (gpu_timestamps_ && !step.gpu->is_view() && step_runs_[s] > 0))
      out.push_back({step.node->name(), qualified_op(*step.node), step_runs_[s], static_cast<double>(step_ns_[s]) * 1e-9});
  }
  return out;
}

}  // namespace tether::engine::vulkan
