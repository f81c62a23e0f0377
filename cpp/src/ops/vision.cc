// Shape inference for image and detection ops: GridSample, AffineGrid, RoiAlign,
// MaxRoiPool, NonMaxSuppression, MaxUnpool, Col2Im, CenterCropPad.
#include "ops/infer_context.h"

namespace tether::ops {

namespace {

// The first of two dims that must be equal (a batch read from two inputs): a known one,
// else a symbolic one, else unknown.
Dim either(const Dim& a, const Dim& b) {
  if (a.is_known() || (a.is_symbolic() && !b.is_known())) return a;
  return b;
}

void grid_sample(InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  const Shape& grid = ctx.input_shape(1);
  const DType dt = ctx.input_dtype(0);
  if (!x.has_rank() && !grid.has_rank()) {
    ctx.set_output(0, dt, Shape());
    return;
  }
  // Y is (N, C, grid's spatial dims): X is (N, C, D1..Dr), grid (N, D1_out..Dr_out, r).
  const size_t rank = x.has_rank() ? x.rank() : grid.rank();
  if (rank < 3) ctx.fail("input must have rank >= 3 (N, C, spatial...), got " + x.to_string());
  if (x.has_rank() && grid.has_rank()) {
    if (grid.rank() != rank)
      ctx.fail("grid has rank " + std::to_string(grid.rank()) + ", expected the input's rank " + std::to_string(rank));
    const Dim& last = grid[rank - 1];
    if (last.is_known() && last.value() != static_cast<int64_t>(rank - 2))
      ctx.fail("grid's last dim is " + last.to_string() + ", expected " + std::to_string(rank - 2) +
               " (one coordinate per spatial axis)");
  }
  std::vector<Dim> out{either(dim_at(x, 0), dim_at(grid, 0)), dim_at(x, 1)};
  for (size_t i = 1; i + 1 < rank; ++i) out.push_back(dim_at(grid, i));
  ctx.set_output(0, dt, Shape(std::move(out)));
}

void affine_grid(InferContext& ctx) {
  // size is (N, C, H, W) or (N, C, D, H, W); the grid is (N, H, W, 2) or (N, D, H, W, 3).
  const DType dt = ctx.input_dtype(0);
  if (auto size = ctx.input_values(1)) {
    if (size->size() != 4 && size->size() != 5)
      ctx.fail("size has " + std::to_string(size->size()) + " entries, expected 4 or 5");
    std::vector<Dim> out{(*size)[0].dim};
    for (size_t i = 2; i < size->size(); ++i) out.push_back((*size)[i].dim);
    out.push_back(Dim(static_cast<int64_t>(size->size() - 2)));
    ctx.set_output(0, dt, Shape(std::move(out)));
    return;
  }
  const Shape& s = ctx.input_shape(1);
  if (s.has_rank() && s.rank() == 1 && s[0].is_known() && (s[0].value() == 4 || s[0].value() == 5)) {
    std::vector<Dim> out(static_cast<size_t>(s[0].value()));
    out[0] = dim_at(ctx.input_shape(0), 0);
    out.back() = Dim(s[0].value() - 2);
    ctx.set_output(0, dt, Shape(std::move(out)));
    return;
  }
  ctx.set_output(0, dt, Shape());
}

// A size attribute, checked: a Dim cannot be negative.
int64_t size_attr(const InferContext& ctx, const char* name, int64_t fallback) {
  const int64_t v = ctx.attr_int(name, fallback);
  if (v < 1) ctx.fail(std::string("attribute '") + name + "' is " + std::to_string(v) + ", expected >= 1");
  return v;
}

void roi_align(InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  const Dim rois = either(dim_at(ctx.input_shape(1), 0), dim_at(ctx.input_shape(2), 0));
  ctx.set_output(0, ctx.input_dtype(0),
                 Shape({rois, dim_at(x, 1), Dim(size_attr(ctx, "output_height", 1)),
                        Dim(size_attr(ctx, "output_width", 1))}));
}

void max_roi_pool(InferContext& ctx) {
  const std::vector<int64_t> pooled = ctx.attr_ints("pooled_shape");
  if (pooled.size() != 2 || pooled[0] < 1 || pooled[1] < 1)
    ctx.fail("pooled_shape must be 2 sizes >= 1, got " + std::to_string(pooled.size()) + " entries");
  ctx.set_output(0, ctx.input_dtype(0),
                 Shape({dim_at(ctx.input_shape(1), 0), dim_at(ctx.input_shape(0), 1), Dim(pooled[0]),
                        Dim(pooled[1])}));
}

// How many boxes survive depends on the scores: only the (index triple) width is known.
void non_max_suppression(InferContext& ctx) {
  // Each of these is one value by the spec; an empty one was read as 0 when fed at run time
  // but as absent when constant.
  ctx.require_one_value(2, "input 'max_output_boxes_per_class'");
  ctx.require_one_value(3, "input 'iou_threshold'");
  ctx.require_one_value(4, "input 'score_threshold'");
  ctx.set_output(0, DType::kInt64, Shape({Dim(), Dim(3)}));
}

void max_unpool(InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  const DType dt = ctx.input_dtype(0);
  if (ctx.has_input(2)) {  // an explicit output_shape wins
    if (auto v = ctx.input_values(2)) {
      std::vector<Dim> out;
      for (const SymInt& e : *v) out.push_back(e.negative < 0 ? Dim() : e.dim);
      ctx.set_output(0, dt, Shape(std::move(out)));
    } else {
      ctx.set_output(0, dt, x.has_rank() ? Shape(std::vector<Dim>(x.rank())) : Shape());
    }
    return;
  }
  if (!x.has_rank()) {
    ctx.set_output(0, dt, Shape());
    return;
  }
  const std::vector<int64_t> kernel = ctx.attr_ints("kernel_shape");
  const size_t k = kernel.size();
  if (x.rank() != k + 2)
    ctx.fail("kernel_shape has " + std::to_string(k) + " entries for input " + x.to_string());
  const std::vector<int64_t> strides = ctx.attr_ints("strides", std::vector<int64_t>(k, 1));
  const std::vector<int64_t> pads = ctx.attr_ints("pads", std::vector<int64_t>(2 * k, 0));
  if (strides.size() != k || pads.size() != 2 * k) ctx.fail("strides or pads do not match kernel_shape");
  std::vector<Dim> out{x[0], x[1]};
  for (size_t i = 0; i < k; ++i) {
    const Dim& in = x[i + 2];
    // The inverse of MaxPool's size: (in - 1) * stride + kernel - pads.
    const int64_t size = in.is_known() ? (in.value() - 1) * strides[i] + kernel[i] - pads[i] - pads[i + k] : 0;
    if (size < 0) ctx.fail("output size on spatial axis " + std::to_string(i) + " would be negative");
    out.push_back(in.is_known() ? Dim(size) : Dim());
  }
  ctx.set_output(0, dt, Shape(std::move(out)));
}

void col2im(InferContext& ctx) {
  // input (N, C * prod(block_shape), L) -> (N, C, image_shape...).
  const Shape& x = ctx.input_shape(0);
  const DType dt = ctx.input_dtype(0);
  auto image = ctx.input_values(1);
  auto block = ctx.input_ints(2);
  if (!image) {
    const Shape& is = ctx.input_shape(1);
    if (is.has_rank() && is.rank() == 1 && is[0].is_known())
      ctx.set_output(0, dt, Shape(std::vector<Dim>(static_cast<size_t>(is[0].value()) + 2)));
    else ctx.set_output(0, dt, Shape());
    return;
  }
  if (x.has_rank() && x.rank() != 3) ctx.fail("input must be 3-D (N, C * prod(block_shape), L), got " + x.to_string());
  Dim channels;
  if (block && x.has_rank()) {
    if (block->size() != image->size())
      ctx.fail("block_shape has " + std::to_string(block->size()) + " entries, image_shape " +
               std::to_string(image->size()));
    int64_t cells = 1;
    for (int64_t b : *block) cells *= b;
    auto c = x[1].divide(Dim(cells));
    if (x[1].is_known() && !c)
      ctx.fail("input dim 1 (" + x[1].to_string() + ") is not a multiple of prod(block_shape) = " + std::to_string(cells));
    if (c) channels = *c;
  }
  std::vector<Dim> out{dim_at(x, 0), channels};
  for (const SymInt& e : *image) out.push_back(e.negative < 0 ? Dim() : e.dim);
  ctx.set_output(0, dt, Shape(std::move(out)));
}

void center_crop_pad(InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  const DType dt = ctx.input_dtype(0);
  if (!x.has_rank()) {
    ctx.set_output(0, dt, Shape());
    return;
  }
  std::vector<size_t> axes = ctx.distinct_axes(ctx.attr_ints("axes"), x.rank());
  if (axes.empty())
    for (size_t i = 0; i < x.rank(); ++i) axes.push_back(i);
  std::vector<Dim> out = x.dims();
  auto target = ctx.input_values(1);
  if (target && target->size() != axes.size())
    ctx.fail("shape has " + std::to_string(target->size()) + " entries for " + std::to_string(axes.size()) + " axes");
  for (size_t i = 0; i < axes.size(); ++i) out[axes[i]] = target && (*target)[i].negative == 0 ? (*target)[i].dim : Dim();
  ctx.set_output(0, dt, Shape(std::move(out)));
}

}  // namespace

void register_vision(Registry& r) {
  r.add("GridSample", grid_sample);
  r.add("AffineGrid", affine_grid);
  r.add("RoiAlign", roi_align);
  r.add("MaxRoiPool", max_roi_pool);
  r.add("NonMaxSuppression", non_max_suppression);
  r.add("MaxUnpool", max_unpool);
  r.add("Col2Im", col2im);
  r.add("CenterCropPad", center_crop_pad);
}

}  // namespace tether::ops
