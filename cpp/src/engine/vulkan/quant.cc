// INT8 on Vulkan, the element-wise part: QuantizeLinear and DequantizeLinear (int8 / uint8, and
// int32 for DequantizeLinear; per tensor or per axis; shaders/quantize.comp, dequantize.comp),
// ai.tether QLinearAdd (shaders/qadd.comp), com.microsoft QLinearGlobalAveragePool
// (shaders/q_global_average_pool.comp), and the ops the QDQ pass leaves on 8-bit tensors:
// MaxPool (shaders/qmaxpool2d.comp), the views, and Concat, Split, Transpose, Expand and Slice
// (quant_shape.cc). The integer products are in quant_gemm.cc.
//
// 8-bit tensors are bytes in storage buffers (storageBuffer8BitAccess, and shaderInt8 to store
// them): a device without them refuses these kernels when they are recorded, and the nodes run
// on the CPU with the reason. Scales and zero points are constants read at compile; rounding
// follows the CPU engine (engine/cpu/quantize.cc), so results agree bit for bit where the
// device divides floats correctly rounded (lavapipe does).
#include "engine/vulkan/quant.h"

#include <cmath>
#include <cstring>

#include "engine/vulkan/ops.h"

namespace tether::engine::vulkan {

bool is_8bit(ir::DType t) { return t == ir::DType::kInt8 || t == ir::DType::kUInt8; }

std::vector<int32_t> zero_point_values(const ir::Tensor* t) {
  if (t == nullptr) return {0};
  std::vector<int32_t> z(static_cast<size_t>(t->num_elements()));
  for (size_t i = 0; i < z.size(); ++i)
    z[i] = t->dtype() == ir::DType::kInt8 ? t->data<int8_t>()[i] : static_cast<int32_t>(t->data<uint8_t>()[i]);
  return z;
}

std::string scale_problem(const ir::Tensor* t, const char* name) {
  if (t == nullptr) return std::string(name) + " is not a constant (the Vulkan kernel reads it at compile)";
  if (t->dtype() != ir::DType::kFloat32) return std::string(name) + " is not float32";
  for (int64_t i = 0; i < t->num_elements(); ++i) {
    const float v = t->data<float>()[i];
    if (!(v > 0.0f) || std::isinf(v)) return std::string(name) + " is not positive and finite";
  }
  return "";
}

std::string zero_problem(const KernelInit& init, size_t i, const char* name) {
  if (i >= init.node.inputs().size() || init.node.input(i) == nullptr) return "";
  if (init.constant(i) == nullptr) return std::string(name) + " is not a constant (the Vulkan kernel reads it at compile)";
  if (!is_8bit(init.input_dtype(i))) return std::string(name) + " is not int8 or uint8";
  return "";
}

void require_storage8(const Recorder& rec, const ir::Node& node) {
  if (!rec.device().storage8())
    throw UnsupportedError(node.describe() + ": Vulkan device '" + rec.device().name() +
                           "' lacks 8-bit storage buffers or 8-bit integers (storageBuffer8BitAccess, shaderInt8), "
                           "which the INT8 kernels need");
}

namespace {

// ---- QuantizeLinear and DequantizeLinear ----------------------------------------------------------

struct QuantPush {
  uint32_t n, len, inner;
};

std::string quantize_check(const KernelInit& init) {
  const bool quantize = init.node.op_type() == "QuantizeLinear";
  const ir::DType data = quantize ? init.input_dtype(0) : init.output_dtype(0);
  const ir::DType q = quantize ? init.output_dtype(0) : init.input_dtype(0);
  if (data != ir::DType::kFloat32) return quantize ? "input 0 is not float32" : "its output is not float32";
  if (!is_8bit(q) && !(!quantize && q == ir::DType::kInt32))
    return quantize ? "its output is not int8 or uint8" : "input 0 is not int8, uint8 or int32";
  if (init.node.attr_int("block_size", 0) != 0) return "blocked quantization runs on the CPU";
  if (std::string why = scale_problem(init.constant(1), "the scale"); !why.empty()) return why;
  const bool has_zero = init.node.inputs().size() > 2 && init.node.input(2) != nullptr;
  if (q == ir::DType::kInt32 && has_zero && (init.constant(2) == nullptr || init.input_dtype(2) != ir::DType::kInt32))
    return "the zero point is not a constant int32";
  if (q != ir::DType::kInt32)
    if (std::string why = zero_problem(init, 2, "the zero point"); !why.empty()) return why;
  const ir::Tensor* s = init.constant(1);
  if (s->num_elements() != 1 && s->rank() != 1) return "the scale is neither one value nor one per element of an axis";
  const ir::Tensor* z = init.constant(2);
  if (z != nullptr && z->num_elements() != s->num_elements()) return "the zero point and the scale differ in size";
  if (s->num_elements() != 1 && !init.input_types[0].shape().has_rank()) return "input 0 has an unknown rank";
  return "";
}

class QuantizeKernel final : public GpuKernel {
 public:
  explicit QuantizeKernel(const KernelInit& init)
      : node_(init.node),
        quantize_(init.node.op_type() == "QuantizeLinear"),
        is_signed_((quantize_ ? init.output_dtype(0) : init.input_dtype(0)) == ir::DType::kInt8),
        int32_(!quantize_ && init.input_dtype(0) == ir::DType::kInt32),
        axis_(init.node.attr_int("axis", 1)) {
    const ir::Tensor& s = *init.constant(1);
    std::vector<int32_t> z = {0};
    if (const ir::Tensor* t = init.constant(2); int32_ && t != nullptr) z.assign(t->data<int32_t>(), t->data<int32_t>() + t->num_elements());
    else if (!int32_) z = zero_point_values(t);
    len_ = s.num_elements();
    for (int64_t i = 0; i < len_; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &s.data<float>()[i], 4);
      params_.push_back(bits);
      params_.push_back(static_cast<uint32_t>(z.size() == 1 ? z[0] : z[static_cast<size_t>(i)]));
    }
  }

  bool reads_on_device(size_t i) const override { return i == 0; }

  void prepare(Gpu& gpu) override {
    if (!gpu.device.storage8()) return;  // refused when recorded
    pipeline_ = quantize_ ? &gpu.pipeline("quantize", 3, sizeof(QuantPush), {kLocal, is_signed_ ? 1u : 0u})
                          : &gpu.pipeline("dequantize", 4, sizeof(QuantPush), {kLocal, is_signed_ ? 1u : 0u, int32_ ? 1u : 0u});
    params_handle_ = gpu.add_weight_view(params_.data(), static_cast<int64_t>(params_.size() * 4));
  }

  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    require_storage8(rec, node_);
    const GpuTensor& x = in[0];
    check_u32(node_, x.numel(), "the input");
    QuantPush p{static_cast<uint32_t>(x.numel()), 1, 1};
    if (len_ != 1) {
      const int64_t axis = normalize_axis(node_, axis_, x.dims.size());
      if (x.dims[static_cast<size_t>(axis)] != len_)
        throw ArgumentError(node_.describe() + ": the scale has " + std::to_string(len_) + " elements, axis " +
                            std::to_string(axis) + " of input 0 has " + std::to_string(x.dims[static_cast<size_t>(axis)]));
      p.len = static_cast<uint32_t>(len_);
      p.inner = static_cast<uint32_t>(product(x.dims, static_cast<size_t>(axis) + 1, x.dims.size()));
    }
    std::vector<Range> bindings{int32_ ? rec.unused() : x.range, rec.weight(params_handle_), out[0].range};
    if (!quantize_) bindings.push_back(int32_ ? x.range : rec.unused());
    dispatch_1d(rec, *pipeline_, bindings, &p, sizeof p, p.n);
  }

 private:
  const ir::Node& node_;
  bool quantize_, is_signed_, int32_;
  int64_t axis_, len_ = 1;
  std::vector<uint32_t> params_;  // per scale: its bits, the zero point
  int params_handle_ = -1;
  const Pipeline* pipeline_ = nullptr;
};

// ---- QLinearAdd and QLinearMul ------------------------------------------------------------------

std::string qadd_check(const KernelInit& init) {
  for (size_t i : {0u, 3u})
    if (!is_8bit(init.input_dtype(i))) return "input " + std::to_string(i) + " is not int8 or uint8";
  if (!is_8bit(init.output_dtype(0))) return "its output is not int8 or uint8";
  for (size_t i : {1u, 4u, 6u}) {
    const std::string name = "input " + std::to_string(i) + " (a scale)";
    if (std::string why = scale_problem(init.constant(i), name.c_str()); !why.empty()) return why;
    if (init.constant(i)->num_elements() != 1) return name + " is not one value";
  }
  for (size_t i : {2u, 5u, 7u}) {
    const std::string name = "input " + std::to_string(i) + " (a zero point)";
    if (std::string why = zero_problem(init, i, name.c_str()); !why.empty()) return why;
    if (init.constant(i) != nullptr && init.constant(i)->num_elements() != 1) return name + " is not one value";
  }
  const std::string act = init.node.attr_string("activation", "");
  if (!act.empty() && act != "Relu") return "activation '" + act + "' is not Relu";
  return "";
}

class QAddKernel final : public GpuKernel {
 public:
  explicit QAddKernel(const KernelInit& init) : node_(init.node) {
    auto scale = [&](size_t i) { return float_bits(*init.constant(i)->data<float>()); };
    auto zero = [&](size_t i) { return static_cast<uint32_t>(zero_point_values(init.constant(i))[0]); };
    const bool y_signed = init.output_dtype(0) == ir::DType::kInt8;
    const int32_t zy = static_cast<int32_t>(zero(7));
    int32_t lo = y_signed ? -128 : 0;
    if (init.node.attr_string("activation", "") == "Relu") lo = std::max(lo, zy);  // Q(Relu(v)) = max(Q(v), zy)
    spec_ = {kLocal,   init.input_dtype(0) == ir::DType::kInt8 ? 1u : 0u, init.input_dtype(3) == ir::DType::kInt8 ? 1u : 0u,
             scale(1), zero(2), scale(4), zero(5), scale(6), static_cast<uint32_t>(zy), static_cast<uint32_t>(lo),
             static_cast<uint32_t>(y_signed ? 127 : 255), init.node.op_type() == "QLinearMul" ? 1u : 0u};
  }

  bool reads_on_device(size_t i) const override { return i == 0 || i == 3; }

  void prepare(Gpu& gpu) override {
    if (gpu.device.storage8()) pipeline_ = &gpu.pipeline("qadd", 3, kTwoOperandPushBytes, spec_);
  }

  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    require_storage8(rec, node_);
    const BroadcastPush p = broadcast_push(node_, {in[0].dims, in[3].dims}, out[0]);
    dispatch_1d(rec, *pipeline_, {in[0].range, in[3].range, out[0].range}, &p, kTwoOperandPushBytes, p.n);
  }

 private:
  const ir::Node& node_;
  std::vector<uint32_t> spec_;
  const Pipeline* pipeline_ = nullptr;
};

// ---- QLinearLookup (ai.tether) -------------------------------------------------------------------

// y[i] = table[x[i]]: the table (a constant the session uploads) holds what the CPU engine's
// kernels computed for the DequantizeLinear -> op -> QuantizeLinear chain, so the two agree.
class QLookupKernel final : public GpuKernel {
 public:
  explicit QLookupKernel(const KernelInit& init) : node_(init.node) {}

  void prepare(Gpu& gpu) override {
    if (gpu.device.storage8()) pipeline_ = &gpu.pipeline("q_lookup", 3, sizeof(uint32_t), {kLocal});
  }

  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    require_storage8(rec, node_);
    if (in[1].numel() != 256)
      throw ArgumentError(node_.describe() + ": the table has " + std::to_string(in[1].numel()) + " elements, expected 256");
    check_u32(node_, out[0].numel(), "the output");
    const auto n = static_cast<uint32_t>(out[0].numel());
    dispatch_1d(rec, *pipeline_, {in[0].range, in[1].range, out[0].range}, &n, sizeof n, n);
  }

 private:
  const ir::Node& node_;
  const Pipeline* pipeline_ = nullptr;
};

std::string qlookup_check(const KernelInit& init) {
  if (!is_8bit(init.input_dtype(0)) || !is_8bit(init.input_dtype(1))) return "X or the table is not int8 or uint8";
  return "";
}

// ---- QLinearGlobalAveragePool (com.microsoft) ----------------------------------------------------

struct QGlobalPoolPush {
  uint32_t n, channels, count, scale;  // scale: float bits
};

// Each channel's mean, requantized as on the CPU engine: s = sum(x) - count * x_zp (exact in
// int32, checked), y = round_half_even(clamp(float(s) * scale, lo - y_zp, hi - y_zp)) + y_zp with
// scale = x_scale / (y_scale * float(count)) computed on the host as the CPU engine computes it.
class QGlobalAveragePoolKernel final : public GpuKernel {
 public:
  explicit QGlobalAveragePoolKernel(const KernelInit& init)
      : node_(init.node), x_scale_(*init.constant(1)->data<float>()), y_scale_(*init.constant(3)->data<float>()) {
    auto zero = [&](size_t i) { return zero_point_values(i < init.node.inputs().size() ? init.constant(i) : nullptr)[0]; };
    spec_ = {kLocal, init.input_dtype(0) == ir::DType::kInt8 ? 1u : 0u, init.node.attr_int("channels_last", 0) != 0 ? 1u : 0u,
             static_cast<uint32_t>(zero(2)), static_cast<uint32_t>(zero(4))};
  }

  bool reads_on_device(size_t i) const override { return i == 0; }

  void prepare(Gpu& gpu) override {
    if (gpu.device.storage8()) pipeline_ = &gpu.pipeline("q_global_average_pool", 2, sizeof(QGlobalPoolPush), spec_);
  }

  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    require_storage8(rec, node_);
    const GpuTensor& x = in[0];
    const int64_t channels = spec_[2] != 0 ? x.dims.back() : x.dims[1];
    const int64_t n = x.dims[0] * channels, count = n == 0 ? 0 : x.numel() / n;
    check_u32(node_, x.numel(), "the input");
    // The sum of count bytes, and count times the zero point, stay within int32.
    if (count > (int64_t{1} << 31) / 256)
      throw UnsupportedError(node_.describe() + ": " + std::to_string(count) +
                             " positions per channel; the Vulkan kernel sums at most 8388608 in int32");
    if (n == 0) return;
    const float scale = x_scale_ / (y_scale_ * static_cast<float>(count));
    const QGlobalPoolPush p{static_cast<uint32_t>(n), static_cast<uint32_t>(channels), static_cast<uint32_t>(count),
                            float_bits(scale)};
    dispatch_1d(rec, *pipeline_, {x.range, out[0].range}, &p, sizeof p, n);
  }

 private:
  const ir::Node& node_;
  float x_scale_, y_scale_;
  std::vector<uint32_t> spec_;
  const Pipeline* pipeline_ = nullptr;
};

std::string qglobal_pool_check(const KernelInit& init) {
  if (!is_8bit(init.input_dtype(0)) || init.output_dtype(0) != init.input_dtype(0))
    return "X is not int8 or uint8, or Y is not of X's type";
  if (std::string why = require_rank(init, 0, {3, 4, 5}); !why.empty()) return why;
  for (size_t i : {1u, 3u}) {
    const std::string name = "input " + std::to_string(i) + " (a scale)";
    if (std::string why = scale_problem(init.constant(i), name.c_str()); !why.empty()) return why;
    if (init.constant(i)->num_elements() != 1) return name + " is not one value";
  }
  for (size_t i : {2u, 4u}) {
    if (std::string why = zero_problem(init, i, "a zero point"); !why.empty()) return why;
    if (const ir::Tensor* z = i < init.node.inputs().size() ? init.constant(i) : nullptr; z != nullptr && z->num_elements() != 1)
      return "input " + std::to_string(i) + " (a zero point) is not one value";
  }
  return "";
}

// ---- MaxPool on 8-bit tensors --------------------------------------------------------------------

struct QPoolPush {
  uint32_t n;
  uint32_t H, W, OH, OW;
  int32_t KH, KW, SH, SW, PH, PW, DH, DW;
};

class QMaxPoolKernel final : public GpuKernel {
 public:
  explicit QMaxPoolKernel(const KernelInit& init)
      : node_(init.node), is_signed_(init.input_dtype(0) == ir::DType::kInt8), kernel_(init.node.attr_ints("kernel_shape")) {}

  void prepare(Gpu& gpu) override {
    if (gpu.device.storage8()) pipeline_ = &gpu.pipeline("qmaxpool2d", 2, sizeof(QPoolPush), {kLocal, is_signed_ ? 1u : 0u});
  }

  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    require_storage8(rec, node_);
    const GpuTensor& x = in[0];
    const GpuTensor& y = out[0];
    const size_t k = kernel_.size();
    auto ints_or = [&](const char* name, size_t n, int64_t fill) {
      std::vector<int64_t> v = node_.attr_ints(name);
      if (v.empty()) v.assign(n, fill);
      return v;
    };
    const std::vector<int64_t> strides = ints_or("strides", k, 1), dilations = ints_or("dilations", k, 1),
                               pads = ints_or("pads", 2 * k, 0);
    const std::string auto_pad = node_.attr_string("auto_pad", "NOTSET");
    std::vector<int64_t> pb(k, 0);
    for (size_t d = 0; d < k; ++d) {
      const int64_t extent = (kernel_[d] - 1) * dilations[d] + 1;
      const int64_t total = std::max<int64_t>(0, (y.dims[d + 2] - 1) * strides[d] + extent - x.dims[d + 2]);
      if (auto_pad == "SAME_UPPER") pb[d] = total / 2;
      else if (auto_pad == "SAME_LOWER") pb[d] = total - total / 2;
      else if (auto_pad != "VALID") pb[d] = pads[d];
    }
    check_u32(node_, x.numel(), "the input");
    const bool two_d = k == 2;
    QPoolPush p{};
    p.n = static_cast<uint32_t>(y.numel());
    p.H = static_cast<uint32_t>(two_d ? x.dims[2] : 1);
    p.W = static_cast<uint32_t>(x.dims.back());
    p.OH = static_cast<uint32_t>(two_d ? y.dims[2] : 1);
    p.OW = static_cast<uint32_t>(y.dims.back());
    set_window(p, kernel_, strides, pb, dilations);
    dispatch_1d(rec, *pipeline_, {x.range, y.range}, &p, sizeof p, p.n);
  }

 private:
  const ir::Node& node_;
  bool is_signed_;
  std::vector<int64_t> kernel_;
  const Pipeline* pipeline_ = nullptr;
};

std::string qmaxpool_check(const KernelInit& init) {
  if (std::string why = require_rank(init, 0, {3, 4}); !why.empty()) return why + " (the Vulkan kernel pools 1-D and 2-D)";
  if (init.node.attr_ints("kernel_shape").size() + 2 != init.input_types[0].shape().rank())
    return "kernel_shape does not match X's rank";
  if (init.node.outputs().size() > 1 && init.node.output(1) != nullptr) return "its Indices output is not computed on Vulkan";
  return "";
}

// ---- ops that take 8-bit tensors besides the float ones -------------------------------------------

// The entries the other families registered for ops that also come on 8-bit tensors: an 8-bit
// input takes the kernel here, anything else the entry as it was. Registry entries are plain
// function pointers, so each op's earlier entry is kept in a slot of its own.
template <int kSlot>
KernelRegistry::Entry& earlier() {
  static KernelRegistry::Entry entry{};
  return entry;
}

template <int kSlot>
void widen(KernelRegistry& r, const char* op, KernelFactory create8, SupportCheck check8) {
  const KernelRegistry::Entry* e = r.find("", op);
  if (e == nullptr) return;
  earlier<kSlot>() = *e;
  static KernelFactory s_create8 = nullptr;
  static SupportCheck s_check8 = nullptr;
  s_create8 = create8 != nullptr ? create8 : e->create;
  s_check8 = check8;
  r.add(op,
        [](const KernelInit& init) { return is_8bit(init.input_dtype(0)) ? s_create8(init) : earlier<kSlot>().create(init); },
        [](const KernelInit& init) { return is_8bit(init.input_dtype(0)) ? s_check8(init) : earlier<kSlot>().check(init); });
}

std::string view_check8(const KernelInit&) { return ""; }

}  // namespace

void register_quant(KernelRegistry& r) {
  auto quantize = [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<QuantizeKernel>(i); };
  r.add("QuantizeLinear", quantize, quantize_check);
  r.add("DequantizeLinear", quantize, quantize_check);
  auto qadd = [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<QAddKernel>(i); };
  r.add("QLinearAdd", qadd, qadd_check, "ai.tether");
  r.add("QLinearMul", qadd, qadd_check, "ai.tether");
  // onnxruntime's QOperator form: zero points optional (0), operands broadcasting.
  r.add("QLinearAdd", qadd, qadd_check, "com.microsoft");
  r.add("QLinearLookup", [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<QLookupKernel>(i); },
        qlookup_check, "ai.tether");
  r.add("QLinearGlobalAveragePool",
        [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<QGlobalAveragePoolKernel>(i); },
        qglobal_pool_check, "com.microsoft");
  widen<0>(r, "MaxPool", [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<QMaxPoolKernel>(i); },
           qmaxpool_check);
  // The views record nothing: their kernels serve bytes as they serve words.
  widen<1>(r, "Reshape", nullptr, view_check8);
  widen<2>(r, "Flatten", nullptr, view_check8);
  widen<3>(r, "Squeeze", nullptr, view_check8);
  widen<4>(r, "Unsqueeze", nullptr, view_check8);
  widen<5>(r, "Identity", nullptr, view_check8);
  widen<6>(r, "Concat", byte_concat_kernel, byte_concat_check);
  widen<7>(r, "Transpose", byte_transpose_kernel, byte_transpose_check);
  widen<8>(r, "Slice", byte_slice_kernel, byte_slice_check);
  // (Split and Expand take any 8-bit input: their sizes and shape are read on the host.)
  widen<9>(r, "Split", byte_split_kernel, view_check8);
  widen<10>(r, "Expand", byte_expand_kernel, view_check8);
  // Gather moves bytes on the computed Gather's shader, whether its indices are constants or not.
  widen<11>(r, "Gather", computed_gather_kernel, computed_gather_indices_check);
  register_quant_gemm(r);
  register_quant_dynamic(r);
}

}  // namespace tether::engine::vulkan
