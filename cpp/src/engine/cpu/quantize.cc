// Linear quantization: QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear on int8, uint8,
// int16 and uint16 (and int32 for DequantizeLinear), per tensor, per axis and blocked. A QDQ
// model runs in float between its Q/DQ pairs; these kernels are where its rounding happens.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>

#include "engine/cpu/cpu.h"
#include "util/float16.h"

namespace tether::engine::cpu {

namespace {

constexpr int64_t kGrain = 1 << 14;

// ---- where each element finds its scale ----------------------------------------------------

// x seen as [outer, len, inner] around the quantization axis. Per tensor every element reads
// scale 0; per axis element (o, j, i) reads scale j; blocked it reads scale
// (o * blocks + j / block) * inner + i, the scale having `blocks` = ceil(len / block) entries
// along the axis.
struct QuantLayout {
  enum class Kind { kTensor, kAxis, kBlocked };
  Kind kind = Kind::kTensor;
  int64_t outer = 1, len = 1, inner = 1;
  int64_t block = 0, blocks = 1;
};

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

int64_t numel_of(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// The layout of a scale of `sdims` for an x of `xdims`; "" on success, else what is wrong. The
// same rules as shape inference (ops/quantize.cc), applied here to the dims of one run, which
// inference may not have known: without block_size one element is per tensor and a 1-D scale
// per axis; with block_size the scale has x's shape but ceil(d / block_size) along the axis
// (onnxruntime refuses a lone scalar there too; the ONNX reference would take it per tensor).
std::string resolve_layout(const std::vector<int64_t>& xdims, const std::vector<int64_t>& sdims, int64_t axis,
                           int64_t block, const std::string& scale_name, QuantLayout& l) {
  l = QuantLayout{};
  l.len = numel_of(xdims);
  if (block == 0 && numel_of(sdims) == 1) return "";
  const auto rank = static_cast<int64_t>(xdims.size());
  if (axis < -rank || axis >= rank)
    return "axis " + std::to_string(axis) + " is out of range for x of rank " + std::to_string(rank);
  const auto a = static_cast<size_t>(axis < 0 ? axis + rank : axis);
  l.outer = l.inner = 1;
  for (size_t d = 0; d < xdims.size(); ++d) {
    if (d < a) l.outer *= xdims[d];
    if (d > a) l.inner *= xdims[d];
  }
  l.len = xdims[a];
  if (block == 0) {
    if (sdims.size() != 1 || sdims[0] != l.len)
      return scale_name + " has shape " + dims_text(sdims) + ", expected one element or [" + std::to_string(l.len) +
             "] (dim " + std::to_string(a) + " of x, shape " + dims_text(xdims) + ")";
    l.kind = QuantLayout::Kind::kAxis;
    return "";
  }
  const int64_t blocks = l.len / block + (l.len % block != 0 ? 1 : 0);
  bool fits = sdims.size() == xdims.size();
  for (size_t d = 0; fits && d < xdims.size(); ++d) fits = sdims[d] == (d == a ? blocks : xdims[d]);
  if (!fits) {
    std::vector<int64_t> want = xdims;
    want[a] = blocks;
    return scale_name + " has shape " + dims_text(sdims) + ", expected " + dims_text(want) + " (x " + dims_text(xdims) +
           " in blocks of " + std::to_string(block) + " along axis " + std::to_string(a) + ")";
  }
  if (numel_of(sdims) == 1) {  // one block covers x: per tensor, on the faster path
    l = QuantLayout{};
    l.len = numel_of(xdims);
    return "";
  }
  l.kind = QuantLayout::Kind::kBlocked;
  l.block = block;
  l.blocks = blocks;
  return "";
}

// Calls f(begin, count, p, vec) for the runs that cover elements [b, e) of x. With vec false
// the whole run reads scale p; with vec true element k of the run reads scale p + k. Runs are
// as long as the layout allows, so that the loops over them vectorise.
template <typename F>
void for_each_run(const QuantLayout& l, int64_t b, int64_t e, F&& f) {
  using Kind = QuantLayout::Kind;
  while (b < e) {
    int64_t n = e - b, p = 0;
    bool vec = false;
    if (l.kind == Kind::kAxis && l.inner == 1) {  // the axis is the last dim: one scale per element
      p = b % l.len;
      n = std::min(n, l.len - p);
      vec = true;
    } else if (l.kind == Kind::kAxis) {
      p = (b / l.inner) % l.len;
      n = std::min(n, l.inner - b % l.inner);
    } else if (l.kind == Kind::kBlocked && l.inner == 1) {  // blocks along the last dim
      const int64_t o = b / l.len, j = b % l.len;
      p = o * l.blocks + j / l.block;
      n = std::min(n, std::min(l.len, (j / l.block + 1) * l.block) - j);
    } else if (l.kind == Kind::kBlocked) {
      const int64_t row = b / l.inner, i = b % l.inner;
      p = ((row / l.len) * l.blocks + (row % l.len) / l.block) * l.inner + i;
      n = std::min(n, l.inner - i);
      vec = true;
    }
    f(b, n, p, vec);
    b += n;
  }
}

// ---- scale and zero-point values -------------------------------------------------------------

std::string float_text(float v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return buf;
}

// ---- QuantizeLinear ------------------------------------------------------------------------------

// y = saturate(round_half_even(x / scale) + zp), with x / scale a float32 division, as
// onnxruntime computes it (never a multiplication by the reciprocal, which rounds differently).
// The quotient is clamped to [lo - zp, hi - zp] before rounding; the bounds are integers, so
// this equals rounding first and saturating after. A NaN fails both comparisons and becomes
// lo - zp, so NaN quantizes to the type's lowest value, as in onnxruntime (the ONNX reference
// agrees: its cast of NaN to int32 gives INT32_MIN, which saturates to the lowest value). +-inf
// saturate to the highest / lowest value as in onnxruntime; the reference's int32 cast sends
// +inf (and any quotient past 2^31) to the lowest value instead, which tether does not copy.
template <typename Q>
inline Q quantize_one(float x, float scale, float zp) {
  const float lo = static_cast<float>(std::numeric_limits<Q>::lowest()) - zp;
  const float hi = static_cast<float>(std::numeric_limits<Q>::max()) - zp;
  float v = x / scale;
  v = v > lo ? v : lo;
  v = v < hi ? v : hi;
  return static_cast<Q>(static_cast<int32_t>(std::nearbyint(v) + zp));
}

template <typename Q>
TETHER_MULTIVERSION void quantize_run(const float* x, Q* y, int64_t n, float scale, float zp) {
  for (int64_t i = 0; i < n; ++i) y[i] = quantize_one<Q>(x[i], scale, zp);
}

template <typename Q>
TETHER_MULTIVERSION void quantize_run_vec(const float* x, Q* y, int64_t n, const float* scale, const Q* zp) {
  if (zp == nullptr) {
    for (int64_t i = 0; i < n; ++i) y[i] = quantize_one<Q>(x[i], scale[i], 0.0f);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = quantize_one<Q>(x[i], scale[i], static_cast<float>(zp[i]));
  }
}

template <typename Q>
void quantize_all(const RunContext& ctx, const QuantLayout& l, const View& x, const View& s, const View* zp, View& y) {
  const float* xp = x.as<float>();
  const float* sp = s.as<float>();
  const Q* zpp = zp != nullptr ? zp->as<Q>() : nullptr;
  Q* yp = y.as<Q>();
  parallel(ctx, x.numel(), kGrain, [&](int64_t b, int64_t e) {
    for_each_run(l, b, e, [&](int64_t at, int64_t n, int64_t p, bool vec) {
      if (vec) quantize_run_vec<Q>(xp + at, yp + at, n, sp + p, zpp != nullptr ? zpp + p : nullptr);
      else quantize_run<Q>(xp + at, yp + at, n, sp[p], zpp != nullptr ? static_cast<float>(zpp[p]) : 0.0f);
    });
  });
}

// Calls f(Q{}) for the quantized types the kernels run; false for any other.
template <typename F>
bool dispatch_quantized(DType t, bool with_int32, F&& f) {
  switch (t) {
    case DType::kInt8: f(int8_t{}); return true;
    case DType::kUInt8: f(uint8_t{}); return true;
    case DType::kInt16: f(int16_t{}); return true;
    case DType::kUInt16: f(uint16_t{}); return true;
    case DType::kInt32:
      if (!with_int32) return false;
      f(int32_t{});
      return true;
    default: return false;
  }
}

// What Q and DQ share: attributes, names and the checks of constant scales and zero points.
class LinearKernelBase : public HostKernel {
 protected:
  LinearKernelBase(const KernelInit& init, bool quantize)
      : name_(init.node.describe()),
        scale_name_(quantize ? "y_scale" : "x_scale"),
        axis_(init.node.attr_int("axis", 1)),
        block_(init.node.attr_int("block_size", 0)) {
    if (const ir::Tensor* s = init.constant(1)) {
      if (std::string why = bad_scale(view_of(*s), scale_name_); !why.empty()) throw ModelError(name_ + ": " + why);
      scale_checked_ = true;
    }
  }

  // The layout of this run's scale and zero point; throws ArgumentError naming the node when
  // they do not fit x, the zero point is not `zp_dtype`, or a scale (not known at compile
  // time) is not positive and finite.
  QuantLayout checked_layout(const std::vector<View>& in, DType zp_dtype) const {
    QuantLayout l;
    if (present(in, 2) && in[2].dtype != zp_dtype)
      throw ArgumentError(name_ + ": the zero point is " + std::string(ir::dtype_name(in[2].dtype)) + ", expected " +
                          std::string(ir::dtype_name(zp_dtype)));
    if (std::string why = resolve_layout(in[0].dims, in[1].dims, axis_, block_, scale_name_, l); !why.empty())
      throw ArgumentError(name_ + ": " + why);
    if (present(in, 2) && in[2].dims != in[1].dims && !(in[2].numel() == 1 && in[1].numel() == 1))
      throw ArgumentError(name_ + ": the zero point has shape " + dims_text(in[2].dims) + " and " + scale_name_ + " " +
                          dims_text(in[1].dims) + "; they must have the same shape");
    if (!scale_checked_)
      if (std::string why = bad_scale(in[1], scale_name_); !why.empty()) throw ArgumentError(name_ + ": " + why);
    return l;
  }

  std::string name_, scale_name_;
  int64_t axis_, block_;
  bool scale_checked_ = false;
};

class QuantizeKernel final : public LinearKernelBase {
 public:
  explicit QuantizeKernel(const KernelInit& init) : LinearKernelBase(init, true), out_(init.output_dtype(0)) {}

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    const QuantLayout l = checked_layout(in, out_);
    const View* zp = present(in, 2) ? &in[2] : nullptr;
    dispatch_quantized(out_, false, [&](auto zero) { quantize_all<decltype(zero)>(ctx, l, in[0], in[1], zp, out[0]); });
  }

 private:
  DType out_;
};

// ---- DequantizeLinear ----------------------------------------------------------------------------

// y = (x - zp) * scale in float32: x - zp is an integer of at most 17 bits, exact in float, so
// the product is rounded once, as in onnxruntime and the ONNX reference. int32 x (zero point
// 0) is rounded to float first, as both do.
template <typename Q>
inline float dequantize_one(Q x, int32_t zp, float scale) {
  return static_cast<float>(static_cast<int32_t>(x) - zp) * scale;
}

template <typename Q>
TETHER_MULTIVERSION void dequantize_run(const Q* x, float* y, int64_t n, float scale, int32_t zp) {
  for (int64_t i = 0; i < n; ++i) y[i] = dequantize_one(x[i], zp, scale);
}

template <typename Q>
TETHER_MULTIVERSION void dequantize_run_vec(const Q* x, float* y, int64_t n, const float* scale, const Q* zp) {
  if (zp == nullptr) {
    for (int64_t i = 0; i < n; ++i) y[i] = dequantize_one(x[i], 0, scale[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = dequantize_one(x[i], static_cast<int32_t>(zp[i]), scale[i]);
  }
}

// float16 scales: the product in float32, rounded once to float16. The float32 product is
// exact for 8-bit x (at most 9 + 11 bits) and rounds the same way as onnxruntime and the
// reference for wider x, which also multiply in float32 before converting.
template <typename Q>
void dequantize_run_half(const Q* x, uint16_t* y, int64_t n, const uint16_t* scale, bool vec, const Q* zp) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = vec ? i : 0;
    const int32_t z = zp != nullptr ? static_cast<int32_t>(zp[k]) : 0;
    y[i] = util::float_to_half(dequantize_one(x[i], z, util::half_to_float(scale[k])));
  }
}

template <typename Q>
void dequantize_all(const RunContext& ctx, const QuantLayout& l, const View& x, const View& s, const View* zp, View& y) {
  const Q* xp = x.as<Q>();
  const Q* zpp = zp != nullptr ? zp->as<Q>() : nullptr;
  const bool half = s.dtype == DType::kFloat16;
  parallel(ctx, x.numel(), kGrain, [&](int64_t b, int64_t e) {
    for_each_run(l, b, e, [&](int64_t at, int64_t n, int64_t p, bool vec) {
      const Q* z = zpp != nullptr ? zpp + p : nullptr;
      if (half) {
        dequantize_run_half<Q>(xp + at, y.as<uint16_t>() + at, n, s.as<uint16_t>() + p, vec, z);
      } else if (vec) {
        dequantize_run_vec<Q>(xp + at, y.as<float>() + at, n, s.as<float>() + p, z);
      } else {
        dequantize_run<Q>(xp + at, y.as<float>() + at, n, s.as<float>()[p], z != nullptr ? static_cast<int32_t>(*z) : 0);
      }
    });
  });
}

// "" when an int32 zero point holds only zeros (the spec defines int32 dequantization without
// one, and x - zp could overflow int32), else which entry does not.
std::string bad_int32_zero_point(const View& zp) {
  for (int64_t i = 0; i < zp.numel(); ++i)
    if (zp.as<int32_t>()[i] != 0)
      return "x_zero_point" + (zp.numel() > 1 ? "[" + std::to_string(i) + "]" : std::string()) + " is " +
             std::to_string(zp.as<int32_t>()[i]) + "; int32 x is dequantized without a zero point (it must be 0)";
  return "";
}

class DequantizeKernel final : public LinearKernelBase {
 public:
  explicit DequantizeKernel(const KernelInit& init) : LinearKernelBase(init, false), x_(init.input_dtype(0)) {
    if (x_ == DType::kInt32 && init.node.input(2) != nullptr) {
      if (const ir::Tensor* zp = init.constant(2)) {
        if (std::string why = bad_int32_zero_point(view_of(*zp)); !why.empty()) throw ModelError(name_ + ": " + why);
        zp_checked_ = true;
      }
    }
  }

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    const QuantLayout l = checked_layout(in, x_);
    const View* zp = present(in, 2) ? &in[2] : nullptr;
    if (zp != nullptr && x_ == DType::kInt32 && !zp_checked_)
      if (std::string why = bad_int32_zero_point(*zp); !why.empty()) throw ArgumentError(name_ + ": " + why);
    dispatch_quantized(x_, true, [&](auto zero) { dequantize_all<decltype(zero)>(ctx, l, in[0], in[1], zp, out[0]); });
  }

 private:
  DType x_;
  bool zp_checked_ = false;
};

// ---- DynamicQuantizeLinear -------------------------------------------------------------------

struct MinMax {
  float lo = std::numeric_limits<float>::infinity(), hi = -std::numeric_limits<float>::infinity();
  int64_t nans = 0;
};

// NaN fails every comparison, so it never becomes the minimum or maximum; it is counted
// instead, for the kernel to refuse. Without NaN, min and max do not depend on the order, so
// the loop keeps 16 lanes of each: the compiler does not reorder a float reduction by itself,
// and vectorises the lane loop only when it is not unrolled into 16 scalar chains.
TETHER_MULTIVERSION MinMax min_max(const float* x, int64_t n) {
  constexpr int kLanes = 16;
  float lo[kLanes], hi[kLanes];
  int32_t nans[kLanes];
  for (int k = 0; k < kLanes; ++k) {
    lo[k] = std::numeric_limits<float>::infinity();
    hi[k] = -std::numeric_limits<float>::infinity();
    nans[k] = 0;
  }
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma GCC unroll 1
    for (int k = 0; k < kLanes; ++k) {
      const float v = x[i + k];
      lo[k] = v < lo[k] ? v : lo[k];
      hi[k] = v > hi[k] ? v : hi[k];
      nans[k] += v != v;
    }
  }
  MinMax r;
  for (int k = 0; k < kLanes; ++k) {
    r.lo = std::min(r.lo, lo[k]);
    r.hi = std::max(r.hi, hi[k]);
    r.nans += nans[k];
  }
  for (; i < n; ++i) {
    const float v = x[i];
    r.lo = v < r.lo ? v : r.lo;
    r.hi = v > r.hi ? v : r.hi;
    r.nans += v != v;
  }
  return r;
}

// y_scale = (max(0, max x) - min(0, min x)) / 255 and y_zero_point = round(clamp(-min / scale,
// 0, 255)), as the spec and onnxruntime (GetQuantizationParameter) compute them, std::min and
// std::max in onnxruntime's order so that a NaN from -(-inf) / inf clamps as it does there. A
// range of 0 (x all zeros, or empty) gives scale 1 and zero point 0 as in onnxruntime; the
// ONNX reference gives scale 1/255 there (the quantized values, all 0, agree).
//
// NaN in x is refused with ArgumentError: onnxruntime's result then depends on where the NaN
// falls among its SIMD lanes (the scale is sometimes NaN, sometimes computed from part of x)
// and the reference returns a NaN scale, so there is no answer to match.
class DynamicQuantizeKernel final : public HostKernel {
 public:
  explicit DynamicQuantizeKernel(const KernelInit& init) : name_(init.node.describe()) {}

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    const float* x = in[0].as<float>();
    const int64_t n = in[0].numel();
    // Partial ranges per chunk, combined in chunk order: the result does not depend on threads.
    constexpr int64_t kMaxChunks = 64;
    std::array<MinMax, kMaxChunks> parts;
    const int64_t chunks = std::clamp<int64_t>(n / kGrain, 1, kMaxChunks);
    const int64_t step = n / chunks + (n % chunks != 0 ? 1 : 0);
    parallel(ctx, chunks, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        const int64_t b = std::min(n, c * step), e = std::min(n, b + step);
        parts[static_cast<size_t>(c)] = min_max(x + b, e - b);
      }
    });
    MinMax r;
    for (int64_t c = 0; c < chunks; ++c) {
      const MinMax& p = parts[static_cast<size_t>(c)];
      r.lo = std::min(r.lo, p.lo);
      r.hi = std::max(r.hi, p.hi);
      r.nans += p.nans;
    }
    if (r.nans > 0)
      throw ArgumentError(name_ + ": x holds " + std::to_string(r.nans) + " NaN value" + (r.nans > 1 ? "s" : "") +
                          " of " + std::to_string(n) + "; the quantization range of NaN is undefined");
    const float lo = std::min(r.lo, 0.0f), hi = std::max(r.hi, 0.0f);
    const float scale = hi == lo ? 1.0f : (hi - lo) / 255.0f;
    const float initial = 0.0f - lo / scale;
    const float zp = std::nearbyint(std::max(0.0f, std::min(255.0f, initial)));
    // The scale and zero point outputs may be omitted (a node that reads only y).
    if (present(out, 1)) out[1].as<float>()[0] = scale;
    if (present(out, 2)) out[2].as<uint8_t>()[0] = static_cast<uint8_t>(zp);
    uint8_t* y = out[0].as<uint8_t>();
    parallel(ctx, n, kGrain, [&](int64_t b, int64_t e) { quantize_run<uint8_t>(x + b, y + b, e - b, scale, zp); });
  }

 private:
  std::string name_;
};

// ---- support checks ------------------------------------------------------------------------------

std::string type_text(DType t) { return std::string(ir::dtype_name(t)); }

std::string quantize_check(const KernelInit& init) {
  if (init.input_dtype(0) != DType::kFloat32)
    return "x is " + type_text(init.input_dtype(0)) +
           "; the cpu engine quantizes float32 (for float16 x, onnxruntime divides in float32 and the ONNX reference in "
           "float16, so the result is not settled)";
  if (init.input_dtype(1) != DType::kFloat32)
    return "y_scale is " + type_text(init.input_dtype(1)) + "; the cpu engine runs float32 scales";
  const DType out = init.output_dtype(0);
  if (!dispatch_quantized(out, false, [](auto) {}))
    return (init.node.input(2) != nullptr ? "y_zero_point is " : "y (output_dtype) is ") + type_text(out) +
           "; the cpu engine quantizes to int8, uint8, int16 and uint16";
  if (const int64_t p = init.node.attr_int("precision", 0); p != 0 && p != static_cast<int64_t>(DType::kFloat32))
    return "precision is " + (ir::dtype_is_known(static_cast<int32_t>(p)) ? type_text(static_cast<DType>(p)) : std::to_string(p)) +
           "; the cpu engine divides in float32";
  return "";
}

std::string dequantize_check(const KernelInit& init) {
  const DType x = init.input_dtype(0);
  if (!dispatch_quantized(x, true, [](auto) {}))
    return "x is " + type_text(x) + "; the cpu engine dequantizes int8, uint8, int16, uint16 and int32";
  const DType s = init.input_dtype(1);
  if (s != DType::kFloat32 && s != DType::kFloat16)
    return "x_scale is " + type_text(s) + "; the cpu engine runs float32 and float16 scales";
  if (init.output_dtype(0) != s)
    return "y (output_dtype) is " + type_text(init.output_dtype(0)) + " and x_scale " + type_text(s) +
           "; the cpu engine dequantizes to the scale's type";
  return "";
}

}  // namespace

// "" when every scale is positive and finite, else which one is not. A zero, negative, NaN or
// infinite scale has no quantization grid: dividing by it gives no meaningful integer, and
// multiplying by it gives no meaningful float, so it is refused rather than computed.
float scale_at(const View& s, int64_t i) {
  return s.dtype == DType::kFloat16 ? util::half_to_float(s.as<uint16_t>()[i]) : s.as<float>()[i];
}

std::string bad_scale(const View& s, const std::string& name) {
  const int64_t n = s.numel();
  for (int64_t i = 0; i < n; ++i) {
    const float v = scale_at(s, i);
    if (!(v > 0.0f) || std::isinf(v))
      return name + (n > 1 ? "[" + std::to_string(i) + "]" : "") + " is " + float_text(v) +
             "; scales must be positive and finite";
  }
  return "";
}

void register_quantize(KernelRegistry& r) {
  TETHER_ADD(r, "QuantizeLinear",
        [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<QuantizeKernel>(i); },
        quantize_check);
  TETHER_ADD(r, "DequantizeLinear",
        [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<DequantizeKernel>(i); },
        dequantize_check);
  TETHER_ADD(r, "DynamicQuantizeLinear",
        [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<DynamicQuantizeKernel>(i); },
        float_only);
}

}  // namespace tether::engine::cpu
