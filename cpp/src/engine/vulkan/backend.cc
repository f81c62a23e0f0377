// The Vulkan backend: which ops it runs and how their kernels are made.
#include "engine/vulkan/instance.h"
#include "engine/vulkan/ops.h"
#include "engine/vulkan/space.h"

#include <algorithm>
#include <cstdlib>

namespace tether::engine::vulkan {

namespace {

class VulkanBackend final : public RegistryBackend {
 public:
  VulkanBackend() : RegistryBackend("no Vulkan kernel for this op") {
    register_elementwise(registry_);
    register_matmul(registry_);
    register_conv(registry_);
    register_pool(registry_);
    register_norm(registry_);
    register_attention(registry_);
    register_shape(registry_);
    register_reduce(registry_);
    register_resize(registry_);
    register_elementwise_logic(registry_);
    register_shape_computed(registry_);
    register_misc(registry_);
    register_rnn(registry_);
    register_scatter(registry_);
    register_quant(registry_);
  }

  std::string_view name() const override { return "vulkan"; }

  std::string supports(const KernelInit& init) const override {
    // The CPU engine's channels-last forms (a model saved after tt.optimize): the Vulkan
    // kernels read the ONNX layout.
    if (init.node.domain() == "ai.tether" && init.node.attr_int("channels_last", 0) != 0 &&
        registry_.find(init.node.domain(), init.node.op_type()) != nullptr)
      return "channels_last = 1 is the CPU engine's layout";
    return RegistryBackend::supports(init);
  }

  std::unique_ptr<Space> open(const CompileOptions& options) const override { return open_space(options); }
};

}  // namespace

const Backend& vulkan_backend() {
  static const VulkanBackend backend;
  return backend;
}

std::vector<int64_t> int_values(const ir::Tensor& t) {
  std::vector<int64_t> out(static_cast<size_t>(t.num_elements()));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = t.dtype() == ir::DType::kInt32 ? t.data<int32_t>()[i] : t.data<int64_t>()[i];
  return out;
}

int element_kind(ir::DType t) {
  switch (t) {
    case ir::DType::kFloat32: return kFloatElement;
    case ir::DType::kInt32: return kInt32Element;
    case ir::DType::kInt64: return kInt64Element;
    case ir::DType::kBool:
    case ir::DType::kUInt8: return kByteElement;
    default: return -1;
  }
}

std::string any_element(const KernelInit& init, size_t i) {
  if (init.node.input(i) == nullptr) return "";
  return require_dtype(init, i, {ir::DType::kFloat32, ir::DType::kInt32, ir::DType::kInt64, ir::DType::kBool, ir::DType::kUInt8});
}

void require_byte_storage(const Recorder& rec, const ir::Node& node) {
  if (!rec.device().storage8())
    throw UnsupportedError(node.describe() + ": the device has no 8-bit storage buffers (storageBuffer8BitAccess), "
                           "which the kernel's shader declares for bool and byte tensors");
}

const Pipeline* element_pipeline(Gpu& gpu, const char* shader, uint32_t bindings, uint32_t push_bytes,
                                 std::vector<uint32_t> spec, bool floats) {
  if (!gpu.device.storage8()) return nullptr;
  return &gpu.pipeline(shader, bindings, push_bytes, std::move(spec), floats ? ir::DType::kFloat32 : ir::DType::kInt32);
}

int64_t normalize_axis(const ir::Node& node, int64_t axis, size_t rank) {
  const auto r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r)
    throw ModelError(node.describe() + ": axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return axis < 0 ? axis + r : axis;
}

int64_t product(const std::vector<int64_t>& dims, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t d = begin; d < end && d < dims.size(); ++d) p *= dims[d];
  return p;
}

void dispatch_1d(Recorder& rec, const Pipeline& p, const std::vector<Range>& bindings, const void* push, size_t push_bytes,
                 int64_t n) {
  if (n <= 0) return;
  const auto [gx, gy] = rec.grid(n, kLocal);
  rec.dispatch(p, bindings, push, push_bytes, gx, gy);
}

bool gpu_kernels(const Device& device) {
  const char* force = std::getenv("TETHER_VULKAN_KERNELS");
  if (force != nullptr && *force != '\0') {
    const std::string v = force;
    if (v == "gpu") return true;
    if (v == "cpu") return false;
    throw ArgumentError("TETHER_VULKAN_KERNELS is \"" + v + "\": expected \"gpu\", \"cpu\" or unset");
  }
  return device.physical().properties.deviceType != VK_PHYSICAL_DEVICE_TYPE_CPU;
}

std::string row_shader(const Device& device, const std::string& shader) {
  return device.subgroup_arithmetic() && !env_is_one("TETHER_VULKAN_NO_SUBGROUPS") ? shader + "_subgroup" : shader;
}

void dispatch_rows(Recorder& rec, const Pipeline& p, const std::vector<Range>& bindings, const void* push,
                   size_t push_bytes, int64_t rows) {
  if (rows <= 0) return;
  const auto [gx, gy] = rec.grid(rows, 1);
  rec.dispatch(p, bindings, push, push_bytes, gx, gy);
}

std::string require_rank(const KernelInit& init, size_t i, std::initializer_list<size_t> ranks) {
  const ir::Shape& s = init.input_types[i].shape();
  if (!s.has_rank()) return "input " + std::to_string(i) + " has an unknown rank";
  if (std::find(ranks.begin(), ranks.end(), s.rank()) == ranks.end())
    return "input " + std::to_string(i) + " has rank " + std::to_string(s.rank()) + ", which the Vulkan kernel does not take";
  return "";
}

}  // namespace tether::engine::vulkan
