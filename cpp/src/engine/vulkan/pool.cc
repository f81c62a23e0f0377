// MaxPool and AveragePool over 1-D and 2-D windows (shaders/pool2d.comp), GlobalAveragePool
// and GlobalMaxPool (the reductions of shaders/reduce.comp).
#include <algorithm>

#include "engine/vulkan/ops.h"

namespace tether::engine::vulkan {

namespace {

struct PoolPush {
  uint32_t n;
  uint32_t H, W, OH, OW;
  int32_t KH, KW, SH, SW, PH, PW, PEH, PEW, DH, DW;
};

class PoolKernel final : public GpuKernel {
 public:
  PoolKernel(const KernelInit& init, bool is_max)
      : is_max_(is_max),
        include_pad_(init.node.attr_int("count_include_pad", 0) != 0),
        kernel_(init.node.attr_ints("kernel_shape")),
        auto_pad_(init.node.attr_string("auto_pad", "NOTSET")) {
    const size_t k = kernel_.size();
    auto ints_or = [&](const char* name, size_t n, int64_t fill) {
      std::vector<int64_t> v = init.node.attr_ints(name);
      if (v.empty()) v.assign(n, fill);
      return v;
    };
    strides_ = ints_or("strides", k, 1);
    dilations_ = ints_or("dilations", k, 1);
    pads_ = ints_or("pads", 2 * k, 0);
  }

  void prepare(Gpu& gpu) override {
    pipeline_ = &gpu.pipeline("pool2d", 2, sizeof(PoolPush), {kLocal, is_max_ ? 1u : 0u, include_pad_ ? 1u : 0u});
  }

  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    const GpuTensor& x = in[0];
    const GpuTensor& y = out[0];
    const size_t k = kernel_.size();
    std::vector<int64_t> pb(k, 0), pe(k, 0);
    for (size_t d = 0; d < k; ++d) {
      const int64_t ek = (kernel_[d] - 1) * dilations_[d] + 1;
      if (auto_pad_ == "SAME_UPPER" || auto_pad_ == "SAME_LOWER") {
        const int64_t total = std::max<int64_t>(0, (y.dims[d + 2] - 1) * strides_[d] + ek - x.dims[d + 2]);
        pb[d] = auto_pad_ == "SAME_UPPER" ? total / 2 : total - total / 2;
        pe[d] = total - pb[d];
      } else if (auto_pad_ != "VALID") {
        pb[d] = pads_[d];
        pe[d] = pads_[d + k];
      }
    }
    const bool two_d = k == 2;
    PoolPush p{};
    p.n = static_cast<uint32_t>(y.numel());
    p.H = static_cast<uint32_t>(two_d ? x.dims[2] : 1);
    p.W = static_cast<uint32_t>(x.dims.back());
    p.OH = static_cast<uint32_t>(two_d ? y.dims[2] : 1);
    p.OW = static_cast<uint32_t>(y.dims.back());
    set_window(p, kernel_, strides_, pb, dilations_);
    p.PEH = static_cast<int32_t>(two_d ? pe[0] : 0);
    p.PEW = static_cast<int32_t>(pe.back());
    dispatch_1d(rec, *pipeline_, {x.range, y.range}, &p, sizeof p, p.n);
  }

 private:
  bool is_max_, include_pad_;
  std::vector<int64_t> kernel_, strides_, dilations_, pads_;
  std::string auto_pad_;
  const Pipeline* pipeline_ = nullptr;
};

std::string pool_check(const KernelInit& init) {
  if (std::string why = float32_only(init); !why.empty()) return why;
  if (std::string why = require_rank(init, 0, {3, 4}); !why.empty()) return why + " (the Vulkan kernel pools 1-D and 2-D)";
  if (init.node.attr_ints("kernel_shape").size() + 2 != init.input_types[0].shape().rank())
    return "kernel_shape does not match X's rank";
  if (init.node.outputs().size() > 1 && init.node.output(1) != nullptr) return "its Indices output is not computed on Vulkan";
  return "";
}

struct ReducePush {
  uint32_t rows, len, inner;
};

// GlobalAveragePool / GlobalMaxPool: a mean or maximum over each plane.
class GlobalPoolKernel final : public GpuKernel {
 public:
  explicit GlobalPoolKernel(bool is_max) : is_max_(is_max) {}

  void prepare(Gpu& gpu) override { pipeline_ = &gpu.pipeline("reduce", 2, sizeof(ReducePush), {kLocal, is_max_ ? 2u : 1u}); }

  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    const std::vector<int64_t>& d = in[0].dims;
    ReducePush p{static_cast<uint32_t>(d[0] * d[1]), static_cast<uint32_t>(product(d, 2, d.size())), 1};
    dispatch_1d(rec, *pipeline_, {in[0].range, out[0].range}, &p, sizeof p, p.rows);
  }

 private:
  bool is_max_;
  const Pipeline* pipeline_ = nullptr;
};

std::string global_check(const KernelInit& init) {
  if (std::string why = float32_only(init); !why.empty()) return why;
  const ir::Shape& s = init.input_types[0].shape();
  if (!s.has_rank() || s.rank() < 3) return "X must have rank 3 or more";
  return "";
}

}  // namespace

void register_pool(KernelRegistry& r) {
  r.add("MaxPool", [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<PoolKernel>(i, true); },
        pool_check);
  r.add("AveragePool", [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<PoolKernel>(i, false); },
        pool_check);
  r.add("GlobalAveragePool", [](const KernelInit&) -> std::unique_ptr<Kernel> { return std::make_unique<GlobalPoolKernel>(false); },
        global_check);
  r.add("GlobalMaxPool", [](const KernelInit&) -> std::unique_ptr<Kernel> { return std::make_unique<GlobalPoolKernel>(true); },
        global_check);
}

}  // namespace tether::engine::vulkan
