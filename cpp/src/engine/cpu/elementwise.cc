// Elementwise kernels: unary math and activations, binary and variadic ops with numpy
// broadcasting, comparisons, logic, Where, Clip, Cast.
#include <cmath>
#include <limits>
#include <type_traits>

#include "engine/cpu/cpu.h"
#include "engine/cpu/elementwise.h"
#include "util/cpu_features.h"
#include "util/fastmath.h"
#include "util/float16.h"

namespace tether::engine::cpu {

namespace {

// Elements per task of the memory-bound element-wise loops. Handing a loop to a second thread
// costs about a microsecond (the wake-up and the cache lines that travel); a task of 64K
// float elements takes several, so smaller loops run on the calling thread alone.
constexpr int64_t kGrain = 1 << 16;

// ---- unary float ops -------------------------------------------------------------------------

struct UnaryParams {
  float alpha = 0, beta = 0, gamma = 0;
};

using UnaryFn = float (*)(float, const UnaryParams&);

template <UnaryFn F>
TETHER_MULTIVERSION void unary_loop(const float* x, float* y, int64_t n, UnaryParams p) {
  for (int64_t i = 0; i < n; ++i) y[i] = F(x[i], p);
}

// Elements per task of unary op F: the element-wise grain for a few instructions per element,
// an eighth of it for the functions that take tens (exp, erf, tanh, ...).
template <UnaryFn F>
constexpr int64_t unary_grain();

// The hand-written vector kernel for unary op F on this CPU (elementwise.h), or nullptr where
// unary_loop computes it.
template <UnaryFn F>
VectorUnaryFn vector_kernel();

template <UnaryFn F>
std::unique_ptr<Kernel> unary_kernel(UnaryParams p) {
  return make_kernel([p, vec = vector_kernel<F>()](const RunContext& ctx, const std::vector<View>& in,
                                                   std::vector<View>& out) {
    const float* x = in[0].as<float>();
    float* y = out[0].as<float>();
    TETHER_CHECK(in[0].numel() == out[0].numel(), "unary op: input and output sizes differ");
    parallel(ctx, in[0].numel(), unary_grain<F>(), [&](int64_t b, int64_t e) {
      if (vec != nullptr) vec(x + b, y + b, e - b);
      else unary_loop<F>(x + b, y + b, e - b, p);
    });
  });
}

// NaN propagates through every activation, as in onnxruntime and torch: comparisons are
// written so that a NaN input takes the branch that returns it, and fmin/fmax (which drop
// NaN) are avoided.
float clamp01(float v) { return v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v); }
float relu(float x, const UnaryParams&) { return x < 0 ? 0.0f : x; }
float leaky_relu(float x, const UnaryParams& p) { return x >= 0 ? x : p.alpha * x; }
// Exp, Erf, Tanh, Sigmoid and Gelu use tether's vectorisable approximations (errors below
// 5e-7, util/fastmath.h), as onnxruntime uses its own; on AVX2 CPUs without AVX-512,
// hand-written kernels within the same bounds (elementwise.h) replace these loops. Log and the
// rest use the C library.
float sigmoid(float x, const UnaryParams&) { return util::fast_sigmoid(x); }
float tanh_(float x, const UnaryParams&) { return util::fast_tanh(x); }
float hard_sigmoid(float x, const UnaryParams& p) { return clamp01(p.alpha * x + p.beta); }
float hard_swish(float x, const UnaryParams&) { return x * clamp01(x / 6.0f + 0.5f); }
// Gelu's two forms as two functions: a branch on the form inside the element loop kept it
// from vectorising (six times slower than Tanh alone).
float gelu(float x, const UnaryParams&) { return 0.5f * x * (1.0f + util::fast_erf(x * 0.70710678118654752f)); }
float gelu_tanh(float x, const UnaryParams&) {
  return 0.5f * x * (1.0f + util::fast_tanh(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}
float softplus(float x, const UnaryParams&) { return x > 20.0f ? x : std::log1p(std::exp(x)); }
float softsign(float x, const UnaryParams&) { return x / (1.0f + std::fabs(x)); }
float elu(float x, const UnaryParams& p) { return x >= 0 ? x : p.alpha * std::expm1(x); }
float selu(float x, const UnaryParams& p) { return p.gamma * (x > 0 ? x : p.alpha * std::expm1(x)); }
float celu(float x, const UnaryParams& p) { return x >= 0 ? x : p.alpha * std::expm1(x / p.alpha); }
float mish(float x, const UnaryParams& p) { return x * util::fast_tanh(softplus(x, p)); }
float thresholded_relu(float x, const UnaryParams& p) { return x > p.alpha ? x : 0.0f; }
float sqrt_(float x, const UnaryParams&) { return std::sqrt(x); }
float exp_(float x, const UnaryParams&) { return util::fast_exp(x); }
float log_(float x, const UnaryParams&) { return std::log(x); }
float reciprocal(float x, const UnaryParams&) { return 1.0f / x; }
float erf_(float x, const UnaryParams&) { return util::fast_erf(x); }
float floor_(float x, const UnaryParams&) { return std::floor(x); }
float ceil_(float x, const UnaryParams&) { return std::ceil(x); }
float round_(float x, const UnaryParams&) { return std::nearbyint(x); }  // half to even
float sin_(float x, const UnaryParams&) { return std::sin(x); }
float cos_(float x, const UnaryParams&) { return std::cos(x); }
float tan_(float x, const UnaryParams&) { return std::tan(x); }
float asin_(float x, const UnaryParams&) { return std::asin(x); }
float acos_(float x, const UnaryParams&) { return std::acos(x); }
float atan_(float x, const UnaryParams&) { return std::atan(x); }
float sinh_(float x, const UnaryParams&) { return std::sinh(x); }
float cosh_(float x, const UnaryParams&) { return std::cosh(x); }
float asinh_(float x, const UnaryParams&) { return std::asinh(x); }
float acosh_(float x, const UnaryParams&) { return std::acosh(x); }
float atanh_(float x, const UnaryParams&) { return std::atanh(x); }
float shrink(float x, const UnaryParams& p) { return x < -p.alpha ? x + p.beta : x > p.alpha ? x - p.beta : 0.0f; }

// ---- ops over any numeric type ---------------------------------------------------------------

template <typename T>
T sign_of(T x) {
  if constexpr (std::is_unsigned_v<T>) return x > 0 ? T(1) : T(0);
  else if constexpr (std::is_floating_point_v<T>) return x > 0 ? T(1) : x < 0 ? T(-1) : x == x ? T(0) : x;  // NaN stays
  else return x > 0 ? T(1) : x < 0 ? T(-1) : T(0);
}

enum class NumUnary { kNeg, kAbs, kSign };

// Integer +, - and * wrap around in two's complement, as the hardware and onnxruntime do. They
// are computed in an unsigned type at least as wide as int: signed overflow is undefined
// behaviour, and so is int16 * int16 past int's range after promotion.
template <typename T>
using Wide = std::conditional_t<(sizeof(T) <= sizeof(uint32_t)), uint32_t, uint64_t>;
template <typename T>
T wrap_add(T a, T b) { return static_cast<T>(static_cast<Wide<T>>(a) + static_cast<Wide<T>>(b)); }
template <typename T>
T wrap_sub(T a, T b) { return static_cast<T>(static_cast<Wide<T>>(a) - static_cast<Wide<T>>(b)); }
template <typename T>
T wrap_mul(T a, T b) { return static_cast<T>(static_cast<Wide<T>>(a) * static_cast<Wide<T>>(b)); }

template <NumUnary kOp, typename T>
T numeric_unary_of(T v) {
  if constexpr (kOp == NumUnary::kSign) return sign_of(v);
  else if constexpr (std::is_integral_v<T> && kOp == NumUnary::kNeg) return wrap_sub(T(0), v);  // -INT_MIN is INT_MIN
  else if constexpr (kOp == NumUnary::kNeg) return static_cast<T>(-v);
  else if constexpr (std::is_unsigned_v<T>) return v;
  else if constexpr (std::is_integral_v<T>) return v < 0 ? wrap_sub(T(0), v) : v;
  else return v < 0 ? static_cast<T>(-v) : v;
}

// The op is a template parameter: a loop without a switch in it vectorises.
template <NumUnary kOp>
std::unique_ptr<Kernel> numeric_unary() {
  return make_kernel([](const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) {
    dispatch_numeric(in[0].dtype, [&](auto zero) {
      using T = decltype(zero);
      const T* __restrict x = in[0].as<T>();
      T* __restrict y = out[0].as<T>();
      parallel(ctx, in[0].numel(), kGrain, [x, y](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) y[i] = numeric_unary_of<kOp>(x[i]);
      });
    });
  });
}

std::string numeric_only(const KernelInit& init) {
  for (size_t i = 0; i < init.input_types.size(); ++i)
    if (init.node.input(i) != nullptr && !is_numeric(init.input_dtype(i)))
      return "input " + std::to_string(i) + " is " + std::string(ir::dtype_name(init.input_dtype(i))) +
             "; supported: numeric types and bool";
  return "";
}

// ---- binary and variadic ops with broadcasting ------------------------------------------------

enum class Binary { kAdd, kSub, kMul, kDiv, kPow, kMin, kMax, kMod, kFMod, kEqual, kLess, kGreater, kLessEq, kGreaterEq, kAnd, kOr, kXor, kPRelu };

bool is_compare(Binary op) { return op >= Binary::kEqual && op <= Binary::kXor; }

template <typename T>
T binary_value(Binary op, T a, T b) {
  switch (op) {
    case Binary::kAdd:
      if constexpr (std::is_integral_v<T>) return wrap_add(a, b);
      else return static_cast<T>(a + b);
    case Binary::kSub:
      if constexpr (std::is_integral_v<T>) return wrap_sub(a, b);
      else return static_cast<T>(a - b);
    case Binary::kMul:
      if constexpr (std::is_integral_v<T>) return wrap_mul(a, b);
      else return static_cast<T>(a * b);
    case Binary::kDiv:
      // INT_MIN / -1 traps on x86 (SIGFPE); it wraps to INT_MIN, as -INT_MIN does.
      if constexpr (std::is_signed_v<T> && std::is_integral_v<T>)
        return b == 0 ? T(0) : b == -1 ? wrap_sub(T(0), a) : static_cast<T>(a / b);
      else if constexpr (std::is_integral_v<T>) return b == 0 ? T(0) : static_cast<T>(a / b);
      else return a / b;
    case Binary::kPow:
      if constexpr (std::is_integral_v<T>) {
        // Past T's range the power saturates: the cast of an out-of-range double is undefined.
        return saturate<T>(std::pow(static_cast<double>(a), static_cast<double>(b)));
      } else {
        return static_cast<T>(std::pow(static_cast<double>(a), static_cast<double>(b)));
      }
    case Binary::kMin:
      if constexpr (std::is_floating_point_v<T>) {
        if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
      }
      return a < b ? a : b;
    case Binary::kMax:
      if constexpr (std::is_floating_point_v<T>) {
        if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
      }
      return a > b ? a : b;
    case Binary::kMod:  // integer Mod takes the divisor's sign, like Python
      if constexpr (std::is_integral_v<T>) {
        if (b == 0 || (std::is_signed_v<T> && b == T(-1))) return T(0);  // INT_MIN % -1 traps on x86
        T m = static_cast<T>(a % b);
        if constexpr (std::is_signed_v<T>) {
          if (m != 0 && ((m < 0) != (b < 0))) m = static_cast<T>(m + b);
        }
        return m;
      } else {
        T m = std::fmod(a, b);
        if (m != 0 && ((m < 0) != (b < 0))) m += b;
        return m;
      }
    case Binary::kFMod:
      if constexpr (std::is_integral_v<T>)
        return b == 0 || (std::is_signed_v<T> && b == T(-1)) ? T(0) : static_cast<T>(a % b);
      else return std::fmod(a, b);
    case Binary::kPRelu:
      if constexpr (std::is_integral_v<T>) return a < 0 ? wrap_mul(a, b) : a;
      else return a < 0 ? static_cast<T>(a * b) : a;
    default: return T(0);
  }
}

template <typename T>
uint8_t compare_value(Binary op, T a, T b) {
  switch (op) {
    case Binary::kEqual: return a == b;
    case Binary::kLess: return a < b;
    case Binary::kGreater: return a > b;
    case Binary::kLessEq: return a <= b;
    case Binary::kGreaterEq: return a >= b;
    case Binary::kAnd: return (a != 0) && (b != 0);
    case Binary::kOr: return (a != 0) || (b != 0);
    case Binary::kXor: return (a != 0) != (b != 0);
    default: return 0;
  }
}

// One row of a float Add/Sub/Mul/Div with each side contiguous (stride 1) or broadcast
// (stride 0): the common cases get loops the compiler vectorises per ISA.
template <Binary kOp>
inline float arith(float a, float b) {
  if constexpr (kOp == Binary::kAdd) return a + b;
  if constexpr (kOp == Binary::kSub) return a - b;
  if constexpr (kOp == Binary::kMul) return a * b;
  return a / b;
}

template <Binary kOp>
TETHER_MULTIVERSION void float_row(const float* x, int64_t sx, const float* y, int64_t sy, float* o, int64_t n) {
  if (sx == 1 && sy == 1) {
    for (int64_t i = 0; i < n; ++i) o[i] = arith<kOp>(x[i], y[i]);
  } else if (sx == 1 && sy == 0) {
    const float v = y[0];
    for (int64_t i = 0; i < n; ++i) o[i] = arith<kOp>(x[i], v);
  } else if (sx == 0 && sy == 1) {
    const float v = x[0];
    for (int64_t i = 0; i < n; ++i) o[i] = arith<kOp>(v, y[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) o[i] = arith<kOp>(x[i * sx], y[i * sy]);
  }
}

using FloatRow = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t);

FloatRow float_row_for(Binary op) {
  switch (op) {
    case Binary::kAdd: return float_row<Binary::kAdd>;
    case Binary::kSub: return float_row<Binary::kSub>;
    case Binary::kMul: return float_row<Binary::kMul>;
    case Binary::kDiv: return float_row<Binary::kDiv>;
    default: return nullptr;
  }
}

// out = a op b, broadcasting; T is the inputs' type, the output is T or bool.
template <typename T>
void binary_loop(const RunContext& ctx, Binary op, const View& a, const View& b, View& out) {
  BroadcastRows rows(out.dims, {&a.dims, &b.dims});
  const T* pa = a.as<T>();
  const T* pb = b.as<T>();
  const int64_t n = rows.row_length();
  const int64_t sa = rows.inner_stride(0), sb = rows.inner_stride(1);
  FloatRow fast = std::is_same_v<T, float> ? float_row_for(op) : nullptr;
  parallel(ctx, rows.rows(), std::max<int64_t>(1, kGrain / std::max<int64_t>(n, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* x = pa + rows.offset(0, r);
      const T* y = pb + rows.offset(1, r);
      if constexpr (std::is_same_v<T, float>) {
        if (fast != nullptr) {
          fast(x, sa, y, sb, out.as<float>() + r * n, n);
          continue;
        }
      }
      if (is_compare(op)) {
        uint8_t* o = out.as<uint8_t>() + r * n;
        for (int64_t i = 0; i < n; ++i) o[i] = compare_value(op, x[i * sa], y[i * sb]);
      } else {
        T* o = out.as<T>() + r * n;
        for (int64_t i = 0; i < n; ++i) o[i] = binary_value(op, x[i * sa], y[i * sb]);
      }
    }
  });
}

std::unique_ptr<Kernel> binary_kernel(Binary op) {
  return make_kernel([op](const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) {
    TETHER_CHECK(broadcast_dims({&in[0].dims, &in[1].dims}) == out[0].dims, "binary op: planned output shape differs");
    dispatch_numeric(in[0].dtype, [&](auto zero) { binary_loop<decltype(zero)>(ctx, op, in[0], in[1], out[0]); });
  });
}

// Pow with an exponent of another type: the exponent is read as double.
TETHER_MULTIVERSION void pow_small(const float* __restrict x, float* __restrict y, int64_t n, int which) {
  switch (which) {
    case 1: for (int64_t i = 0; i < n; ++i) y[i] = x[i]; break;
    case 2: for (int64_t i = 0; i < n; ++i) y[i] = x[i] * x[i]; break;
    default: for (int64_t i = 0; i < n; ++i) y[i] = x[i] * x[i] * x[i]; break;
  }
}

// Float x to a scalar power of 1, 2 or 3 (x * x in RMSNorm, x^3 in the tanh Gelu): multiplies
// per element, vectorised, with pow's results for zeros, infinities and NaN too. false for
// other exponents (0.5 is not sqrt at -inf) and types.
bool pow_scalar_fast(const RunContext& ctx, const View& x, const View& e, View& y) {
  if (x.dtype != DType::kFloat32 || e.numel() != 1 || x.numel() != y.numel()) return false;
  double v;
  switch (e.dtype) {
    case DType::kFloat32: v = e.as<float>()[0]; break;
    case DType::kFloat64: v = e.as<double>()[0]; break;
    case DType::kInt64: v = static_cast<double>(e.as<int64_t>()[0]); break;
    case DType::kInt32: v = e.as<int32_t>()[0]; break;
    default: return false;
  }
  const int which = v == 1.0 ? 1 : v == 2.0 ? 2 : v == 3.0 ? 3 : 0;
  if (which == 0) return false;
  const float* xp = x.as<float>();
  float* yp = y.as<float>();
  parallel(ctx, x.numel(), kGrain, [&](int64_t b, int64_t end) { pow_small(xp + b, yp + b, end - b, which); });
  return true;
}

std::unique_ptr<Kernel> pow_kernel() {
  return make_kernel([](const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) {
    if (pow_scalar_fast(ctx, in[0], in[1], out[0])) return;
    if (in[0].dtype == in[1].dtype) {
      dispatch_numeric(in[0].dtype, [&](auto zero) { binary_loop<decltype(zero)>(ctx, Binary::kPow, in[0], in[1], out[0]); });
      return;
    }
    BroadcastRows rows(out[0].dims, {&in[0].dims, &in[1].dims});
    const int64_t n = rows.row_length();
    dispatch_numeric(in[0].dtype, [&](auto zx) {
      using TX = decltype(zx);
      dispatch_numeric(in[1].dtype, [&](auto zy) {
        using TY = decltype(zy);
        for (int64_t r = 0; r < rows.rows(); ++r) {
          const TX* x = in[0].as<TX>() + rows.offset(0, r);
          const TY* y = in[1].as<TY>() + rows.offset(1, r);
          TX* o = out[0].as<TX>() + r * n;
          for (int64_t i = 0; i < n; ++i)
            o[i] = static_cast<TX>(std::pow(static_cast<double>(x[i * rows.inner_stride(0)]),
                                            static_cast<double>(y[i * rows.inner_stride(1)])));
        }
      });
    });
  });
}

// Min, Max, Sum, Mean over any number of inputs: folded pairwise into the output.
std::unique_ptr<Kernel> variadic_kernel(Binary op, bool mean) {
  return make_kernel([op, mean](const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) {
    dispatch_numeric(in[0].dtype, [&](auto zero) {
      using T = decltype(zero);
      View acc = out[0];
      // First input broadcast into the output, then each further input folded in.
      BroadcastRows rows(acc.dims, {&in[0].dims});
      const int64_t n = rows.row_length();
      for (int64_t r = 0; r < rows.rows(); ++r) {
        const T* x = in[0].as<T>() + rows.offset(0, r);
        T* o = acc.as<T>() + r * n;
        for (int64_t i = 0; i < n; ++i) o[i] = x[i * rows.inner_stride(0)];
      }
      for (size_t k = 1; k < in.size(); ++k) binary_loop<T>(ctx, op, acc, in[k], acc);
      if (mean) {
        T* o = acc.as<T>();
        const auto count = static_cast<T>(in.size());
        for (int64_t i = 0; i < acc.numel(); ++i) o[i] = static_cast<T>(o[i] / count);
      }
    });
  });
}

std::string same_numeric_types(const KernelInit& init) {
  if (std::string why = numeric_only(init); !why.empty()) return why;
  for (size_t i = 1; i < init.input_types.size(); ++i)
    if (init.input_dtype(i) != init.input_dtype(0))
      return "inputs 0 and " + std::to_string(i) + " differ in type (" + std::string(ir::dtype_name(init.input_dtype(0))) +
             " vs " + std::string(ir::dtype_name(init.input_dtype(i))) + ")";
  return "";
}

std::string pow_types(const KernelInit& init) { return numeric_only(init); }

// ---- Where, Clip, Not, IsNaN, IsInf -------------------------------------------------------

std::unique_ptr<Kernel> where_kernel(const KernelInit&) {
  return make_kernel([](const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) {
    BroadcastRows rows(out[0].dims, {&in[0].dims, &in[1].dims, &in[2].dims});
    const int64_t n = rows.row_length();
    const size_t bytes = static_cast<size_t>(ir::dtype_bits(in[1].dtype) / 8);
    TETHER_CHECK(bytes > 0, "Where on a packed or string type");
    parallel(ctx, rows.rows(), 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* c = in[0].as<uint8_t>() + rows.offset(0, r);
        const auto* x = in[1].as<std::byte>() + rows.offset(1, r) * static_cast<int64_t>(bytes);
        const auto* y = in[2].as<std::byte>() + rows.offset(2, r) * static_cast<int64_t>(bytes);
        auto* o = out[0].as<std::byte>() + r * n * static_cast<int64_t>(bytes);
        for (int64_t i = 0; i < n; ++i) {
          const std::byte* src = c[i * rows.inner_stride(0)] ? x + i * rows.inner_stride(1) * static_cast<int64_t>(bytes)
                                                             : y + i * rows.inner_stride(2) * static_cast<int64_t>(bytes);
          std::memcpy(o + i * static_cast<int64_t>(bytes), src, bytes);
        }
      }
    });
  });
}

std::string where_types(const KernelInit& init) {
  if (init.input_dtype(0) != DType::kBool) return "condition is " + std::string(ir::dtype_name(init.input_dtype(0))) + ", not bool";
  if (init.input_dtype(1) != init.input_dtype(2)) return "the two branches differ in type";
  if (ir::dtype_bits(init.input_dtype(1)) % 8 != 0 || init.input_dtype(1) == DType::kString)
    return "branches of type " + std::string(ir::dtype_name(init.input_dtype(1))) + " are not supported";
  return "";
}

// min(max(x, lo), hi): with lo > hi every element becomes hi, as ONNX defines. A NaN fails
// both comparisons and passes through, as in onnxruntime.
template <typename T>
inline T clip_one(T x, T lo, T hi) {
  const T t = x < lo ? lo : x;
  return t > hi ? hi : t;
}

TETHER_MULTIVERSION void clip_floats(const float* x, float* y, int64_t n, float lo, float hi) {
  for (int64_t i = 0; i < n; ++i) y[i] = clip_one(x[i], lo, hi);
}

std::unique_ptr<Kernel> clip_kernel(const KernelInit& init) {
  // Opset < 11 keeps the bounds in attributes; later opsets take optional inputs.
  const bool attrs = init.node.attr("min") != nullptr || init.node.attr("max") != nullptr || init.opset < 11;
  const float amin = init.node.attr_float("min", -std::numeric_limits<float>::infinity());
  const float amax = init.node.attr_float("max", std::numeric_limits<float>::infinity());
  return make_kernel([attrs, amin, amax](const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) {
    dispatch_numeric(in[0].dtype, [&](auto zero) {
      using T = decltype(zero);
      T lo = std::numeric_limits<T>::lowest(), hi = std::numeric_limits<T>::max();
      if (attrs) {
        // The float bounds saturate to T's range (the default -inf and +inf included): casting
        // an out-of-range float to an integer is undefined behaviour.
        if constexpr (std::is_integral_v<T>) {
          lo = saturate<T>(amin, lo);
          hi = saturate<T>(amax, hi);
        } else {
          lo = static_cast<T>(amin);
          hi = static_cast<T>(amax);
        }
      } else {
        if (present(in, 1)) lo = in[1].as<T>()[0];
        if (present(in, 2)) hi = in[2].as<T>()[0];
      }
      const T* x = in[0].as<T>();
      T* y = out[0].as<T>();
      parallel(ctx, in[0].numel(), kGrain, [&](int64_t b, int64_t e) {
        if constexpr (std::is_same_v<T, float>) {
          clip_floats(x + b, y + b, e - b, lo, hi);
        } else {
          for (int64_t i = b; i < e; ++i) y[i] = clip_one(x[i], lo, hi);
        }
      });
    });
  });
}

std::unique_ptr<Kernel> not_kernel(const KernelInit&) {
  return make_kernel([](const RunContext&, const std::vector<View>& in, std::vector<View>& out) {
    const uint8_t* x = in[0].as<uint8_t>();
    uint8_t* y = out[0].as<uint8_t>();
    for (int64_t i = 0; i < in[0].numel(); ++i) y[i] = !x[i];
  });
}

std::unique_ptr<Kernel> isnan_kernel(const KernelInit&) {
  return make_kernel([](const RunContext&, const std::vector<View>& in, std::vector<View>& out) {
    for (int64_t i = 0; i < in[0].numel(); ++i) out[0].as<uint8_t>()[i] = std::isnan(in[0].as<float>()[i]);
  });
}

std::unique_ptr<Kernel> isinf_kernel(const KernelInit& init) {
  const bool neg = init.node.attr_int("detect_negative", 1) != 0;
  const bool pos = init.node.attr_int("detect_positive", 1) != 0;
  return make_kernel([neg, pos](const RunContext&, const std::vector<View>& in, std::vector<View>& out) {
    for (int64_t i = 0; i < in[0].numel(); ++i) {
      const float v = in[0].as<float>()[i];
      out[0].as<uint8_t>()[i] = std::isinf(v) && ((v > 0 && pos) || (v < 0 && neg));
    }
  });
}

// ---- Cast -----------------------------------------------------------------------------------

// Reads element i of `v` as double (the common path of every cast between number types).
double read_as_double(const View& v, int64_t i) {
  switch (v.dtype) {
    case DType::kFloat16: return util::half_to_float(v.as<uint16_t>()[i]);
    case DType::kBFloat16: return util::bfloat16_to_float(v.as<uint16_t>()[i]);
    default: {
      double d = 0;
      dispatch_numeric(v.dtype, [&](auto zero) { d = static_cast<double>(v.as<decltype(zero)>()[i]); });
      return d;
    }
  }
}

template <typename T>
T convert(double d) {
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(d);
  } else {
    // Out-of-range floats have no defined integer value; saturate rather than invoke UB.
    if (std::isnan(d)) return T(0);
    if (d <= static_cast<double>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
    if (d >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    return static_cast<T>(d);
  }
}

void write_from_double(View& v, int64_t i, double d) {
  switch (v.dtype) {
    case DType::kFloat16: v.as<uint16_t>()[i] = util::float_to_half(static_cast<float>(d)); return;
    case DType::kBFloat16: v.as<uint16_t>()[i] = util::float_to_bfloat16(static_cast<float>(d)); return;
    case DType::kBool: v.as<uint8_t>()[i] = d != 0.0; return;
    default: dispatch_numeric(v.dtype, [&](auto zero) { v.as<decltype(zero)>()[i] = convert<decltype(zero)>(d); });
  }
}

bool int64_like(DType t) { return t == DType::kInt64 || t == DType::kUInt64; }

std::unique_ptr<Kernel> cast_kernel(const KernelInit&) {
  return make_kernel([](const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) {
    const View& x = in[0];
    View& y = out[0];
    if (x.dtype == y.dtype) {
      std::memcpy(y.data, x.data, static_cast<size_t>(*ir::storage_bytes(x.dtype, x.numel())));
      return;
    }
    // 64-bit integers do not all fit a double: copy them between integer types directly.
    if (int64_like(x.dtype) && ir::dtype_is_integer(y.dtype)) {
      dispatch_numeric(x.dtype, [&](auto zx) {
        dispatch_numeric(y.dtype, [&](auto zy) {
          for (int64_t i = 0; i < x.numel(); ++i) y.as<decltype(zy)>()[i] = static_cast<decltype(zy)>(x.as<decltype(zx)>()[i]);
        });
      });
      return;
    }
    parallel(ctx, x.numel(), kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) write_from_double(y, i, read_as_double(x, i));
    });
  });
}

bool castable(DType t) { return is_numeric(t) || t == DType::kFloat16 || t == DType::kBFloat16; }

std::string cast_types(const KernelInit& init) {
  if (!castable(init.input_dtype(0))) return "casting from " + std::string(ir::dtype_name(init.input_dtype(0))) + " is not supported";
  if (!castable(init.output_dtype(0))) return "casting to " + std::string(ir::dtype_name(init.output_dtype(0))) + " is not supported";
  return "";
}

std::unique_ptr<Kernel> dropout_kernel(const KernelInit&) {
  return make_kernel([](const RunContext&, const std::vector<View>& in, std::vector<View>& out) {
    std::memcpy(out[0].data, in[0].data, static_cast<size_t>(*ir::storage_bytes(in[0].dtype, in[0].numel())));
    if (out.size() > 1 && out[1].data != nullptr) std::memset(out[1].data, 1, static_cast<size_t>(out[1].numel()));
  });
}

std::string dropout_types(const KernelInit& init) {
  if (const ir::Tensor* t = init.constant(2); init.node.input(2) != nullptr && (t == nullptr || t->data<uint8_t>()[0] != 0))
    return "training_mode must be a constant false";
  return castable(init.input_dtype(0)) ? "" : "input 0 is " + std::string(ir::dtype_name(init.input_dtype(0)));
}

template <UnaryFn F>
constexpr int64_t unary_grain() {
  constexpr bool cheap = F == relu || F == leaky_relu || F == floor_ || F == ceil_ || F == round_ || F == hard_swish ||
                         F == hard_sigmoid || F == shrink || F == thresholded_relu || F == softsign || F == reciprocal ||
                         F == sqrt_;
  return cheap ? kGrain : kGrain / 8;
}

template <UnaryFn F>
VectorUnaryFn vector_kernel() {
#if defined(__x86_64__)
  // Where AVX-512 is on, unary_loop's 16-lane copy (TETHER_MULTIVERSION) computes these ops.
  const util::CpuFeatures& f = util::cpu_features();
  if (f.avx2 && !f.avx512) {
    if constexpr (F == exp_) return f32_vexp__avx2;
    if constexpr (F == erf_) return f32_verf__avx2;
    if constexpr (F == tanh_) return f32_vtanh__avx2;
    if constexpr (F == sigmoid) return f32_vsigmoid__avx2;
    if constexpr (F == gelu) return f32_vgelu__avx2;
    if constexpr (F == gelu_tanh) return f32_vgelu_tanh__avx2;
  }
#endif
  return nullptr;
}

}  // namespace

void register_elementwise(KernelRegistry& r) {
#define TETHER_UNARY(op, fn) \
  TETHER_ADD(r, op, [](const KernelInit&) { return unary_kernel<fn>({}); }, float_only)
#define TETHER_UNARY_P(op, fn, ...)                                                      \
  TETHER_ADD(r, op, [](const KernelInit& init) { return unary_kernel<fn>(__VA_ARGS__); }, float_only)
  TETHER_UNARY("Relu", relu);
  TETHER_UNARY("Sigmoid", sigmoid);
  TETHER_UNARY("Tanh", tanh_);
  TETHER_UNARY("HardSwish", hard_swish);
  TETHER_UNARY("Softplus", softplus);
  TETHER_UNARY("Softsign", softsign);
  TETHER_UNARY("Mish", mish);
  TETHER_UNARY("Sqrt", sqrt_);
  TETHER_UNARY("Exp", exp_);
  TETHER_UNARY("Log", log_);
  TETHER_UNARY("Reciprocal", reciprocal);
  TETHER_UNARY("Erf", erf_);
  TETHER_UNARY("Floor", floor_);
  TETHER_UNARY("Ceil", ceil_);
  TETHER_UNARY("Round", round_);
  TETHER_UNARY("Sin", sin_);
  TETHER_UNARY("Cos", cos_);
  TETHER_UNARY("Tan", tan_);
  TETHER_UNARY("Asin", asin_);
  TETHER_UNARY("Acos", acos_);
  TETHER_UNARY("Atan", atan_);
  TETHER_UNARY("Sinh", sinh_);
  TETHER_UNARY("Cosh", cosh_);
  TETHER_UNARY("Asinh", asinh_);
  TETHER_UNARY("Acosh", acosh_);
  TETHER_UNARY("Atanh", atanh_);
  TETHER_UNARY_P("LeakyRelu", leaky_relu, UnaryParams{init.node.attr_float("alpha", 0.01f)});
  TETHER_UNARY_P("HardSigmoid", hard_sigmoid,
                 UnaryParams{init.node.attr_float("alpha", 0.2f), init.node.attr_float("beta", 0.5f)});
  // ONNX's Gelu, and ai.tether's for models of opsets before 20 (passes::fuse_gelu writes it).
  auto gelu_kernel = [](const KernelInit& init) {
    return init.node.attr_string("approximate", "none") == "tanh" ? unary_kernel<gelu_tanh>({}) : unary_kernel<gelu>({});
  };
  TETHER_ADD(r, "Gelu", gelu_kernel, float_only);
  TETHER_ADD_IN(r, "ai.tether", "Gelu", gelu_kernel, float_only);
  TETHER_UNARY_P("Elu", elu, UnaryParams{init.node.attr_float("alpha", 1.0f)});
  TETHER_UNARY_P("Selu", selu,
                 UnaryParams{init.node.attr_float("alpha", 1.67326319217681884765625f), 0,
                             init.node.attr_float("gamma", 1.05070102214813232421875f)});
  TETHER_UNARY_P("Celu", celu, UnaryParams{init.node.attr_float("alpha", 1.0f)});
  TETHER_UNARY_P("ThresholdedRelu", thresholded_relu, UnaryParams{init.node.attr_float("alpha", 1.0f)});
  TETHER_UNARY_P("Shrink", shrink, UnaryParams{init.node.attr_float("lambd", 0.5f), init.node.attr_float("bias", 0.0f)});
#undef TETHER_UNARY
#undef TETHER_UNARY_P

  TETHER_ADD(r, "Neg", [](const KernelInit&) { return numeric_unary<NumUnary::kNeg>(); }, numeric_only);
  TETHER_ADD(r, "Abs", [](const KernelInit&) { return numeric_unary<NumUnary::kAbs>(); }, numeric_only);
  TETHER_ADD(r, "Sign", [](const KernelInit&) { return numeric_unary<NumUnary::kSign>(); }, numeric_only);

  TETHER_ADD(r, "Add", [](const KernelInit&) { return binary_kernel(Binary::kAdd); }, same_numeric_types);
  TETHER_ADD(r, "Sub", [](const KernelInit&) { return binary_kernel(Binary::kSub); }, same_numeric_types);
  TETHER_ADD(r, "Mul", [](const KernelInit&) { return binary_kernel(Binary::kMul); }, same_numeric_types);
  TETHER_ADD(r, "Div", [](const KernelInit&) { return binary_kernel(Binary::kDiv); }, same_numeric_types);
  TETHER_ADD(r, "Pow", [](const KernelInit&) { return pow_kernel(); }, pow_types);
  TETHER_ADD(r, "PRelu", [](const KernelInit&) { return binary_kernel(Binary::kPRelu); }, same_numeric_types);
  TETHER_ADD(r, "Mod",
        [](const KernelInit& init) { return binary_kernel(init.node.attr_int("fmod", 0) ? Binary::kFMod : Binary::kMod); },
        same_numeric_types);
  TETHER_ADD(r, "Equal", [](const KernelInit&) { return binary_kernel(Binary::kEqual); }, same_numeric_types);
  TETHER_ADD(r, "Less", [](const KernelInit&) { return binary_kernel(Binary::kLess); }, same_numeric_types);
  TETHER_ADD(r, "Greater", [](const KernelInit&) { return binary_kernel(Binary::kGreater); }, same_numeric_types);
  TETHER_ADD(r, "LessOrEqual", [](const KernelInit&) { return binary_kernel(Binary::kLessEq); }, same_numeric_types);
  TETHER_ADD(r, "GreaterOrEqual",
        [](const KernelInit&) { return binary_kernel(Binary::kGreaterEq); }, same_numeric_types);
  TETHER_ADD(r, "And", [](const KernelInit&) { return binary_kernel(Binary::kAnd); }, same_numeric_types);
  TETHER_ADD(r, "Or", [](const KernelInit&) { return binary_kernel(Binary::kOr); }, same_numeric_types);
  TETHER_ADD(r, "Xor", [](const KernelInit&) { return binary_kernel(Binary::kXor); }, same_numeric_types);
  TETHER_ADD(r, "Min", [](const KernelInit&) { return variadic_kernel(Binary::kMin, false); }, same_numeric_types);
  TETHER_ADD(r, "Max", [](const KernelInit&) { return variadic_kernel(Binary::kMax, false); }, same_numeric_types);
  TETHER_ADD(r, "Sum", [](const KernelInit&) { return variadic_kernel(Binary::kAdd, false); }, same_numeric_types);
  TETHER_ADD(r, "Mean", [](const KernelInit&) { return variadic_kernel(Binary::kAdd, true); }, same_numeric_types);

  TETHER_ADD(r, "Where", where_kernel, where_types);
  TETHER_ADD(r, "Clip", clip_kernel, numeric_only);
  TETHER_ADD(r, "Not", not_kernel, [](const KernelInit& init) { return require_dtype(init, 0, {DType::kBool}); });
  TETHER_ADD(r, "IsNaN", isnan_kernel, float_only);
  TETHER_ADD(r, "IsInf", isinf_kernel, float_only);
  TETHER_ADD(r, "Cast", cast_kernel, cast_types);
  TETHER_ADD(r, "CastLike", cast_kernel, cast_types);  // the output type (input 1's) is all the kernel reads
  TETHER_ADD(r, "Dropout", dropout_kernel, dropout_types);
}

}  // namespace tether::engine::cpu
