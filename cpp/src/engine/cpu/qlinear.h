// Shared pieces of the integer kernels (qlinear*.cc): where each op keeps its operands and
// parameters, reading and checking them, the requantizing epilogue they ask of the integer
// GEMM, and the channels-last depthwise convolution. Internal to the CPU backend.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/cpu/cpu.h"
#include "engine/cpu/qgemm.h"

namespace tether::engine::cpu::qlinear {

inline std::string type_text(DType t) { return std::string(ir::dtype_name(t)); }

inline bool is_8bit(DType t) { return t == DType::kInt8 || t == DType::kUInt8; }

inline std::string dims_text(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

// Where each input of the four ops sits.
struct Slots {
  int a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp, bias;
  const char* a_name;
  const char* b_name;
};

constexpr Slots kMatMulInteger{0, -1, 2, 1, -1, 3, -1, -1, -1, "a", "b"};
constexpr Slots kQLinearMatMul{0, 1, 2, 3, 4, 5, 6, 7, 8, "a", "b"};  // bias: ai.tether only
constexpr Slots kConvInteger{0, -1, 2, 1, -1, 3, -1, -1, -1, "x", "w"};
constexpr Slots kQLinearConv{0, 1, 2, 3, 4, 5, 6, 7, 8, "x", "w"};
// ai.tether MatMulIntegerToFloat(A, B, scale, a_zero_point, b_zero_point, bias): MatMulInteger,
// then float(sum) * scale + bias and an activation (see kFloatScale and kFloatBias).
constexpr Slots kMatMulIntegerToFloat{0, -1, 3, 1, -1, 4, -1, -1, -1, "a", "b"};
// ai.tether ConvIntegerToFloat(X, W, scale, x_zero_point, w_zero_point, bias): ConvInteger,
// then the same per output channel.
constexpr Slots kConvIntegerToFloat{0, -1, 3, 1, -1, 4, -1, -1, -1, "x", "w"};
constexpr size_t kFloatScale = 2, kFloatBias = 5;
// com.microsoft QGemm(A, a_scale, a_zero_point, B, b_scale, b_zero_point, C, y_scale,
// y_zero_point): QLinearMatMul with an int32 bias C and a float output when y_scale is absent.
constexpr Slots kQGemm{0, 1, 2, 3, 4, 5, 7, 8, 6, "a", "b"};

inline const Slots& slots_of(const ir::Node& n) {
  const std::string& op = n.op_type();
  return op == "MatMulInteger" ? kMatMulInteger
         : op == "MatMulIntegerToFloat" ? kMatMulIntegerToFloat
         : op == "ConvIntegerToFloat"   ? kConvIntegerToFloat
         : op == "QGemm" ? kQGemm
         : op == "QLinearMatMul" ? kQLinearMatMul
         : op == "ConvInteger"   ? kConvInteger
                                 : kQLinearConv;
}

inline bool has(const std::vector<View>& in, int slot) { return slot >= 0 && present(in, static_cast<size_t>(slot)); }

// The integer values of an 8-bit zero point (none: one zero).
inline std::vector<int32_t> zero_points(const View* v) {
  if (v == nullptr) return {0};
  std::vector<int32_t> z(static_cast<size_t>(v->numel()));
  for (size_t i = 0; i < z.size(); ++i)
    z[i] = v->dtype == DType::kInt8 ? v->as<int8_t>()[i] : static_cast<int32_t>(v->as<uint8_t>()[i]);
  return z;
}

// The parameters of one run, read and checked: zero points and, for the QLinear ops, the
// output scale per column and the output's zero point. Throws `Err` (ModelError at compile
// time, ArgumentError at run time) naming the node.
struct Params {
  std::vector<int32_t> a_zp, b_zp;
  std::vector<float> scale;  // QLinear: one per column or one
  int32_t y_zp = 0;
  float y_scale = 1.0f;
};

// A size not known yet (a parameter checked at compile time, before the shapes of a run).
constexpr int64_t kUnknown = -2;

template <typename Err>
void check_count(const std::string& node, const char* what, int64_t count, int64_t want, const char* per) {
  if (want == kUnknown) return;
  if (count != 1 && count != want)
    throw Err(node + ": " + what + " has " + std::to_string(count) + " elements, expected 1 or " + std::to_string(want) +
              " (one " + per + ")");
}

template <typename Err>
void check_scale(const std::string& node, const View& s, const char* name) {
  if (std::string why = bad_scale(s, name); !why.empty()) throw Err(node + ": " + why);
}

// Reads the parameters; `rows` and `cols` are the sizes a per-row a zero point and a
// per-column b scale / zero point must have (kUnknown: not known yet; rows -1: a's zero point
// is one value).
template <typename Err>
Params read_params(const std::string& node, const Slots& s, const std::vector<View>& in, int64_t rows, int64_t cols,
                   const char* col_word) {
  Params p;
  const View* a_zp = has(in, s.a_zp) ? &in[static_cast<size_t>(s.a_zp)] : nullptr;
  const View* b_zp = has(in, s.b_zp) ? &in[static_cast<size_t>(s.b_zp)] : nullptr;
  p.a_zp = zero_points(a_zp);
  p.b_zp = zero_points(b_zp);
  const std::string a_zp_name = std::string(s.a_name) + "_zero_point", b_zp_name = std::string(s.b_name) + "_zero_point";
  if (rows != -1) check_count<Err>(node, a_zp_name.c_str(), static_cast<int64_t>(p.a_zp.size()), rows, "per row of a");
  else if (p.a_zp.size() != 1)
    throw Err(node + ": " + a_zp_name + " has " + std::to_string(p.a_zp.size()) + " elements, expected 1");
  check_count<Err>(node, b_zp_name.c_str(), static_cast<int64_t>(p.b_zp.size()), cols, col_word);
  if (s.y_scale < 0) return p;
  const View& as = in[static_cast<size_t>(s.a_scale)];
  const View& bs = in[static_cast<size_t>(s.b_scale)];
  const View& ys = in[static_cast<size_t>(s.y_scale)];
  const std::string as_name = std::string(s.a_name) + "_scale", bs_name = std::string(s.b_name) + "_scale";
  check_scale<Err>(node, as, as_name.c_str());
  check_scale<Err>(node, bs, bs_name.c_str());
  check_scale<Err>(node, ys, "y_scale");
  if (as.numel() != 1) throw Err(node + ": " + as_name + " has " + std::to_string(as.numel()) + " elements, expected 1");
  if (ys.numel() != 1) throw Err(node + ": y_scale has " + std::to_string(ys.numel()) + " elements, expected 1");
  check_count<Err>(node, bs_name.c_str(), bs.numel(), cols, col_word);
  if (b_zp != nullptr && b_zp->numel() != 1 && b_zp->numel() != bs.numel())
    throw Err(node + ": " + b_zp_name + " has " + std::to_string(b_zp->numel()) + " elements and " + bs_name + " " +
              std::to_string(bs.numel()) + "; they must match");
  const View* y_zp = has(in, s.y_zp) ? &in[static_cast<size_t>(s.y_zp)] : nullptr;
  if (y_zp != nullptr && y_zp->numel() != 1)
    throw Err(node + ": y_zero_point has " + std::to_string(y_zp->numel()) + " elements, expected 1");
  p.y_zp = zero_points(y_zp)[0];
  const float a = scale_at(as, 0), y = scale_at(ys, 0);
  p.y_scale = y;
  p.scale.resize(static_cast<size_t>(bs.numel()));
  for (size_t j = 0; j < p.scale.size(); ++j) p.scale[j] = a * scale_at(bs, static_cast<int64_t>(j)) / y;
  return p;
}

// The views of an op's constant inputs (an empty view where an input is not constant or absent),
// for reading parameters at compile time.
inline std::vector<View> constant_views(const KernelInit& init, bool& all_params) {
  std::vector<View> v(init.node.inputs().size());
  const Slots& s = slots_of(init.node);
  all_params = true;
  for (int slot : {s.a_scale, s.a_zp, s.b_scale, s.b_zp, s.y_scale, s.y_zp}) {
    if (slot < 0 || init.node.input(static_cast<size_t>(slot)) == nullptr) continue;
    if (const ir::Tensor* t = init.constant(static_cast<size_t>(slot))) v[static_cast<size_t>(slot)] = view_of(*t);
    else all_params = false;
  }
  return v;
}

// The activation an ai.tether QLinearConv / QLinearMatMul applies before quantizing its output:
// none, Relu, or Clip(lo, hi). Throws ModelError naming the node for any other.
struct QActivation {
  enum class Kind { kNone, kRelu, kClip } kind = Kind::kNone;
  float lo = 0.0f, hi = 0.0f;

  static QActivation of(const ir::Node& n) {
    QActivation a;
    if (n.domain() != "ai.tether") return a;
    const std::string act = n.attr_string("activation", "");
    if (act.empty()) return a;
    if (act == "Relu") {
      a.kind = Kind::kRelu;
      return a;
    }
    const ir::Attribute* params = n.attr("activation_params");
    if (act != "Clip" || params == nullptr || params->as_floats().size() != 2)
      throw ModelError(n.describe() + ": activation '" + act +
                       "' is not one the integer kernels apply (Relu, or Clip with activation_params [min, max])");
    a.kind = Kind::kClip;
    a.lo = params->as_floats()[0];
    a.hi = params->as_floats()[1];
    return a;
  }
};

// The last step of every requantization: round_half_even(clamp(v, lo, hi)) + zero, with lo and
// hi the output range less the zero point (the default rounding mode rounds half to even).
[[gnu::always_inline]] inline int32_t requantized(float v, float lo, float hi, int32_t zero) {
  v = v > lo ? v : lo;
  v = v < hi ? v : hi;
  return static_cast<int32_t>(std::nearbyint(v)) + zero;
}

// x quantized with scale s and zero point zp into [lo, hi], as QuantizeLinear computes it.
inline int32_t quantize_bound(float x, float s, int32_t zp, int32_t lo, int32_t hi) {
  return requantized(x / s, static_cast<float>(lo - zp), static_cast<float>(hi - zp), zp);
}

// The epilogue of one product with these parameters.
inline QGemmOutput output_of(const Params& p, DType out_type, const int32_t* bias, const QActivation& act = {}) {
  QGemmOutput o;
  o.bias = bias;
  if (out_type == DType::kInt32) {
    o.kind = QGemmOutput::Kind::kInt32;
    return o;
  }
  o.kind = out_type == DType::kInt8 ? QGemmOutput::Kind::kInt8 : QGemmOutput::Kind::kUInt8;
  o.scale = p.scale.data();
  o.scale_per_column = p.scale.size() > 1;
  o.zero_point = p.y_zp;
  o.lo = out_type == DType::kInt8 ? -128 : 0;
  o.hi = out_type == DType::kInt8 ? 127 : 255;
  // Rounding is monotone, so Q(Relu(v)) = max(Q(v), zp) and Q(Clip(v, a, b)) = Q(v) clamped
  // to [Q(a), Q(b)].
  if (act.kind == QActivation::Kind::kRelu) {
    o.lo = std::max(o.lo, p.y_zp);
  } else if (act.kind == QActivation::Kind::kClip) {
    const int32_t lo = quantize_bound(act.lo, p.y_scale, p.y_zp, o.lo, o.hi);
    const int32_t hi = quantize_bound(act.hi, p.y_scale, p.y_zp, o.lo, o.hi);
    o.lo = lo;
    o.hi = hi;
  }
  return o;
}

// The float epilogue of MatMulIntegerToFloat and ConvIntegerToFloat, what Cast, Mul, Add and
// the activation compute after the integer product: float(sum) * scale (one value, or one per
// column: `per` names a column, as in "per column of b"), plus the float bias (one per column),
// then `act`. Throws ArgumentError naming `node` when a size differs from `columns`.
inline void set_float_output(const std::string& node, const std::vector<View>& in, int64_t columns, const char* per,
                             const Epilogue& act, QGemmOutput& o) {
  const View& scale = in[kFloatScale];
  auto want = [&] { return "[" + std::to_string(columns) + "] (one " + per + ")"; };
  if (scale.numel() != 1 && scale.numel() != columns)
    throw ArgumentError(node + ": scale has shape " + dims_text(scale.dims) + ", expected one value or " + want());
  o.kind = QGemmOutput::Kind::kFloat32;
  o.scale = scale.as<float>();
  o.scale_per_column = scale.numel() > 1;
  o.float_bias = nullptr;
  if (present(in, kFloatBias)) {
    if (in[kFloatBias].numel() != columns)
      throw ArgumentError(node + ": bias has shape " + dims_text(in[kFloatBias].dims) + ", expected " + want());
    o.float_bias = in[kFloatBias].as<float>();
  }
  o.act = act;
}

// ---- channels-last depthwise convolution (qlinear_depthwise.cc) ----------------------------------

// One output pixel of a channels-last depthwise convolution, for every channel c:
//   s = sum over the taps t of src[t][c] * w[t * channels + c] + corr[c]
//   y[c] = round_half_even(clamp(float(s) * scale[c], lo, hi)) + y_zero
// src[t] is the input pixel under tap t (a pixel of zero points outside the input: the filter
// sums in corr, -x_zero * sum(w) + bias, cancel it), so s is the sum of QLinearConv less its
// zero points, and y its requantization as QGemmOutput defines it. Per ISA, the sums stay in
// registers through the requantization; bytes widen straight to int32 lanes.
// The across geometry of a row of output pixels (depthwise_row_*).
struct DwRow {
  int64_t kh, kw, sw, dw, pw;
  int64_t ox0, ox1;  // the pixels whose windows lie inside the input across
  int64_t iw = 0;                // the input's width
  const void* zeros = nullptr;   // a pixel of zero points, read for columns outside the input
};

struct DwPixel {
  int64_t taps, channels;
  const int32_t* w;      // [taps][channels]
  const int32_t* corr;   // [channels]
  const float* scale;    // [channels]
  float lo, hi;
  int32_t y_zero;
  // A 3 x 3 filter as [window row i][pair, third][channels]: the pair (w[i][0] & 0xFFFF) |
  // (w[i][1] << 16), the third w[i][2] & 0xFFFF (int16 lanes for vpdpwssd); else nullptr.
  const int32_t* pairs3x3 = nullptr;
};

/// Output rows of a channels-last depthwise convolution: x [N, H, W, C] and y [N, OH, OW, C],
/// 8-bit. `zeros` is a pixel of zero points (C bytes), `zero_row` an input row of them; each
/// of the pool's threads gets `slot` bytes of ctx.scratch (pointers to the taps' pixels and to
/// the window's rows).
void depthwise_nhwc_rows(const RunContext& ctx, const View& x, View& y, const ConvGeometry& g, const DwPixel& pixel,
                         const std::byte* zeros, const std::byte* zero_row, int64_t slot);

/// MatMulInteger, QLinearMatMul, ai.tether MatMulIntegerToFloat and com.microsoft QGemm
/// (qlinear_matmul.cc).
std::unique_ptr<Kernel> make_integer_matmul(const KernelInit& init);

/// QLinearAdd (ai.tether, com.microsoft) and com.microsoft QLinearGlobalAveragePool
/// (qlinear_elementwise.cc).
void register_qlinear_elementwise(KernelRegistry& r);

}  // namespace tether::engine::cpu::qlinear
