// Shape inference for Resize and Upsample.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/infer_context.h"

namespace tether::ops {

namespace {

// Resize: X, roi, scales, sizes (opset 11+); X, scales (opset 10). Upsample: X, scales
// (opset 9+) or a `scales` attribute (opset 7).
std::optional<std::vector<float>> resize_scales(const InferContext& ctx, bool is_upsample) {
  if (const ir::Attribute* a = ctx.node().attr("scales")) return a->as_floats();
  const size_t at = is_upsample || ctx.opset() < 11 ? 1 : 2;
  if (!ctx.has_input(at)) return std::vector<float>{};
  const ir::Tensor* t = ctx.input_constant(at);
  if (t == nullptr || t->dtype() != DType::kFloat32) return std::nullopt;
  return std::vector<float>(t->data<float>(), t->data<float>() + t->num_elements());
}

// Output sizes from `sizes` under keep_aspect_ratio_policy (opset 18): one scale for every
// resized axis, the smallest (not_larger) or largest (not_smaller) of sizes / input, then
// each axis is round_half_up(scale * input). In float, as onnxruntime and onnx's own
// inference compute it: double arithmetic rounds some products (59.499996f) the other way.
bool keep_aspect_ratio(const std::vector<size_t>& axes, const std::vector<SymInt>& sizes, bool not_larger,
                       std::vector<Dim>& out) {
  float scale = 0;
  for (size_t i = 0; i < axes.size(); ++i) {
    const Dim& in = out[axes[i]];
    if (!in.is_known() || in.value() == 0 || !sizes[i].known() || *sizes[i].known() < 0) return false;
    const float s = static_cast<float>(*sizes[i].known()) / static_cast<float>(in.value());
    scale = i == 0 ? s : not_larger ? std::min(scale, s) : std::max(scale, s);
  }
  for (size_t a : axes) out[a] = Dim(static_cast<int64_t>(std::round(scale * static_cast<float>(out[a].value()))));
  return true;
}

void resize(InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  const DType dt = ctx.input_dtype(0);
  if (!x.has_rank()) {
    ctx.set_output(0, dt, Shape());
    return;
  }
  const size_t rank = x.rank();
  std::vector<size_t> axes = ctx.distinct_axes(ctx.attr_ints("axes"), rank);
  if (axes.empty())
    for (size_t i = 0; i < rank; ++i) axes.push_back(i);
  std::vector<Dim> out = x.dims();
  const Shape rank_only{std::vector<Dim>(rank)};
  const bool is_upsample = ctx.node().op_type() == "Upsample";
  // The crop box is 1-D, and tf_crop_and_resize reads one start and one end per resized axis:
  // an empty roi is not the whole image there.
  if (!is_upsample && ctx.opset() >= 11 && ctx.num_inputs() > 1 && ctx.has_input(1)) {
    const Shape& roi = ctx.input_shape(1);
    if (roi.has_rank() && roi.rank() != 1) ctx.fail("input 'roi' must be 1-D, got shape " + roi.to_string());
    if (ctx.attr_string("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize" && roi.has_rank() &&
        roi[0].is_known() && roi[0].value() != static_cast<int64_t>(2 * axes.size()))
      ctx.fail("input 'roi' has " + roi[0].to_string() + " entries; tf_crop_and_resize needs " +
               std::to_string(2 * axes.size()) + " (a start and an end per resized axis)");
  }
  const auto scales = resize_scales(ctx, is_upsample);
  if (!scales) {  // computed at run time: only the rank is certain
    ctx.set_output(0, dt, rank_only);
    return;
  }
  if (scales->empty()) {
    auto sizes = !is_upsample && ctx.opset() >= 11 && ctx.has_input(3) ? ctx.input_values(3) : std::nullopt;
    if (!sizes || sizes->size() != axes.size()) {
      ctx.set_output(0, dt, rank_only);
      return;
    }
    for (const SymInt& e : *sizes)
      if (e.negative < 0) ctx.fail("sizes has negative entry " + std::to_string(e.negative));
    const std::string policy = ctx.attr_string("keep_aspect_ratio_policy", "stretch");
    if (policy == "stretch") {
      for (size_t i = 0; i < axes.size(); ++i) out[axes[i]] = (*sizes)[i].dim;
    } else if (policy != "not_larger" && policy != "not_smaller") {
      ctx.fail("keep_aspect_ratio_policy is '" + policy + "', expected stretch, not_larger or not_smaller");
    } else if (!keep_aspect_ratio(axes, *sizes, policy == "not_larger", out)) {
      for (size_t a : axes) out[a] = Dim();
    }
    ctx.set_output(0, dt, Shape(std::move(out)));
    return;
  }
  if (scales->size() != axes.size())
    ctx.fail("scales has " + std::to_string(scales->size()) + " entries for " + std::to_string(axes.size()) + " axes");
  for (size_t i = 0; i < axes.size(); ++i) {
    const size_t a = axes[i];
    const float s = (*scales)[i];
    if (!(s > 0.0f) || !std::isfinite(s))
      ctx.fail("scale " + float_text(s) + " on axis " + std::to_string(a) + " is not a positive finite number");
    if (s == 1.0f) continue;
    // The spec's output size is floor(input * scale), with the product in float as onnxruntime
    // and onnx's own inference take it (3 * 1.6666666f is 5 there, 4 in double); an integer
    // scale keeps a symbolic dim.
    if (!x[a].is_known()) {
      out[a] = s == std::floor(s) && s < 9223372036854775808.0f ? x[a] * Dim(static_cast<int64_t>(s)) : Dim();
      continue;
    }
    const float size = std::floor(static_cast<float>(x[a].value()) * s);
    // 2^63 is the first float past int64; converting anything at or above it is undefined.
    if (!(size < 9223372036854775808.0f))
      ctx.fail("scale " + float_text(s) + " makes axis " + std::to_string(a) + " of size " + x[a].to_string() +
               " larger than int64");
    out[a] = Dim(static_cast<int64_t>(size));
  }
  ctx.set_output(0, dt, Shape(std::move(out)));
}

}  // namespace

void register_resize(Registry& r) {
  r.add("Resize", resize);
  r.add("Upsample", resize);
}

}  // namespace tether::ops
