// Reductions: ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare, ArgMax, ArgMin.
// Sums accumulate in double.
#include <algorithm>
#include <cmath>
#include <optional>
#include <limits>
#include <type_traits>

#include "engine/cpu/cpu.h"

namespace tether::engine::cpu {

namespace {

enum class Reduce { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kLogSum, kLogSumExp, kSumSquare };

// Which dims a reduction reduces, given its axes (attribute or input) for this input rank.
// Shape inference has checked the axes; an axis out of range here is an internal error.
std::vector<bool> reduced_dims(const std::vector<int64_t>& axes, size_t rank, bool noop_empty, bool* noop) {
  std::vector<bool> red(rank, axes.empty() && !noop_empty);
  *noop = axes.empty() && noop_empty;
  const auto r = static_cast<int64_t>(rank);
  for (int64_t a : axes) {
    TETHER_CHECK(a >= -r && a < r, "reduction axis out of range after inference");
    red[static_cast<size_t>(a < 0 ? a + r : a)] = true;
  }
  return red;
}

// Calls body(out_index, offsets of the reduced elements as a visitor) for every output element.
struct ReduceLayout {
  std::vector<int64_t> kept_dims, kept_strides, red_dims, red_strides;
  int64_t outputs = 1, per_output = 1;

  ReduceLayout(const std::vector<int64_t>& dims, const std::vector<bool>& red) {
    const std::vector<int64_t> st = strides_of(dims);
    for (size_t d = 0; d < dims.size(); ++d) {
      if (red[d]) {
        red_dims.push_back(dims[d]);
        red_strides.push_back(st[d]);
        per_output *= dims[d];
      } else {
        kept_dims.push_back(dims[d]);
        kept_strides.push_back(st[d]);
        outputs *= dims[d];
      }
    }
  }
  int64_t base(int64_t o) const {
    int64_t off = 0;
    for (size_t d = kept_dims.size(); d-- > 0;) {
      off += (o % kept_dims[d]) * kept_strides[d];
      o /= kept_dims[d];
    }
    return off;
  }
  int64_t inner(int64_t r) const {
    int64_t off = 0;
    for (size_t d = red_dims.size(); d-- > 0;) {
      off += (r % red_dims[d]) * red_strides[d];
      r /= red_dims[d];
    }
    return off;
  }
};

template <typename T>
double reduce_one(Reduce op, const T* x, const ReduceLayout& l, int64_t base) {
  double acc = op == Reduce::kProd ? 1.0 : op == Reduce::kMax ? -std::numeric_limits<double>::infinity()
                                         : op == Reduce::kMin ? std::numeric_limits<double>::infinity() : 0.0;
  double m = -std::numeric_limits<double>::infinity();
  if (op == Reduce::kLogSumExp)
    for (int64_t r = 0; r < l.per_output; ++r) m = std::fmax(m, static_cast<double>(x[base + l.inner(r)]));
  // The largest element is subtracted before exp, unless it is infinite (inf - inf is NaN):
  // then the sum itself is inf (or 0 when every element is -inf), as it should be.
  if (std::isinf(m)) m = 0.0;
  for (int64_t r = 0; r < l.per_output; ++r) {
    const double v = static_cast<double>(x[base + l.inner(r)]);
    switch (op) {
      case Reduce::kSum: case Reduce::kMean: case Reduce::kLogSum: acc += v; break;
      case Reduce::kMax: acc = std::isnan(v) || v > acc ? v : acc; break;
      case Reduce::kMin: acc = std::isnan(v) || v < acc ? v : acc; break;
      case Reduce::kProd: acc *= v; break;
      case Reduce::kL1: acc += std::fabs(v); break;
      case Reduce::kL2: case Reduce::kSumSquare: acc += v * v; break;
      case Reduce::kLogSumExp: acc += std::exp(v - m); break;
    }
  }
  switch (op) {
    case Reduce::kMean: return l.per_output ? acc / static_cast<double>(l.per_output) : std::nan("");
    case Reduce::kL2: return std::sqrt(acc);
    case Reduce::kLogSum: return std::log(acc);
    case Reduce::kLogSumExp: return l.per_output ? m + std::log(acc) : -std::numeric_limits<double>::infinity();
    default: return acc;
  }
}

// A reduction's double result as element type T. Integers take NaN as 0 and saturate (the
// log-sum-exp or max of nothing is -inf, a product may leave the type's range): a plain cast of
// those is undefined behaviour.
template <typename T>
T to_element(double v) {
  if constexpr (std::is_integral_v<T>) return saturate<T>(v);
  else return static_cast<T>(v);
}

// The largest (or smallest) element an output reduces, compared in T; of nothing, T's lowest
// (or highest) value.
template <typename T>
T extreme_one(bool max, const T* x, const ReduceLayout& l, int64_t base) {
  T acc = max ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
  for (int64_t r = 0; r < l.per_output; ++r) {
    const T v = x[base + l.inner(r)];
    acc = max ? std::max(acc, v) : std::min(acc, v);
  }
  return acc;
}

// True when the elements each output reduces are one contiguous run: ignoring dims of size 1,
// every reduced dim comes after every kept one (global pooling over H and W, a last-axis sum).
bool reduces_trailing_run(const std::vector<int64_t>& dims, const std::vector<bool>& red) {
  bool reducing = false;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == 1) continue;
    if (red[d]) reducing = true;
    else if (reducing) return false;
  }
  return true;
}

// Sum of n floats in double, in 8 independent lanes (the compiler vectorises the lanes; a
// single running sum would be a serial chain of additions).
TETHER_MULTIVERSION
double sum_run(const float* __restrict x, int64_t n) {
  double lane[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) lane[k] += static_cast<double>(x[i + k]);
  double acc = 0.0;
  for (; i < n; ++i) acc += static_cast<double>(x[i]);
  return acc + ((lane[0] + lane[4]) + (lane[1] + lane[5])) + ((lane[2] + lane[6]) + (lane[3] + lane[7]));
}

// The reduction as [outer][reduced][inner] (dims of size 1 ignored) with inner > 1: every
// reduced dim lies between kept ones, as global pooling of a channels-last [N, H, W, C].
struct MiddleRun {
  int64_t outer = 1, reduced = 1, inner = 1;
};
std::optional<MiddleRun> middle_run(const std::vector<int64_t>& dims, const std::vector<bool>& red) {
  MiddleRun m;
  int stage = 0;  // 0: outer kept dims, 1: reduced dims, 2: inner kept dims
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == 1) continue;
    if (red[d]) {
      if (stage == 2) return std::nullopt;
      stage = 1;
      m.reduced *= dims[d];
    } else if (stage == 0) {
      m.outer *= dims[d];
    } else {
      stage = 2;
      m.inner *= dims[d];
    }
  }
  if (stage != 2 || m.inner == 1) return std::nullopt;
  return m;
}

// y[j] = sum over r < rows of x[r * stride + j], for j < n (n <= kColumns), in double.
constexpr int64_t kColumns = 256;
TETHER_MULTIVERSION
void sum_columns(const float* __restrict x, int64_t rows, int64_t stride, int64_t n, double scale, float* __restrict y) {
  double acc[kColumns] = {};
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) acc[j] += static_cast<double>(x[r * stride + j]);
  for (int64_t j = 0; j < n; ++j) y[j] = static_cast<float>(acc[j] * scale);
}

class ReduceKernel final : public HostKernel {
 public:
  ReduceKernel(const KernelInit& init, Reduce op)
      : op_(op),
        attr_axes_(init.node.attr_ints("axes")),
        has_attr_axes_(init.node.attr("axes") != nullptr),
        noop_empty_(init.node.attr_int("noop_with_empty_axes", 0) == 1) {}

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    const View& x = in[0];
    std::vector<int64_t> axes = has_attr_axes_ ? attr_axes_ : (present(in, 1) ? int_values(in[1]) : std::vector<int64_t>{});
    bool noop = false;
    const std::vector<bool> red = reduced_dims(axes, x.rank(), noop_empty_, &noop);
    // Nothing reduced: Sum, Mean, Max, Min and Prod copy; the others still apply their map to
    // each element (SumSquare squares, L1 takes the magnitude, LogSum the log...), as ONNX's
    // reference and onnxruntime do.
    if (noop && (op_ == Reduce::kSum || op_ == Reduce::kMean || op_ == Reduce::kMax || op_ == Reduce::kMin ||
                 op_ == Reduce::kProd)) {
      std::memcpy(out[0].data, x.data, static_cast<size_t>(*ir::storage_bytes(x.dtype, x.numel())));
      return;
    }
    const ReduceLayout l(x.dims, red);
    TETHER_CHECK(out[0].numel() == l.outputs, "Reduce: planned output size differs");
    if (x.dtype == DType::kFloat32 && (op_ == Reduce::kSum || op_ == Reduce::kMean) && l.per_output > 0 &&
        reduces_trailing_run(x.dims, red)) {
      // Output o reduces the run [o * n, o * n + n): no per-element index arithmetic.
      const int64_t n = l.per_output;
      const double scale = op_ == Reduce::kMean ? 1.0 / static_cast<double>(n) : 1.0;
      const float* xp = x.as<float>();
      float* yp = out[0].as<float>();
      parallel(ctx, l.outputs, std::max<int64_t>(1, 4096 / n), [&](int64_t o0, int64_t o1) {
        for (int64_t o = o0; o < o1; ++o) yp[o] = static_cast<float>(sum_run(xp + o * n, n) * scale);
      });
      return;
    }
    if (x.dtype == DType::kFloat32 && (op_ == Reduce::kSum || op_ == Reduce::kMean) && l.per_output > 0) {
      if (const std::optional<MiddleRun> m = middle_run(x.dims, red)) {
        // Rows of `inner` values added up per block of columns: no per-element index arithmetic.
        const double scale = op_ == Reduce::kMean ? 1.0 / static_cast<double>(m->reduced) : 1.0;
        const int64_t blocks = (m->inner + kColumns - 1) / kColumns;
        const float* xp = x.as<float>();
        float* yp = out[0].as<float>();
        parallel(ctx, m->outer * blocks, 1, [&](int64_t t0, int64_t t1) {
          for (int64_t t = t0; t < t1; ++t) {
            const int64_t o = t / blocks, j0 = t % blocks * kColumns, n = std::min(kColumns, m->inner - j0);
            sum_columns(xp + o * m->reduced * m->inner + j0, m->reduced, m->inner, n, scale, yp + o * m->inner + j0);
          }
        });
        return;
      }
    }
    dispatch_numeric(x.dtype, [&](auto zero) {
      using T = decltype(zero);
      const T* xp = x.as<T>();
      T* yp = out[0].as<T>();
      // Integers' max and min compare exactly (int64 past 2^53 does not survive a double).
      const bool extreme = std::is_integral_v<T> && (op_ == Reduce::kMax || op_ == Reduce::kMin);
      parallel(ctx, l.outputs, 1, [&](int64_t o0, int64_t o1) {
        for (int64_t o = o0; o < o1; ++o)
          yp[o] = extreme ? extreme_one(op_ == Reduce::kMax, xp, l, l.base(o)) : to_element<T>(reduce_one(op_, xp, l, l.base(o)));
      });
    });
  }

 private:
  Reduce op_;
  std::vector<int64_t> attr_axes_;
  bool has_attr_axes_, noop_empty_;
};

class ArgKernel final : public HostKernel {
 public:
  ArgKernel(const KernelInit& init, bool is_max)
      : is_max_(is_max),
        axis_(init.node.attr_int("axis", 0)),
        last_(init.node.attr_int("select_last_index", 0) != 0),
        name_(init.node.describe()) {}

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    const View& x = in[0];
    std::vector<bool> red(x.rank(), false);
    const auto axis = static_cast<size_t>(axis_ < 0 ? axis_ + static_cast<int64_t>(x.rank()) : axis_);
    red[axis] = true;
    const ReduceLayout l(x.dims, red);
    // Of no elements there is no index to give (onnxruntime fails too; numpy raises).
    if (l.per_output == 0 && l.outputs > 0)
      throw ArgumentError(name_ + ": axis " + std::to_string(axis) + " of the input " +
                          ir::Shape::of(x.dims).to_string() + " is empty; there is no index to return");
    dispatch_numeric(x.dtype, [&](auto zero) {
      using T = decltype(zero);
      const T* xp = x.as<T>();
      parallel(ctx, l.outputs, 1, [&](int64_t o0, int64_t o1) {
        for (int64_t o = o0; o < o1; ++o) {
          const int64_t base = l.base(o);
          int64_t best = 0;
          T bv = xp[base];
          for (int64_t r = 1; r < l.per_output; ++r) {
            const T v = xp[base + l.inner(r)];
            const bool better = is_max_ ? (last_ ? v >= bv : v > bv) : (last_ ? v <= bv : v < bv);
            if (better) {
              bv = v;
              best = r;
            }
          }
          out[0].as<int64_t>()[o] = best;
        }
      });
    });
  }

 private:
  bool is_max_;
  int64_t axis_;
  bool last_;
  std::string name_;
};

std::string reduce_check(const KernelInit& init) {
  if (!is_numeric(init.input_dtype(0))) return "input 0 is " + std::string(ir::dtype_name(init.input_dtype(0)));
  return "";
}

}  // namespace

void register_reduce(KernelRegistry& r) {
#define TETHER_REDUCE(op, kind)                                                                                  \
  TETHER_ADD(r, op, [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<ReduceKernel>(i, kind); }, \
             reduce_check)
  TETHER_REDUCE("ReduceSum", Reduce::kSum);
  TETHER_REDUCE("ReduceMean", Reduce::kMean);
  TETHER_REDUCE("ReduceMax", Reduce::kMax);
  TETHER_REDUCE("ReduceMin", Reduce::kMin);
  TETHER_REDUCE("ReduceProd", Reduce::kProd);
  TETHER_REDUCE("ReduceL1", Reduce::kL1);
  TETHER_REDUCE("ReduceL2", Reduce::kL2);
  TETHER_REDUCE("ReduceLogSum", Reduce::kLogSum);
  TETHER_REDUCE("ReduceLogSumExp", Reduce::kLogSumExp);
  TETHER_REDUCE("ReduceSumSquare", Reduce::kSumSquare);
#undef TETHER_REDUCE
  TETHER_ADD(r, "ArgMax",
        [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<ArgKernel>(i, true); },
        reduce_check);
  TETHER_ADD(r, "ArgMin",
        [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<ArgKernel>(i, false); },
        reduce_check);
}

}  // namespace tether::engine::cpu
