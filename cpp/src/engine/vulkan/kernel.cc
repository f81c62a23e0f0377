// Helpers the Vulkan kernels share.
#include "engine/vulkan/kernel.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace tether::engine::vulkan {

int Gpu::add_weight(std::vector<std::byte> bytes) {
  Weight w;
  w.bytes = static_cast<int64_t>(bytes.size());
  w.owned = std::move(bytes);
  weights.push_back(std::move(w));
  return static_cast<int>(weights.size()) - 1;
}

int Gpu::add_weight_view(const void* data, int64_t bytes) {
  Weight w;
  w.data = data;
  w.bytes = bytes;
  weights.push_back(std::move(w));
  return static_cast<int>(weights.size()) - 1;
}

std::pair<uint32_t, uint32_t> Recorder::grid(int64_t n, uint32_t local) const {
  const int64_t groups = (n + local - 1) / local;
  const int64_t max_x = std::min<int64_t>(65535, device().limits().maxComputeWorkGroupCount[0]);
  if (groups <= max_x) return {static_cast<uint32_t>(std::max<int64_t>(groups, 1)), 1};
  const int64_t gy = (groups + max_x - 1) / max_x;
  if (n > std::numeric_limits<uint32_t>::max() || gy > device().limits().maxComputeWorkGroupCount[1])
    throw UnsupportedError("a Vulkan kernel over " + std::to_string(n) + " elements: more than the 2^32 one dispatch indexes");
  return {static_cast<uint32_t>(max_x), static_cast<uint32_t>(gy)};
}

namespace {

// Takes a kernel's commands and keeps none: what GpuKernel::refuses records into.
class ProbeRecorder final : public Recorder {
 public:
  explicit ProbeRecorder(const Device& device) : device_(device) {}
  const Device& device() const override { return device_; }
  void dispatch(const Pipeline&, const std::vector<Range>&, const void*, size_t, uint32_t, uint32_t, uint32_t) override {}
  void copy(const Range&, const Range&) override {}
  Range weight(int) const override { return Range{}; }
  Range unused() const override { return Range{}; }
  Range table(const void*, int64_t) override { return Range{}; }
  Range scratch(int64_t bytes) override {
    scratch_bytes = std::max(scratch_bytes, bytes);
    return Range{VK_NULL_HANDLE, 0, bytes};
  }
  Range fault(const std::string&) override { return Range{}; }
  int64_t scratch_bytes = 0;

 private:
  const Device& device_;
};

}  // namespace

std::string GpuKernel::refuses(const Device& device, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out,
                               int64_t* scratch_bytes) const {
  ProbeRecorder probe(device);
  try {
    record(probe, in, out);
  } catch (const UnsupportedError& e) {
    return e.what();
  }
  if (scratch_bytes != nullptr) *scratch_bytes = probe.scratch_bytes;
  return "";
}

namespace {

struct Named {
  const char* name;
  UnaryOp op;
};

// The activations the graph passes fuse (passes/activation.cc writes these names).
constexpr Named kFused[] = {
    {"Relu", kRelu},       {"LeakyRelu", kLeakyRelu}, {"Clip", kClip},          {"Sigmoid", kSigmoid},
    {"HardSigmoid", kHardSigmoid}, {"HardSwish", kHardSwish}, {"Gelu", kGelu}, {"GeluTanh", kGeluTanh},
    {"SiLU", kSilu},       {"Tanh", kTanh},
};

}  // namespace

Activation fused_activation(const ir::Node& node) {
  Activation a;
  const std::string name = node.attr_string("activation", "");
  if (name.empty()) return a;
  bool found = false;
  for (const Named& n : kFused)
    if (name == n.name) {
      a.op = n.op;
      found = true;
    }
  if (!found) throw ModelError(node.describe() + ": unknown fused activation '" + name + "'");
  const std::vector<float> p = node.attr("activation_params") ? node.attr("activation_params")->as_floats() : std::vector<float>{};
  switch (a.op) {
    case kLeakyRelu: a.a = p.size() > 0 ? p[0] : 0.01f; break;
    case kClip:
      a.a = p.size() > 0 ? p[0] : -INFINITY;
      a.b = p.size() > 1 ? p[1] : INFINITY;
      break;
    case kHardSigmoid:
      a.a = p.size() > 0 ? p[0] : 0.2f;
      a.b = p.size() > 1 ? p[1] : 0.5f;
      break;
    default: break;
  }
  return a;
}

std::vector<int64_t> strides_of(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * dims[i];
  return s;
}

std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& in, const std::vector<int64_t>& out) {
  std::vector<int64_t> s(out.size(), 0);
  const std::vector<int64_t> own = strides_of(in);
  const size_t lead = out.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d) s[lead + d] = in[d] == 1 ? 0 : own[d];
  return s;
}

void collapse_dims(std::vector<int64_t>& dims, std::vector<std::vector<int64_t>*> strides) {
  std::vector<int64_t> nd;
  std::vector<std::vector<int64_t>> ns(strides.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == 1) continue;
    bool merge = !nd.empty();
    for (size_t k = 0; merge && k < strides.size(); ++k) merge = ns[k].back() == (*strides[k])[d] * dims[d];
    if (merge) {
      nd.back() *= dims[d];
      for (size_t k = 0; k < strides.size(); ++k) ns[k].back() = (*strides[k])[d];
    } else {
      nd.push_back(dims[d]);
      for (size_t k = 0; k < strides.size(); ++k) ns[k].push_back((*strides[k])[d]);
    }
  }
  if (nd.empty()) {  // every dim 1 (or none): one element
    nd.push_back(1);
    for (auto& s : ns) s.push_back(0);
  }
  dims = std::move(nd);
  for (size_t k = 0; k < strides.size(); ++k) *strides[k] = std::move(ns[k]);
}

std::string float32_only(const KernelInit& init) {
  for (size_t i = 0; i < init.node.inputs().size(); ++i)
    if (init.node.input(i) != nullptr && init.input_dtype(i) != ir::DType::kFloat32)
      return "input " + std::to_string(i) + " is " + std::string(ir::dtype_name(init.input_dtype(i))) +
             "; the Vulkan kernel takes float32";
  return "";
}

void check_u32(const ir::Node& node, int64_t count, const char* what) {
  if (count > std::numeric_limits<uint32_t>::max())
    throw UnsupportedError(node.describe() + ": " + what + " has " + std::to_string(count) +
                           " elements, more than the Vulkan kernels index (2^32); compile with device='cpu'");
}

}  // namespace tether::engine::vulkan
