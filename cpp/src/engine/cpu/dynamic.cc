// Ops whose output sizes depend on their inputs' values: NonZero, Compress, Unique and
// NonMaxSuppression. Each sizes and allocates its outputs (AllocatingKernel); the session plans
// the steps after it once the sizes are known.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "engine/cpu/cpu.h"

namespace tether::engine::cpu {

namespace {

using ir::Tensor;

Tensor int64_tensor(std::vector<int64_t> dims, const std::vector<int64_t>& values) {
  return Tensor::copy_of(DType::kInt64, std::move(dims), values.data(), static_cast<int64_t>(values.size() * sizeof(int64_t)));
}

// True where element i of a numeric view is not zero.
template <typename F>
void for_each_nonzero(const View& x, F&& f) {
  dispatch_numeric(x.dtype, [&](auto zero) {
    using T = decltype(zero);
    const T* p = x.as<T>();
    const int64_t n = x.numel();
    for (int64_t i = 0; i < n; ++i)
      if (p[i] != T{0}) f(i);
  });
}

std::string numeric_only(const KernelInit& init) {
  if (is_numeric(init.input_dtype(0))) return "";
  return "input 0 is " + std::string(ir::dtype_name(init.input_dtype(0))) + "; supported: numeric and bool types";
}

// ---- NonZero ----------------------------------------------------------------------------------

// Indices of the non-zero elements, one row per dim, in row-major order. A scalar counts as
// rank 1 (as numpy and onnxruntime do).
class NonZeroKernel final : public AllocatingKernel {
 public:
  std::vector<Tensor> run_alloc(const RunContext&, const std::vector<View>& in, const std::vector<View>&) const override {
    const View& x = in[0];
    const std::vector<int64_t> dims = x.rank() == 0 ? std::vector<int64_t>{1} : x.dims;
    std::vector<int64_t> flat;
    for_each_nonzero(x, [&](int64_t i) { flat.push_back(i); });
    const auto rank = static_cast<int64_t>(dims.size());
    const auto count = static_cast<int64_t>(flat.size());
    std::vector<int64_t> out(static_cast<size_t>(rank * count));
    for (int64_t k = 0; k < count; ++k) {
      int64_t rest = flat[static_cast<size_t>(k)];
      for (int64_t d = rank - 1; d >= 0; --d) {
        out[static_cast<size_t>(d * count + k)] = rest % dims[static_cast<size_t>(d)];
        rest /= dims[static_cast<size_t>(d)];
      }
    }
    return {int64_tensor({rank, count}, out)};
  }
};

// ---- Compress ---------------------------------------------------------------------------------

// The slices along `axis` (or the elements of the flattened input, without an axis) whose
// condition entry is true. A condition shorter than the axis drops the slices past its end.
class CompressKernel final : public AllocatingKernel {
 public:
  explicit CompressKernel(const KernelInit& init)
      : has_axis_((init.node.attr("axis") != nullptr)), axis_(init.node.attr_int("axis", 0)), name_(init.node.describe()) {}

  std::vector<Tensor> run_alloc(const RunContext&, const std::vector<View>& in, const std::vector<View>& out) const override {
    const View& x = in[0];
    const View& cond = in[1];
    const auto* c = cond.as<uint8_t>();
    int64_t outer = 1, len = x.numel(), inner = 1;
    size_t a = 0;
    if (has_axis_) {
      const auto r = static_cast<int64_t>(x.rank());
      if (axis_ < -r || axis_ >= r)
        throw ArgumentError(name_ + ": axis " + std::to_string(axis_) + " is out of range for rank " + std::to_string(r));
      a = static_cast<size_t>(axis_ < 0 ? axis_ + r : axis_);
      outer = 1, inner = 1;
      for (size_t d = 0; d < x.rank(); ++d) {
        if (d < a) outer *= x.dims[d];
        if (d > a) inner *= x.dims[d];
      }
      len = x.dims[a];
    }
    if (cond.numel() > len)
      throw ArgumentError(name_ + ": the condition has " + std::to_string(cond.numel()) + " entries, more than the " +
                          std::to_string(len) + (has_axis_ ? " slices along axis " + std::to_string(a) : " input elements"));
    std::vector<int64_t> keep;
    for (int64_t i = 0; i < cond.numel(); ++i)
      if (c[i] != 0) keep.push_back(i);
    std::vector<int64_t> dims{static_cast<int64_t>(keep.size())};
    if (has_axis_) {
      dims = x.dims;
      dims[a] = static_cast<int64_t>(keep.size());
    }
    Tensor y = Tensor::zeros(x.dtype, dims);
    const size_t esize = elem_bytes(x.dtype);
    const auto* src = static_cast<const std::byte*>(x.data);
    auto* dst = static_cast<std::byte*>(y.nbytes() > 0 ? y.mutable_raw_data() : nullptr);
    const auto slice = static_cast<size_t>(inner) * esize;
    for (int64_t o = 0; o < outer && dst != nullptr; ++o)
      for (size_t k = 0; k < keep.size(); ++k)
        std::memcpy(dst + (static_cast<size_t>(o) * keep.size() + k) * slice,
                    src + static_cast<size_t>(o * len + keep[k]) * slice, slice);
    (void)out;
    return {std::move(y)};
  }

 private:
  bool has_axis_;
  int64_t axis_;
  std::string name_;
};

std::string compress_check(const KernelInit& init) {
  if (std::string why = fixed_size(init); !why.empty()) return why;
  return require_dtype(init, 1, {DType::kBool});
}

// ---- Unique -----------------------------------------------------------------------------------

// The distinct elements (or slices along `axis`), sorted ascending or in order of first
// occurrence, with the index of each one's first occurrence, the inverse mapping and counts.
// Slices compare lexicographically by value; NaN compares as larger than every number and
// equal to NaN (as numpy's unique does).
class UniqueKernel final : public AllocatingKernel {
 public:
  explicit UniqueKernel(const KernelInit& init)
      : has_axis_((init.node.attr("axis") != nullptr)),
        axis_(init.node.attr_int("axis", 0)),
        sorted_(init.node.attr_int("sorted", 1) != 0),
        name_(init.node.describe()) {}

  std::vector<Tensor> run_alloc(const RunContext&, const std::vector<View>& in, const std::vector<View>& out) const override {
    const View& x = in[0];
    int64_t outer = 1, len = x.numel(), inner = 1;
    size_t a = 0;
    if (has_axis_) {
      const auto r = static_cast<int64_t>(x.rank());
      if (axis_ < -r || axis_ >= r)
        throw ArgumentError(name_ + ": axis " + std::to_string(axis_) + " is out of range for rank " + std::to_string(r));
      a = static_cast<size_t>(axis_ < 0 ? axis_ + r : axis_);
      for (size_t d = 0; d < x.rank(); ++d) {
        if (d < a) outer *= x.dims[d];
        if (d > a) inner *= x.dims[d];
      }
      len = x.dims[a];
    }
    std::vector<Tensor> result(4);
    dispatch_numeric(x.dtype, [&](auto zero) {
      using T = decltype(zero);
      const T* p = x.as<T>();
      // Element e of slice s.
      auto at = [&](int64_t s, int64_t e) { return p[(e / inner) * len * inner + s * inner + e % inner]; };
      const int64_t width = outer * inner;
      auto less = [](T u, T v) {
        if constexpr (std::is_floating_point_v<T>) {
          if (std::isnan(u)) return false;
          if (std::isnan(v)) return true;
        }
        return u < v;
      };
      auto same = [](T u, T v) {
        if constexpr (std::is_floating_point_v<T>)
          if (std::isnan(u) && std::isnan(v)) return true;
        return u == v;
      };
      auto cmp = [&](int64_t s, int64_t t) {  // -1, 0, 1
        for (int64_t e = 0; e < width; ++e) {
          const T u = at(s, e), v = at(t, e);
          if (same(u, v)) continue;
          return less(u, v) ? -1 : 1;
        }
        return 0;
      };
      // Slices in ascending order (stable: equal slices by position), then grouped.
      std::vector<int64_t> order(static_cast<size_t>(len));
      std::iota(order.begin(), order.end(), int64_t{0});
      std::stable_sort(order.begin(), order.end(), [&](int64_t s, int64_t t) { return cmp(s, t) < 0; });
      std::vector<int64_t> group_first, group_count, group_of(static_cast<size_t>(len));
      for (size_t k = 0; k < order.size(); ++k) {
        if (k == 0 || cmp(order[k - 1], order[k]) != 0) {
          group_first.push_back(order[k]);
          group_count.push_back(0);
        }
        ++group_count.back();
        group_of[static_cast<size_t>(order[k])] = static_cast<int64_t>(group_first.size()) - 1;
      }
      // Output order of the groups: as sorted, or by first occurrence.
      std::vector<int64_t> rank(group_first.size());
      std::iota(rank.begin(), rank.end(), int64_t{0});
      if (!sorted_)
        std::sort(rank.begin(), rank.end(), [&](int64_t g, int64_t h) { return group_first[static_cast<size_t>(g)] < group_first[static_cast<size_t>(h)]; });
      std::vector<int64_t> position(rank.size());
      for (size_t k = 0; k < rank.size(); ++k) position[static_cast<size_t>(rank[k])] = static_cast<int64_t>(k);
      const auto groups = static_cast<int64_t>(rank.size());
      std::vector<int64_t> ydims{groups};
      if (has_axis_) {
        ydims = x.dims;
        ydims[a] = groups;
      }
      Tensor y = Tensor::zeros(x.dtype, ydims);
      T* yp = y.nbytes() > 0 ? y.mutable_data<T>() : nullptr;
      std::vector<int64_t> indices(rank.size()), counts(rank.size()), inverse(static_cast<size_t>(len));
      for (size_t k = 0; k < rank.size(); ++k) {
        const auto g = static_cast<size_t>(rank[k]);
        indices[k] = group_first[g];
        counts[k] = group_count[g];
        for (int64_t e = 0; e < width && yp != nullptr; ++e)
          yp[(e / inner) * groups * inner + static_cast<int64_t>(k) * inner + e % inner] = at(group_first[g], e);
      }
      for (int64_t s = 0; s < len; ++s)
        inverse[static_cast<size_t>(s)] = position[static_cast<size_t>(group_of[static_cast<size_t>(s)])];
      result[0] = std::move(y);
      result[1] = int64_tensor({groups}, indices);
      result[2] = int64_tensor({len}, inverse);
      result[3] = int64_tensor({groups}, counts);
    });
    (void)out;
    return result;
  }

 private:
  bool has_axis_;
  int64_t axis_;
  bool sorted_;
  std::string name_;
};

// ---- NonMaxSuppression ------------------------------------------------------------------------

// Greedy suppression per batch and class: boxes by descending score (ties by lower index), each
// kept unless its IoU with a box already kept exceeds the threshold. Boxes are corner pairs
// [y1, x1, y2, x2] in either order (center_point_box 0) or [x_center, y_center, w, h] (1).
class NmsKernel final : public AllocatingKernel {
 public:
  explicit NmsKernel(const KernelInit& init)
      : center_(init.node.attr_int("center_point_box", 0) != 0), name_(init.node.describe()) {
    const int64_t c = init.node.attr_int("center_point_box", 0);
    if (c != 0 && c != 1)
      throw ModelError(name_ + ": center_point_box is " + std::to_string(c) + "; it must be 0 or 1");
  }

  std::vector<Tensor> run_alloc(const RunContext&, const std::vector<View>& in, const std::vector<View>&) const override {
    const View& boxes = in[0];
    const View& scores = in[1];
    if (boxes.rank() != 3 || boxes.dims[2] != 4)
      throw ArgumentError(name_ + ": boxes have shape " + dims_str(boxes.dims) + "; expected [batches, boxes, 4]");
    if (scores.rank() != 3 || scores.dims[0] != boxes.dims[0] || scores.dims[2] != boxes.dims[1])
      throw ArgumentError(name_ + ": scores have shape " + dims_str(scores.dims) + "; expected [" +
                          std::to_string(boxes.dims[0]) + ", classes, " + std::to_string(boxes.dims[1]) + "] to match boxes " +
                          dims_str(boxes.dims));
    const int64_t max_out = present(in, 2) && in[2].numel() > 0 ? scalar_int(in[2]) : 0;
    const float iou_threshold = present(in, 3) && in[3].numel() > 0 ? in[3].as<float>()[0] : 0.0f;
    const bool has_score_threshold = present(in, 4) && in[4].numel() > 0;
    const float score_threshold = has_score_threshold ? in[4].as<float>()[0] : 0.0f;
    const int64_t batches = boxes.dims[0], n = boxes.dims[1], classes = scores.dims[1];
    std::vector<int64_t> selected;
    std::vector<int64_t> order, kept;
    // Corners as (y_min, x_min, y_max, x_max) for the batch being processed.
    std::vector<float> corners(static_cast<size_t>(n) * 4);
    for (int64_t b = 0; b < batches && max_out > 0; ++b) {
      const float* bx = boxes.as<float>() + b * n * 4;
      for (int64_t i = 0; i < n; ++i) {
        const float* q = bx + i * 4;
        float* c = corners.data() + i * 4;
        if (center_) {
          c[0] = q[1] - q[3] / 2, c[2] = q[1] + q[3] / 2;
          c[1] = q[0] - q[2] / 2, c[3] = q[0] + q[2] / 2;
        } else {
          c[0] = std::min(q[0], q[2]), c[2] = std::max(q[0], q[2]);
          c[1] = std::min(q[1], q[3]), c[3] = std::max(q[1], q[3]);
        }
      }
      for (int64_t cl = 0; cl < classes; ++cl) {
        const float* sc = scores.as<float>() + (b * classes + cl) * n;
        order.clear();
        for (int64_t i = 0; i < n; ++i)
          if (!has_score_threshold || sc[i] > score_threshold) order.push_back(i);
        std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) { return sc[p] > sc[q]; });
        kept.clear();
        for (int64_t i : order) {
          if (static_cast<int64_t>(kept.size()) >= max_out) break;
          bool keep = true;
          for (int64_t j : kept)
            if (overlaps(corners.data() + i * 4, corners.data() + j * 4, iou_threshold)) {
              keep = false;
              break;
            }
          if (!keep) continue;
          kept.push_back(i);
          selected.insert(selected.end(), {b, cl, i});
        }
      }
    }
    return {int64_tensor({static_cast<int64_t>(selected.size() / 3), 3}, selected)};
  }

 private:
  static bool overlaps(const float* p, const float* q, float threshold) {
    const float iy0 = std::max(p[0], q[0]), iy1 = std::min(p[2], q[2]);
    const float ix0 = std::max(p[1], q[1]), ix1 = std::min(p[3], q[3]);
    if (ix1 <= ix0 || iy1 <= iy0) return false;
    const float inter = (ix1 - ix0) * (iy1 - iy0);
    const float a1 = (p[2] - p[0]) * (p[3] - p[1]);
    const float a2 = (q[2] - q[0]) * (q[3] - q[1]);
    const float uni = a1 + a2 - inter;
    if (inter <= 0 || a1 <= 0 || a2 <= 0 || uni <= 0) return false;
    return inter / uni > threshold;
  }
  static std::string dims_str(const std::vector<int64_t>& d) {
    std::string s = "[";
    for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
    return s + "]";
  }

  bool center_;
  std::string name_;
};

std::string nms_check(const KernelInit& init) {
  for (size_t i : {0, 1, 3, 4})
    if (init.node.input(i) != nullptr)
      if (std::string why = require_dtype(init, i, {DType::kFloat32}); !why.empty()) return why;
  if (init.node.input(2) != nullptr) return require_dtype(init, 2, {DType::kInt64});
  return "";
}

}  // namespace

void register_dynamic(KernelRegistry& r) {
  TETHER_ADD(r, "NonZero",
        [](const KernelInit&) -> std::unique_ptr<Kernel> { return std::make_unique<NonZeroKernel>(); }, numeric_only);
  TETHER_ADD(r, "Compress",
        [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<CompressKernel>(i); },
        compress_check);
  TETHER_ADD(r, "Unique",
        [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<UniqueKernel>(i); }, numeric_only);
  TETHER_ADD(r, "NonMaxSuppression",
        [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<NmsKernel>(i); },
        nms_check);
}

}  // namespace tether::engine::cpu
