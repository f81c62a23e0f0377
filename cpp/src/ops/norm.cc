// Shape inference for normalisations: BatchNormalization, LayerNormalization,
// RMSNormalization, InstanceNormalization, GroupNormalization, LRN, MeanVarianceNormalization,
// LpNormalization, and Softmax, LogSoftmax and Hardmax.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/infer_context.h"

namespace tether::ops {

namespace {

// X [N, C, ...] of rank at least `min_rank`, and inputs [first, last] (those present) 1-D
// tensors of C values each: the per-channel parameters of a normalisation.
void check_channel_params(InferContext& ctx, size_t min_rank, size_t first, size_t last) {
  const Shape& x = ctx.input_shape(0);
  if (!x.has_rank()) return;
  if (x.rank() < min_rank)
    ctx.fail("input must have rank >= " + std::to_string(min_rank) + " (N, C, ...), got " + x.to_string());
  static const char* const kNames[] = {"X", "scale", "B", "mean", "var"};
  for (size_t i = first; i <= last && i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) continue;
    const Shape& p = ctx.input_shape(i);
    if (!p.has_rank()) continue;
    const std::string name = i < 5 ? kNames[i] : "input " + std::to_string(i);
    if (p.rank() != 1) ctx.fail(name + " must be 1-D (one value per channel), got " + p.to_string());
    if (p[0].is_known() && x[1].is_known() && p[0].value() != x[1].value())
      ctx.fail(name + " has " + p[0].to_string() + " values for " + x[1].to_string() + " channels");
  }
}

void batch_norm(InferContext& ctx) {
  check_channel_params(ctx, 2, 1, 4);
  ctx.set_output(0, ctx.input_type(0));
  ctx.set_output(1, ctx.input_type(3));
  ctx.set_output(2, ctx.input_type(4));
}

void layer_norm(InferContext& ctx) {
  ctx.set_output(0, ctx.input_type(0));
  const Shape& x = ctx.input_shape(0);
  const DType stash = ctx.attr_dtype("stash_type", DType::kFloat32);
  // The statistics (and the optional Mean and InvStdDev outputs) are float32: the type the
  // operator's default names, and the only one tether computes them in.
  if (stash != DType::kFloat32)
    ctx.fail("stash_type is " + std::string(dtype_name(stash)) + "; only float (1) is supported");
  if (!x.has_rank()) {
    ctx.set_output(1, stash, Shape());
    ctx.set_output(2, stash, Shape());
    return;
  }
  if (x.rank() == 0) ctx.fail("input must have rank >= 1, got a scalar");
  const size_t axis = ctx.axis(ctx.attr_int("axis", -1), x.rank());
  // Scale and bias broadcast to the normalised dims x[axis:] (numpy rules, one direction).
  const Shape normalised(std::vector<Dim>(x.dims().begin() + static_cast<std::ptrdiff_t>(axis), x.dims().end()));
  for (size_t i = 1; i < 3 && i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i))
      check_unidirectional(ctx, ctx.input_shape(i), normalised,
                           std::string(i == 1 ? "scale" : "bias") + " (normalising from axis " + std::to_string(axis) + ")");
  std::vector<Dim> reduced(x.dims().begin(), x.dims().begin() + static_cast<std::ptrdiff_t>(axis));
  reduced.resize(x.rank(), Dim(1));
  ctx.set_output(1, stash, Shape(reduced));
  ctx.set_output(2, stash, Shape(reduced));
}

void instance_norm(InferContext& ctx) {
  check_channel_params(ctx, 3, 1, 2);
  ctx.set_output(0, ctx.input_type(0));
}

void lrn(InferContext& ctx) {
  check_channel_params(ctx, 3, 1, 0);
  if (ctx.attr_int("size", 0) < 1) ctx.fail("size is " + std::to_string(ctx.attr_int("size", 0)) + "; it must be >= 1");
  ctx.set_output(0, ctx.input_type(0));
}

// GroupNormalization(X, scale, bias): num_groups divides the channels; scale and bias hold one
// value per group (opset 18) or per channel (opset 21), both the same way: the kernel reads
// them with one index.
void group_norm(InferContext& ctx) {
  const int64_t groups = ctx.attr_int("num_groups", 0);
  if (groups < 1) ctx.fail("num_groups is " + std::to_string(groups) + "; it must be >= 1");
  const Shape& x = ctx.input_shape(0);
  if (x.has_rank()) {
    if (x.rank() < 2) ctx.fail("input must have rank >= 2 (N, C, ...), got " + x.to_string());
    if (x[1].is_known() && x[1].value() % groups != 0)
      ctx.fail("num_groups " + std::to_string(groups) + " does not divide the " + std::to_string(x[1].value()) +
               " channels");
    for (size_t i = 1; i < 3 && i < ctx.num_inputs(); ++i) {
      const Shape& p = ctx.input_shape(i);
      if (p.has_rank() && p.rank() != 1)
        ctx.fail(std::string(i == 1 ? "scale" : "bias") + " must be 1-D, got shape " + p.to_string());
      if (!p.has_rank() || !p[0].is_known() || !x[1].is_known()) continue;
      const int64_t n = p[0].value();
      if (n != groups && n != x[1].value())
        ctx.fail(std::string(i == 1 ? "scale" : "bias") + " has " + std::to_string(n) + " values; it needs one per group (" +
                 std::to_string(groups) + ") or per channel (" + std::to_string(x[1].value()) + ")");
    }
    const Shape& scale = ctx.input_shape(1);
    const Shape& bias = ctx.input_shape(2);
    if (scale.has_rank() && bias.has_rank() && scale.rank() == 1 && bias.rank() == 1 && scale[0].is_known() &&
        bias[0].is_known() && scale[0].value() != bias[0].value())
      ctx.fail("scale has " + scale[0].to_string() + " values and bias " + bias[0].to_string() +
               "; both must hold one value per group or both one per channel");
  }
  ctx.set_output(0, ctx.input_type(0));
}

// Ops of X's shape that work along an axis attribute (Softmax, Hardmax, LpNormalization):
// X has rank >= 1 and the axis lies within it.
void along_axis(InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  if (x.has_rank()) {
    if (x.rank() == 0) ctx.fail("input must have rank >= 1, got a scalar");
    // (The default differs between opsets; only an axis the model gives is checked.)
    if (ctx.has_attr("axis")) ctx.axis(ctx.attr_int("axis", -1), x.rank());
  }
  same_as_input(ctx);
}

// MeanVarianceNormalization over `axes` (default [0, 2, 3]), each within X's rank.
void mean_variance(InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  // An empty list is not the default: it would normalise over nothing.
  if (ctx.has_attr("axes") && ctx.attr_ints("axes").empty()) ctx.fail("axes is empty; it must name at least one axis");
  if (x.has_rank())
    ctx.distinct_axes(ctx.attr_ints("axes", {0, 2, 3}), x.rank());
  same_as_input(ctx);
}

}  // namespace

void register_norm(Registry& r) {
  r.add("BatchNormalization", batch_norm);
  r.add("LayerNormalization", layer_norm);
  r.add("RMSNormalization", same_as_input);
  r.add("InstanceNormalization", instance_norm);
  r.add("LRN", lrn);
  r.add("GroupNormalization", group_norm);
  for (const char* op : {"Softmax", "LogSoftmax", "Hardmax", "LpNormalization"}) r.add(op, along_axis);
  r.add("MeanVarianceNormalization", mean_variance);
}

}  // namespace tether::ops
