// INT8 on Vulkan, the integer products: QLinearMatMul and QLinearConv (ONNX, and ai.tether with a
// bias and a fused Relu or Clip, as passes/qdq_fuse.cc writes them), MatMulInteger and
// ConvInteger, and ai.tether MatMulIntegerToFloat and ConvIntegerToFloat (dynamic quantization's
// MatMul and Conv, as passes/integer_matmul.cc fuses them: float output, its scale computed at
// run time), all by
// shaders/qgemm.glsl. Constant weights are packed at compile as int8 words of 4 along K per
// output column, with each column's weight sum, zero point, bias and output scale beside them;
// a MatMul's B computed at run time or with batch dims is packed so on the device, each run
// (shaders/qgemm_pack.comp), and then read as constant weights are.
// The dot products of 4 bytes are the device's own (OpSDotKHR) where it has
// VK_KHR_shader_integer_dot_product (qgemm_dot.comp), else plain int32 multiply-adds
// (qgemm.comp); TETHER_VULKAN_NO_INTEGER_DOT=1 forces the plain form when a kernel is compiled.
// Both give the same integers, requantized as on the CPU engine (engine/cpu/qlinear.h).
// com.microsoft QGemm (onnxruntime's QOperator format) is QLinearMatMul with an int32 bias C
// (one value or one per column), B [N, K] under transB, and a float output scaled by
// a_scale * b_scale[j] when y_scale is absent.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <tuple>
#include <utility>

#include "engine/session.h"
#include "engine/vulkan/instance.h"
#include "engine/vulkan/ops.h"
#include "engine/vulkan/quant.h"
#include "ops/conv_geometry.h"

namespace tether::engine::vulkan {

namespace {

// Where an op keeps its operands: the QLinear ops in ONNX's order, the Integer ops in theirs.
struct Slots {
  int a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp, bias;
};
constexpr Slots kQLinear{0, 1, 2, 3, 4, 5, 6, 7, 8};
constexpr Slots kInteger{0, -1, 2, 1, -1, 3, -1, -1, -1};
// com.microsoft QGemm(A, a_scale, a_zero_point, B, b_scale, b_zero_point, C, y_scale, y_zero_point).
constexpr Slots kQGemm{0, 1, 2, 3, 4, 5, 7, 8, 6};
// MatMulIntegerToFloat / ConvIntegerToFloat(A, B, scale, a_zero_point, b_zero_point, bias): the
// float scale and bias are read on the device, in kFloatScale and kFloatBias.
constexpr Slots kToFloat{0, -1, 3, 1, -1, 4, -1, -1, -1};
constexpr size_t kFloatScale = 2, kFloatBias = 5;

bool is_to_float(const ir::Node& n) {
  return n.op_type() == "MatMulIntegerToFloat" || n.op_type() == "ConvIntegerToFloat";
}
bool is_qgemm(const ir::Node& n) { return n.op_type() == "QGemm"; }
const Slots& slots_of(const ir::Node& n) {
  return is_to_float(n) ? kToFloat : is_qgemm(n) ? kQGemm : n.op_type().rfind("QLinear", 0) == 0 ? kQLinear : kInteger;
}
bool is_conv(const ir::Node& n) {
  return n.op_type() == "QLinearConv" || n.op_type() == "ConvInteger" || n.op_type() == "ConvIntegerToFloat";
}
bool present(const ir::Node& n, int slot) {
  return slot >= 0 && static_cast<size_t>(slot) < n.inputs().size() && n.input(static_cast<size_t>(slot)) != nullptr;
}

// Constant weights whose output columns come first: a convolution's [M, C/G, kh, kw], QGemm's
// B under transB ([N, K]); else B is [K, N].
bool columns_first(const ir::Node& n) { return is_conv(n) || (is_qgemm(n) && n.attr_int("transB", 0) != 0); }

// Output columns (channels) and depth of the constant weights.
int64_t columns_of(const ir::Tensor& w, bool first) { return first ? w.dims()[0] : w.dims()[1]; }
int64_t depth_of(const ir::Tensor& w, bool first) { return first ? w.num_elements() / std::max<int64_t>(w.dims()[0], 1) : w.dims()[0]; }

// Elements of input `i` when its shape is static, else -1.
int64_t static_count(const KernelInit& init, size_t i) {
  const std::optional<std::vector<int64_t>> dims = init.input_types[i].shape().static_sizes();
  return dims ? product(*dims, 0, dims->size()) : -1;
}

// MatMulIntegerToFloat's float side: the scale one value or one per column, the bias one per
// column, an activation the shader applies.
std::string to_float_check(const KernelInit& init, int64_t cols) {
  if (init.output_dtype(0) != ir::DType::kFloat32) return "its output is not float32";
  if (init.input_dtype(kFloatScale) != ir::DType::kFloat32) return "its scale is not float32";
  const int64_t scales = static_count(init, kFloatScale);
  if (scales != 1 && scales != cols) return "its scale is neither one value nor one per column, as far as compile knows";
  if (present(init.node, kFloatBias)) {
    if (init.input_dtype(kFloatBias) != ir::DType::kFloat32) return "its bias is not float32";
    if (static_count(init, kFloatBias) != cols) return "its bias is not one value per column, as far as compile knows";
  }
  try {
    fused_activation(init.node);
  } catch (const ModelError& e) {
    return e.what();
  }
  return "";
}

// A MatMul whose B is not a constant matrix: packed on the device, each run.
bool runtime_b(const KernelInit& init) {
  if (is_conv(init.node) || is_qgemm(init.node)) return false;
  const ir::Tensor* w = init.constant(static_cast<size_t>(slots_of(init.node).b));
  return w == nullptr || w->rank() != 2;
}

// QGemm's own terms: A as it is (no transA), alpha 1, B a constant matrix, y_scale and
// y_zero_point together.
std::string qgemm_check(const KernelInit& init) {
  const ir::Node& n = init.node;
  if (n.attr_int("transA", 0) != 0) return "transA = 1 (the Vulkan kernel reads A as [M, K])";
  if (n.attr_float("alpha", 1.0f) != 1.0f) return "alpha is not 1";
  if (present(n, kQGemm.y_scale) != present(n, kQGemm.y_zp)) return "y_scale and y_zero_point are not given together";
  const ir::Tensor* b = init.constant(static_cast<size_t>(kQGemm.b));
  if (b == nullptr || b->rank() != 2) return "B is not a constant matrix";
  // C is [N], [1, N] or one value; [M, N] or [M, 1] would be per row.
  const ir::Tensor* c = init.constant(static_cast<size_t>(kQGemm.bias));
  if (c != nullptr && c->rank() > 1 && (c->rank() > 2 || c->dims()[0] != 1))
    return "C of shape " + dims_text(c->dims()) + " (one value, [N] or [1, N] only)";
  return "";
}

std::string gemm_check(const KernelInit& init) {
  const ir::Node& n = init.node;
  const Slots& s = slots_of(n);
  const bool conv = is_conv(n);
  if (is_qgemm(n))
    if (std::string why = qgemm_check(init); !why.empty()) return why;
  const auto a = static_cast<size_t>(s.a), b = static_cast<size_t>(s.b);
  if (!is_8bit(init.input_dtype(a))) return "input " + std::to_string(a) + " is not int8 or uint8";
  if (!is_8bit(init.input_dtype(b))) return "its weights (input " + std::to_string(b) + ") are not int8 or uint8";
  const ir::Tensor* w = init.constant(b);
  const bool at_run_time = runtime_b(init);
  int64_t cols = 0;
  if (at_run_time) {
    const ir::Shape& bs = init.input_types[b].shape();
    if (!bs.has_rank() || bs.rank() < 2) return "input " + std::to_string(b) + " has an unknown rank or is 1-D";
    const ir::Dim& n = bs[bs.rank() - 1];
    if (!n.is_known()) return "the columns of input " + std::to_string(b) + " are not known at compile";
    cols = n.value();
    const ir::Shape& x = init.input_types[a].shape();
    if (!x.has_rank() || x.rank() < 1) return "input 0 has an unknown rank";
  } else if (w == nullptr) {
    return "its weights (input " + std::to_string(b) + ") are not a constant";
  } else if (conv) {
    if (std::string why = require_rank(init, a, {3, 4}); !why.empty()) return why + " (the Vulkan kernel takes 1-D and 2-D)";
    if (w->rank() != init.input_types[a].shape().rank()) return "W's rank differs from X's";
    if (n.attr_int("group", 1) < 1) return "group must be at least 1";
  } else {
    const ir::Shape& x = init.input_types[a].shape();
    if (!x.has_rank() || x.rank() < 1) return "input 0 has an unknown rank";
  }
  if (!at_run_time) cols = columns_of(*w, columns_first(n));
  if (present(n, s.a_zp)) {
    if (!is_8bit(init.input_dtype(static_cast<size_t>(s.a_zp)))) return "the zero point of input 0 is not int8 or uint8";
    const ir::Shape& z = init.input_types[static_cast<size_t>(s.a_zp)].shape();
    const std::optional<std::vector<int64_t>> dims = z.static_sizes();
    // MatMulInteger's (and MatMulIntegerToFloat's) may be one per row of A, checked when run.
    const bool per_row = !conv && s.y_scale < 0 && z.has_rank() && z.rank() == 1;
    if (!per_row && (!dims || product(*dims, 0, dims->size()) != 1)) return "the zero point of input 0 is not one value";
  }
  if (at_run_time) {
    // Read on the device (DynamicQuantizeLinear may compute it): one value, or one per column.
    if (present(n, s.b_zp)) {
      if (!is_8bit(init.input_dtype(static_cast<size_t>(s.b_zp)))) return "the weights' zero point is not int8 or uint8";
      if (const int64_t count = static_count(init, static_cast<size_t>(s.b_zp)); count != 1 && count != cols)
        return "the weights' zero point is neither one value nor one per column of b, as far as compile knows";
    }
  } else {
    if (std::string why = zero_problem(init, static_cast<size_t>(s.b_zp), "the weights' zero point"); !why.empty()) return why;
    if (const ir::Tensor* z = init.constant(static_cast<size_t>(s.b_zp)); z != nullptr && z->num_elements() != 1 && z->num_elements() != cols)
      return "the weights' zero point is neither one value nor one per output column";
  }
  if (is_to_float(n)) return to_float_check(init, cols);
  if (s.y_scale < 0) {
    if (init.output_dtype(0) != ir::DType::kInt32) return "its output is not int32";
    return "";
  }
  const bool float_out = is_qgemm(n) && !present(n, s.y_scale);  // QGemm's float output
  if (float_out ? init.output_dtype(0) != ir::DType::kFloat32 : !is_8bit(init.output_dtype(0)))
    return float_out ? "its output is not float32" : "its output is not int8 or uint8";
  for (int slot : {s.a_scale, s.b_scale, s.y_scale}) {
    if (float_out && slot == s.y_scale) continue;
    const std::string name = "input " + std::to_string(slot) + " (a scale)";
    if (std::string why = scale_problem(init.constant(static_cast<size_t>(slot)), name.c_str()); !why.empty()) return why;
    const int64_t count = init.constant(static_cast<size_t>(slot))->num_elements();
    if (count != 1 && !(slot == s.b_scale && count == cols)) return name + " has " + std::to_string(count) + " elements";
  }
  if (std::string why = zero_problem(init, static_cast<size_t>(s.y_zp), "y_zero_point"); !why.empty()) return why;
  if (present(n, s.y_zp) && init.constant(static_cast<size_t>(s.y_zp))->num_elements() != 1) return "y_zero_point is not one value";
  if (present(n, s.bias)) {
    const ir::Tensor* bias = init.constant(static_cast<size_t>(s.bias));
    const bool one = is_qgemm(n) && bias != nullptr && bias->num_elements() == 1;  // QGemm's C may be one value
    if (bias == nullptr || bias->dtype() != ir::DType::kInt32 || (bias->num_elements() != cols && !one))
      return "its bias is not a constant int32 of one value per output column";
  }
  const std::string act = n.domain() == "ai.tether" ? n.attr_string("activation", "") : "";
  if (!act.empty() && act != "Relu" && !(act == "Clip" && n.attr("activation_params") != nullptr &&
                                         n.attr("activation_params")->as_floats().size() == 2))
    return "activation '" + act + "' is not Relu or Clip";
  return "";
}

// round_half_even(clamp(v, lo, hi)) + zero, as the CPU engine's requantization.
int32_t requantized(float v, float lo, float hi, int32_t zero) {
  v = v > lo ? v : lo;
  v = v < hi ? v : hi;
  return static_cast<int32_t>(std::nearbyint(v)) + zero;
}

struct GemmPush {
  uint32_t n, rows, N, K, K4;
  uint32_t C, H, W, OW, KH, KW;
  int32_t SH, SW, PH, PW, DH, DW;
  uint32_t G, M;
  uint32_t zrows;                // A's zero point one per row of A's M rows, or 1: one value
  uint32_t bd[3], as[3], bs[3];  // a MatMul with B's batch dims: the output's, and A's and B's strides
};
static_assert(sizeof(GemmPush) <= 128, "push constants past the 128 bytes every device takes");

struct PackPush {
  uint32_t n, N, K, K4;
};

// Byte offsets in a scratch range start where any device binds them.
constexpr int64_t kScratchAlign = 256;

// Column c of the packed weights: K bytes as int8 (uint8 less 128) in words of 4.
struct Packed {
  std::vector<int32_t> words;  // [columns][K4]
  std::vector<int32_t> cols;   // [columns][4]: sum of w, w's zero point, bias, scale bits
};

class QGemmKernel final : public GpuKernel {
 public:
  explicit QGemmKernel(const KernelInit& init) : node_(init.node), conv_(is_conv(init.node)), runtime_b_(runtime_b(init)) {
    const Slots& s = slots_of(init.node);
    a_signed_ = init.input_dtype(static_cast<size_t>(s.a)) == ir::DType::kInt8;
    has_az_ = present(init.node, s.a_zp);
    az_per_row_ = has_az_ && static_count(init, static_cast<size_t>(s.a_zp)) != 1;
    out_ = is_to_float(init.node)                                 ? Out::kFloat
           : s.y_scale < 0                                        ? Out::kInt32
           : is_qgemm(init.node) && !present(init.node, s.y_scale) ? Out::kFloatTable
                                                                  : Out::kBytes;
    if (runtime_b_) {
      const ir::Shape& b = init.input_types[static_cast<size_t>(s.b)].shape();
      cols_ = b[b.rank() - 1].value();
      batched_ = b.rank() > 2;
      b_signed_ = init.input_dtype(static_cast<size_t>(s.b)) == ir::DType::kInt8;
      has_bz_ = present(init.node, s.b_zp);
      bz_per_column_ = has_bz_ && static_count(init, static_cast<size_t>(s.b_zp)) != 1;
      column_table(init, s);
    } else {
      const ir::Tensor& w = *init.constant(static_cast<size_t>(s.b));
      cols_ = columns_of(w, columns_first(init.node));
      k_ = depth_of(w, columns_first(init.node));
      column_table(init, s);
      pack(init, s, w);
    }
    if (out_ == Out::kBytes || out_ == Out::kFloatTable) requantization(init, s);
    if (out_ == Out::kFloat) {
      act_ = fused_activation(init.node);
      scale_per_column_ = static_count(init, kFloatScale) != 1;
      has_bias_ = present(init.node, kFloatBias);
    }
  }

  bool reads_on_device(size_t i) const override {
    const Slots& s = slots_of(node_);
    if (out_ == Out::kFloat && (i == kFloatScale || i == kFloatBias)) return true;
    if (runtime_b_ && (static_cast<int>(i) == s.b || static_cast<int>(i) == s.b_zp)) return true;
    return static_cast<int>(i) == s.a || static_cast<int>(i) == s.a_zp;
  }

  void prepare(Gpu& gpu) override {
    if (!gpu.device.storage8()) return;  // refused when recorded
    const bool dot = gpu.device.integer_dot() && !env_is_one("TETHER_VULKAN_NO_INTEGER_DOT");
    std::vector<uint32_t> spec{kLocal};
    for (uint32_t v : act_.spec()) spec.push_back(v);
    for (uint32_t v : {conv_ ? 1u : 0u, a_signed_ ? 1u : 0u, has_az_ ? 1u : 0u, static_cast<uint32_t>(out_),
                       y_signed_ ? 1u : 0u, static_cast<uint32_t>(y_zero_), static_cast<uint32_t>(y_lo_),
                       static_cast<uint32_t>(y_hi_), scale_per_column_ ? 1u : 0u, has_bias_ ? 1u : 0u, a_words() ? 1u : 0u,
                       batched_ ? 1u : 0u})
      spec.push_back(v);
    // Float output takes the float16-storage build under precision fp16, like every float tensor.
    // Two row blockings: 4 rows per invocation, and 1 for a single row (chosen when recorded).
    for (uint32_t rows : {4u, 1u}) {
      std::vector<uint32_t> s = spec;
      s.push_back(rows);
      (rows == 4 ? pipeline_ : one_row_) = &gpu.pipeline(dot ? "qgemm_dot" : "qgemm", 10, sizeof(GemmPush), std::move(s),
                                                         floats_out() ? ir::DType::kFloat32 : ir::DType::kInt8);
    }
    if (runtime_b_)
      pack_pipeline_ = &gpu.pipeline("qgemm_pack", 5, sizeof(PackPush),
                                     {kLocal, b_signed_ ? 1u : 0u, has_bz_ ? 1u : 0u, bz_per_column_ ? 1u : 0u}, ir::DType::kInt8);
    else
      words_ = gpu.add_weight_view(packed_.words.data(), static_cast<int64_t>(packed_.words.size() * 4));
    table_ = gpu.add_weight_view(packed_.cols.data(), static_cast<int64_t>(packed_.cols.size() * 4));
  }

  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    require_storage8(rec, node_);
    const Slots& s = slots_of(node_);
    const GpuTensor& x = in[static_cast<size_t>(s.a)];
    const GpuTensor& y = out[0];
    check_u32(node_, x.numel(), "the input");
    check_u32(node_, y.numel(), "the output");
    GemmPush p{};
    p.K = static_cast<uint32_t>(k_);
    p.K4 = static_cast<uint32_t>((k_ + 3) / 4);
    p.G = 1;
    p.OW = 1;
    p.zrows = 1;
    int64_t batch = 1;
    if (conv_) {
      const ops::ConvGeometry g = ops::conv_geometry(node_, x.dims, w_dims_, y.dims, false);
      const bool two_d = x.dims.size() == 4;
      auto last2 = [two_d](const std::vector<int64_t>& v, int64_t fill) { return two_d ? v[v.size() - 2] : fill; };
      p.G = static_cast<uint32_t>(g.group);
      p.M = static_cast<uint32_t>(cols_);
      p.N = static_cast<uint32_t>(cols_ / g.group);
      p.C = static_cast<uint32_t>(x.dims[1]);
      p.H = static_cast<uint32_t>(last2(x.dims, 1));
      p.W = static_cast<uint32_t>(x.dims.back());
      p.OW = static_cast<uint32_t>(y.dims.back());
      p.rows = static_cast<uint32_t>(last2(y.dims, 1) * y.dims.back());
      set_window(p, g.kernel, g.strides, g.pad_begin, g.dilations);
      if (x.dims[1] != w_dims_[1] * g.group)
        throw ArgumentError(node_.describe() + ": input 0 has " + std::to_string(x.dims[1]) + " channels, the weights expect " +
                            std::to_string(w_dims_[1] * g.group));
      batch = x.dims[0] * g.group;
    } else {
      const int64_t k = runtime_b_ ? in[static_cast<size_t>(s.b)].dims.end()[-2] : k_;
      if (x.dims.empty() || x.dims.back() != k)
        throw ArgumentError(node_.describe() + ": input 0's last dim is " + std::to_string(x.dims.empty() ? 0 : x.dims.back()) +
                            ", the weights have " + std::to_string(k) + " rows");
      p.K = static_cast<uint32_t>(k);
      p.K4 = static_cast<uint32_t>((k + 3) / 4);
      p.N = static_cast<uint32_t>(cols_);
      p.M = static_cast<uint32_t>(x.dims.size() >= 2 ? x.dims.end()[-2] : 1);
      p.rows = static_cast<uint32_t>(k == 0 ? product(x.dims, 0, x.dims.size() - 1) : x.numel() / k);
      if (batched_) batch = matmul_batches(in[static_cast<size_t>(s.b)].dims, x.dims, p);
      if (has_az_) {
        const int64_t zeros = in[static_cast<size_t>(s.a_zp)].numel();
        if (zeros != 1 && (!az_per_row_ || zeros != p.M))
          throw ArgumentError(node_.describe() + ": the zero point of input 0 has " + std::to_string(zeros) + " elements, expected 1" +
                              (az_per_row_ ? " or " + std::to_string(p.M) + " (one per row of a)" : ""));
        p.zrows = static_cast<uint32_t>(zeros);
      }
    }
    // Invocations: 4 columns (CB) by 4 rows (RB) of one output matrix each, or 1 row of a single.
    const int64_t row_block = p.rows == 1 ? 1 : 4;
    const int64_t n = batch * ((p.N + 3) / 4) * ((p.rows + row_block - 1) / row_block);
    check_u32(node_, n, "the invocations");
    p.n = static_cast<uint32_t>(n);
    if (n == 0) return;
    const Range az = has_az_ ? in[static_cast<size_t>(s.a_zp)].range : rec.unused();
    Range words = runtime_b_ ? Range{} : rec.weight(words_), table = rec.weight(table_);
    if (runtime_b_) std::tie(words, table) = pack_b(rec, in, p);
    auto output_if = [&](Out kind) { return out_ == kind || (kind == Out::kFloat && floats_out()) ? y.range : rec.unused(); };
    Range scale = rec.unused(), bias = rec.unused();
    if (out_ == Out::kFloat) {
      scale = float_operand(in, kFloatScale, scale_per_column_, "scale").range;
      if (has_bias_) bias = float_operand(in, kFloatBias, true, "bias").range;
    }
    dispatch_1d(rec, row_block == 1 ? *one_row_ : *pipeline_,
                {x.range, words, table, az, output_if(Out::kBytes), output_if(Out::kInt32),
                 scale, bias, output_if(Out::kFloat), a_words() ? x.range : rec.unused()},
                &p, sizeof p, n);
  }

 private:
  // The bias of each column (col[2]); requantization() adds the scales.
  void column_table(const KernelInit& init, const Slots& s) {
    const ir::Tensor* bias = present(init.node, s.bias) ? init.constant(static_cast<size_t>(s.bias)) : nullptr;
    packed_.cols.assign(static_cast<size_t>(cols_ * 4), 0);
    for (int64_t c = 0; bias != nullptr && c < cols_; ++c)
      packed_.cols[static_cast<size_t>(c * 4 + 2)] = bias->data<int32_t>()[bias->num_elements() == 1 ? 0 : c];
  }

  // Constant weights: their words and each column's sum and zero point (col[0], col[1]).
  void pack(const KernelInit& init, const Slots& s, const ir::Tensor& w) {
    w_dims_ = w.dims();
    const bool w_signed = w.dtype() == ir::DType::kInt8;
    const auto* raw = static_cast<const uint8_t*>(w.raw_data());
    const std::vector<int32_t> zw = zero_point_values(init.constant(static_cast<size_t>(s.b_zp)));
    const bool first = columns_first(init.node);
    const int64_t k4 = (k_ + 3) / 4;
    packed_.words.assign(static_cast<size_t>(cols_ * k4), 0);
    for (int64_t c = 0; c < cols_; ++c) {
      int32_t sum = 0;
      for (int64_t k = 0; k < k_; ++k) {
        const uint8_t byte = raw[first ? c * k_ + k : k * cols_ + c];
        const auto v = static_cast<int8_t>(w_signed ? byte : byte ^ 0x80);  // uint8 less 128
        sum += v;
        auto& word = reinterpret_cast<uint32_t&>(packed_.words[static_cast<size_t>(c * k4 + k / 4)]);
        word |= static_cast<uint32_t>(static_cast<uint8_t>(v)) << (8 * (k % 4));
      }
      int32_t* col = &packed_.cols[static_cast<size_t>(c * 4)];
      col[0] = sum;
      col[1] = (zw.size() == 1 ? zw[0] : zw[static_cast<size_t>(c)]) - (w_signed ? 0 : 128);
    }
    // The activations' zero point shifts likewise on the device (qgemm.glsl).
  }

  // Output scales per column, float(a_scale * w_scale) / y_scale as the CPU engine computes
  // them (QGemm's float output: a_scale * w_scale), and the output's clamp with a fused
  // activation folded in.
  void requantization(const KernelInit& init, const Slots& s) {
    const float sa = *init.constant(static_cast<size_t>(s.a_scale))->data<float>();
    const ir::Tensor& sw = *init.constant(static_cast<size_t>(s.b_scale));
    const bool float_out = out_ == Out::kFloatTable;
    const float sy = float_out ? 1.0f : *init.constant(static_cast<size_t>(s.y_scale))->data<float>();
    for (int64_t c = 0; c < cols_; ++c) {
      const float product = sa * sw.data<float>()[sw.num_elements() == 1 ? 0 : c];
      const float v = float_out ? product : product / sy;
      std::memcpy(&packed_.cols[static_cast<size_t>(c * 4 + 3)], &v, 4);
    }
    if (float_out) return;
    y_signed_ = init.output_dtype(0) == ir::DType::kInt8;
    y_zero_ = zero_point_values(present(init.node, s.y_zp) ? init.constant(static_cast<size_t>(s.y_zp)) : nullptr)[0];
    y_lo_ = y_signed_ ? -128 : 0;
    y_hi_ = y_signed_ ? 127 : 255;
    const std::string act = init.node.domain() == "ai.tether" ? init.node.attr_string("activation", "") : "";
    if (act == "Relu") {
      y_lo_ = std::max(y_lo_, y_zero_);  // Q(Relu(v)) = max(Q(v), zy): rounding is monotone
    } else if (act == "Clip") {
      const std::vector<float>& bounds = init.node.attr("activation_params")->as_floats();
      auto bound = [&](float v) {
        return requantized(v / sy, static_cast<float>(y_lo_ - y_zero_), static_cast<float>(y_hi_ - y_zero_), y_zero_);
      };
      const int32_t lo = bound(bounds[0]), hi = bound(bounds[1]);
      y_lo_ = lo;
      y_hi_ = hi;
    }
  }

  // MatMulIntegerToFloat's scale or bias: one value per column, or one value (`per_column` false).
  const GpuTensor& float_operand(const std::vector<GpuTensor>& in, size_t i, bool per_column, const char* name) const {
    const int64_t want = per_column ? cols_ : 1;
    if (in[i].numel() != want)
      throw ArgumentError(node_.describe() + ": " + name + " has " + std::to_string(in[i].numel()) + " elements, expected " +
                          std::to_string(want) + (per_column ? " (one per column of b)" : "") + ", as at compile");
    return in[i];
  }

  // A MatMul with B's batch dims: the output's batch dims, merged, and A's and B's strides over
  // them (in matrices) into the push constants; each matrix's rows. Returns the matrices.
  int64_t matmul_batches(const std::vector<int64_t>& b_dims, const std::vector<int64_t>& a_dims, GemmPush& p) const {
    const std::vector<int64_t> a(a_dims.begin(), a_dims.size() >= 2 ? a_dims.end() - 2 : a_dims.begin());
    const std::vector<int64_t> b(b_dims.begin(), b_dims.end() - 2);
    std::vector<int64_t> dims(std::max(a.size(), b.size()));
    for (size_t d = 0; d < dims.size(); ++d) {
      const size_t from_end = dims.size() - d;
      const int64_t ad = from_end <= a.size() ? a[a.size() - from_end] : 1, bd = from_end <= b.size() ? b[b.size() - from_end] : 1;
      if (ad != bd && ad != 1 && bd != 1)
        throw ArgumentError(node_.describe() + ": the batch dims of input 0 " + dims_text(a_dims) + " and the weights " +
                            dims_text(b_dims) + " do not broadcast");
      dims[d] = ad == 1 ? bd : ad;
    }
    std::vector<int64_t> as = broadcast_strides(a, dims), bs = broadcast_strides(b, dims);
    collapse_dims(dims, {&as, &bs});
    if (dims.size() > 3)
      throw UnsupportedError(node_.describe() + ": " + std::to_string(dims.size()) +
                             " batch dims that do not merge; the Vulkan kernel takes 3");
    const size_t pad = 3 - dims.size();
    for (size_t d = 0; d < 3; ++d) {
      p.bd[d] = d < pad ? 1 : static_cast<uint32_t>(dims[d - pad]);
      p.as[d] = d < pad ? 0 : static_cast<uint32_t>(as[d - pad]);
      p.bs[d] = d < pad ? 0 : static_cast<uint32_t>(bs[d - pad]);
    }
    p.rows = p.M;
    return product(dims, 0, dims.size());
  }

  // B computed at run time: packed into the scratch by qgemm_pack.comp, as pack() packs
  // constant weights. Returns the words and the column table.
  std::pair<Range, Range> pack_b(Recorder& rec, const std::vector<GpuTensor>& in, const GemmPush& p) const {
    const Slots& s = slots_of(node_);
    const GpuTensor& b = in[static_cast<size_t>(s.b)];
    check_u32(node_, b.numel(), "the weights");
    if (has_bz_) {
      const int64_t count = in[static_cast<size_t>(s.b_zp)].numel(), want = bz_per_column_ ? cols_ : 1;
      if (count != want)
        throw ArgumentError(node_.describe() + ": the weights' zero point has " + std::to_string(count) + " elements, expected " +
                            std::to_string(want) + (bz_per_column_ ? " (one per column of b)" : "") + ", as at compile");
    }
    const int64_t columns = product(b.dims, 0, b.dims.size() - 2) * cols_;
    check_u32(node_, columns * p.K4, "the packed weights");
    const int64_t word_bytes = (std::max<int64_t>(columns * p.K4 * 4, 4) + kScratchAlign - 1) / kScratchAlign * kScratchAlign;
    const int64_t col_bytes = std::max<int64_t>(columns * 16, 16);
    const Range scratch = rec.scratch(word_bytes + col_bytes);
    const Range words{scratch.buffer, scratch.offset, word_bytes}, cols{scratch.buffer, scratch.offset + word_bytes, col_bytes};
    const PackPush pp{static_cast<uint32_t>(columns), p.N, p.K, p.K4};
    dispatch_1d(rec, *pack_pipeline_,
                {b.range, has_bz_ ? in[static_cast<size_t>(s.b_zp)].range : rec.unused(), rec.weight(table_), words, cols}, &pp,
                sizeof pp, columns);
    return {words, cols};
  }

  // A's rows start on whole words when K is a multiple of 4: the shader then loads a word where
  // it would load 4 bytes.
  bool a_words() const { return !conv_ && !runtime_b_ && k_ % 4 == 0; }

  // What the shader writes (its OUT_KIND): 8-bit requantized values, int32 sums, floats scaled
  // by the scale read on the device, or floats scaled by the column table's scale (QGemm).
  enum class Out : uint32_t { kBytes = 0, kInt32 = 1, kFloat = 2, kFloatTable = 3 };
  bool floats_out() const { return out_ == Out::kFloat || out_ == Out::kFloatTable; }

  const ir::Node& node_;
  Out out_ = Out::kBytes;
  Activation act_;
  bool scale_per_column_ = false, has_bias_ = false;
  bool conv_, runtime_b_, a_signed_ = true, has_az_ = false, y_signed_ = true;
  // A MatMul's B computed at run time (runtime_b_): with batch dims, its sign, its zero point.
  bool batched_ = false, b_signed_ = true, has_bz_ = false, bz_per_column_ = false;
  bool az_per_row_ = false;  // MatMulInteger's zero point of A per row
  int64_t cols_ = 0, k_ = 0;
  std::vector<int64_t> w_dims_;
  int32_t y_zero_ = 0, y_lo_ = -128, y_hi_ = 127;
  Packed packed_;
  int words_ = -1, table_ = -1;
  const Pipeline* pipeline_ = nullptr;  // 4 rows per invocation
  const Pipeline* one_row_ = nullptr;   // 1 row per invocation: a single row
  const Pipeline* pack_pipeline_ = nullptr;
};

}  // namespace

void register_quant_gemm(KernelRegistry& r) {
  auto make = [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<QGemmKernel>(i); };
  for (const char* op : {"QLinearMatMul", "QLinearConv", "MatMulInteger", "ConvInteger"}) r.add(op, make, gemm_check);
  r.add("QLinearMatMul", make, gemm_check, "ai.tether");
  r.add("QLinearConv", make, gemm_check, "ai.tether");
  r.add("MatMulIntegerToFloat", make, gemm_check, "ai.tether");
  r.add("ConvIntegerToFloat", make, gemm_check, "ai.tether");
  r.add("QGemm", make, gemm_check, "com.microsoft");
}

}  // namespace tether::engine::vulkan
