// Indexed reads and writes: GatherND, ScatterND, ScatterElements (and its opset 9 form
// Scatter). Negative indices count from the end of their axis; indices out of range are an
// ArgumentError naming the node.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "engine/cpu/cpu.h"

namespace tether::engine::cpu {

namespace {

enum class Reduction { kNone, kAdd, kMul, kMax, kMin };

Reduction reduction_of(const std::string& s) {
  if (s == "add") return Reduction::kAdd;
  if (s == "mul") return Reduction::kMul;
  if (s == "max") return Reduction::kMax;
  if (s == "min") return Reduction::kMin;
  return Reduction::kNone;
}

std::string reduction_check(const KernelInit& init) {
  const std::string r = init.node.attr_string("reduction", "none");
  if (r != "none" && r != "add" && r != "mul" && r != "max" && r != "min")
    return "reduction is '" + r + "'; supported: none, add, mul, max, min";
  if (r == "none") {
    if (std::string why = fixed_size(init); !why.empty()) return why;
  } else if (!is_numeric(init.input_dtype(0)) || init.input_dtype(0) == DType::kBool) {
    return "reduction '" + r + "' on " + std::string(ir::dtype_name(init.input_dtype(0))) + " data; supported: numeric types";
  }
  return require_dtype(init, 1, {DType::kInt64, DType::kInt32});
}

// Applies `r` to dst[to] with src[from]; the element type is T.
template <typename T>
void combine(Reduction r, T* dst, int64_t to, const T* src, int64_t from) {
  T& d = dst[to];
  const T v = src[from];
  switch (r) {
    case Reduction::kNone: d = v; break;
    case Reduction::kAdd: d = static_cast<T>(d + v); break;
    case Reduction::kMul: d = static_cast<T>(d * v); break;
    // NaN wins either way, as numpy's maximum and minimum (and the ONNX reference) have it.
    case Reduction::kMax: if (v != v || v > d) d = v; break;
    case Reduction::kMin: if (v != v || v < d) d = v; break;
  }
}

// Calls f(T{}) with T the element type to combine: the numeric type for reductions, an
// unsigned integer of the element's width for plain copies (any type of whole bytes).
template <typename F>
void dispatch_scatter(Reduction r, DType t, F&& f) {
  if (r != Reduction::kNone) {
    dispatch_numeric(t, f);
    return;
  }
  switch (elem_bytes(t)) {
    case 1: f(uint8_t{}); break;
    case 2: f(uint16_t{}); break;
    case 4: f(uint32_t{}); break;
    case 8: f(uint64_t{}); break;
    default: TETHER_CHECK(false, "scatter of an element type of unusual width");
  }
}

// Resolves index v on an axis of `len`, or throws naming the node.
int64_t resolve(const std::string& name, int64_t v, int64_t len, size_t axis) {
  if (v < -len || v >= len)
    throw ArgumentError(name + ": index " + std::to_string(v) + " is out of range for axis " + std::to_string(axis) +
                        " of size " + std::to_string(len));
  return v < 0 ? v + len : v;
}

// ---- GatherND, ScatterND ----------------------------------------------------------------------

// Where each index tuple of an ND op points in data: the offset (in elements) of its slice.
// Indices have shape [batch..., rest..., q]; data [batch..., q dims..., slice dims...].
struct NdLayout {
  int64_t batches = 1;      // product of data's first batch_dims dims
  int64_t per_batch = 1;    // index tuples per batch
  int64_t q = 0;            // length of one index tuple
  int64_t slice = 1;        // elements per addressed slice
  int64_t batch_stride = 1; // elements of data per batch
  std::vector<int64_t> data_dims, data_strides;

  NdLayout(const std::vector<int64_t>& data, const std::vector<int64_t>& idx, int64_t batch_dims) {
    TETHER_CHECK(!idx.empty(), "ND op: indices of rank 0 passed inference");
    q = idx.back();
    const auto b = static_cast<size_t>(batch_dims);
    TETHER_CHECK(b + static_cast<size_t>(q) <= data.size(), "ND op: indices address more dims than data has");
    for (size_t d = 0; d < b; ++d) batches *= data[d];
    for (size_t d = b; d + 1 < idx.size(); ++d) per_batch *= idx[d];
    for (size_t d = b + static_cast<size_t>(q); d < data.size(); ++d) slice *= data[d];
    const std::vector<int64_t> st = strides_of(data);
    batch_stride = b == 0 ? (data.empty() ? 1 : st[0] * data[0]) : st[b - 1];
    for (size_t d = b; d < b + static_cast<size_t>(q); ++d) {
      data_dims.push_back(data[d]);
      data_strides.push_back(st[d]);
    }
  }

  // Offset of tuple t (over all batches) in data.
  int64_t offset(const std::string& name, const std::vector<int64_t>& idx, int64_t t) const {
    int64_t off = (t / per_batch) * batch_stride;
    for (int64_t j = 0; j < q; ++j)
      off += resolve(name, idx[static_cast<size_t>(t * q + j)], data_dims[static_cast<size_t>(j)], static_cast<size_t>(j)) *
             data_strides[static_cast<size_t>(j)];
    return off;
  }
};

std::unique_ptr<Kernel> gather_nd_kernel(const KernelInit& init) {
  const int64_t batch_dims = init.node.attr_int("batch_dims", 0);
  const std::string name = init.node.describe();
  return make_kernel([batch_dims, name](const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) {
    const NdLayout l(in[0].dims, in[1].dims, batch_dims);
    const std::vector<int64_t> idx = int_values(in[1]);
    const int64_t tuples = l.batches * l.per_batch;
    TETHER_CHECK(out[0].numel() == tuples * l.slice, "GatherND: planned output size differs");
    const auto esize = static_cast<int64_t>(elem_bytes(in[0].dtype));
    const int64_t bytes = esize * l.slice;
    parallel(ctx, tuples, 64, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        std::memcpy(out[0].as<std::byte>() + t * bytes, in[0].as<std::byte>() + l.offset(name, idx, t) * esize,
                    static_cast<size_t>(bytes));
    });
  });
}

std::string gather_nd_check(const KernelInit& init) {
  if (std::string why = fixed_size(init); !why.empty()) return why;
  return require_dtype(init, 1, {DType::kInt64, DType::kInt32});
}

std::unique_ptr<Kernel> scatter_nd_kernel(const KernelInit& init) {
  const Reduction red = reduction_of(init.node.attr_string("reduction", "none"));
  const std::string name = init.node.describe();
  return make_kernel([red, name](const RunContext&, const std::vector<View>& in, std::vector<View>& out) {
    const View& data = in[0];
    View& y = out[0];
    const NdLayout l(data.dims, in[1].dims, 0);
    const std::vector<int64_t> idx = int_values(in[1]);
    TETHER_CHECK(in[2].numel() == l.per_batch * l.slice, "ScatterND: updates do not match indices and data");
    if (y.data != data.data) std::memcpy(y.data, data.data, static_cast<size_t>(data.numel()) * elem_bytes(data.dtype));
    // In index order, so that with duplicate indices the last update wins (reduction none)
    // or every update is folded in, as in onnxruntime.
    dispatch_scatter(red, data.dtype, [&](auto zero) {
      using T = decltype(zero);
      for (int64_t t = 0; t < l.per_batch; ++t) {
        const int64_t off = l.offset(name, idx, t);
        for (int64_t e = 0; e < l.slice; ++e) combine(red, y.as<T>(), off + e, in[2].as<T>(), t * l.slice + e);
      }
    });
  });
}

// ---- ScatterElements --------------------------------------------------------------------------

std::unique_ptr<Kernel> scatter_elements_kernel(const KernelInit& init) {
  const int64_t axis = init.node.attr_int("axis", 0);
  const Reduction red = reduction_of(init.node.attr_string("reduction", "none"));
  const std::string name = init.node.describe();
  return make_kernel([axis, red, name](const RunContext&, const std::vector<View>& in, std::vector<View>& out) {
    const View& data = in[0];
    const View& upd = in[2];
    View& y = out[0];
    const auto rank = static_cast<int64_t>(data.rank());
    const auto a = static_cast<size_t>(axis < 0 ? axis + rank : axis);
    TETHER_CHECK(in[1].dims == upd.dims && in[1].rank() == data.rank(), "ScatterElements: indices and updates differ in shape");
    const std::vector<int64_t> idx = int_values(in[1]);
    const std::vector<int64_t> ds = strides_of(data.dims);
    const auto& id = in[1].dims;
    for (size_t d = 0; d < id.size(); ++d)
      TETHER_CHECK(d == a || id[d] <= data.dims[d], "ScatterElements: indices are longer than data off the axis");
    if (y.data != data.data) std::memcpy(y.data, data.data, static_cast<size_t>(data.numel()) * elem_bytes(data.dtype));
    dispatch_scatter(red, data.dtype, [&](auto zero) {
      using T = decltype(zero);
      for (int64_t u = 0; u < upd.numel(); ++u) {
        int64_t rem = u, dst = 0;
        for (size_t d = id.size(); d-- > 0;) {
          int64_t c = rem % id[d];
          rem /= id[d];
          if (d == a) c = resolve(name, idx[static_cast<size_t>(u)], data.dims[a], a);
          dst += c * ds[d];
        }
        combine(red, y.as<T>(), dst, upd.as<T>(), u);
      }
    });
  });
}

}  // namespace

void register_scatter(KernelRegistry& r) {
  TETHER_ADD(r, "GatherND", gather_nd_kernel, gather_nd_check);
  TETHER_ADD(r, "ScatterND", scatter_nd_kernel, reduction_check);
  TETHER_ADD(r, "ScatterElements", scatter_elements_kernel, reduction_check);
  TETHER_ADD(r, "Scatter", scatter_elements_kernel, reduction_check);
}

}  // namespace tether::engine::cpu
