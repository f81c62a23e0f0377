// Shape inference for ops that move data or compute shapes: Shape, Reshape, Transpose,
// Concat, Split, Slice, Gather, Squeeze, Unsqueeze, Expand, Tile, Pad, TopK, ...
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/infer_context.h"

namespace tether::ops {

namespace {

// Sum of dims: exact when all are known, or all are multiples of one symbolic product.
Dim sum(const std::vector<Dim>& dims) {
  if (dims.empty()) return Dim(0);
  int64_t total = 0;
  const Dim* symbolic = nullptr;
  for (const Dim& d : dims) {
    if (d.is_unknown()) return Dim();
    if (d.is_known()) {
      if (__builtin_add_overflow(total, d.value(), &total)) return Dim();
    } else if (symbolic == nullptr) {
      symbolic = &d;
    } else if (d.factors() != symbolic->factors()) {
      return Dim();
    }
  }
  if (symbolic == nullptr) return Dim(total);
  if (total != 0) return Dim();
  int64_t coeff = 0;
  for (const Dim& d : dims)
    if (d.is_symbolic() && __builtin_add_overflow(coeff, d.coefficient(), &coeff)) return Dim();
  auto unit = symbolic->divide(Dim(symbolic->coefficient()));
  return unit ? Dim(coeff) * *unit : Dim();
}

// fail()s when input `i` is present with a known rank other than 1: axes, starts, split
// sizes and K are lists by the spec (a scalar or a matrix of them is refused by onnxruntime too).
void require_vector(const InferContext& ctx, size_t i, const char* what, bool or_scalar = false) {
  if (i >= ctx.num_inputs() || !ctx.has_input(i)) return;
  const Shape& s = ctx.input_shape(i);
  if (s.has_rank() && s.rank() != 1 && !(or_scalar && s.rank() == 0))
    ctx.fail(std::string("input '") + what + "' must be 1-D" + (or_scalar ? " or a scalar" : "") + ", got shape " + s.to_string());
}

// Reads axes from an attribute (older opsets) or from input `index` (newer ones).
std::optional<std::vector<int64_t>> axes_of(const InferContext& ctx, size_t index) {
  if (ctx.has_attr("axes")) return ctx.attr_ints("axes");
  if (ctx.has_input(index)) return ctx.input_ints(index);
  return std::vector<int64_t>{};
}

void shape(InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  if (!x.has_rank()) {
    ctx.set_output(0, DType::kInt64, Shape({Dim()}));
    return;
  }
  const auto r = static_cast<int64_t>(x.rank());
  int64_t start = ctx.attr_int("start", 0), end = ctx.attr_int("end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<int64_t>(start, 0, r);
  end = std::clamp<int64_t>(end, 0, r);
  std::vector<SymInt> values;
  for (int64_t i = start; i < end; ++i) values.push_back(SymInt::of(x[static_cast<size_t>(i)]));
  ctx.set_output(0, DType::kInt64, Shape({Dim(static_cast<int64_t>(values.size()))}));
  ctx.set_output_values(0, std::move(values));
}

void size(InferContext& ctx) {
  ctx.set_output(0, DType::kInt64, Shape(std::vector<Dim>{}));
  const Shape& x = ctx.input_shape(0);
  if (x.has_rank()) ctx.set_output_values(0, {SymInt::of(product(x.dims()))});
}

void reshape(InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  const DType dt = ctx.input_dtype(0);
  const bool allowzero = ctx.attr_int("allowzero", 0) != 0;
  auto target = ctx.input_values(1);
  if (!target) {
    const Shape& ts = ctx.input_shape(1);
    ctx.set_output(0, dt, ts.has_rank() && ts.rank() == 1 ? shape_of_rank(ts[0]) : Shape());
    return;
  }
  std::vector<Dim> out;
  int infer_at = -1;
  for (size_t i = 0; i < target->size(); ++i) {
    const SymInt& e = (*target)[i];
    if (e.negative == -1) {
      if (infer_at >= 0) ctx.fail("the target shape has more than one -1");
      infer_at = static_cast<int>(i);
      out.push_back(Dim());
    } else if (e.negative < 0) {
      ctx.fail("the target shape has entry " + std::to_string(e.negative) + "; only -1 may be negative");
    } else if (e.known() == 0 && !allowzero) {
      // 0 copies the input's dim at the same index.
      if (x.has_rank() && i >= x.rank()) ctx.fail("target entry " + std::to_string(i) + " is 0 (copy), but the input has rank " + std::to_string(x.rank()));
      out.push_back(x.has_rank() ? x[i] : Dim());
    } else {
      out.push_back(e.dim);
    }
  }
  if (x.has_rank()) {
    const Dim total = product(x.dims());
    if (infer_at >= 0) {
      std::vector<Dim> others = out;
      others.erase(others.begin() + infer_at);
      const Dim rest = product(others);
      if (auto q = total.divide(rest)) out[static_cast<size_t>(infer_at)] = *q;
      else if (total.is_known() && rest.is_known() && rest.value() != 0)
        ctx.fail("cannot reshape " + x.to_string() + " (" + total.to_string() + " elements) into " + Shape(out).to_string());
    } else {
      const Dim got = product(out);
      if (total.is_known() && got.is_known() && total.value() != got.value())
        ctx.fail("cannot reshape " + x.to_string() + " (" + total.to_string() + " elements) into " + Shape(out).to_string() +
                 " (" + got.to_string() + " elements)");
    }
  }
  ctx.set_output(0, dt, Shape(out));
  if (out.size() <= 1)
    if (auto v = ctx.input_values(0)) ctx.set_output_values(0, *v);
}

void flatten(InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  if (!x.has_rank()) {
    ctx.set_output(0, ctx.input_dtype(0), Shape({Dim(), Dim()}));
    return;
  }
  int64_t a = ctx.attr_int("axis", 1);
  const auto r = static_cast<int64_t>(x.rank());
  if (a < -r || a > r) ctx.fail("axis " + std::to_string(a) + " is out of range for rank " + std::to_string(r));
  if (a < 0) a += r;
  const auto split = static_cast<size_t>(a);
  ctx.set_output(0, ctx.input_dtype(0), Shape({product(x.dims(), 0, split), product(x.dims(), split)}));
}

void transpose(InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  if (!x.has_rank()) {
    ctx.set_output(0, ctx.input_type(0));
    return;
  }
  std::vector<int64_t> perm = ctx.attr_ints("perm");
  if (perm.empty())
    for (size_t i = x.rank(); i-- > 0;) perm.push_back(static_cast<int64_t>(i));
  if (perm.size() != x.rank()) ctx.fail("perm has " + std::to_string(perm.size()) + " entries for rank " + std::to_string(x.rank()));
  std::vector<bool> seen(x.rank(), false);
  std::vector<Dim> out;
  for (int64_t p : perm) {
    const size_t a = ctx.axis(p, x.rank(), "perm entry");
    if (seen[a]) ctx.fail("perm repeats axis " + std::to_string(a));
    seen[a] = true;
    out.push_back(x[a]);
  }
  ctx.set_output(0, ctx.input_dtype(0), Shape(std::move(out)));
}

void squeeze(InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  const DType dt = ctx.input_dtype(0);
  require_vector(ctx, 1, "axes");
  auto axes = axes_of(ctx, 1);
  if (!x.has_rank() || !axes) {
    ctx.set_output(0, dt, Shape());
    return;
  }
  std::vector<bool> drop(x.rank(), false);
  if (axes->empty()) {
    for (size_t i = 0; i < x.rank(); ++i) {
      if (!x[i].is_known()) {  // a symbolic dim may or may not be 1
        ctx.set_output(0, dt, Shape());
        return;
      }
      drop[i] = x[i].value() == 1;
    }
  }
  for (size_t k : ctx.distinct_axes(*axes, x.rank())) {
    if (x[k].is_known() && x[k].value() != 1) ctx.fail("cannot squeeze axis " + std::to_string(k) + " of size " + x[k].to_string());
    drop[k] = true;
  }
  std::vector<Dim> out;
  for (size_t i = 0; i < x.rank(); ++i)
    if (!drop[i]) out.push_back(x[i]);
  const bool tracked_rank = out.size() <= 1;
  ctx.set_output(0, dt, Shape(std::move(out)));
  if (tracked_rank)
    if (auto v = ctx.input_values(0)) ctx.set_output_values(0, *v);
}

void unsqueeze(InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  const DType dt = ctx.input_dtype(0);
  require_vector(ctx, 1, "axes", /*or_scalar=*/true);  // ONNX function bodies (AffineGrid) pass a scalar
  auto axes = axes_of(ctx, 1);
  if (!x.has_rank() || !axes) {
    ctx.set_output(0, dt, Shape());
    return;
  }
  const size_t rank = x.rank() + axes->size();
  std::vector<bool> added(rank, false);
  for (int64_t a : *axes) {
    const size_t k = ctx.axis(a, rank);
    if (added[k]) ctx.fail("axes repeat axis " + std::to_string(k));
    added[k] = true;
  }
  std::vector<Dim> out;
  size_t src = 0;
  for (size_t i = 0; i < rank; ++i) out.push_back(added[i] ? Dim(1) : x[src++]);
  ctx.set_output(0, dt, Shape(std::move(out)));
  if (rank <= 1)
    if (auto v = ctx.input_values(0)) ctx.set_output_values(0, *v);
}

void concat(InferContext& ctx) {
  std::optional<size_t> rank;
  for (size_t i = 0; i < ctx.num_inputs(); ++i)
    if (auto r = ctx.input_rank(i)) {
      if (rank && *rank != *r) ctx.fail("inputs have ranks " + std::to_string(*rank) + " and " + std::to_string(*r));
      rank = r;
    }
  const DType dt = ctx.input_dtype(0);
  if (!rank) {
    ctx.set_output(0, dt, Shape());
    return;
  }
  const size_t a = ctx.axis(ctx.attr_int("axis", 0), *rank);
  std::vector<Dim> out(*rank);
  std::vector<Dim> along;
  for (size_t k = 0; k < *rank; ++k) {
    if (k == a) continue;
    // Dims off the concat axis must be equal (Concat does not broadcast a 1), so any known
    // one, or else any symbolic one, names them all.
    for (size_t i = 0; i < ctx.num_inputs(); ++i) {
      if (!ctx.input_rank(i)) continue;
      const Dim& d = ctx.input_shape(i)[k];
      if (d.is_known() && out[k].is_known() && d.value() != out[k].value())
        ctx.fail("inputs differ on axis " + std::to_string(k) + ", off the concat axis " + std::to_string(a) + ": " +
                 out[k].to_string() + " vs " + d.to_string() + " (input " + std::to_string(i) + ")");
      if (d.is_known() ? !out[k].is_known() : d.is_symbolic() && out[k].is_unknown()) out[k] = d;
    }
  }
  bool all_ranked = true;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.input_rank(i)) all_ranked = false;
    else along.push_back(ctx.input_shape(i)[a]);
  }
  out[a] = all_ranked ? sum(along) : Dim();
  ctx.set_output(0, dt, Shape(std::move(out)));
  if (*rank == 1) {
    std::vector<SymInt> values;
    for (size_t i = 0; i < ctx.num_inputs(); ++i) {
      auto v = ctx.input_values(i);
      if (!v) return;
      values.insert(values.end(), v->begin(), v->end());
    }
    ctx.set_output_values(0, std::move(values));
  }
}

void split(InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  const DType dt = ctx.input_dtype(0);
  const size_t n = ctx.num_outputs();
  if (n == 0) ctx.fail("has no outputs; Split needs at least one");
  require_vector(ctx, 1, "split");
  // Every output is a part; one left unnamed would shift where the later parts start.
  for (size_t i = 0; i < n; ++i)
    if (ctx.node().output(i) == nullptr) ctx.fail("output " + std::to_string(i) + " is empty; every part of a Split must be named");
  if (!x.has_rank()) {
    for (size_t i = 0; i < n; ++i) ctx.set_output(i, dt, Shape());
    return;
  }
  if (ctx.has_attr("num_outputs")) {
    const int64_t want = ctx.attr_int("num_outputs", 0);
    if (want != static_cast<int64_t>(n))
      ctx.fail("num_outputs is " + std::to_string(want) + " but the node has " + std::to_string(n) + " outputs");
    if (ctx.has_input(1)) ctx.fail("has both the split input and num_outputs; give one of them");
  }
  const size_t a = ctx.axis(ctx.attr_int("axis", 0), x.rank());
  std::optional<std::vector<int64_t>> sizes;
  if (ctx.has_attr("split")) sizes = ctx.attr_ints("split");
  else if (ctx.has_input(1)) sizes = ctx.input_ints(1);
  std::vector<Dim> parts(n);
  if (!sizes && ctx.has_input(1)) {
    // Sizes given by a tensor not known here: each part's length is unknown.
  } else if (sizes) {
    if (sizes->size() != n) ctx.fail("split has " + std::to_string(sizes->size()) + " sizes for " + std::to_string(n) + " outputs");
    int64_t total = 0;
    for (size_t i = 0; i < n; ++i) {
      parts[i] = ctx.dim((*sizes)[i], "split size " + std::to_string(i));
      total = ctx.add(total, (*sizes)[i], "the sum of the split sizes");
    }
    if (x[a].is_known() && x[a].value() != total)
      ctx.fail("split sizes add up to " + std::to_string(total) + ", the axis has " + x[a].to_string());
  } else if (x[a].is_known()) {
    // Equal parts; with num_outputs (opset 18) the last part may be smaller.
    const int64_t len = x[a].value();
    const auto count = static_cast<int64_t>(n);
    // Rounded up without (len + count - 1), which overflows for a dim near 2^63.
    const int64_t chunk = ctx.has_attr("num_outputs") ? len / count + (len % count != 0 ? 1 : 0) : len / count;
    if (!ctx.has_attr("num_outputs") && len % count != 0)
      ctx.fail("axis of size " + std::to_string(len) + " cannot be split into " + std::to_string(n) + " equal parts");
    int64_t at = 0;  // where part i starts; it never passes len, so it cannot overflow
    for (size_t i = 0; i < n; ++i) {
      parts[i] = Dim(std::min(chunk, len - at));
      at += std::min(chunk, len - at);
    }
  } else if (auto q = x[a].divide(Dim(static_cast<int64_t>(n))); q && !ctx.has_attr("num_outputs")) {
    for (size_t i = 0; i < n; ++i) parts[i] = *q;
  }
  for (size_t i = 0; i < n; ++i) {
    std::vector<Dim> d = x.dims();
    d[a] = parts[i];
    ctx.set_output(i, dt, Shape(std::move(d)));
  }
}

// Where Slice starts on a dim of size `len` and how many elements it takes, following ONNX's
// clamping rules. Precondition: step != 0. Steps are the model's numbers, so the arithmetic
// avoids (end - start + step - 1) and -step, which overflow for steps near the int64 limits.
struct SliceRange {
  int64_t first = 0;
  int64_t count = 0;
};

SliceRange slice_range(int64_t len, int64_t start, int64_t end, int64_t step) {
  if (start < 0) start += len;
  if (end < 0) end += len;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, len);
    end = std::clamp<int64_t>(end, 0, len);
    return {start, end > start ? (end - start - 1) / step + 1 : 0};
  }
  if (len == 0) return {};  // nothing to clamp to: [0, len - 1] is empty
  start = std::clamp<int64_t>(start, 0, len - 1);
  end = std::clamp<int64_t>(end, -1, len - 1);
  if (start <= end) return {start, 0};
  const uint64_t magnitude = uint64_t{0} - static_cast<uint64_t>(step);
  return {start, static_cast<int64_t>((static_cast<uint64_t>(start - end) - 1) / magnitude + 1)};
}

// True when Slice takes every entry of a dim whatever its size (below 2^31): x[:] forward,
// or x[::-1] (torch.flip exports starts = -1, ends = -INT_MAX, steps = -1).
bool covers_whole_dim(int64_t start, int64_t end, int64_t step) {
  constexpr int64_t kBig = std::numeric_limits<int32_t>::max();
  if (step == 1) return (start == 0 || start <= -kBig) && end >= kBig;
  if (step == -1) return (start == -1 || start >= kBig) && end <= -kBig;
  return false;
}

void slice(InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  const DType dt = ctx.input_dtype(0);
  std::optional<std::vector<int64_t>> starts, ends, axes, steps;
  const bool attrs = ctx.has_attr("starts") || ctx.has_attr("ends");
  if (attrs ? !(ctx.has_attr("starts") && ctx.has_attr("ends")) : ctx.num_inputs() < 3)
    ctx.fail("needs starts and ends: as attributes before opset 10, as inputs 1 and 2 since; this node has " +
             std::string(attrs ? "one of the attributes" : std::to_string(ctx.num_inputs()) + " input(s) and no attributes"));
  if (attrs) {  // opset < 10
    starts = ctx.attr_ints("starts");
    ends = ctx.attr_ints("ends");
    axes = ctx.has_attr("axes") ? std::optional(ctx.attr_ints("axes")) : std::nullopt;
  } else {
    for (size_t i = 1; i <= 4; ++i) require_vector(ctx, i, i == 1 ? "starts" : i == 2 ? "ends" : i == 3 ? "axes" : "steps");
    starts = ctx.input_ints(1);
    ends = ctx.input_ints(2);
    if (ctx.has_input(3)) axes = ctx.input_ints(3);
    if (ctx.has_input(4)) steps = ctx.input_ints(4);
    if ((ctx.has_input(3) && !axes) || (ctx.has_input(4) && !steps)) starts.reset();
  }
  if (!x.has_rank()) {
    ctx.set_output(0, dt, Shape());
    return;
  }
  if (!starts || !ends) {
    // Unknown bounds: every dim the slice may touch becomes unknown.
    std::vector<Dim> out = x.dims();
    if (axes) {
      for (int64_t a : *axes) out[ctx.axis(a, x.rank())] = Dim();
    } else {
      out.assign(x.rank(), Dim());
    }
    ctx.set_output(0, dt, Shape(std::move(out)));
    return;
  }
  if (!axes) {
    axes.emplace();
    for (size_t i = 0; i < starts->size(); ++i) axes->push_back(static_cast<int64_t>(i));
  }
  if (!steps) steps = std::vector<int64_t>(starts->size(), 1);
  if (ends->size() != starts->size() || axes->size() != starts->size() || steps->size() != starts->size())
    ctx.fail("starts, ends, axes and steps have different lengths");
  std::vector<Dim> out = x.dims();
  std::vector<bool> sliced(x.rank(), false);
  for (size_t i = 0; i < starts->size(); ++i) {
    const size_t a = ctx.axis((*axes)[i], x.rank());
    if (sliced[a]) ctx.fail("axes repeat axis " + std::to_string(a));
    sliced[a] = true;
    const int64_t s = (*starts)[i], e = (*ends)[i], st = (*steps)[i];
    if (st == 0) ctx.fail("a step is 0");
    if (x[a].is_known()) out[a] = Dim(slice_range(x[a].value(), s, e, st).count);
    else if (!covers_whole_dim(s, e, st)) out[a] = Dim();  // a whole symbolic dim stays itself
  }
  ctx.set_output(0, dt, Shape(out));
  // Slicing a tracked 1-D value. The entries are sliced by their own count, and tracked only
  // when that agrees with the shape: a model can declare a shape its constant does not have.
  if (x.rank() == 1 && starts->size() == 1 && out[0].is_known())
    if (auto v = ctx.input_values(0)) {
      const int64_t st = (*steps)[0];
      const SliceRange r = slice_range(static_cast<int64_t>(v->size()), (*starts)[0], (*ends)[0], st);
      if (r.count != out[0].value()) return;
      std::vector<SymInt> picked;
      for (int64_t k = 0; k < r.count; ++k) picked.push_back((*v)[static_cast<size_t>(r.first + k * st)]);
      ctx.set_output_values(0, std::move(picked));
    }
}

void gather(InferContext& ctx) {
  const Shape& data = ctx.input_shape(0);
  const Shape& idx = ctx.input_shape(1);
  const DType dt = ctx.input_dtype(0);
  if (!data.has_rank() || !idx.has_rank()) {
    ctx.set_output(0, dt, Shape());
    return;
  }
  if (data.rank() == 0) ctx.fail("data must have rank >= 1");
  const size_t a = ctx.axis(ctx.attr_int("axis", 0), data.rank());
  std::vector<Dim> out(data.dims().begin(), data.dims().begin() + static_cast<std::ptrdiff_t>(a));
  out.insert(out.end(), idx.dims().begin(), idx.dims().end());
  out.insert(out.end(), data.dims().begin() + static_cast<std::ptrdiff_t>(a) + 1, data.dims().end());
  ctx.set_output(0, dt, Shape(out));
  if (data.rank() == 1 && idx.rank() <= 1) {
    auto v = ctx.input_values(0);
    auto picks = ctx.input_ints(1);
    if (!v || !picks) return;
    std::vector<SymInt> got;
    const auto n = static_cast<int64_t>(v->size());
    for (int64_t p : *picks) {
      if (p < -n || p >= n) ctx.fail("index " + std::to_string(p) + " is out of range for " + std::to_string(n) + " entries");
      got.push_back((*v)[static_cast<size_t>(p < 0 ? p + n : p)]);
    }
    ctx.set_output_values(0, std::move(got));
  }
}

// GatherElements and ScatterElements address data element by element: off the axis, the
// indices may cover less of data than data has, never more (the kernels index data with the
// indices' coordinates there).
void check_indices_within_data(InferContext& ctx, const Shape& data, const Shape& idx, size_t axis) {
  for (size_t k = 0; k < data.rank() && k < idx.rank(); ++k)
    if (k != axis && data[k].is_known() && idx[k].is_known() && idx[k].value() > data[k].value())
      ctx.fail("indices " + idx.to_string() + " are longer than data " + data.to_string() + " on axis " +
               std::to_string(k) + " (" + idx[k].to_string() + " vs " + data[k].to_string() +
               "); off the axis " + std::to_string(axis) + " they must not exceed data");
}

void gather_elements(InferContext& ctx) {
  const Shape& data = ctx.input_shape(0);
  const Shape& idx = ctx.input_shape(1);
  if (data.has_rank() && idx.has_rank()) {
    if (data.rank() == 0) ctx.fail("data must have rank >= 1, got a scalar");
    if (idx.rank() != data.rank())
      ctx.fail("indices have rank " + std::to_string(idx.rank()) + " and data " + std::to_string(data.rank()) +
               "; they must have the same rank");
    const size_t axis = ctx.axis(ctx.attr_int("axis", 0), data.rank());
    check_indices_within_data(ctx, data, idx, axis);
  }
  ctx.set_output(0, ctx.input_dtype(0), idx);
}

void gather_nd(InferContext& ctx) {
  const Shape& data = ctx.input_shape(0);
  const Shape& idx = ctx.input_shape(1);
  const int64_t batch = ctx.attr_int("batch_dims", 0);
  if (!data.has_rank() || !idx.has_rank() || idx.rank() == 0 || !idx[idx.rank() - 1].is_known()) {
    ctx.set_output(0, ctx.input_dtype(0), Shape());
    return;
  }
  const int64_t last = idx[idx.rank() - 1].value();
  const auto rank = static_cast<int64_t>(data.rank());
  if (batch < 0 || batch >= std::min<int64_t>(rank, static_cast<int64_t>(idx.rank())))
    ctx.fail("batch_dims is " + std::to_string(batch) + "; it must be >= 0 and below both ranks (" +
             std::to_string(rank) + " and " + std::to_string(idx.rank()) + ")");
  if (last > rank - batch) ctx.fail("indices address more dims than data has");
  for (int64_t d = 0; d < batch; ++d)
    if (data[d].is_known() && idx[d].is_known() && data[d].value() != idx[d].value())
      ctx.fail("batch dim " + std::to_string(d) + " is " + data[d].to_string() + " in data and " + idx[d].to_string() +
               " in indices; the first batch_dims dims must match");
  std::vector<Dim> out(idx.dims().begin(), idx.dims().end() - 1);
  out.insert(out.end(), data.dims().begin() + batch + last, data.dims().end());
  ctx.set_output(0, ctx.input_dtype(0), Shape(std::move(out)));
}

bool same_known(const Shape& a, const Shape& b) {
  if (a.rank() != b.rank()) return false;
  for (size_t k = 0; k < a.rank(); ++k)
    if (a[k].is_known() && b[k].is_known() && a[k].value() != b[k].value()) return false;
  return true;
}

// ScatterElements / Scatter (data, indices, updates): indices and updates of one shape, of
// data's rank, and the axis within it.
void scatter_elements(InferContext& ctx) {
  const Shape& data = ctx.input_shape(0);
  const Shape& idx = ctx.input_shape(1);
  const Shape& upd = ctx.input_shape(2);
  if (idx.has_rank() && upd.has_rank() && !same_known(idx, upd))
    ctx.fail("indices " + idx.to_string() + " and updates " + upd.to_string() + " must have the same shape");
  if (data.has_rank()) {
    if (data.rank() == 0) ctx.fail("data must have rank >= 1, got a scalar");
    for (const Shape* s : {&idx, &upd})
      if (s->has_rank() && s->rank() != data.rank())
        ctx.fail(std::string(s == &idx ? "indices " : "updates ") + s->to_string() + " must have data's rank " +
                 std::to_string(data.rank()));
    const size_t axis = ctx.axis(ctx.attr_int("axis", 0), data.rank());
    for (const Shape* s : {&idx, &upd})
      if (s->has_rank()) check_indices_within_data(ctx, data, *s, axis);
  }
  same_as_input(ctx);
}

// ScatterND (data, indices, updates): indices of rank >= 1 whose last dim q addresses at most
// data's rank; updates = indices[:-1] + data[q:].
void scatter_nd(InferContext& ctx) {
  const Shape& data = ctx.input_shape(0);
  const Shape& idx = ctx.input_shape(1);
  const Shape& upd = ctx.input_shape(2);
  if (idx.has_rank() && idx.rank() == 0) ctx.fail("indices must have rank >= 1, got a scalar");
  if (data.has_rank() && idx.has_rank() && idx[idx.rank() - 1].is_known()) {
    const int64_t q = idx[idx.rank() - 1].value();
    if (q > static_cast<int64_t>(data.rank()))
      ctx.fail("indices address " + std::to_string(q) + " dims; data " + data.to_string() + " has " +
               std::to_string(data.rank()));
    std::vector<Dim> want(idx.dims().begin(), idx.dims().end() - 1);
    want.insert(want.end(), data.dims().begin() + q, data.dims().end());
    if (upd.has_rank() && !same_known(upd, Shape(want)))
      ctx.fail("updates have shape " + upd.to_string() + ", expected " + Shape(want).to_string() +
               " (indices[:-1] + data[" + std::to_string(q) + ":])");
  }
  same_as_input(ctx);
}

void expand(InferContext& ctx) {
  const DType dt = ctx.input_dtype(0);
  auto target = ctx.input_values(1);
  if (!target) {
    const Shape& ts = ctx.input_shape(1);
    const Shape& x = ctx.input_shape(0);
    if (ts.has_rank() && ts.rank() == 1 && x.has_rank()) ctx.set_output(0, dt, shape_of_rank(ts[0], x.rank()));
    else ctx.set_output(0, dt, Shape());
    return;
  }
  std::vector<Dim> t;
  for (const SymInt& e : *target) t.push_back(e.negative < 0 ? Dim() : e.dim);
  ctx.set_output(0, dt, broadcast_shapes(ctx, {ctx.input_shape(0), Shape(std::move(t))}));
}

void tile(InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  auto reps = ctx.input_values(1);
  if (!x.has_rank()) {
    ctx.set_output(0, ctx.input_dtype(0), Shape());
    return;
  }
  std::vector<Dim> out(x.rank());
  if (reps) {
    if (reps->size() != x.rank()) ctx.fail("repeats has " + std::to_string(reps->size()) + " entries for rank " + std::to_string(x.rank()));
    for (size_t i = 0; i < x.rank(); ++i) {
      if ((*reps)[i].negative < 0) ctx.fail("repeats has negative entry " + std::to_string((*reps)[i].negative));
      out[i] = x[i] * (*reps)[i].dim;
    }
  }
  ctx.set_output(0, ctx.input_dtype(0), Shape(std::move(out)));
}

void pad(InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  const DType dt = ctx.input_dtype(0);
  ctx.require_one_value(2, "constant_value");
  if (!x.has_rank()) {
    ctx.set_output(0, dt, Shape());
    return;
  }
  const size_t rank = x.rank();
  for (size_t i : {size_t{1}, size_t{3}}) {
    const Shape& v = i < ctx.num_inputs() && ctx.has_input(i) ? ctx.input_shape(i) : Shape();
    if (v.has_rank() && v.rank() != 1)
      ctx.fail(std::string(i == 1 ? "pads" : "axes") + " must be 1-D, got shape " + v.to_string());
  }
  std::optional<std::vector<int64_t>> pads = ctx.has_attr("pads") ? std::optional(ctx.attr_ints("pads")) : ctx.input_ints(1);
  std::vector<int64_t> axes;
  if (ctx.has_input(3)) {
    auto a = ctx.input_ints(3);
    if (!a) pads.reset();
    else axes = *a;
  } else {
    for (size_t i = 0; i < rank; ++i) axes.push_back(static_cast<int64_t>(i));
  }
  std::vector<Dim> out = x.dims();
  if (!pads) {
    for (int64_t a : axes) out[ctx.axis(a, rank)] = Dim();
    if (axes.empty()) out.assign(rank, Dim());
    ctx.set_output(0, dt, Shape(std::move(out)));
    return;
  }
  if (pads->size() != 2 * axes.size()) ctx.fail("pads has " + std::to_string(pads->size()) + " entries for " + std::to_string(axes.size()) + " axes");
  for (size_t i = 0; i < axes.size(); ++i) {
    const size_t a = ctx.axis(axes[i], rank);
    const int64_t add = ctx.add((*pads)[i], (*pads)[i + axes.size()], "the padding of axis " + std::to_string(a));
    if (add == 0) continue;
    if (x[a].is_known()) {
      const int64_t size = ctx.add(x[a].value(), add, "the padded size of axis " + std::to_string(a));
      if (size < 0) ctx.fail("padding makes axis " + std::to_string(a) + " negative");
      out[a] = Dim(size);
    } else {
      out[a] = Dim();
    }
  }
  ctx.set_output(0, dt, Shape(std::move(out)));
}

void topk(InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  if (!x.has_rank()) {
    ctx.set_output(0, ctx.input_dtype(0), Shape());
    ctx.set_output(1, DType::kInt64, Shape());
    return;
  }
  const size_t a = ctx.axis(ctx.attr_int("axis", -1), x.rank());
  if (!ctx.has_attr("k")) {  // K is a 1-D tensor of one value
    require_vector(ctx, 1, "K");
    ctx.require_one_value(1, "input 'K'");
  }
  Dim k;
  if (ctx.has_attr("k")) {
    k = ctx.dim(ctx.attr_int("k", 0), "attribute 'k'");
  } else if (auto v = ctx.input_values(1); v && v->size() == 1) {
    if (v->front().negative < 0) ctx.fail("k is " + std::to_string(v->front().negative) + "; it must be >= 0");
    k = v->front().dim;
  }
  if (k.is_known() && x[a].is_known() && k.value() > x[a].value())
    ctx.fail("k is " + k.to_string() + ", larger than axis " + std::to_string(a) + " of size " + x[a].to_string());
  std::vector<Dim> out = x.dims();
  out[a] = k;
  ctx.set_output(0, ctx.input_dtype(0), Shape(out));
  ctx.set_output(1, DType::kInt64, Shape(out));
}

void nonzero(InferContext& ctx) {
  const auto r = ctx.input_rank(0);
  ctx.set_output(0, DType::kInt64, Shape({r ? Dim(static_cast<int64_t>(*r)) : Dim(), Dim()}));
}

void one_hot(InferContext& ctx) {
  const Shape& idx = ctx.input_shape(0);
  const DType dt = ctx.input_dtype(2);
  const Shape& values = ctx.input_shape(2);
  if (values.has_rank() && (values.rank() != 1 || (values[0].is_known() && values[0].value() != 2)))
    ctx.fail("values must hold two elements [off, on], got shape " + values.to_string());
  const Shape& depth_shape = ctx.input_shape(1);
  if (depth_shape.has_rank() && (depth_shape.rank() > 1 || (depth_shape.rank() == 1 && depth_shape[0].is_known() &&
                                                             depth_shape[0].value() != 1)))
    ctx.fail("depth must be a scalar, got shape " + depth_shape.to_string());
  if (!idx.has_rank()) {
    ctx.set_output(0, dt, Shape());
    return;
  }
  const size_t rank = idx.rank() + 1;
  const size_t a = ctx.axis(ctx.attr_int("axis", -1), rank);
  Dim depth;
  if (const ir::Tensor* t = ctx.input_constant(1); t != nullptr && t->num_elements() == 1) {
    std::optional<int64_t> d;
    if (auto ints = ctx.input_ints(1)) {
      d = ints->front();
    } else if (t->dtype() == DType::kFloat32) {
      // A float depth is cast to int64 (ONNX); NaN, infinities and 2^63 and up have no int64.
      const float f = t->data<float>()[0];
      if (!(std::fabs(f) < 9223372036854775808.0f)) ctx.fail("depth " + float_text(f) + " is not an int64 number");
      d = static_cast<int64_t>(f);
    }
    if (d) depth = ctx.dim(*d, "depth");
  }
  std::vector<Dim> out = idx.dims();
  out.insert(out.begin() + static_cast<std::ptrdiff_t>(a), depth);
  ctx.set_output(0, dt, Shape(std::move(out)));
}

// Unique's counts depend on the data: only ranks, and the inverse indices' length, are known.
void unique(InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  const DType dt = ctx.input_dtype(0);
  if (!ctx.has_attr("axis")) {
    ctx.set_output(0, dt, Shape({Dim()}));
    ctx.set_output(1, DType::kInt64, Shape({Dim()}));
    ctx.set_output(2, DType::kInt64, Shape({x.has_rank() ? product(x.dims()) : Dim()}));
    ctx.set_output(3, DType::kInt64, Shape({Dim()}));
    return;
  }
  if (!x.has_rank()) {
    ctx.set_output(0, dt, Shape());
  } else {
    const size_t a = ctx.axis(ctx.attr_int("axis", 0), x.rank());
    std::vector<Dim> out = x.dims();
    out[a] = Dim();
    ctx.set_output(0, dt, Shape(std::move(out)));
    ctx.set_output(2, DType::kInt64, Shape({x[a]}));
  }
  ctx.set_output(1, DType::kInt64, Shape({Dim()}));
  if (!x.has_rank()) ctx.set_output(2, DType::kInt64, Shape({Dim()}));
  ctx.set_output(3, DType::kInt64, Shape({Dim()}));
}

// Compress keeps the slices whose condition entry is true; a constant condition says how many.
void compress(InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  const DType dt = ctx.input_dtype(0);
  const bool has_axis = ctx.has_attr("axis");
  Dim len = !x.has_rank() ? Dim() : has_axis ? Dim() : product(x.dims());
  if (has_axis && x.has_rank()) len = x[ctx.axis(ctx.attr_int("axis", 0), x.rank())];
  Dim kept;
  const ir::Tensor* c = ctx.input_constant(1);
  if (c != nullptr && c->dtype() == DType::kBool && len.is_known()) {
    // Entries past the selected axis are ignored; a shorter condition selects a prefix.
    const int64_t n = std::min(len.value(), c->num_elements());
    int64_t count = 0;
    // Read as bytes: a raw bool byte other than 0 and 1 (true, to ONNX) is not a valid C++ bool.
    const auto* bytes = static_cast<const uint8_t*>(c->raw_data());
    for (int64_t k = 0; k < n; ++k) count += bytes[k] != 0 ? 1 : 0;
    kept = Dim(count);
  }
  if (!has_axis) {
    ctx.set_output(0, dt, Shape({kept}));
    return;
  }
  if (!x.has_rank()) {
    ctx.set_output(0, dt, Shape());
    return;
  }
  std::vector<Dim> out = x.dims();
  out[ctx.axis(ctx.attr_int("axis", 0), x.rank())] = kept;
  ctx.set_output(0, dt, Shape(std::move(out)));
}

}  // namespace

void register_shape(Registry& r) {
  r.add("Shape", shape);
  r.add("Size", size);
  r.add("Reshape", reshape);
  r.add("Flatten", flatten);
  r.add("Transpose", transpose);
  r.add("Squeeze", squeeze);
  r.add("Unsqueeze", unsqueeze);
  r.add("Concat", concat);
  r.add("Split", split);
  r.add("Slice", slice);
  r.add("Gather", gather);
  r.add("GatherElements", gather_elements);
  r.add("GatherND", gather_nd);
  // TensorScatter writes updates into a KV cache in place: the cache keeps its shape.
  r.add("ScatterND", scatter_nd);
  for (const char* op : {"ScatterElements", "Scatter"}) r.add(op, scatter_elements);
  r.add("TensorScatter", same_as_input);
  r.add("Expand", expand);
  r.add("Tile", tile);
  r.add("Pad", pad);
  r.add("TopK", topk);
  r.add("NonZero", nonzero);
  r.add("OneHot", one_hot);
  r.add("Unique", unique);
  r.add("Compress", compress);
}

}  // namespace tether::ops
