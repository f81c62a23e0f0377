// Conv and FusedConv (bias, a residual summand and an activation fused), 1-D and 2-D, NCHW:
// 1x1 convolutions with unit strides and no padding as a GEMM per image (matmul.h); on GPUs
// (gpu_kernels) the others with at least kGemmChannels output channels per group as an
// implicit GEMM (shaders/conv_gemm.comp); the rest, and all on lavapipe, by the direct
// convolution of shaders/conv2d.comp (groups, depthwise, dilations, strides, pads), each
// invocation 4 pixels of a row for up to 8 output channels. ConvTranspose by
// shaders/conv_transpose2d.comp. Pads, auto_pad and the output sizes of ConvTranspose resolve
// as on the CPU engine (ops/conv_geometry.h).
#include <algorithm>

#include "engine/vulkan/matmul.h"
#include "engine/vulkan/ops.h"
#include "ops/conv_geometry.h"

namespace tether::engine::vulkan {

namespace {

// The push constants of conv2d.comp and conv_transpose2d.comp.
struct ConvPush {
  uint32_t n;
  uint32_t C, H, W;
  uint32_t M, OH, OW;
  uint32_t KH, KW;
  int32_t SH, SW, PH, PW, DH, DW;
  uint32_t G;
};

// A 1-D convolution is a 2-D one of height 1.
ConvPush conv_push(const ir::Node& node, const GpuTensor& x, const GpuTensor& w, const GpuTensor& y, bool transpose) {
  const ops::ConvGeometry g = ops::conv_geometry(node, x.dims, w.dims, y.dims, transpose);
  check_u32(node, x.numel(), "the input");
  check_u32(node, y.numel(), "the output");
  const bool two_d = x.dims.size() == 4;
  auto last2 = [two_d](const std::vector<int64_t>& v, int64_t fill) { return two_d ? v[v.size() - 2] : fill; };
  ConvPush p{};
  p.n = static_cast<uint32_t>(y.numel());
  p.C = static_cast<uint32_t>(x.dims[1]);
  p.H = static_cast<uint32_t>(last2(x.dims, 1));
  p.W = static_cast<uint32_t>(x.dims.back());
  p.M = static_cast<uint32_t>(y.dims[1]);
  p.OH = static_cast<uint32_t>(last2(y.dims, 1));
  p.OW = static_cast<uint32_t>(y.dims.back());
  set_window(p, g.kernel, g.strides, g.pad_begin, g.dilations);
  p.G = static_cast<uint32_t>(g.group);
  return p;
}

// A 1x1 kernel with unit strides and no padding is a GEMM: known when W is a constant.
bool pointwise(const KernelInit& init) {
  const ir::Tensor* w = init.constant(1);
  const std::string auto_pad = init.node.attr_string("auto_pad", "NOTSET");
  if (w == nullptr || init.node.attr_int("group", 1) != 1 || !(auto_pad == "NOTSET" || auto_pad == "VALID")) return false;
  for (int64_t v : init.node.attr_ints("strides"))
    if (v != 1) return false;
  for (int64_t v : init.node.attr_ints("pads"))
    if (v != 0) return false;
  for (size_t d = 2; d < w->rank(); ++d)
    if (w->dims()[d] != 1) return false;
  return true;
}

// Output pixels per invocation of conv2d.comp, along a row (its PX).
constexpr uint32_t kPixels = 4;

// Output channels per invocation of conv2d.comp: the most of 8, 4 and 2 that divides a group's
// output channels (1 for depthwise, and for weights of unknown shape).
uint32_t channel_block(const KernelInit& init) {
  const ir::Shape& w = init.input_types[1].shape();
  const int64_t group = init.node.attr_int("group", 1);
  if (!w.has_rank() || w.rank() < 1 || !w[0].is_known() || group < 1) return 1;
  const int64_t per_group = w[0].value() / group;
  for (uint32_t b : {8u, 4u, 2u})
    if (per_group % b == 0) return b;
  return 1;
}

// Output channels per group from which an implicit GEMM pays on a GPU: its tiles are at least
// 32 channels tall, and a depthwise convolution (one channel per group) would fill 1/32 of them.
constexpr int64_t kGemmChannels = 8;

class ConvKernel final : public GpuKernel {
 public:
  explicit ConvKernel(const KernelInit& init)
      : node_(init.node),
        has_bias_(init.node.inputs().size() > 2 && init.node.input(2) != nullptr),
        has_sum_(init.node.inputs().size() > 3 && init.node.input(3) != nullptr),
        pointwise_(pointwise(init)),
        block_(channel_block(init)),
        act_(fused_activation(init.node)) {}

  void prepare(Gpu& gpu) override {
    if (pointwise_) {
      gemm_ = gemm_pipeline(gpu, act_, has_bias_, has_sum_);
    } else {
      std::vector<uint32_t> spec{kLocal};
      for (uint32_t v : act_.spec()) spec.push_back(v);
      spec.push_back(has_bias_ ? 1 : 0);
      spec.push_back(has_sum_ ? 1 : 0);
      spec.push_back(block_);
      pipeline_ = &gpu.pipeline("conv2d", 5, sizeof(ConvPush), spec);
      if (gpu_kernels(gpu.device)) {
        std::vector<uint32_t> tiled = act_.spec();
        tiled.push_back(has_bias_ ? 1 : 0);
        tiled.push_back(has_sum_ ? 1 : 0);
        tiled_ = tiled_pipelines(gpu, "conv_gemm", sizeof(ConvPush), tiled);
      }
    }
  }

  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    const GpuTensor& x = in[0];
    const GpuTensor& w = in[1];
    const GpuTensor& y = out[0];
    const Range bias = has_bias_ ? in[2].range : rec.unused();
    const Range sum = has_sum_ ? in[3].range : rec.unused();
    if (pointwise_) {
      const int64_t n = x.dims[0], c = x.dims[1], m = y.dims[1];
      const int64_t in_size = product(x.dims, 2, x.dims.size()), out_size = product(y.dims, 2, y.dims.size());
      check_u32(node_, x.numel(), "the input");
      check_u32(node_, y.numel(), "the output");
      GemmPush p{};
      p.M = static_cast<uint32_t>(m);
      p.K = static_cast<uint32_t>(c);
      p.N = static_cast<uint32_t>(out_size);
      p.a_rs = p.K;
      p.a_cs = 1;
      p.b_rs = p.N;
      p.b_cs = 1;
      p.bias_rs = 1;
      p.bias_cs = 0;
      p.alpha = 1.0f;
      p.beta = 1.0f;
      record_gemm(rec, node_, gemm_, p, {n}, {0}, {c * in_size}, w.range, x.range, bias, sum, y.range);
      return;
    }
    ConvPush p = conv_push(node_, x, w, y, false);
    if (p.n == 0) return;  // an empty output
    const std::vector<Range> bindings{x.range, w.range, bias, sum, y.range};
    if (p.M / p.G >= kGemmChannels) {
      ConvPush q = p;
      q.n = static_cast<uint32_t>(x.dims[0] * p.G);  // conv_gemm.comp: batch elements, one per image and group
      const TiledEpilogue epilogue{p.G, 1, 0, 1.0f, 1.0f};
      if (record_tiled(rec, tiled_, bindings, &q, sizeof q, p.M / p.G, int64_t{p.OH} * p.OW, int64_t{p.C} / p.G * p.KH * p.KW,
                       q.n, epilogue))
        return;
    }
    // An invocation per kPixels pixels of a row and block of output channels.
    p.n = p.n / p.OW * ((p.OW + kPixels - 1) / kPixels) / block_;
    dispatch_1d(rec, *pipeline_, bindings, &p, sizeof p, p.n);
  }

 private:
  const ir::Node& node_;
  bool has_bias_, has_sum_, pointwise_;
  uint32_t block_;
  Activation act_;
  const Pipeline* pipeline_ = nullptr;  // conv2d.comp
  TiledPipelines tiled_{};              // conv_gemm.comp, on GPUs
  GemmPipeline gemm_;                   // a 1x1 convolution
};

std::string conv_check(const KernelInit& init) {
  if (std::string why = float32_only(init); !why.empty()) return why;
  if (std::string why = require_rank(init, 0, {3, 4}); !why.empty()) return why + " (the Vulkan kernel takes 1-D and 2-D)";
  const ir::Shape& w = init.input_types[1].shape();
  if (!w.has_rank() || w.rank() != init.input_types[0].shape().rank()) return "W's rank differs from X's";
  if (init.node.attr_int("group", 1) < 1) return "group must be at least 1";
  return "";
}

class ConvTransposeKernel final : public GpuKernel {
 public:
  explicit ConvTransposeKernel(const KernelInit& init)
      : node_(init.node), has_bias_(init.node.inputs().size() > 2 && init.node.input(2) != nullptr) {}

  void prepare(Gpu& gpu) override {
    pipeline_ = &gpu.pipeline("conv_transpose2d", 4, sizeof(ConvPush), {kLocal, has_bias_ ? 1u : 0u});
  }

  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    const ConvPush p = conv_push(node_, in[0], in[1], out[0], true);
    dispatch_1d(rec, *pipeline_, {in[0].range, in[1].range, has_bias_ ? in[2].range : rec.unused(), out[0].range}, &p,
                sizeof p, p.n);
  }

 private:
  const ir::Node& node_;
  bool has_bias_;
  const Pipeline* pipeline_ = nullptr;
};

}  // namespace

void register_conv(KernelRegistry& r) {
  auto conv = [](const KernelInit& init) -> std::unique_ptr<Kernel> { return std::make_unique<ConvKernel>(init); };
  r.add("Conv", conv, conv_check);
  r.add("FusedConv", conv, conv_check, "ai.tether");
  r.add("ConvTranspose",
        [](const KernelInit& init) -> std::unique_ptr<Kernel> { return std::make_unique<ConvTransposeKernel>(init); },
        conv_check);
}

}  // namespace tether::engine::vulkan
