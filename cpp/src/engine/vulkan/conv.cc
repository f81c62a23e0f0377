// Conv and FusedConv (bias, a residual summand and an activation fused), 1-D and 2-D, NCHW:
// 1x1 convolutions with unit strides and no padding as a GEMM per image (shaders/gemm.comp),
// the others by the direct convolution of shaders/conv2d.comp (groups, depthwise, dilations,
// strides, pads).
#include <algorithm>

#include "engine/vulkan/matmul.h"
#include "engine/vulkan/ops.h"

namespace tether::engine::vulkan {

namespace {

struct ConvPush {
  uint32_t n;
  uint32_t C, H, W;
  uint32_t M, OH, OW;
  uint32_t KH, KW;
  int32_t SH, SW, PH, PW, DH, DW;
  uint32_t G;
};

class ConvKernel final : public GpuKernel {
 public:
  explicit ConvKernel(const KernelInit& init)
      : node_(init.node),
        group_(init.node.attr_int("group", 1)),
        has_bias_(init.node.inputs().size() > 2 && init.node.input(2) != nullptr),
        has_sum_(init.node.inputs().size() > 3 && init.node.input(3) != nullptr),
        act_(fused_activation(init.node)) {
    const size_t k = init.input_types[0].shape().rank() - 2;
    auto ints_or = [&](const char* name, size_t n, int64_t fill) {
      std::vector<int64_t> v = init.node.attr_ints(name);
      if (v.empty()) v.assign(n, fill);
      return v;
    };
    strides_ = ints_or("strides", k, 1);
    dilations_ = ints_or("dilations", k, 1);
    pads_ = ints_or("pads", 2 * k, 0);
    auto_pad_ = init.node.attr_string("auto_pad", "NOTSET");
    // A 1x1 kernel with unit strides and no padding is a GEMM: known when W is a constant.
    const ir::Tensor* w = init.constant(1);
    bool pointwise = w != nullptr && group_ == 1 && (auto_pad_ == "NOTSET" || auto_pad_ == "VALID");
    for (size_t d = 0; pointwise && d < k; ++d)
      pointwise = w->dims()[d + 2] == 1 && strides_[d] == 1 && pads_[d] == 0 && pads_[d + k] == 0;
    pointwise_ = pointwise;
  }

  void prepare(Gpu& gpu) override {
    if (pointwise_) {
      pipeline_ = &gemm_pipeline(gpu, act_, has_bias_, has_sum_);
    } else {
      std::vector<uint32_t> spec{kLocal};
      for (uint32_t v : act_.spec()) spec.push_back(v);
      spec.push_back(has_bias_ ? 1 : 0);
      spec.push_back(has_sum_ ? 1 : 0);
      pipeline_ = &gpu.pipeline("conv2d", 5, sizeof(ConvPush), spec);
    }
  }

  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    const GpuTensor& x = in[0];
    const GpuTensor& w = in[1];
    const GpuTensor& y = out[0];
    const Range bias = has_bias_ ? in[2].range : rec.unused();
    const Range sum = has_sum_ ? in[3].range : rec.unused();
    const bool two_d = x.dims.size() == 4;
    const int64_t n = x.dims[0], c = x.dims[1], h = two_d ? x.dims[2] : 1, wd = x.dims.back();
    const int64_t m = y.dims[1], oh = two_d ? y.dims[2] : 1, ow = y.dims.back();
    check_u32(node_, x.numel(), "the input");
    check_u32(node_, y.numel(), "the output");
    if (pointwise_) {
      GemmPush p{};
      p.M = static_cast<uint32_t>(m);
      p.K = static_cast<uint32_t>(c);
      p.N = static_cast<uint32_t>(oh * ow);
      p.a_rs = p.K;
      p.a_cs = 1;
      p.b_rs = p.N;
      p.b_cs = 1;
      p.bias_rs = 1;
      p.bias_cs = 0;
      p.alpha = 1.0f;
      p.beta = 1.0f;
      record_gemm(rec, node_, *pipeline_, p, {n}, {0}, {c * h * wd}, w.range, x.range, bias, sum, y.range);
      return;
    }
    const size_t k = x.dims.size() - 2;
    std::vector<int64_t> pb(k), pe(k);
    for (size_t d = 0; d < k; ++d) {
      const int64_t ek = (w.dims[d + 2] - 1) * dilations_[d] + 1;
      if (auto_pad_ == "SAME_UPPER" || auto_pad_ == "SAME_LOWER") {
        const int64_t total = std::max<int64_t>(0, (y.dims[d + 2] - 1) * strides_[d] + ek - x.dims[d + 2]);
        pb[d] = auto_pad_ == "SAME_UPPER" ? total / 2 : total - total / 2;
      } else if (auto_pad_ != "VALID") {
        pb[d] = pads_[d];
      }
    }
    ConvPush p{};
    p.n = static_cast<uint32_t>(y.numel());
    p.C = static_cast<uint32_t>(c);
    p.H = static_cast<uint32_t>(h);
    p.W = static_cast<uint32_t>(wd);
    p.M = static_cast<uint32_t>(m);
    p.OH = static_cast<uint32_t>(oh);
    p.OW = static_cast<uint32_t>(ow);
    p.KH = static_cast<uint32_t>(two_d ? w.dims[2] : 1);
    p.KW = static_cast<uint32_t>(w.dims.back());
    p.SH = static_cast<int32_t>(two_d ? strides_[0] : 1);
    p.SW = static_cast<int32_t>(strides_.back());
    p.PH = static_cast<int32_t>(two_d ? pb[0] : 0);
    p.PW = static_cast<int32_t>(pb.back());
    p.DH = static_cast<int32_t>(two_d ? dilations_[0] : 1);
    p.DW = static_cast<int32_t>(dilations_.back());
    p.G = static_cast<uint32_t>(group_);
    dispatch_1d(rec, *pipeline_, {x.range, w.range, bias, sum, y.range}, &p, sizeof p, p.n);
  }

 private:
  const ir::Node& node_;
  int64_t group_;
  bool has_bias_, has_sum_;
  Activation act_;
  std::vector<int64_t> strides_, dilations_, pads_;
  std::string auto_pad_;
  bool pointwise_ = false;
  const Pipeline* pipeline_ = nullptr;
};

std::string conv_check(const KernelInit& init) {
  if (std::string why = float32_only(init); !why.empty()) return why;
  if (std::string why = require_rank(init, 0, {3, 4}); !why.empty()) return why + " (the Vulkan kernel takes 1-D and 2-D)";
  const ir::Shape& w = init.input_types[1].shape();
  if (!w.has_rank() || w.rank() != init.input_types[0].shape().rank()) return "W's rank differs from X's";
  if (init.node.attr_int("group", 1) < 1) return "group must be at least 1";
  return "";
}

}  // namespace

void register_conv(KernelRegistry& r) {
  auto conv = [](const KernelInit& init) -> std::unique_ptr<Kernel> { return std::make_unique<ConvKernel>(init); };
  r.add("Conv", conv, conv_check);
  r.add("FusedConv", conv, conv_check, "ai.tether");
}

}  // namespace tether::engine::vulkan
