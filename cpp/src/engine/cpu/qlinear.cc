// Integer matrix products: MatMulInteger and ConvInteger (int32 sums), QLinearMatMul and
// QLinearConv (requantized to int8 / uint8), on the integer GEMM (qgemm.h). Constant weights
// are packed once, with their zero points and column sums; the zero points of the activations
// are applied from row sums, so no operand is ever widened and shifted in memory.
//
// Requantization follows onnxruntime: the output scale of column j is
// float(a_scale * b_scale[j]) / y_scale in float32, y = round_half_even(clamp(float(sum) *
// scale, lo - y_zp, hi - y_zp)) + y_zp; the integer sums are exact.
#include <algorithm>
#include <immintrin.h>

#include <array>
#include <cmath>
#include <cstring>
#include <optional>
#include <type_traits>

#include "engine/cpu/cpu.h"
#include "engine/cpu/qgemm.h"
#include "util/cpu_features.h"

namespace tether::engine::cpu {

namespace {

std::string type_text(DType t) { return std::string(ir::dtype_name(t)); }

bool is_8bit(DType t) { return t == DType::kInt8 || t == DType::kUInt8; }

// ai.tether QLinearConv with channels_last = 1: X and Y are [N, H, W, C] (see passes/channels_last.cc).
bool channels_last(const ir::Node& n) { return n.domain() == "ai.tether" && n.attr_int("channels_last", 0) != 0; }

// [N, spatial..., C] dims as [N, C, spatial...].
std::vector<int64_t> channels_first(const std::vector<int64_t>& d) {
  std::vector<int64_t> r = {d[0], d.back()};
  r.insert(r.end(), d.begin() + 1, d.end() - 1);
  return r;
}

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

// memcpy for the short runs of an im2col gather: runs up to 32 bytes as two fixed-size,
// possibly overlapping copies (inlined moves, where a call to memcpy costs more than the copy).
inline void copy_bytes(std::byte* dst, const std::byte* src, int64_t n) {
  if (n > 32) {
    std::memcpy(dst, src, static_cast<size_t>(n));
  } else if (n >= 16) {
    std::memcpy(dst, src, 16);
    std::memcpy(dst + n - 16, src + n - 16, 16);
  } else if (n >= 8) {
    std::memcpy(dst, src, 8);
    std::memcpy(dst + n - 8, src + n - 8, 8);
  } else if (n >= 4) {
    std::memcpy(dst, src, 4);
    std::memcpy(dst + n - 4, src + n - 4, 4);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
  }
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
constexpr size_t kFloatScale = 2, kFloatBias = 5;
// com.microsoft QGemm(A, a_scale, a_zero_point, B, b_scale, b_zero_point, C, y_scale,
// y_zero_point): QLinearMatMul with an int32 bias C and a float output when y_scale is absent.
constexpr Slots kQGemm{0, 1, 2, 3, 4, 5, 7, 8, 6, "a", "b"};

const Slots& slots_of(const ir::Node& n) {
  const std::string& op = n.op_type();
  return op == "MatMulInteger" ? kMatMulInteger
         : op == "MatMulIntegerToFloat" ? kMatMulIntegerToFloat
         : op == "QGemm" ? kQGemm
         : op == "QLinearMatMul" ? kQLinearMatMul
         : op == "ConvInteger"   ? kConvInteger
                                 : kQLinearConv;
}

bool has(const std::vector<View>& in, int slot) { return slot >= 0 && present(in, static_cast<size_t>(slot)); }

// The integer values of an 8-bit zero point (none: one zero).
std::vector<int32_t> zero_points(const View* v) {
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
std::vector<View> constant_views(const KernelInit& init, bool& all_params) {
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

// x quantized with scale s and zero point zp into [lo, hi], as QuantizeLinear computes it.
int32_t quantize_bound(float x, float s, int32_t zp, int32_t lo, int32_t hi) {
  float v = x / s;
  v = std::max(v, static_cast<float>(lo - zp));
  v = std::min(v, static_cast<float>(hi - zp));
  return static_cast<int32_t>(std::nearbyint(v)) + zp;
}

// The epilogue of one product with these parameters.
QGemmOutput output_of(const Params& p, DType out_type, const int32_t* bias, const QActivation& act = {}) {
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

// ---- MatMulInteger and QLinearMatMul ------------------------------------------------------------

class IntegerMatMulKernel final : public Kernel {
 public:
  explicit IntegerMatMulKernel(const KernelInit& init)
      : name_(init.node.describe()),
        s_(slots_of(init.node)),
        a_type_(init.input_dtype(static_cast<size_t>(s_.a))),
        b_type_(init.input_dtype(static_cast<size_t>(s_.b))),
        out_type_(init.output_dtype(0)),
        threads_(init.threads),
        to_float_(init.node.op_type() == "MatMulIntegerToFloat"),
        qgemm_(init.node.op_type() == "QGemm"),
        qgemm_float_(qgemm_ && init.node.input(7) == nullptr),
        trans_b_(init.node.op_type() == "QGemm" && init.node.attr_int("transB", 0) != 0),
        act_(to_float_ ? QActivation{} : QActivation::of(init.node)),
        float_act_(to_float_ ? Epilogue::from_node(init.node) : Epilogue{}) {
    bool all = false;
    std::vector<View> c = constant_views(init, all);
    const ir::Tensor* b = init.constant(static_cast<size_t>(s_.b));
    // B is [K, N], or [N, K] under QGemm's transB.
    const int64_t n = b != nullptr && b->rank() >= 2 ? b->dims()[trans_b_ ? 0 : b->rank() - 1] : kUnknown;
    // Checked now when constant: a bad scale or zero point is the model's fault, found before any run.
    if (all) params<ModelError>(c, s_.y_scale < 0 ? kUnknown : -1, n);
    if (b != nullptr && b->rank() == 2 && (init.node.input(static_cast<size_t>(s_.b_zp)) == nullptr ||
                                           init.constant(static_cast<size_t>(s_.b_zp)) != nullptr)) {
      const View* zp = has(c, s_.b_zp) ? &c[static_cast<size_t>(s_.b_zp)] : nullptr;
      const std::vector<int32_t> z = zero_points(zp);
      const int64_t k = b->dims()[trans_b_ ? 1 : 0];
      check_count<ModelError>(name_, (std::string(s_.b_name) + "_zero_point").c_str(), static_cast<int64_t>(z.size()), n,
                              "per column of b");
      packed_ = QPackedB::pack(b->raw_data(), b_type_ == DType::kInt8, k, n, trans_b_ ? 1 : n, trans_b_ ? k : 1, z.data(),
                               z.size() > 1, qgemm_isa_for(k, a_type_ == DType::kUInt8));
      has_packed_ = true;
    }
  }

  // The parameters; QGemm without y_scale has a float output scaled by a_scale * b_scale[j].
  template <typename Err>
  Params params(const std::vector<View>& in, int64_t rows, int64_t cols) const {
    if (!qgemm_float_) return read_params<Err>(name_, s_, in, rows, cols, "per column of b");
    Slots zps = s_;
    zps.y_scale = -1;
    Params p = read_params<Err>(name_, zps, in, rows, cols, "per column of b");
    const View& as = in[static_cast<size_t>(s_.a_scale)];
    const View& bs = in[static_cast<size_t>(s_.b_scale)];
    check_scale<Err>(name_, as, "a_scale");
    check_scale<Err>(name_, bs, "b_scale");
    if (as.numel() != 1) throw Err(name_ + ": a_scale has " + std::to_string(as.numel()) + " elements, expected 1");
    check_count<Err>(name_, "b_scale", bs.numel(), cols, "per column of b");
    p.scale.resize(static_cast<size_t>(bs.numel()));
    for (size_t j = 0; j < p.scale.size(); ++j) p.scale[j] = scale_at(as, 0) * scale_at(bs, static_cast<int64_t>(j));
    return p;
  }

  bool packs_input(size_t i) const override { return has_packed_ && static_cast<int>(i) == s_.b; }

  int64_t scratch_bytes(const std::vector<View>& in, const std::vector<View>&) const override {
    const View& a = in[static_cast<size_t>(s_.a)];
    const View& b = in[static_cast<size_t>(s_.b)];
    int64_t k = b.rank() == 1 ? b.dims[0] : b.dims[b.rank() - 2], n = b.rank() == 1 ? 1 : b.dims.back();
    if (trans_b_) std::swap(k, n);
    const int64_t rows = a.rank() >= 2 ? a.numel() / std::max<int64_t>(k, 1) : 1;
    return qgemm_scratch_bytes(rows, n, k, threads_) + (has_packed_ ? 0 : QPackedB::bytes_needed(k, n) + 64);
  }

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    const View& av = in[static_cast<size_t>(s_.a)];
    const View& bv = in[static_cast<size_t>(s_.b)];
    std::vector<int64_t> ad = av.dims, bd = has_packed_ ? std::vector<int64_t>{packed_.k(), packed_.n()} : bv.dims;
    if (trans_b_ && !has_packed_) std::swap(bd[0], bd[1]);
    if (ad.size() == 1) ad.insert(ad.begin(), 1);
    if (bd.size() == 1) bd.push_back(1);
    const int64_t m = ad[ad.size() - 2], k = ad.back(), n = bd.back();
    TETHER_CHECK(bd[bd.size() - 2] == k, "MatMulInteger inner dims differ");
    // A per-row zero point of a has one value per row of a (ONNX: "per-row quantization").
    const Params p = params<ArgumentError>(in, s_.y_scale < 0 ? m : -1, n);
    const std::vector<int64_t> a_batch(ad.begin(), ad.end() - 2), b_batch(bd.begin(), bd.end() - 2);
    const std::vector<int64_t> batch = broadcast_dims({&a_batch, &b_batch});
    int64_t batches = 1;
    for (int64_t d : batch) batches *= d;
    const std::vector<int64_t> sa = broadcast_strides(a_batch, batch), sb = broadcast_strides(b_batch, batch);
    auto offset = [&](int64_t idx, const std::vector<int64_t>& st) {
      int64_t off = 0;
      for (size_t d = batch.size(); d-- > 0;) {
        off += (idx % batch[d]) * st[d];
        idx /= batch[d];
      }
      return off;
    };
    const size_t esize = elem_bytes(out_type_);
    const View* bias = has(in, s_.bias) ? &in[static_cast<size_t>(s_.bias)] : nullptr;
    const bool scalar_c = qgemm_;  // QGemm's C: one int32 per column, or one value
    if (bias != nullptr && bias->numel() != n && !(scalar_c && bias->numel() == 1))
      throw ArgumentError(name_ + ": the bias has shape " + dims_text(bias->dims) + ", expected [" + std::to_string(n) +
                          "] (one int32 per column of b)" + (scalar_c ? " or one value" : ""));
    QGemmOutput o = output_of(p, out_type_, bias != nullptr ? bias->as<int32_t>() : nullptr, act_);
    if (bias != nullptr) o.bias_per_column = bias->numel() == n;
    if (to_float_) to_float(in, n, o);
    if (qgemm_float_) {
      o.kind = QGemmOutput::Kind::kFloat32;
      o.scale = p.scale.data();
      o.scale_per_column = p.scale.size() > 1;
    }
    o.row_stride = n;
    o.col_stride = 1;
    std::byte* scratch = ctx.scratch;
    std::byte* pack_space = scratch + (has_packed_ ? 0 : qgemm_scratch_bytes(batches * m, n, k, threads_));
    pack_space = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(pack_space) + 63) / 64 * 64);
    std::vector<int32_t> a_zp = p.a_zp;
    const bool shared_b = std::all_of(b_batch.begin(), b_batch.end(), [](int64_t d) { return d == 1; });
    const bool a_dense = std::all_of(sa.begin(), sa.end(), [](int64_t d) { return d != 0; }) || batch.empty();
    const int64_t group = shared_b && a_dense ? batches : 1;  // batches folded into the rows of one product
    if (a_zp.size() > 1 && group > 1) {
      a_zp.resize(static_cast<size_t>(group * m));
      for (int64_t i = m; i < group * m; ++i) a_zp[static_cast<size_t>(i)] = a_zp[static_cast<size_t>(i % m)];
    }
    for (int64_t bi = 0; bi < batches; bi += group) {
      QPackedB packed = packed_;
      if (!has_packed_) {
        const auto* b = static_cast<const std::byte*>(bv.data) + offset(bi, sb) * k * n;
        packed = QPackedB::pack_into(pack_space, b, b_type_ == DType::kInt8, k, n, trans_b_ ? 1 : n, trans_b_ ? k : 1,
                                     p.b_zp.data(), p.b_zp.size() > 1);
      }
      QGemmA a;
      a.data = static_cast<const std::byte*>(av.data) + offset(bi, sa) * m * k;
      a.lda = k;
      a.is_signed = a_type_ == DType::kInt8;
      a.zero_points = a_zp.data();
      a.per_row = a_zp.size() > 1;
      o.c = static_cast<std::byte*>(out[0].data) + static_cast<int64_t>(esize) * bi * m * n;
      qgemm(ctx, group * m, a, packed, o, scratch);
    }
  }

 private:
  // MatMulIntegerToFloat's epilogue: float(sum) * scale (one value or one per column), plus the
  // float bias per column, then the activation: what Cast, Mul, Add and the activation compute.
  void to_float(const std::vector<View>& in, int64_t n, QGemmOutput& o) const {
    const View& scale = in[kFloatScale];
    if (scale.numel() != 1 && scale.numel() != n)
      throw ArgumentError(name_ + ": scale has shape " + dims_text(scale.dims) + ", expected one value or [" +
                          std::to_string(n) + "] (one per column of b)");
    o.kind = QGemmOutput::Kind::kFloat32;
    o.scale = scale.as<float>();
    o.scale_per_column = scale.numel() > 1;
    if (present(in, kFloatBias)) {
      if (in[kFloatBias].numel() != n)
        throw ArgumentError(name_ + ": bias has shape " + dims_text(in[kFloatBias].dims) + ", expected [" +
                            std::to_string(n) + "] (one per column of b)");
      o.float_bias = in[kFloatBias].as<float>();
    }
    o.act = float_act_;
  }

  std::string name_;
  Slots s_;
  DType a_type_, b_type_, out_type_;
  int threads_;
  bool to_float_;
  bool qgemm_;        // com.microsoft QGemm
  bool qgemm_float_;  // QGemm without y_scale: float output
  bool trans_b_;      // QGemm's transB: B is [N, K]
  QActivation act_;
  Epilogue float_act_;
  QPackedB packed_;
  bool has_packed_ = false;
};

// ---- ConvInteger and QLinearConv ----------------------------------------------------------------

// Writes `count` rows of one image-and-group's im2col matrix, starting at output position
// `o0`: row o holds the k = channels x kernel-size input values output position o reads, in
// the weight's order (channel, then kernel position), with `pad` where the window leaves x.
template <typename T>
void gather_rows(const T* x, const std::vector<int64_t>& xd, const std::vector<int64_t>& yd, const ConvGeometry& g,
                 int64_t channels, int64_t o0, int64_t count, T pad, T* dst) {
  const size_t sp = xd.size() - 2;
  int64_t in_size = 1, ksize = 1;
  for (size_t d = 0; d < sp; ++d) {
    in_size *= xd[d + 2];
    ksize *= g.kernel[d];
  }
  const int64_t k = channels * ksize;
  if (sp == 2) {
    const int64_t ih = xd[2], iw = xd[3], ow = yd[3], kh = g.kernel[0], kw = g.kernel[1];
    const int64_t sh = g.strides[0], sw = g.strides[1], dh = g.dilations[0], dw = g.dilations[1];
    const int64_t ph = g.pad_begin[0], pw = g.pad_begin[1];
    if (ksize == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0) {
      // 1x1, stride 1: row o is x[:, o], a transpose of [channels, count] in tiles.
      constexpr int64_t kTile = 16;
      for (int64_t c0 = 0; c0 < channels; c0 += kTile) {
        const int64_t c1 = std::min(channels, c0 + kTile);
        for (int64_t r = 0; r < count; ++r)
          for (int64_t c = c0; c < c1; ++c) dst[r * k + c] = x[c * in_size + o0 + r];
      }
      return;
    }
    int64_t oy = o0 / ow, ox = o0 % ow;
    for (int64_t r = 0; r < count; ++r) {
      T* row = dst + r * k;
      const int64_t y0 = oy * sh - ph, x0 = ox * sw - pw;
      for (int64_t c = 0; c < channels; ++c) {
        const T* plane = x + c * in_size;
        T* out = row + c * ksize;
        for (int64_t i = 0; i < kh; ++i) {
          const int64_t iy = y0 + i * dh;
          if (iy < 0 || iy >= ih) {
            for (int64_t j = 0; j < kw; ++j) out[i * kw + j] = pad;
            continue;
          }
          const T* src = plane + iy * iw;
          for (int64_t j = 0; j < kw; ++j) {
            const int64_t ix = x0 + j * dw;
            out[i * kw + j] = ix >= 0 && ix < iw ? src[ix] : pad;
          }
        }
      }
      if (++ox == ow) {
        ox = 0;
        ++oy;
      }
    }
    return;
  }
  std::vector<int64_t> start(sp), kpos(sp);
  for (int64_t r = 0; r < count; ++r) {
    int64_t o = o0 + r;
    for (size_t d = sp; d-- > 0;) {
      start[d] = (o % yd[d + 2]) * g.strides[d] - g.pad_begin[d];
      o /= yd[d + 2];
    }
    T* row = dst + r * k;
    for (int64_t kp = 0; kp < ksize; ++kp) {
      int64_t rest = kp, at = 0;
      bool inside = true;
      for (size_t d = sp; d-- > 0;) {
        kpos[d] = rest % g.kernel[d];
        rest /= g.kernel[d];
      }
      int64_t stride = 1;
      for (size_t d = sp; d-- > 0;) {
        const int64_t c = start[d] + kpos[d] * g.dilations[d];
        inside = inside && c >= 0 && c < xd[d + 2];
        at += c * stride;
        stride *= xd[d + 2];
      }
      for (int64_t c = 0; c < channels; ++c) row[c * ksize + kp] = inside ? x[c * in_size + at] : pad;
    }
  }
}

// ---- depthwise (one input and one output channel per group), 2-D ----------------------------------

// The padded input plane of one channel, as int16 values less the zero point (zeros in the
// padding), split into sh x sw phase planes: phase (fr, fc) holds padded rows fr, fr + sh, ...
// and columns fc, fc + sw, ..., each plane `pitch` columns wide. Tap (i, j) of output (r, c)
// is padded row r * sh + i * dh, column c * sw + j * dw: phase ((i * dh) % sh, (j * dw) % sw)
// at row r + (i * dh) / sh, column c + (j * dw) / sw. Over a plane, the outputs of a whole
// channel, computed `pitch` columns wide (the columns past ow are discarded), then read one
// contiguous run per tap.
struct PhasePlane {
  int64_t sh, sw, rows, pitch;  // phase planes: rows x pitch, then `tail` zeros
  int64_t tail, size;           // size: one phase plane's elements, tail included
};

PhasePlane phase_plane(int64_t oh, int64_t ow, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t dh, int64_t dw) {
  PhasePlane d;
  d.sh = sh;
  d.sw = sw;
  const int64_t rows = (oh - 1) * sh + (kh - 1) * dh + 1, cols = (ow - 1) * sw + (kw - 1) * dw + 1;
  d.rows = (rows + sh - 1) / sh;
  d.pitch = (cols + sw - 1) / sw;
  d.tail = (kw - 1) * dw / sw + 16;  // reads of the discarded columns of the last row
  d.size = d.rows * d.pitch + d.tail;
  return d;
}

template <typename T>
TETHER_MULTIVERSION void fill_phases(int16_t* __restrict pad, const T* __restrict x, const PhasePlane& d, int64_t ih,
                                     int64_t iw, int64_t ph, int64_t pw, int32_t zero) {
  const int64_t total = d.sh * d.sw * d.size, sh = d.sh, sw = d.sw, pitch = d.pitch, size = d.size;
  for (int64_t i = 0; i < total; ++i) pad[i] = 0;
  for (int64_t sr = 0; sr < ih; ++sr) {
    const int64_t r = sr + ph;  // padded row
    if (r < 0 || r >= d.rows * sh) continue;
    const T* __restrict src = x + sr * iw;
    int16_t* __restrict base = pad + (r % sh) * sw * size + (r / sh) * pitch;
    // Input column sc is padded column sc + pw: phase (sc + pw) % sw, at (sc + pw) / sw.
    for (int64_t fc = 0; fc < sw; ++fc) {
      int64_t sc = ((fc - pw) % sw + sw) % sw;  // the first input column of this phase
      int16_t* __restrict dst = base + fc * size;
      int64_t at = (sc + pw) / sw;
      for (; sc < iw && at < pitch; sc += sw, ++at)
        if (at >= 0) dst[at] = static_cast<int16_t>(static_cast<int32_t>(src[sc]) - zero);
    }
  }
}

// acc[r * pitch + c] = the window sums of one channel (see PhasePlane), for r < oh and every
// c < pitch (columns past ow are garbage the caller drops).
TETHER_MULTIVERSION void depthwise_plane_i16(int32_t* __restrict acc, const int16_t* __restrict pad, const PhasePlane& d,
                                            const int16_t* __restrict w, int64_t oh, int64_t kh, int64_t kw, int64_t dh,
                                            int64_t dw) {
  const int64_t n = oh * d.pitch, sh = d.sh, sw = d.sw, pitch = d.pitch, size = d.size;
  for (int64_t i = 0; i < n; ++i) acc[i] = 0;
  for (int64_t i = 0; i < kh; ++i) {
    for (int64_t j = 0; j < kw; ++j) {
      const int32_t wv = w[i * kw + j];
      const int64_t fr = (i * dh) % sh, fc = (j * dw) % sw;
      const int16_t* __restrict src = pad + (fr * sw + fc) * size + ((i * dh) / sh) * pitch + (j * dw) / sw;
      // Explicit 16-lane steps (the compiler's own choice for this loop is to jam two taps and
      // stay scalar).
      typedef int16_t H16 __attribute__((vector_size(32)));
      typedef int32_t I16 __attribute__((vector_size(64)));
      int64_t c = 0;
      for (; c + 16 <= n; c += 16) {
        H16 h;
        I16 a;
        std::memcpy(&h, src + c, sizeof h);
        std::memcpy(&a, acc + c, sizeof a);
        a += __builtin_convertvector(h, I16) * wv;
        std::memcpy(acc + c, &a, sizeof a);
      }
      for (; c < n; ++c) acc[c] += static_cast<int32_t>(src[c]) * wv;
    }
  }
}

// Requantizes (or stores) n sums of one output channel, as QGemmOutput defines it.
template <typename Y>
TETHER_MULTIVERSION void store_channel(const int32_t* __restrict acc, int64_t n, int32_t bias, float lo, float hi,
                                       int32_t zero, float scale, Y* __restrict y) {
  if constexpr (std::is_same_v<Y, int32_t>) {
    for (int64_t i = 0; i < n; ++i) y[i] = acc[i] + bias;
  } else {
    for (int64_t i = 0; i < n; ++i) {
      float v = static_cast<float>(acc[i] + bias) * scale;
      v = v > lo ? v : lo;
      v = v < hi ? v : hi;
      y[i] = static_cast<Y>(static_cast<int32_t>(std::nearbyint(v)) + zero);
    }
  }
}

class IntegerConvKernel final : public Kernel {
 public:
  explicit IntegerConvKernel(const KernelInit& init)
      : node_(init.node),
        name_(init.node.describe()),
        s_(slots_of(init.node)),
        x_type_(init.input_dtype(0)),
        w_type_(init.input_dtype(static_cast<size_t>(s_.b))),
        out_type_(init.output_dtype(0)),
        threads_(init.threads),
        act_(QActivation::of(init.node)),
        nhwc_(channels_last(init.node)) {
    bool all = false;
    std::vector<View> c = constant_views(init, all);
    const ir::Tensor* w = init.constant(static_cast<size_t>(s_.b));
    if (all && w != nullptr && w->rank() == 4 && node_.attr_int("group", 1) == w->dims()[0] && w->dims()[1] == 1) {
      // Depthwise: the filters less their zero points, as int16, for the direct kernel.
      const int64_t cout = w->dims()[0], taps = w->dims()[2] * w->dims()[3];
      const Params p = read_params<ModelError>(name_, s_, c, -1, cout, "per output channel");
      // Channels last: int32 [tap][channel], with each channel's sum over the taps.
      if (nhwc_) {
        dw_weights32_.resize(static_cast<size_t>(cout * taps));
        dw_sums_.assign(static_cast<size_t>(cout), 0);
      } else {
        dw_weights_.resize(static_cast<size_t>(cout * taps));
      }
      for (int64_t ch = 0; ch < cout; ++ch) {
        const int32_t z = p.b_zp[p.b_zp.size() > 1 ? static_cast<size_t>(ch) : 0];
        for (int64_t t = 0; t < taps; ++t) {
          const int64_t at = ch * taps + t;
          const int32_t v = (w_type_ == DType::kInt8 ? w->data<int8_t>()[at] : static_cast<int32_t>(w->data<uint8_t>()[at])) - z;
          if (nhwc_) {
            dw_weights32_[static_cast<size_t>(t * cout + ch)] = v;
            dw_sums_[static_cast<size_t>(ch)] += v;
          } else {
            dw_weights_[static_cast<size_t>(at)] = static_cast<int16_t>(v);
          }
        }
      }
    } else if (all && w != nullptr && w->rank() >= 3) {
      const int64_t cout = w->dims()[0], group = node_.attr_int("group", 1);
      const Params p = read_params<ModelError>(name_, s_, c, -1, cout, "per output channel");
      const int64_t cg = cout / group, k = w->num_elements() / cout;
      const std::vector<int32_t>& z = p.b_zp;
      // 2-D filters in (kernel position, channel) order: the activations are then gathered as
      // runs of channels from a channels-last copy of the input.
      channels_last_ = w->rank() == 4;
      const int64_t taps = channels_last_ ? w->dims()[2] * w->dims()[3] : 1, cin_g = k / taps;
      std::vector<std::byte> reordered(static_cast<size_t>(channels_last_ ? cg * k : 0));
      for (int64_t gi = 0; gi < group; ++gi) {
        const auto* src = static_cast<const std::byte*>(w->raw_data()) + gi * cg * k;
        if (channels_last_) {
          for (int64_t j = 0; j < cg; ++j)
            for (int64_t c = 0; c < cin_g; ++c)
              for (int64_t t = 0; t < taps; ++t) reordered[static_cast<size_t>(j * k + t * cin_g + c)] = src[j * k + c * taps + t];
          src = reordered.data();
        }
        const int32_t* zg = z.size() > 1 ? z.data() + gi * cg : z.data();
        // A is read in place by a 1x1 convolution of stride 1 without padding (channels last).
        const bool unit = channels_last_ && taps == 1 && node_.attr_ints("strides", {1, 1}) == std::vector<int64_t>{1, 1} &&
                          node_.attr_ints("pads", {0, 0, 0, 0}) == std::vector<int64_t>{0, 0, 0, 0};
        packed_.push_back(QPackedB::pack(src, w_type_ == DType::kInt8, k, cg, 1, k, zg, z.size() > 1,
                                         qgemm_isa_for(k, unit && x_type_ == DType::kUInt8)));
      }
    }
  }

  bool packs_input(size_t i) const override {
    return (!packed_.empty() || is_depthwise()) && static_cast<int>(i) == s_.b;
  }

  int64_t scratch_bytes(const std::vector<View>& in, const std::vector<View>& out) const override {
    const View& w = in[static_cast<size_t>(s_.b)];
    const View& y = out[0];
    if (nhwc_) {
      const int64_t c = y.dims.back(), taps = w.numel() / (w.dims[0] * w.dims[1]);
      if (is_depthwise()) return dw_shared_bytes(c, in[0].dims[2]) + threads_ * dw_nhwc_slot_bytes(taps, w.dims[2]);
      const ConvGeometry g = conv_geometry(node_, channels_first(in[0].dims), w.dims, channels_first(y.dims), false);
      const int64_t positions = unit_window(g) ? y.numel() / c : y.dims[1] * y.dims[2];
      return qgemm_scratch_bytes(positions, c, w.numel() / c, threads_);
    }
    if (!dw_weights_.empty()) return threads_ * dw_slot_bytes(in[0], y, w);
    const int64_t group = node_.attr_int("group", 1), cg = y.dims[1] / group;
    int64_t positions = 1;
    for (size_t d = 2; d < y.rank(); ++d) positions *= y.dims[d];
    int64_t k = 1;
    for (size_t d = 1; d < w.rank(); ++d) k *= w.dims[d];
    const int64_t nhwc = channels_last_ ? (in[0].numel() / in[0].dims[0] / group + 64 +
                                           positions * cg * static_cast<int64_t>(elem_bytes(out_type_)) + 64)
                                        : 0;
    return qgemm_scratch_bytes(positions, cg, k, threads_) + (packed_.empty() ? QPackedB::bytes_needed(k, cg) + 64 : 0) +
           nhwc;
  }

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    const View& x = in[0];
    const View& w = in[static_cast<size_t>(s_.b)];
    View& y = out[0];
    const ConvGeometry g = nhwc_ ? conv_geometry(node_, channels_first(x.dims), w.dims, channels_first(y.dims), false)
                                 : conv_geometry(node_, x.dims, w.dims, y.dims, false);
    const int64_t cout = nhwc_ ? y.dims.back() : y.dims[1];
    const Params p = read_params<ArgumentError>(name_, s_, in, -1, cout, "per output channel");
    const View* bias = has(in, s_.bias) ? &in[static_cast<size_t>(s_.bias)] : nullptr;
    if (bias != nullptr && bias->numel() != cout)
      throw ArgumentError(name_ + ": B has shape " + dims_text(bias->dims) + ", expected [" + std::to_string(cout) +
                          "] (one int32 per output channel)");
    if (nhwc_) {
      if (is_depthwise()) depthwise_nhwc(ctx, x, y, g, p, bias);
      else run_nhwc(ctx, x, y, g, p, bias);
      return;
    }
    const int64_t cg = cout / g.group, cin_g = x.dims[1] / g.group;
    int64_t positions = 1, in_size = 1, ksize = 1;
    for (size_t d = 2; d < y.rank(); ++d) {
      positions *= y.dims[d];
      in_size *= x.dims[d];
      ksize *= g.kernel[d - 2];
    }
    const int64_t k = cin_g * ksize;
    if (!dw_weights_.empty()) {
      depthwise(ctx, x, w, y, g, p, bias);
      return;
    }
    const size_t esize = elem_bytes(out_type_);
    std::byte* scratch = ctx.scratch;
    std::byte* pack_space = scratch + qgemm_scratch_bytes(positions, cg, k, threads_);
    pack_space = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(pack_space) + 63) / 64 * 64);
    std::byte* nhwc = pack_space + (packed_.empty() ? QPackedB::bytes_needed(k, cg) : 0);
    nhwc = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(nhwc) + 63) / 64 * 64);
    std::byte* out_space = nhwc + (channels_last_ ? in_size * cin_g : 0);
    out_space = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(out_space) + 63) / 64 * 64);
    const bool per_channel = p.b_zp.size() > 1;
    const int32_t a_zp = p.a_zp[0];
    for (int64_t img = 0; img < x.dims[0]; ++img) {
      for (int64_t gi = 0; gi < g.group; ++gi) {
        QPackedB packed;
        if (!packed_.empty()) {
          packed = packed_[static_cast<size_t>(gi)];
        } else {
          const auto* src = static_cast<const std::byte*>(w.data) + gi * cg * k;
          const int32_t* zg = per_channel ? p.b_zp.data() + gi * cg : p.b_zp.data();
          packed = QPackedB::pack_into(pack_space, src, w_type_ == DType::kInt8, k, cg, 1, k, zg, per_channel);
        }
        QGemmA a;
        a.is_signed = x_type_ == DType::kInt8;
        a.zero_points = &a_zp;
        const auto* xg = static_cast<const std::byte*>(x.data) + (img * x.dims[1] + gi * cin_g) * in_size;
        if (channels_last_) {
          channels_last_rows(ctx, xg, x.dims, y.dims, g, cin_g, static_cast<std::byte>(a_zp), nhwc, a);
        } else {
          a.rows = [&, xg](const RunContext&, int64_t o0, int64_t count, void* dst) {
          if (a.is_signed)
            gather_rows(reinterpret_cast<const int8_t*>(xg), x.dims, y.dims, g, cin_g, o0, count,
                        static_cast<int8_t>(a_zp), static_cast<int8_t*>(dst));
          else
            gather_rows(reinterpret_cast<const uint8_t*>(xg), x.dims, y.dims, g, cin_g, o0, count,
                        static_cast<uint8_t>(a_zp), static_cast<uint8_t*>(dst));
          };
        }
        QGemmOutput o = output_of(p, out_type_, bias != nullptr ? bias->as<int32_t>() + gi * cg : nullptr, act_);
        if (o.scale_per_column) o.scale += gi * cg;
        std::byte* yg = static_cast<std::byte*>(y.data) + static_cast<int64_t>(esize) * (img * cout + gi * cg) * positions;
        if (channels_last_) {
          // Rows of C (positions) stored whole into scratch, then transposed to [channels, positions]:
          // a store with a column stride would write one byte per cache line.
          o.row_stride = cg;
          o.col_stride = 1;
          o.c = out_space;
          qgemm(ctx, positions, a, packed, o, scratch);
          transpose_out(ctx, out_space, yg, positions, cg, esize);
        } else {
          o.row_stride = 1;
          o.col_stride = positions;
          o.c = yg;
          qgemm(ctx, positions, a, packed, o, scratch);
        }
      }
    }
  }

 private:
  const ir::Node& node_;
  std::string name_;
  Slots s_;
  // One thread's scratch for the depthwise kernel: the padded input plane a channel's windows
  // read (int16, the input less its zero point) and the channel's sums (int32).
  struct DwPlane {
    PhasePlane phase;
    int64_t plane_bytes, bytes;
  };
  static int64_t round64(int64_t b) { return (b + 63) / 64 * 64; }
  // Channels-last depthwise scratch shared by the threads: a pixel of zero points, then the
  // int32 corrections and float scales of every channel.
  static int64_t dw_shared_bytes(int64_t c, int64_t iw = 0) { return round64(c) + 2 * round64(4 * c) + round64(iw * c); }
  // One thread's: the taps' input pixels, then the window's input rows.
  static int64_t dw_nhwc_slot_bytes(int64_t taps, int64_t kh) { return round64((taps + kh) * 8); }
  static DwPlane dw_plane(const View& y, const ConvGeometry& g) {
    DwPlane d;
    d.phase = phase_plane(y.dims[2], y.dims[3], g.kernel[0], g.kernel[1], g.strides[0], g.strides[1], g.dilations[0],
                          g.dilations[1]);
    d.plane_bytes = round64(d.phase.sh * d.phase.sw * d.phase.size * static_cast<int64_t>(sizeof(int16_t)));
    d.bytes = d.plane_bytes + round64(y.dims[2] * d.phase.pitch * static_cast<int64_t>(sizeof(int32_t)));
    return d;
  }
  int64_t dw_slot_bytes(const View& x, const View& y, const View& w) const {
    return dw_plane(y, conv_geometry(node_, x.dims, w.dims, y.dims, false)).bytes;
  }

  void depthwise(const RunContext& ctx, const View& x, const View& w, View& y, const ConvGeometry& g, const Params& p,
                 const View* bias) const;
  // Channels last: the GEMM over images [h, w, c] read in place (1x1, stride 1: every image's
  // positions at once) and rows of C stored as they are; the depthwise kernel over pixels.
  void run_nhwc(const RunContext& ctx, const View& x, View& y, const ConvGeometry& g, const Params& p,
                const View* bias) const;
  void depthwise_nhwc(const RunContext& ctx, const View& x, View& y, const ConvGeometry& g, const Params& p,
                      const View* bias) const;

  // dst[c * rows + r] = src[r * cols + c] for elements of `esize` bytes (1 or 4), in bands of rows.
  static void transpose_out(const RunContext& ctx, const std::byte* src, std::byte* dst, int64_t rows, int64_t cols,
                            size_t esize) {
    constexpr int64_t kBand = 64;
    parallel(ctx, (rows + kBand - 1) / kBand, 1, [&](int64_t t0, int64_t t1) {
      const int64_t r0 = t0 * kBand, r1 = std::min(rows, t1 * kBand);
      transpose_2d(src + r0 * cols * static_cast<int64_t>(esize), cols, dst + r0 * static_cast<int64_t>(esize), rows,
                   r1 - r0, cols, esize);
    });
  }

  // Copies one image-and-group's input [channels, h, w] channels-last into `nhwc`, then points
  // `a` at it: directly for a 1x1 convolution of stride 1 without padding (row o of A is
  // position o), else as rows gathered from it, each kernel position a run of `channels`
  // bytes (or `pad`, the input's zero point, outside the input).
  static void channels_last_rows(const RunContext& ctx, const std::byte* x, const std::vector<int64_t>& xd,
                                 const std::vector<int64_t>& yd, const ConvGeometry& g, int64_t channels, std::byte pad,
                                 std::byte* nhwc, QGemmA& a) {
    const int64_t ih = xd[2], iw = xd[3], hw = ih * iw;
    constexpr int64_t kBand = 64;
    parallel(ctx, (hw + kBand - 1) / kBand, 1, [&](int64_t t0, int64_t t1) {
      const int64_t p0 = t0 * kBand, p1 = std::min(hw, t1 * kBand);
      // x is [channels, hw]: positions [p0, p1) of every channel become rows of nhwc.
      transpose_2d(x + p0, hw, nhwc + p0 * channels, channels, channels, p1 - p0, 1);
    });
    point_at_nhwc(nhwc, ih, iw, yd[3], g, channels, pad, a);
  }

  static bool unit_window(const ConvGeometry& g) {
    return g.kernel[0] == 1 && g.kernel[1] == 1 && g.strides[0] == 1 && g.strides[1] == 1 && g.pad_begin[0] == 0 &&
           g.pad_begin[1] == 0;
  }

  // Points `a` at one channels-last image `src` ([ih, iw, channels]): directly for a 1x1
  // window of stride 1 without padding (row o of A is position o), else as rows gathered from
  // it, each kernel position a run of `channels` bytes (or `pad`, the input's zero point,
  // outside the input).
  static void point_at_nhwc(const std::byte* src, int64_t ih, int64_t iw, int64_t ow, const ConvGeometry& g,
                            int64_t channels, std::byte pad, QGemmA& a) {
    if (unit_window(g)) {
      a.data = src;
      a.lda = channels;
      return;
    }
    const int64_t kh = g.kernel[0], kw = g.kernel[1];
    const int64_t sh = g.strides[0], sw = g.strides[1], dh = g.dilations[0], dw = g.dilations[1];
    const int64_t ph = g.pad_begin[0], pw = g.pad_begin[1];
    a.rows = [=](const RunContext&, int64_t o0, int64_t count, void* out) {
      auto* dst = static_cast<std::byte*>(out);
      int64_t oy = o0 / ow, ox = o0 % ow;
      const int64_t run = kw * channels;  // one window row, when dw == 1 and it lies inside
      for (int64_t r = 0; r < count; ++r) {
        const int64_t y0 = oy * sh - ph, x0 = ox * sw - pw;
        const bool row_inside = dw == 1 && x0 >= 0 && x0 + kw <= iw;
        for (int64_t i = 0; i < kh; ++i) {
          const int64_t iy = y0 + i * dh;
          if (row_inside && iy >= 0 && iy < ih) {
            copy_bytes(dst, src + (iy * iw + x0) * channels, run);
            dst += run;
            continue;
          }
          for (int64_t j = 0; j < kw; ++j, dst += channels) {
            const int64_t ix = x0 + j * dw;
            if (iy >= 0 && iy < ih && ix >= 0 && ix < iw) copy_bytes(dst, src + (iy * iw + ix) * channels, channels);
            else std::memset(dst, static_cast<int>(pad), static_cast<size_t>(channels));
          }
        }
        if (++ox == ow) {
          ox = 0;
          ++oy;
        }
      }
    };
  }

  DType x_type_, w_type_, out_type_;
  int threads_;
  QActivation act_;
  bool nhwc_;                        // channels_last: X and Y are [N, spatial..., C]
  std::vector<int16_t> dw_weights_;    // depthwise: cout x kh x kw filters less their zero points
  std::vector<int32_t> dw_weights32_;  // the same, channels last: kh x kw x cout
  std::vector<int32_t> dw_sums_;       // channels last, depthwise: each filter's sum
  bool is_depthwise() const { return !dw_weights_.empty() || !dw_weights32_.empty(); }
  bool channels_last_ = false;       // 2-D: packed filters in (kernel position, channel) order
  std::vector<QPackedB> packed_;  // one per group, when the weights and their zero points are constant
};

void IntegerConvKernel::depthwise(const RunContext& ctx, const View& x, const View& w, View& y, const ConvGeometry& g,
                                  const Params& p, const View* bias) const {
  const DwPlane d = dw_plane(y, g);
  const int64_t channels = y.dims[1], ih = x.dims[2], iw = x.dims[3], oh = y.dims[2], ow = y.dims[3];
  const int64_t kh = g.kernel[0], kw = g.kernel[1], taps = kh * kw;
  const int32_t xz = p.a_zp[0];
  const QGemmOutput o = output_of(p, out_type_, nullptr, act_);
  const float lo = static_cast<float>(o.lo - o.zero_point), hi = static_cast<float>(o.hi - o.zero_point);
  auto plane = [&](int thread, int64_t q0, int64_t q1) {
    std::byte* slot = ctx.scratch + thread * d.bytes;
    auto* pad = reinterpret_cast<int16_t*>(slot);
    auto* acc = reinterpret_cast<int32_t*>(slot + d.plane_bytes);
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t ch = q % channels;
      if (x_type_ == DType::kInt8)
        fill_phases(pad, x.as<int8_t>() + q * ih * iw, d.phase, ih, iw, g.pad_begin[0], g.pad_begin[1], xz);
      else
        fill_phases(pad, x.as<uint8_t>() + q * ih * iw, d.phase, ih, iw, g.pad_begin[0], g.pad_begin[1], xz);
      depthwise_plane_i16(acc, pad, d.phase, dw_weights_.data() + ch * taps, oh, kh, kw, g.dilations[0],
                          g.dilations[1]);
      const int32_t b = bias != nullptr ? bias->as<int32_t>()[ch] : 0;
      const float scale = o.scale != nullptr ? o.scale[o.scale_per_column ? ch : 0] : 0.0f;
      const int64_t pitch = d.phase.pitch;
      for (int64_t r = 0; r < oh; ++r) {
        const int64_t at = q * oh * ow + r * ow;
        switch (out_type_) {
          case DType::kInt32: store_channel(acc + r * pitch, ow, b, lo, hi, o.zero_point, scale, y.as<int32_t>() + at); break;
          case DType::kInt8: store_channel(acc + r * pitch, ow, b, lo, hi, o.zero_point, scale, y.as<int8_t>() + at); break;
          default: store_channel(acc + r * pitch, ow, b, lo, hi, o.zero_point, scale, y.as<uint8_t>() + at); break;
        }
      }
    }
  };
  const int64_t planes = x.dims[0] * channels;
  if (ctx.pool == nullptr) plane(0, 0, planes);
  else ctx.pool->parallel_for_indexed(planes, 1, plane);
}

void IntegerConvKernel::run_nhwc(const RunContext& ctx, const View& x, View& y, const ConvGeometry& g, const Params& p,
                                 const View* bias) const {
  const int64_t n = x.dims[0], ih = x.dims[1], iw = x.dims[2], cin = x.dims[3];
  const int64_t oh = y.dims[1], ow = y.dims[2], cout = y.dims[3];
  const size_t esize = elem_bytes(out_type_);
  const int32_t a_zp = p.a_zp[0];
  QGemmOutput o = output_of(p, out_type_, bias != nullptr ? bias->as<int32_t>() : nullptr, act_);
  o.row_stride = cout;
  o.col_stride = 1;
  QGemmA a;
  a.is_signed = x_type_ == DType::kInt8;
  a.zero_points = &a_zp;
  if (unit_window(g)) {
    a.data = x.data;
    a.lda = cin;
    o.c = y.data;
    qgemm(ctx, n * oh * ow, a, packed_[0], o, ctx.scratch);
    return;
  }
  for (int64_t img = 0; img < n; ++img) {
    const std::byte* xi = static_cast<const std::byte*>(x.data) + img * ih * iw * cin;
    point_at_nhwc(xi, ih, iw, ow, g, cin, static_cast<std::byte>(a_zp), a);
    o.c = static_cast<std::byte*>(y.data) + static_cast<int64_t>(esize) * img * oh * ow * cout;
    qgemm(ctx, oh * ow, a, packed_[0], o, ctx.scratch);
  }
}

namespace {

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
};

struct DwPixel {
  int64_t taps, channels;
  const int32_t* w;      // [taps][channels]
  const int32_t* corr;   // [channels]
  const float* scale;    // [channels]
  float lo, hi;
  int32_t y_zero;
};

template <typename T, typename Y>
void depthwise_pixel_generic(const DwPixel& p, const T* const* __restrict src, Y* __restrict y, int64_t c = 0) {
  for (; c < p.channels; ++c) {
    int32_t s = p.corr[c];
    for (int64_t t = 0; t < p.taps; ++t) s += static_cast<int32_t>(src[t][c]) * p.w[t * p.channels + c];
    float v = static_cast<float>(s) * p.scale[c];
    v = v > p.lo ? v : p.lo;
    v = v < p.hi ? v : p.hi;
    y[c] = static_cast<Y>(static_cast<int32_t>(std::nearbyint(v)) + p.y_zero);
  }
}

template <typename T, typename Y>
__attribute__((target("avx2"))) void depthwise_pixel_avx2(const DwPixel& p, const T* const* __restrict src,
                                                           Y* __restrict y) {
  const __m256 lo = _mm256_set1_ps(p.lo), hi = _mm256_set1_ps(p.hi);
  const __m256i zero = _mm256_set1_epi32(p.y_zero);
  int64_t c = 0;
  for (; c + 8 <= p.channels; c += 8) {
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.corr + c));
    for (int64_t t = 0; t < p.taps; ++t) {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src[t] + c));
      const __m256i x = std::is_signed_v<T> ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
      a = _mm256_add_epi32(a, _mm256_mullo_epi32(x, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.w + t * p.channels + c))));
    }
    __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(a), _mm256_loadu_ps(p.scale + c));
    v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
    const __m256i q = _mm256_add_epi32(_mm256_cvtps_epi32(v), zero);  // MXCSR: round half to even
    // Eight int32 in the output's range to eight bytes.
    const __m128i w16 = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    const __m128i w8 = std::is_signed_v<Y> ? _mm_packs_epi16(w16, w16) : _mm_packus_epi16(w16, w16);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(y + c), w8);
  }
  depthwise_pixel_generic(p, src, y, c);
}

template <typename T, typename Y>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void depthwise_pixel_avx512(const DwPixel& p, const T* const* __restrict src,
                                                                         Y* __restrict y) {
  const __m512 lo = _mm512_set1_ps(p.lo), hi = _mm512_set1_ps(p.hi);
  const __m512i zero = _mm512_set1_epi32(p.y_zero);
  for (int64_t c = 0; c < p.channels; c += 16) {
    const __mmask16 m = p.channels - c >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (p.channels - c)) - 1);
    __m512i a = _mm512_maskz_loadu_epi32(m, p.corr + c);
    for (int64_t t = 0; t < p.taps; ++t) {
      const __m128i b = _mm_maskz_loadu_epi8(m, src[t] + c);
      const __m512i x = std::is_signed_v<T> ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b);
      a = _mm512_add_epi32(a, _mm512_mullo_epi32(x, _mm512_maskz_loadu_epi32(m, p.w + t * p.channels + c)));
    }
    __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(a), _mm512_maskz_loadu_ps(m, p.scale + c));
    v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
    const __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(v), zero);  // MXCSR: round half to even
    if constexpr (std::is_signed_v<Y>) _mm512_mask_cvtsepi32_storeu_epi8(y + c, m, q);
    else _mm512_mask_cvtusepi32_storeu_epi8(y + c, m, q);
  }
}

// Output pixels [ox0, ox1) of one output row whose windows lie inside the input across
// (above and below, rows[i] is input row oy * sh - ph + i * dh, or a row of zero points):
// the pixel loop runs inside each block of 16 channels, reading each tap at a fixed offset.
// Any filter size: the pixel loop runs inside each block of 16 channels, reading each tap at
// a fixed offset from the pixel's window.
template <typename T, typename Y>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void depthwise_row_avx512_any(const DwPixel& p, const DwRow& r,
                                                                                    const T* const* __restrict rows,
                                                                                    Y* __restrict y) {
  const __m512 lo = _mm512_set1_ps(p.lo), hi = _mm512_set1_ps(p.hi);
  const __m512i zero = _mm512_set1_epi32(p.y_zero);
  const int64_t ch = p.channels, kh = r.kh, kw = r.kw, tap_step = r.dw * ch;
  for (int64_t c = 0; c < ch; c += 16) {
    const __mmask16 m = ch - c >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (ch - c)) - 1);
    const __m512i corr = _mm512_maskz_loadu_epi32(m, p.corr + c);
    const __m512 scale = _mm512_maskz_loadu_ps(m, p.scale + c);
    Y* out = y + r.ox0 * ch + c;
    for (int64_t ox = r.ox0; ox < r.ox1; ++ox, out += ch) {
      __m512i a = corr;
      const int64_t at = (ox * r.sw - r.pw) * ch + c;
      for (int64_t i = 0; i < kh; ++i) {
        const T* row = rows[i] + at;
        const int32_t* w = p.w + i * kw * ch + c;
        for (int64_t j = 0; j < kw; ++j) {
          const __m128i b = _mm_maskz_loadu_epi8(m, row + j * tap_step);
          const __m512i x = std::is_signed_v<T> ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b);
          a = _mm512_add_epi32(a, _mm512_mullo_epi32(x, _mm512_maskz_loadu_epi32(m, w + j * ch)));
        }
      }
      __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(a), scale);
      v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
      const __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(v), zero);
      if constexpr (std::is_signed_v<Y>) _mm512_mask_cvtsepi32_storeu_epi8(out, m, q);
      else _mm512_mask_cvtusepi32_storeu_epi8(out, m, q);
    }
  }
}

// The 3 x 3 row with AVX-512 VNNI: vpdpwssd multiplies int16 pairs and adds both products to
// an int32 lane, so each window row takes one instruction for its first two taps (their
// inputs packed as the low and high halves of a lane, the filter likewise) and one for the
// third (high half zero). Inputs and filters fit int16 (|w - w_zp| <= 255), the sums are exact.
template <typename T, typename Y>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) void depthwise_row3x3_avx512vnni(
    const DwPixel& p, const DwRow& r, const T* const* __restrict rows, Y* __restrict y) {
  const __m512 lo = _mm512_set1_ps(p.lo), hi = _mm512_set1_ps(p.hi);
  const __m512i zero = _mm512_set1_epi32(p.y_zero), low16 = _mm512_set1_epi32(0xFFFF);
  const int64_t ch = p.channels, step = r.sw * ch, tap_step = r.dw * ch, ox0 = r.ox0, ox1 = r.ox1;
  for (int64_t c = 0; c < ch; c += 16) {
    const __mmask16 m = ch - c >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (ch - c)) - 1);
    const __m512i corr = _mm512_maskz_loadu_epi32(m, p.corr + c);
    const __m512 scale = _mm512_maskz_loadu_ps(m, p.scale + c);
    __m512i pair[3], single[3];
    const T* base[3];
    for (int i = 0; i < 3; ++i) {
      const __m512i w0 = _mm512_maskz_loadu_epi32(m, p.w + (i * 3) * ch + c);
      const __m512i w1 = _mm512_maskz_loadu_epi32(m, p.w + (i * 3 + 1) * ch + c);
      pair[i] = _mm512_or_si512(_mm512_and_si512(w0, low16), _mm512_slli_epi32(w1, 16));
      single[i] = _mm512_and_si512(_mm512_maskz_loadu_epi32(m, p.w + (i * 3 + 2) * ch + c), low16);
      base[i] = rows[i] + (ox0 * r.sw - r.pw) * ch + c;
    }
    Y* out = y + ox0 * ch + c;
    for (int64_t ox = ox0; ox < ox1; ++ox, out += ch) {
      __m512i a = corr;
      for (int i = 0; i < 3; ++i) {
        // Bytes to int32 lanes holding the value in their low half.
        __m512i x0, x1, x2;
        if constexpr (std::is_signed_v<T>) {
          x0 = _mm512_and_si512(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, base[i])), low16);
          x1 = _mm512_and_si512(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, base[i] + tap_step)), low16);
          x2 = _mm512_and_si512(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(m, base[i] + 2 * tap_step)), low16);
        } else {
          x0 = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, base[i]));
          x1 = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, base[i] + tap_step));
          x2 = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, base[i] + 2 * tap_step));
        }
        a = _mm512_dpwssd_epi32(a, _mm512_or_si512(x0, _mm512_slli_epi32(x1, 16)), pair[i]);
        a = _mm512_dpwssd_epi32(a, x2, single[i]);
        base[i] += step;
      }
      __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(a), scale);
      v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
      const __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(v), zero);
      if constexpr (std::is_signed_v<Y>) _mm512_mask_cvtsepi32_storeu_epi8(out, m, q);
      else _mm512_mask_cvtusepi32_storeu_epi8(out, m, q);
    }
  }
}

template <typename T, typename Y>
void depthwise_row_avx512(const DwPixel& p, const DwRow& r, const T* const* rows, Y* y) {
  // (AVX-512 without VNNI, a CPU generation before Cascade Lake, runs 3 x 3 filters on the
  // general row: one path less to keep right.)
  static const bool vnni = util::cpu_features().avx512_vnni;
  if (r.kh == 3 && r.kw == 3 && vnni) depthwise_row3x3_avx512vnni<T, Y>(p, r, rows, y);
  else depthwise_row_avx512_any<T, Y>(p, r, rows, y);
}

template <typename T, typename Y>
using DepthwisePixel = void (*)(const DwPixel&, const T* const*, Y*);
template <typename T, typename Y>
using DepthwiseRow = void (*)(const DwPixel&, const DwRow&, const T* const*, Y*);

// The widest variant this machine runs (TETHER_ISA caps it).
template <typename T, typename Y>
DepthwisePixel<T, Y> depthwise_pixel_for_isa() {
  const util::CpuFeatures& f = util::cpu_features();
  if (f.avx512) return depthwise_pixel_avx512<T, Y>;
  if (f.avx2) return depthwise_pixel_avx2<T, Y>;
  return [](const DwPixel& p, const T* const* src, Y* y) { depthwise_pixel_generic(p, src, y); };
}

template <typename T, typename Y>
void depthwise_nhwc_run(const RunContext& ctx, const View& x, View& y, const ConvGeometry& g, const DwPixel& pixel,
                        const std::byte* zeros, const std::byte* zero_row, int64_t slot) {
  static const DepthwisePixel<T, Y> kernel = depthwise_pixel_for_isa<T, Y>();
  static const DepthwiseRow<T, Y> row_kernel =
      util::cpu_features().avx512 ? depthwise_row_avx512<T, Y> : DepthwiseRow<T, Y>{nullptr};
  const int64_t ih = x.dims[1], iw = x.dims[2], oh = y.dims[1], ow = y.dims[2], c = y.dims[3];
  const int64_t kh = g.kernel[0], kw = g.kernel[1];
  // Output columns whose windows lie inside the input across: ox * sw - pw >= 0 and
  // ox * sw - pw + (kw - 1) * dw < iw.
  DwRow across{kh, kw, g.strides[1], g.dilations[1], g.pad_begin[1], 0, 0};
  across.ox0 = std::min(ow, (g.pad_begin[1] + g.strides[1] - 1) / g.strides[1]);
  const int64_t last = iw - 1 - (kw - 1) * g.dilations[1] + g.pad_begin[1];  // ox * sw <= last
  across.ox1 = last < 0 ? across.ox0 : std::max(across.ox0, std::min(ow, last / g.strides[1] + 1));
  auto rows = [&](int thread, int64_t r0, int64_t r1) {
    auto* src = reinterpret_cast<const T**>(ctx.scratch + thread * slot);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t img = r / oh, oy = r % oh;
      const T* xi = x.as<T>() + img * ih * iw * c;
      if (row_kernel != nullptr && across.ox1 > across.ox0) {
        // Rows of the window (a row of zero points outside the input), then the inside run.
        const T** in_rows = src + kh * kw;
        for (int64_t i = 0; i < kh; ++i) {
          const int64_t iy = oy * g.strides[0] - g.pad_begin[0] + i * g.dilations[0];
          in_rows[i] = iy >= 0 && iy < ih ? xi + iy * iw * c : reinterpret_cast<const T*>(zero_row);
        }
        row_kernel(pixel, across, in_rows, y.as<Y>() + r * ow * c);
      }
      for (int64_t ox = 0; ox < ow; ++ox) {
        if (row_kernel != nullptr && ox >= across.ox0 && ox < across.ox1) continue;
        for (int64_t i = 0; i < kh; ++i) {
          const int64_t iy = oy * g.strides[0] - g.pad_begin[0] + i * g.dilations[0];
          for (int64_t j = 0; j < kw; ++j) {
            const int64_t ix = ox * g.strides[1] - g.pad_begin[1] + j * g.dilations[1];
            src[i * kw + j] = iy >= 0 && iy < ih && ix >= 0 && ix < iw ? xi + (iy * iw + ix) * c
                                                                       : reinterpret_cast<const T*>(zeros);
          }
        }
        kernel(pixel, src, y.as<Y>() + (r * ow + ox) * c);
      }
    }
  };
  const int64_t total = x.dims[0] * oh;
  if (ctx.pool == nullptr) rows(0, 0, total);
  else ctx.pool->parallel_for_indexed(total, 1, rows);
}

}  // namespace

void IntegerConvKernel::depthwise_nhwc(const RunContext& ctx, const View& x, View& y, const ConvGeometry& g,
                                       const Params& p, const View* bias) const {
  const int64_t c = y.dims[3], taps = g.kernel[0] * g.kernel[1];
  const int32_t xz = p.a_zp[0];
  const QGemmOutput o = output_of(p, out_type_, nullptr, act_);
  // Shared, written once per run: a pixel of zero points, the sums' corrections, the scales.
  std::byte* zeros = ctx.scratch;
  auto* corr = reinterpret_cast<int32_t*>(zeros + round64(c));
  auto* scale = reinterpret_cast<float*>(zeros + round64(c) + round64(4 * c));
  std::memset(zeros, static_cast<int>(static_cast<uint8_t>(xz)), static_cast<size_t>(c));
  for (int64_t ch = 0; ch < c; ++ch) {
    const uint32_t b = bias != nullptr ? static_cast<uint32_t>(bias->as<int32_t>()[ch]) : 0u;
    corr[ch] = static_cast<int32_t>(b - static_cast<uint32_t>(xz) * static_cast<uint32_t>(dw_sums_[static_cast<size_t>(ch)]));
    scale[ch] = o.scale[o.scale_per_column ? ch : 0];
  }
  DwPixel pixel{taps, c, dw_weights32_.data(), corr, scale, static_cast<float>(o.lo - o.zero_point),
                static_cast<float>(o.hi - o.zero_point), o.zero_point};
  // A whole input row of zero points, for window rows above and below the input.
  std::byte* zero_row = zeros + dw_shared_bytes(c, 0);
  std::memset(zero_row, static_cast<int>(static_cast<uint8_t>(xz)), static_cast<size_t>(x.dims[2] * c));
  const RunContext per_thread{ctx.pool, zeros + dw_shared_bytes(c, x.dims[2])};
  const int64_t slot = dw_nhwc_slot_bytes(taps, g.kernel[0]);
  const bool s8 = x_type_ == DType::kInt8, y8 = out_type_ == DType::kInt8;
  if (s8 && y8) depthwise_nhwc_run<int8_t, int8_t>(per_thread, x, y, g, pixel, zeros, zero_row, slot);
  else if (s8) depthwise_nhwc_run<int8_t, uint8_t>(per_thread, x, y, g, pixel, zeros, zero_row, slot);
  else if (y8) depthwise_nhwc_run<uint8_t, int8_t>(per_thread, x, y, g, pixel, zeros, zero_row, slot);
  else depthwise_nhwc_run<uint8_t, uint8_t>(per_thread, x, y, g, pixel, zeros, zero_row, slot);
}

// ---- QLinearAdd (ai.tether) ---------------------------------------------------------------------

// y = Q(DQ(a) + DQ(b)) [with Relu], computed as the unfused nodes compute it: each operand
// dequantized by a float32 product, a float32 sum, then QuantizeLinear's float32 division and
// round-half-to-even, so the result equals the DequantizeLinear -> Add -> QuantizeLinear it
// replaces bit for bit, in one pass over memory instead of four.
// No multiply-add contraction: the FMA of the AVX2 / AVX-512 copies would round the sum once
// where the unfused nodes round each product.
template <typename A, typename B, typename Y>
TETHER_MULTIVERSION __attribute__((optimize("fp-contract=off"))) void add_run(const A* a, const B* b, Y* y, int64_t n, float sa, int32_t za, float sb, int32_t zb,
                                 float sy, int32_t zy, float lo, float hi) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(static_cast<int32_t>(a[i]) - za) * sa +
                    static_cast<float>(static_cast<int32_t>(b[i]) - zb) * sb;
    float q = v / sy;
    q = q > lo ? q : lo;
    q = q < hi ? q : hi;
    y[i] = static_cast<Y>(static_cast<int32_t>(std::nearbyint(q)) + zy);
  }
}

class QLinearAddKernel final : public Kernel {
 public:
  explicit QLinearAddKernel(const KernelInit& init)
      : name_(init.node.describe()), act_(QActivation::of(init.node)), types_{init.input_dtype(0), init.input_dtype(3), init.output_dtype(0)} {
    for (size_t i : {1u, 4u, 6u})
      if (const ir::Tensor* t = init.constant(i)) check_scale<ModelError>(name_, view_of(*t), i == 1 ? "a_scale" : i == 4 ? "b_scale" : "y_scale");
  }

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    for (size_t i : {1u, 2u, 4u, 5u, 6u, 7u})
      if (present(in, i) && in[i].numel() != 1)
        throw ArgumentError(name_ + ": input " + std::to_string(i) + " has " + std::to_string(in[i].numel()) +
                            " elements, expected 1 (QLinearAdd's parameters are per tensor)");
    check_scale<ArgumentError>(name_, in[1], "a_scale");
    check_scale<ArgumentError>(name_, in[4], "b_scale");
    check_scale<ArgumentError>(name_, in[6], "y_scale");

    const float sa = scale_at(in[1], 0), sb = scale_at(in[4], 0), sy = scale_at(in[6], 0);
    // com.microsoft QLinearAdd may omit its zero points (C's is its eighth input, A's and B's in between).
    auto zp = [&](size_t i) { return zero_points(present(in, i) ? &in[i] : nullptr)[0]; };
    const int32_t za = zp(2), zb = zp(5), zy = zp(7);
    const bool i8 = types_[2] == DType::kInt8;
    float lo = static_cast<float>((i8 ? -128 : 0) - zy), hi = static_cast<float>((i8 ? 127 : 255) - zy);
    if (act_.kind == QActivation::Kind::kRelu) lo = std::max(lo, 0.0f);  // Q(Relu(v)) = max(Q(v), zy)
    const int64_t n = out[0].numel();
    auto go = [&](auto a0, auto b0, auto y0) {
      using A = decltype(a0);
      using B = decltype(b0);
      using Y = decltype(y0);
      const A* a = in[0].as<A>();
      const B* b = in[3].as<B>();
      Y* y = out[0].as<Y>();
      if (in[0].numel() == n && in[3].numel() == n) {
        parallel(ctx, n, 1 << 14, [&](int64_t i0, int64_t i1) {
          add_run<A, B, Y>(a + i0, b + i0, y + i0, i1 - i0, sa, za, sb, zb, sy, zy, lo, hi);
        });
        return;
      }
      // Broadcast (com.microsoft QLinearAdd): rows of the output's last dim, each with the
      // offsets of its a and b elements; a run where both step by one, else one at a time.
      const std::vector<int64_t>& yd = out[0].dims;
      const std::vector<int64_t> sa_ = broadcast_strides(in[0].dims, yd), sb_ = broadcast_strides(in[3].dims, yd);
      const int64_t last = yd.empty() ? 1 : yd.back(), rows = last == 0 ? 0 : n / last;
      const int64_t la = sa_.empty() ? 0 : sa_.back(), lb = sb_.empty() ? 0 : sb_.back();
      parallel(ctx, rows, 1, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          int64_t oa = 0, ob = 0, rest = r;
          for (size_t d = yd.size() - 1; d-- > 0;) {
            oa += (rest % yd[d]) * sa_[d];
            ob += (rest % yd[d]) * sb_[d];
            rest /= yd[d];
          }
          if (la == 1 && lb == 1) {
            add_run<A, B, Y>(a + oa, b + ob, y + r * last, last, sa, za, sb, zb, sy, zy, lo, hi);
          } else {
            for (int64_t i = 0; i < last; ++i)
              add_run<A, B, Y>(a + oa + i * la, b + ob + i * lb, y + r * last + i, 1, sa, za, sb, zb, sy, zy, lo, hi);
          }
        }
      });
    };
    auto with_y = [&](auto a0, auto b0) {
      if (i8) go(a0, b0, int8_t{});
      else go(a0, b0, uint8_t{});
    };
    auto with_b = [&](auto a0) {
      if (types_[1] == DType::kInt8) with_y(a0, int8_t{});
      else with_y(a0, uint8_t{});
    };
    if (types_[0] == DType::kInt8) with_b(int8_t{});
    else with_b(uint8_t{});
  }

 private:
  std::string name_;
  QActivation act_;
  std::array<DType, 3> types_;
};

std::string qlinear_add_check(const KernelInit& init) {
  for (size_t i : {0u, 3u})
    if (!is_8bit(init.input_dtype(i)) || (init.node.input(i + 2) != nullptr && init.input_dtype(i + 2) != init.input_dtype(i)))
      return "input " + std::to_string(i) + " is " + type_text(init.input_dtype(i)) + " with a zero point of " +
             type_text(init.input_dtype(i + 2)) + "; QLinearAdd runs int8 and uint8 with zero points of their type";
  for (size_t i : {1u, 4u, 6u})
    if (init.input_dtype(i) != DType::kFloat32 && init.input_dtype(i) != DType::kFloat16)
      return "input " + std::to_string(i) + " (a scale) is " + type_text(init.input_dtype(i)) + "; expected float32";
  if (!is_8bit(init.output_dtype(0))) return "y is " + type_text(init.output_dtype(0)) + "; expected int8 or uint8";
  if (QActivation::of(init.node).kind == QActivation::Kind::kClip) return "QLinearAdd applies Relu only";
  return "";
}

// ---- QLinearGlobalAveragePool (com.microsoft) ----------------------------------------------------

// The mean of each channel's positions, requantized: s = sum(x) - count * x_zp (exact int64),
// y = round_half_even(clamp(float(s) * (x_scale / (y_scale * count)), lo - y_zp, hi - y_zp)) + y_zp.
class QLinearGlobalAveragePoolKernel final : public Kernel {
 public:
  explicit QLinearGlobalAveragePoolKernel(const KernelInit& init)
      : name_(init.node.describe()), last_(init.node.attr_int("channels_last", 0) != 0),
        types_{init.input_dtype(0), init.output_dtype(0)} {}

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    for (size_t i : {1u, 2u, 3u, 4u})
      if (present(in, i) && in[i].numel() != 1)
        throw ArgumentError(name_ + ": input " + std::to_string(i) + " has " + std::to_string(in[i].numel()) +
                            " elements, expected 1 (the parameters are per tensor)");
    check_scale<ArgumentError>(name_, in[1], "x_scale");
    check_scale<ArgumentError>(name_, in[3], "y_scale");
    const View& x = in[0];
    const int64_t n = x.dims[0], c = last_ ? x.dims.back() : x.dims[1];
    const int64_t count = n * c == 0 ? 0 : x.numel() / (n * c);
    const int32_t xz = zero_points(present(in, 2) ? &in[2] : nullptr)[0];
    const int32_t yz = zero_points(present(in, 4) ? &in[4] : nullptr)[0];
    const float scale = scale_at(in[1], 0) / (scale_at(in[3], 0) * static_cast<float>(count));
    const bool y8 = types_[1] == DType::kInt8;
    const float lo = static_cast<float>((y8 ? -128 : 0) - yz), hi = static_cast<float>((y8 ? 127 : 255) - yz);
    auto value = [&](int64_t img, int64_t ch, int64_t i) -> int64_t {
      const int64_t at = last_ ? (img * count + i) * c + ch : (img * c + ch) * count + i;
      return types_[0] == DType::kInt8 ? x.as<int8_t>()[at] : x.as<uint8_t>()[at];
    };
    parallel(ctx, n * c, 1, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t img = p / c, ch = p % c;
        int64_t sum = 0;
        for (int64_t i = 0; i < count; ++i) sum += value(img, ch, i);
        float v = static_cast<float>(sum - count * xz) * scale;
        v = std::min(std::max(v, lo), hi);
        const int32_t q = static_cast<int32_t>(std::nearbyint(v)) + yz;
        if (y8) out[0].as<int8_t>()[p] = static_cast<int8_t>(q);
        else out[0].as<uint8_t>()[p] = static_cast<uint8_t>(q);
      }
    });
  }

 private:
  std::string name_;
  bool last_;
  std::array<DType, 2> types_;
};

std::string qlinear_gap_check(const KernelInit& init) {
  if (!is_8bit(init.input_dtype(0)) || init.output_dtype(0) != init.input_dtype(0))
    return "X is " + type_text(init.input_dtype(0)) + " and Y " + type_text(init.output_dtype(0)) +
           "; QLinearGlobalAveragePool runs int8 and uint8, Y of X's type";
  for (size_t i : {1u, 3u})
    if (init.input_dtype(i) != DType::kFloat32 && init.input_dtype(i) != DType::kFloat16)
      return "input " + std::to_string(i) + " (a scale) is " + type_text(init.input_dtype(i)) + "; expected float32";
  return "";
}

// ---- support checks ------------------------------------------------------------------------------

std::string integer_check(const KernelInit& init) {
  const Slots& s = slots_of(init.node);
  for (int slot : {s.a, s.b}) {
    const DType t = init.input_dtype(static_cast<size_t>(slot));
    const char* name = slot == s.a ? s.a_name : s.b_name;
    if (!is_8bit(t))
      return std::string(name) + " is " + type_text(t) + "; the cpu engine runs 8-bit integer products (int8, uint8)";
    const int zp = slot == s.a ? s.a_zp : s.b_zp;
    if (init.node.input(static_cast<size_t>(zp)) != nullptr && init.input_dtype(static_cast<size_t>(zp)) != t)
      return std::string(name) + "_zero_point is " + type_text(init.input_dtype(static_cast<size_t>(zp))) + " and " +
             name + " " + type_text(t) + "; they must have the same type";
  }
  if (s.y_scale < 0) return "";
  for (int slot : {s.a_scale, s.b_scale, s.y_scale})
    if (const DType t = init.input_dtype(static_cast<size_t>(slot)); t != DType::kFloat32 && t != DType::kFloat16)
      return "input " + std::to_string(slot) + " (a scale) is " + type_text(t) +
             "; the cpu engine runs float32 and float16 scales";
  if (!is_8bit(init.output_dtype(0)))
    return "y is " + type_text(init.output_dtype(0)) + "; the cpu engine requantizes to int8 and uint8";
  if (s.bias >= 0 && init.node.input(static_cast<size_t>(s.bias)) != nullptr &&
      init.input_dtype(static_cast<size_t>(s.bias)) != DType::kInt32)
    return "the bias is " + type_text(init.input_dtype(static_cast<size_t>(s.bias))) + "; it must be int32";
  if (channels_last(init.node)) {
    const ir::Shape& x = init.input_types[0].shape();
    const ir::Tensor* w = init.constant(static_cast<size_t>(s.b));
    if (!x.has_rank() || x.rank() != 4)
      return "channels_last takes a 4-D X [N, H, W, C], got " + (x.has_rank() ? x.to_string() : std::string("unknown rank"));
    if (w == nullptr || w->rank() != 4)
      return "channels_last takes constant 4-D weights";
    for (size_t i = static_cast<size_t>(s.a_scale); i < init.node.inputs().size(); ++i)
      if (static_cast<int>(i) != s.b && init.node.input(i) != nullptr && init.constant(i) == nullptr)
        return "channels_last takes constant scales, zero points and bias; input " + std::to_string(i) + " is not";
    const int64_t group = init.node.attr_int("group", 1);
    if (group != 1 && !(group == w->dims()[0] && w->dims()[1] == 1))
      return "channels_last runs group 1 or depthwise convolutions, not group " + std::to_string(group);
  }
  return "";
}

std::unique_ptr<Kernel> make_matmul(const KernelInit& i) { return std::make_unique<IntegerMatMulKernel>(i); }
std::unique_ptr<Kernel> make_conv(const KernelInit& i) { return std::make_unique<IntegerConvKernel>(i); }

std::string qgemm_check(const KernelInit& init) {
  if (init.node.attr_int("transA", 0) != 0) return "transA = 1 is not supported (A must be [M, K])";
  if (init.node.attr_float("alpha", 1.0f) != 1.0f) return "alpha other than 1 is not supported";
  if ((init.node.input(7) == nullptr) != (init.node.input(8) == nullptr))
    return "y_scale and y_zero_point must be given together (a quantized output) or both omitted (a float output)";
  if (init.node.input(6) != nullptr) {
    const ir::Shape& c = init.input_types[6].shape();
    if (init.input_dtype(6) != DType::kInt32) return "C is " + type_text(init.input_dtype(6)) + "; it must be int32";
    if (c.has_rank() && c.rank() == 2 && !(c[0].is_known() && c[0].value() == 1))
      return "C of shape " + c.to_string() + " is not supported (one value, [N] or [1, N])";
  }
  if (init.node.input(7) == nullptr) {
    Slots s = kQGemm;
    for (int slot : {s.a, s.b})
      if (!is_8bit(init.input_dtype(static_cast<size_t>(slot))))
        return std::string(slot == s.a ? "a" : "b") + " is " + type_text(init.input_dtype(static_cast<size_t>(slot))) +
               "; the cpu engine runs 8-bit integer products (int8, uint8)";
    if (init.output_dtype(0) != DType::kFloat32) return "the output is " + type_text(init.output_dtype(0)) + "; expected float32";
    return "";
  }
  return integer_check(init);
}

std::string integer_to_float_check(const KernelInit& init) {
  if (std::string why = integer_check(init); !why.empty()) return why;
  for (size_t i : {kFloatScale, kFloatBias})
    if (init.node.input(i) != nullptr && init.input_dtype(i) != DType::kFloat32)
      return std::string(i == kFloatScale ? "scale" : "bias") + " is " + type_text(init.input_dtype(i)) + "; it must be float32";
  if (init.output_dtype(0) != DType::kFloat32) return "the output is " + type_text(init.output_dtype(0)) + "; it must be float32";
  return "";
}

}  // namespace

void register_qlinear(KernelRegistry& r) {
  r.add("MatMulInteger", make_matmul, integer_check);
  r.add("QLinearMatMul", make_matmul, integer_check);
  r.add("ConvInteger", make_conv, integer_check);
  r.add("QLinearConv", make_conv, integer_check);
  // The QDQ pass's forms: the ONNX op plus an activation (and QLinearMatMul a bias).
  r.add("QLinearMatMul", make_matmul, integer_check, "ai.tether");
  r.add("QLinearConv", make_conv, integer_check, "ai.tether");
  r.add("MatMulIntegerToFloat", make_matmul, integer_to_float_check, "ai.tether");
  // onnxruntime's QOperator format: com.microsoft QLinearAdd (broadcasting, optional zero
  // points; the float arithmetic of DequantizeLinear -> Add -> QuantizeLinear) and QGemm.
  r.add("QLinearAdd", [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<QLinearAddKernel>(i); },
        qlinear_add_check, "com.microsoft");
  r.add("QGemm", make_matmul, qgemm_check, "com.microsoft");
  r.add("QLinearGlobalAveragePool",
        [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<QLinearGlobalAveragePoolKernel>(i); },
        qlinear_gap_check, "com.microsoft");
  r.add("QLinearAdd", [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<QLinearAddKernel>(i); },
        qlinear_add_check, "ai.tether");
}

}  // namespace tether::engine::cpu
