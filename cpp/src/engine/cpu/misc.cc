// Selection and rearrangement: TopK, CumSum, Trilu, OneHot, DepthToSpace, SpaceToDepth,
// Hardmax.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <type_traits>

#include "engine/cpu/cpu.h"

namespace tether::engine::cpu {

namespace {

size_t norm_axis(int64_t axis, size_t rank) { return static_cast<size_t>(axis < 0 ? axis + static_cast<int64_t>(rank) : axis); }

// Sizes before, along and after `axis`.
struct AxisSplit {
  int64_t outer = 1, len = 1, inner = 1;
  AxisSplit(const std::vector<int64_t>& dims, size_t axis) {
    for (size_t d = 0; d < dims.size(); ++d) {
      if (d < axis) outer *= dims[d];
      else if (d == axis) len = dims[d];
      else inner *= dims[d];
    }
  }
};

std::string numeric_input(const KernelInit& init, size_t i) {
  if (is_numeric(init.input_dtype(i))) return "";
  return "input " + std::to_string(i) + " is " + std::string(ir::dtype_name(init.input_dtype(i))) + "; supported: numeric types";
}

// ---- TopK -------------------------------------------------------------------------------------

// Orders (value, index) pairs: the wanted values first, equal values by lower index (as the
// spec and onnxruntime do). NaN counts as the largest value, which keeps the order strict.
template <typename T>
bool topk_before(T a, int64_t ia, T b, int64_t ib, bool largest) {
  if constexpr (std::is_floating_point_v<T>) {
    const bool na = std::isnan(a), nb = std::isnan(b);
    if (na || nb) {
      if (na && nb) return ia < ib;
      return largest ? na : nb;
    }
  }
  if (a != b) return largest ? a > b : a < b;
  return ia < ib;
}

class TopKKernel final : public HostKernel {
 public:
  explicit TopKKernel(const KernelInit& init)
      : axis_(init.node.attr_int("axis", -1)),
        largest_(init.node.attr_int("largest", 1) != 0),
        attr_k_(init.node.attr_int("k", -1)),
        name_(init.node.describe()) {}

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    const View& x = in[0];
    const size_t a = norm_axis(axis_, x.rank());
    const int64_t k = attr_k_ >= 0 ? attr_k_ : scalar_int(in[1]);
    const AxisSplit s(x.dims, a);
    if (k < 0 || k > s.len)
      throw ArgumentError(name_ + ": k is " + std::to_string(k) + ", expected 0 <= k <= " + std::to_string(s.len) +
                          " (the size of axis " + std::to_string(a) + ")");
    TETHER_CHECK(out[0].dims[a] == k, "TopK: planned output does not have k entries on the axis");
    int64_t* indices = out.size() > 1 && out[1].data != nullptr ? out[1].as<int64_t>() : nullptr;
    dispatch_numeric(x.dtype, [&](auto zero) {
      using T = decltype(zero);
      const T* xp = x.as<T>();
      T* values = out[0].data != nullptr ? out[0].as<T>() : nullptr;
      parallel(ctx, s.outer * s.inner, 1, [&](int64_t t0, int64_t t1) {
        std::vector<int64_t> order(static_cast<size_t>(s.len));
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t o = t / s.inner, i = t % s.inner;
          const T* row = xp + o * s.len * s.inner + i;
          std::iota(order.begin(), order.end(), int64_t{0});
          // Always sorted: with sorted=0 the spec leaves the order open, so sorted is valid too.
          std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t p, int64_t q) {
            return topk_before(row[p * s.inner], p, row[q * s.inner], q, largest_);
          });
          const int64_t base = o * k * s.inner + i;
          for (int64_t j = 0; j < k; ++j) {
            const int64_t src = order[static_cast<size_t>(j)];
            if (values != nullptr) values[base + j * s.inner] = row[src * s.inner];
            if (indices != nullptr) indices[base + j * s.inner] = src;
          }
        }
      });
    });
  }

 private:
  int64_t axis_;
  bool largest_;
  int64_t attr_k_;  // opset 1 keeps k in an attribute; -1 when it is an input
  std::string name_;
};

std::string topk_check(const KernelInit& init) {
  if (std::string why = numeric_input(init, 0); !why.empty()) return why;
  if (init.node.input(1) != nullptr) return require_dtype(init, 1, {DType::kInt64, DType::kInt32});
  return "";
}

// ---- CumSum -----------------------------------------------------------------------------------

std::unique_ptr<Kernel> cumsum_kernel(const KernelInit& init) {
  const bool exclusive = init.node.attr_int("exclusive", 0) != 0;
  const bool reverse = init.node.attr_int("reverse", 0) != 0;
  const std::string name = init.node.describe();
  return make_kernel([=](const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) {
    const View& x = in[0];
    const auto rank = static_cast<int64_t>(x.rank());
    const int64_t axis = scalar_int(in[1]);
    if (axis < -rank || axis >= rank)
      throw ArgumentError(name + ": axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
    const AxisSplit s(x.dims, norm_axis(axis, x.rank()));
    dispatch_numeric(x.dtype, [&](auto zero) {
      using T = decltype(zero);
      // Float sums accumulate in double; integers in their own type (int64 does not fit a double).
      using Acc = std::conditional_t<std::is_floating_point_v<T>, double, T>;
      const T* xp = x.as<T>();
      T* yp = out[0].as<T>();
      parallel(ctx, s.outer * s.inner, 64, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          const int64_t base = (t / s.inner) * s.len * s.inner + t % s.inner;
          Acc acc = 0;
          for (int64_t j = 0; j < s.len; ++j) {
            const int64_t at = base + (reverse ? s.len - 1 - j : j) * s.inner;
            if (exclusive) {
              yp[at] = static_cast<T>(acc);
              acc = static_cast<Acc>(acc + static_cast<Acc>(xp[at]));
            } else {
              acc = static_cast<Acc>(acc + static_cast<Acc>(xp[at]));
              yp[at] = static_cast<T>(acc);
            }
          }
        }
      });
    });
  });
}

std::string cumsum_check(const KernelInit& init) {
  if (std::string why = numeric_input(init, 0); !why.empty()) return why;
  return require_dtype(init, 1, {DType::kInt64, DType::kInt32});
}

// ---- Trilu ------------------------------------------------------------------------------------

std::unique_ptr<Kernel> trilu_kernel(const KernelInit& init) {
  const bool upper = init.node.attr_int("upper", 1) != 0;
  return make_kernel([upper](const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) {
    const View& x = in[0];
    TETHER_CHECK(x.rank() >= 2, "Trilu: input of rank < 2 passed inference");
    const int64_t k = present(in, 1) ? scalar_int(in[1]) : 0;
    const int64_t rows = x.dims[x.rank() - 2], cols = x.dims[x.rank() - 1];
    const int64_t mats = rows * cols == 0 ? 0 : x.numel() / (rows * cols);
    const size_t size = elem_bytes(x.dtype);
    auto* y = out[0].as<std::byte>();
    const auto* xp = x.as<std::byte>();
    parallel(ctx, mats * rows, 16, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t i = r % rows;
        for (int64_t j = 0; j < cols; ++j) {
          const bool keep = upper ? j - i >= k : j - i <= k;
          const int64_t at = r * cols + j;
          if (keep) copy_elem(y, at, xp, at, size);
          else std::memset(y + at * static_cast<int64_t>(size), 0, size);
        }
      }
    });
  });
}

std::string trilu_check(const KernelInit& init) {
  if (std::string why = fixed_size(init); !why.empty()) return why;
  if (init.node.input(1) != nullptr) return require_dtype(init, 1, {DType::kInt64, DType::kInt32});
  return "";
}

// ---- OneHot -----------------------------------------------------------------------------------

// An element of a numeric view as int64 (float indices are truncated, as onnxruntime does).
int64_t read_int(const View& v, int64_t i) {
  int64_t r = 0;
  dispatch_numeric(v.dtype, [&](auto zero) { r = static_cast<int64_t>(v.as<decltype(zero)>()[i]); });
  return r;
}

std::unique_ptr<Kernel> one_hot_kernel(const KernelInit& init) {
  const int64_t axis = init.node.attr_int("axis", -1);
  const std::string name = init.node.describe();
  return make_kernel([axis, name](const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) {
    const View& idx = in[0];
    View& y = out[0];
    const size_t a = norm_axis(axis, y.rank());
    const int64_t depth = read_int(in[1], 0);
    if (depth < 1) throw ArgumentError(name + ": depth is " + std::to_string(depth) + ", expected >= 1");
    TETHER_CHECK(y.dims[a] == depth, "OneHot: planned depth differs from the depth input");
    TETHER_CHECK(in[2].numel() == 2, "OneHot: values must hold [off, on]");
    const size_t size = elem_bytes(y.dtype);
    const auto* off = in[2].as<std::byte>();
    const std::byte* on = off + size;
    const AxisSplit s(y.dims, a);  // outer * inner is the number of indices
    parallel(ctx, s.outer * s.inner, 256, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        int64_t v = read_int(idx, t);
        if (v < 0) v += depth;  // negative indices count from the end; out of range gives all off
        const int64_t o = t / s.inner, i = t % s.inner;
        for (int64_t j = 0; j < depth; ++j)
          std::memcpy(y.as<std::byte>() + ((o * depth + j) * s.inner + i) * static_cast<int64_t>(size), j == v ? on : off, size);
      }
    });
  });
}

std::string one_hot_check(const KernelInit& init) {
  if (std::string why = numeric_input(init, 0); !why.empty()) return why;
  if (std::string why = numeric_input(init, 1); !why.empty()) return why;
  const DType t = init.input_dtype(2);
  if (t == DType::kString || ir::dtype_bits(t) % 8 != 0 || t == DType::kUndefined)
    return "values are " + std::string(ir::dtype_name(t)) + "; supported: types of whole bytes";
  return "";
}

// ---- DepthToSpace, SpaceToDepth -----------------------------------------------------------------

// Copies x, seen with dims `dims`, to y in the order of `perm` (y's dim d is x's dim perm[d]).
void permute_copy(const RunContext& ctx, const View& x, View& y, const std::vector<int64_t>& dims,
                  const std::vector<size_t>& perm) {
  const std::vector<int64_t> xs = strides_of(dims);
  std::vector<int64_t> od(perm.size()), st(perm.size());
  for (size_t d = 0; d < perm.size(); ++d) {
    od[d] = dims[perm[d]];
    st[d] = xs[perm[d]];
  }
  const size_t size = elem_bytes(x.dtype);
  parallel(ctx, y.numel(), 1 << 12, [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      int64_t rem = o, src = 0;
      for (size_t d = od.size(); d-- > 0;) {
        src += (rem % od[d]) * st[d];
        rem /= od[d];
      }
      copy_elem(y.as<std::byte>(), o, x.as<std::byte>(), src, size);
    }
  });
}

std::unique_ptr<Kernel> depth_to_space_kernel(const KernelInit& init, bool to_space) {
  const int64_t b = init.node.attr_int("blocksize", 1);
  const bool crd = init.node.attr_string("mode", "DCR") == "CRD";
  return make_kernel([=](const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) {
    const View& x = in[0];
    const int64_t n = x.dims[0], c = x.dims[1], h = x.dims[2], w = x.dims[3];
    if (to_space) {
      const int64_t oc = c / (b * b);
      TETHER_CHECK(out[0].dims == (std::vector<int64_t>{n, oc, h * b, w * b}), "DepthToSpace: planned shape differs");
      // DCR reads channels as (b1, b2, c), CRD as (c, b1, b2); both write (n, c, h, b1, w, b2).
      if (crd) permute_copy(ctx, x, out[0], {n, oc, b, b, h, w}, {0, 1, 4, 2, 5, 3});
      else permute_copy(ctx, x, out[0], {n, b, b, oc, h, w}, {0, 3, 4, 1, 5, 2});
    } else {
      TETHER_CHECK(out[0].dims == (std::vector<int64_t>{n, c * b * b, h / b, w / b}), "SpaceToDepth: planned shape differs");
      // The inverse of DepthToSpace in the same mode: DCR writes channels as (b1, b2, c), CRD
      // (opset 28) as (c, b1, b2).
      if (crd) permute_copy(ctx, x, out[0], {n, c, h / b, b, w / b, b}, {0, 1, 3, 5, 2, 4});
      else permute_copy(ctx, x, out[0], {n, c, h / b, b, w / b, b}, {0, 3, 5, 1, 2, 4});
    }
  });
}

std::string depth_to_space_check(const KernelInit& init) {
  const std::string mode = init.node.attr_string("mode", "DCR");
  if (mode != "DCR" && mode != "CRD") return "mode is '" + mode + "'; supported: DCR, CRD";
  if (init.node.attr_int("blocksize", 0) < 1) return "blocksize must be >= 1";
  return fixed_size(init);
}

// ---- Hardmax ----------------------------------------------------------------------------------

// 1 at the first largest element along `axis` (opset >= 13), or along the flattened dims
// from `axis` on (older opsets), 0 elsewhere.
std::unique_ptr<Kernel> hardmax_kernel(const KernelInit& init) {
  const bool coerce = init.opset < 13;
  const int64_t axis = init.node.attr_int("axis", coerce ? 1 : -1);
  return make_kernel([axis, coerce](const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) {
    const View& x = in[0];
    const size_t a = norm_axis(axis, x.rank());
    int64_t outer = 1, len = 1, inner = 1;
    for (size_t d = 0; d < x.rank(); ++d) {
      if (d < a) outer *= x.dims[d];
      else if (d == a || coerce) len *= x.dims[d];
      else inner *= x.dims[d];
    }
    const float* xp = x.as<float>();
    float* yp = out[0].as<float>();
    parallel(ctx, outer * inner, 16, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t base = (t / inner) * len * inner + t % inner;
        int64_t best = 0;
        for (int64_t j = 1; j < len; ++j)
          if (xp[base + j * inner] > xp[base + best * inner]) best = j;
        for (int64_t j = 0; j < len; ++j) yp[base + j * inner] = j == best ? 1.0f : 0.0f;
      }
    });
  });
}

}  // namespace

void register_misc(KernelRegistry& r) {
  TETHER_ADD(r, "TopK",
        [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<TopKKernel>(i); }, topk_check);
  TETHER_ADD(r, "CumSum", cumsum_kernel, cumsum_check);
  TETHER_ADD(r, "Trilu", trilu_kernel, trilu_check);
  TETHER_ADD(r, "OneHot", one_hot_kernel, one_hot_check);
  TETHER_ADD(r, "DepthToSpace",
        [](const KernelInit& i) { return depth_to_space_kernel(i, true); }, depth_to_space_check);
  TETHER_ADD(r, "SpaceToDepth",
        [](const KernelInit& i) { return depth_to_space_kernel(i, false); }, depth_to_space_check);
  TETHER_ADD(r, "Hardmax", hardmax_kernel, float_only);
}

}  // namespace tether::engine::cpu
