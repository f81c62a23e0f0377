// INT8 on Vulkan, dynamic quantization: DynamicQuantizeLinear, its range found on the device in
// three dispatches: partial ranges per workgroup (shaders/dynamic_quantize_range.comp), their
// combination into y_scale and y_zero_point (dynamic_quantize_params.comp), and the
// quantization itself (quantize.comp, reading the scale and zero point the second left in the
// kernel's scratch). The parameters are those of the CPU engine (engine/cpu/quantize.cc), so the
// output agrees with it bit for bit where the device divides floats correctly rounded; NaN in x
// is refused with ArgumentError as there.
#include <algorithm>

#include "engine/vulkan/ops.h"
#include "engine/vulkan/quant.h"

namespace tether::engine::vulkan {

namespace {

// The range dispatch's workgroups: enough for every invocation to compare at least about 64
// elements, at most kMaxParts so that one workgroup combines them in a few steps.
constexpr int64_t kRangeLocal = 64;
constexpr int64_t kMaxParts = 256;
// The scratch holds the parameters at its start and the partial ranges past the largest offset
// alignment Vulkan allows for storage buffers, so that both are bindable ranges.
constexpr int64_t kPartsOffset = 256;

struct QuantPush {
  uint32_t n, len, inner;
};

class DynamicQuantizeKernel final : public GpuKernel {
 public:
  explicit DynamicQuantizeKernel(const KernelInit& init) : node_(init.node) {}

  void prepare(Gpu& gpu) override {
    if (!gpu.device.storage8()) return;  // refused when recorded
    range_ = &gpu.pipeline("dynamic_quantize_range", 2, sizeof(uint32_t), {});
    params_ = &gpu.pipeline("dynamic_quantize_params", 5, sizeof(uint32_t), {});
    quantize_ = &gpu.pipeline("quantize", 3, sizeof(QuantPush), {kLocal, 0u});
  }

  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    require_storage8(rec, node_);
    const GpuTensor& x = in[0];
    // The range loop steps by the grid's size: indices stay below 2^31 so that no step wraps.
    if (x.numel() >= (int64_t{1} << 31))
      throw UnsupportedError(node_.describe() + ": x has " + std::to_string(x.numel()) +
                             " elements; the Vulkan kernel takes fewer than 2^31");
    const int64_t parts = std::clamp<int64_t>(x.numel() / (kRangeLocal * kRangeLocal), 1, kMaxParts);
    const Range scratch = rec.scratch(kPartsOffset + parts * 16);
    const Range params{scratch.buffer, scratch.offset, 8};
    const Range partial{scratch.buffer, scratch.offset + kPartsOffset, parts * 16};
    const auto n = static_cast<uint32_t>(x.numel());
    rec.dispatch(*range_, {x.range, partial}, &n, sizeof n, static_cast<uint32_t>(parts));
    const Range fault = rec.fault(node_.describe() +
                                  ": x holds NaN, whose quantization range is undefined; NaN values in x");
    const auto count = static_cast<uint32_t>(parts);
    rec.dispatch(*params_, {partial, params, out[1].range, out[2].range, fault}, &count, sizeof count, 1);
    const QuantPush qp{n, 1, 1};
    dispatch_1d(rec, *quantize_, {x.range, params, out[0].range}, &qp, sizeof qp, n);
  }

 private:
  const ir::Node& node_;
  const Pipeline* range_ = nullptr;
  const Pipeline* params_ = nullptr;
  const Pipeline* quantize_ = nullptr;
};

std::string dynamic_quantize_check(const KernelInit& init) {
  if (init.input_dtype(0) != ir::DType::kFloat32) return "x is not float32";
  if (init.output_dtype(0) != ir::DType::kUInt8) return "y is not uint8";
  return "";
}

}  // namespace

void register_quant_dynamic(KernelRegistry& r) {
  r.add("DynamicQuantizeLinear",
        [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<DynamicQuantizeKernel>(i); },
        dynamic_quantize_check);
}

}  // namespace tether::engine::vulkan
