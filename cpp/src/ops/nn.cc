// Shape inference for neural-network ops: convolutions, pooling, normalisation, resizing,
// recurrent layers, attention, quantization.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/infer_context.h"

namespace tether::ops {

namespace {

// a / b rounded up, for a >= 0 and b >= 1; (a + b - 1) / b would overflow for large a.
int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

std::vector<int64_t> attr_or(const InferContext& ctx, const char* name, size_t n, int64_t fill) {
  std::vector<int64_t> v = ctx.attr_ints(name);
  // Only an absent attribute takes the default: an empty list is a list of the wrong length.
  if (v.empty() && !ctx.has_attr(name)) v.assign(n, fill);
  if (v.size() != n) ctx.fail(std::string("attribute '") + name + "' has " + std::to_string(v.size()) +
                              " entries, expected " + std::to_string(n));
  return v;
}

// Output spatial dims of a sliding window (Conv and pools).
struct Window {
  std::vector<int64_t> kernel, strides, dilations, pads;  // pads: begins then ends
  std::string auto_pad;
  bool ceil_mode = false;
};

Window window(const InferContext& ctx, std::vector<int64_t> kernel) {
  const size_t k = kernel.size();
  Window w;
  w.kernel = std::move(kernel);
  w.strides = attr_or(ctx, "strides", k, 1);
  w.dilations = attr_or(ctx, "dilations", k, 1);
  w.pads = attr_or(ctx, "pads", 2 * k, 0);
  w.auto_pad = ctx.attr_string("auto_pad", "NOTSET");
  w.ceil_mode = ctx.attr_int("ceil_mode", 0) != 0;
  for (size_t i = 0; i < k; ++i) {
    const std::string axis = " on spatial axis " + std::to_string(i) + " is ";
    if (w.strides[i] < 1) ctx.fail("the stride" + axis + std::to_string(w.strides[i]) + "; strides must be >= 1");
    if (w.dilations[i] < 1) ctx.fail("the dilation" + axis + std::to_string(w.dilations[i]) + "; dilations must be >= 1");
    if (w.kernel[i] < 1) ctx.fail("the kernel size" + axis + std::to_string(w.kernel[i]) + "; kernel sizes must be >= 1");
  }
  return w;
}

Dim window_out(const InferContext& ctx, const Window& w, size_t i, const Dim& in) {
  const int64_t ek = ctx.add(ctx.mul(w.kernel[i] - 1, w.dilations[i], "the dilated kernel size"), 1,
                             "the dilated kernel size");
  const int64_t s = w.strides[i];
  const int64_t padded = ctx.add(w.pads[i], w.pads[i + w.kernel.size()], "the padding");
  if (w.auto_pad == "SAME_UPPER" || w.auto_pad == "SAME_LOWER") {
    if (s == 1) return in;
    return in.is_known() ? Dim(ceil_div(in.value(), s)) : Dim();
  }
  const bool valid = w.auto_pad == "VALID";
  if (!valid && w.auto_pad != "NOTSET") ctx.fail("unknown auto_pad '" + w.auto_pad + "'");
  const int64_t total_pad = valid ? 0 : padded;
  if (!in.is_known()) return (s == 1 && total_pad == ek - 1) ? in : Dim();
  const int64_t padded_in = ctx.add(in.value(), total_pad, "the padded input size");
  if (padded_in < ek) ctx.fail("the window (" + std::to_string(ek) + ") is larger than the padded input (" +
                               std::to_string(padded_in) + ") on spatial axis " + std::to_string(i));
  const int64_t span = padded_in - ek;
  int64_t out = (w.ceil_mode ? ceil_div(span, s) : span / s) + 1;
  // With ceil_mode, a last window that would start in the end padding is dropped.
  if (w.ceil_mode && ctx.mul(out - 1, s, "the last window's start") >= ctx.add(in.value(), w.pads[i], "the padded input size"))
    --out;
  return Dim(out);
}

// ai.tether QLinearConv and MaxPool with channels_last = 1 read X [N, spatial..., C] and write
// Y alike; their shapes are the ONNX op's on the channels-first view of X.
bool channels_last(const InferContext& ctx) {
  return ctx.node().domain() == "ai.tether" && ctx.attr_int("channels_last", 0) != 0;
}

// X's shape as the ONNX op sees it: [N, C, spatial...] (moved from [N, spatial..., C] when last).
Shape channels_first_view(const InferContext& ctx, bool last) {
  const Shape& x = ctx.input_shape(0);
  if (!last || !x.has_rank()) return x;
  if (x.rank() < 3) ctx.fail("input must have rank >= 3 (N, spatial..., C), got " + x.to_string());
  std::vector<Dim> d = {x[0], x[x.rank() - 1]};
  for (size_t i = 1; i + 1 < x.rank(); ++i) d.push_back(x[i]);
  return Shape(std::move(d));
}

// [N, C, spatial...] output dims as the op writes them.
Shape output_layout(std::vector<Dim> out, bool last) {
  if (last) std::rotate(out.begin() + 1, out.begin() + 2, out.end());
  return Shape(std::move(out));
}

void conv(InferContext& ctx) {
  const bool last = channels_last(ctx);
  const Shape x = channels_first_view(ctx, last);
  // QLinearConv takes (x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point).
  const bool qlinear = ctx.node().op_type() == "QLinearConv";
  const Shape& w = ctx.input_shape(qlinear ? 3 : 1);
  const DType dt = ctx.node().op_type() == "ConvInteger" ? DType::kInt32 : ctx.input_dtype(qlinear ? 7 : 0);
  if (!x.has_rank()) {
    ctx.set_output(0, dt, Shape());
    return;
  }
  if (x.rank() < 3) ctx.fail("input must have rank >= 3 (N, C, spatial...), got " + x.to_string());
  const size_t k = x.rank() - 2;
  if (w.has_rank() && w.rank() != x.rank()) ctx.fail("weight rank " + std::to_string(w.rank()) + " differs from input rank " + std::to_string(x.rank()));
  // The kernel comes from kernel_shape or else the weight's spatial dims; an axis whose size
  // neither gives has an unknown output size, but strides, pads and the rest are still checked.
  std::vector<int64_t> kernel = ctx.attr_ints("kernel_shape");
  std::vector<bool> known(k, true);
  if (kernel.size() != k && (!kernel.empty() || ctx.has_attr("kernel_shape")))
    ctx.fail("kernel_shape has " + std::to_string(kernel.size()) + " entries for " + std::to_string(k) + " spatial axes");
  if (kernel.empty()) {
    for (size_t i = 0; i < k; ++i) {
      known[i] = w.has_rank() && w[i + 2].is_known();
      kernel.push_back(known[i] ? w[i + 2].value() : 1);
    }
  }
  std::vector<Dim> out{x[0], w.has_rank() ? w[0] : Dim()};
  const int64_t group = ctx.attr_int("group", 1);
  if (group < 1) ctx.fail("group is " + std::to_string(group) + "; it must be >= 1");
  if (!qlinear && ctx.num_inputs() > 2 && ctx.has_input(2) && ctx.node().op_type() == "Conv") {
    const Shape& b = ctx.input_shape(2);
    if (b.has_rank() && (b.rank() != 1 || (b[0].is_known() && w.has_rank() && w[0].is_known() && b[0].value() != w[0].value())))
      ctx.fail("bias " + b.to_string() + " must be 1-D with one value per output channel (" +
               (w.has_rank() ? w[0].to_string() : std::string("?")) + ")");
  }
  // Compared by division: the product of two of the model's numbers may overflow.
  if (w.has_rank() && x[1].is_known() && w[1].is_known() &&
      (x[1].value() % group != 0 || x[1].value() / group != w[1].value()))
    ctx.fail("input has " + x[1].to_string() + " channels, weight expects " + w[1].to_string() + " per group x " +
             std::to_string(group) + " groups");
  Window win = window(ctx, kernel);
  // After the kernel sizes and channels are checked on their own: kernel_shape must describe
  // the weight, whose output channels split into the groups.
  if (w.has_rank() && !ctx.attr_ints("kernel_shape").empty())
    for (size_t i = 0; i < k; ++i)
      if (w[i + 2].is_known() && w[i + 2].value() != kernel[i])
        ctx.fail("kernel_shape says " + std::to_string(kernel[i]) + " on spatial axis " + std::to_string(i) +
                 ", the weight " + w.to_string() + " has " + w[i + 2].to_string());
  if (w.has_rank() && w[0].is_known() && w[0].value() % group != 0)
    ctx.fail("the weight's " + w[0].to_string() + " output channels do not split into " + std::to_string(group) + " groups");
  for (size_t i = 0; i < k; ++i) out.push_back(known[i] ? window_out(ctx, win, i, x[i + 2]) : Dim());
  ctx.set_output(0, dt, output_layout(std::move(out), last));
}

void conv_transpose(InferContext& ctx) {
  const bool last = channels_last(ctx);
  const Shape x = channels_first_view(ctx, last);
  const Shape& w = ctx.input_shape(1);
  if (!x.has_rank()) {
    ctx.set_output(0, ctx.input_dtype(0), Shape());
    return;
  }
  if (x.rank() < 3) ctx.fail("input must have rank >= 3 (N, C, spatial...), got " + x.to_string());
  const size_t k = x.rank() - 2;
  const int64_t group = ctx.attr_int("group", 1);
  if (group < 1) ctx.fail("group is " + std::to_string(group) + ", expected >= 1");
  // The weight is (C_in, C_out / group, k...): its first dim must match the input's channels.
  if (w.has_rank() && w.rank() >= 1 && x[1].is_known() && w[0].is_known() && x[1].value() != w[0].value())
    ctx.fail("input has " + x[1].to_string() + " channels, weight expects " + w[0].to_string());
  // Each group reads C_in / group input channels.
  if (x[1].is_known() && x[1].value() % group != 0)
    ctx.fail("input has " + x[1].to_string() + " channels, which " + std::to_string(group) + " groups do not divide");
  Dim channels = w.has_rank() && w.rank() >= 2 ? w[1] * Dim(group) : Dim();
  if (ctx.num_inputs() > 2 && ctx.has_input(2)) {
    const Shape& b = ctx.input_shape(2);
    if (b.has_rank() && (b.rank() != 1 || (b[0].is_known() && channels.is_known() && b[0].value() != channels.value())))
      ctx.fail("bias " + b.to_string() + " must be 1-D with one value per output channel (" + channels.to_string() + ")");
  }
  std::vector<Dim> out{x[0], channels};
  std::vector<int64_t> kernel = ctx.attr_ints("kernel_shape");
  if (kernel.size() != k && (!kernel.empty() || ctx.has_attr("kernel_shape")))
    ctx.fail("kernel_shape has " + std::to_string(kernel.size()) + " entries for " + std::to_string(k) + " spatial axes");
  for (int64_t v : kernel)
    if (v < 1) ctx.fail("kernel sizes must be >= 1, kernel_shape has " + std::to_string(v));
  // kernel_shape must describe the weight (C_in, C_out / group, k...), as for Conv.
  if (!kernel.empty() && w.has_rank() && w.rank() == x.rank())
    for (size_t i = 0; i < k; ++i)
      if (w[i + 2].is_known() && w[i + 2].value() != kernel[i])
        ctx.fail("kernel_shape says " + std::to_string(kernel[i]) + " on spatial axis " + std::to_string(i) +
                 ", the weight " + w.to_string() + " has " + w[i + 2].to_string());
  if (kernel.empty() && w.has_rank() && w.rank() == x.rank())
    for (size_t i = 0; i < k; ++i) kernel.push_back(w[i + 2].is_known() ? w[i + 2].value() : -1);
  const auto strides = attr_or(ctx, "strides", k, 1);
  const auto dilations = attr_or(ctx, "dilations", k, 1);
  const auto pads = attr_or(ctx, "pads", 2 * k, 0);
  const auto out_pad = attr_or(ctx, "output_padding", k, 0);
  const std::string auto_pad = ctx.attr_string("auto_pad", "NOTSET");
  for (size_t i = 0; i < k; ++i) {
    const std::string axis = " on spatial axis " + std::to_string(i) + " is ";
    if (strides[i] < 1) ctx.fail("the stride" + axis + std::to_string(strides[i]) + "; strides must be >= 1");
    if (dilations[i] < 1) ctx.fail("the dilation" + axis + std::to_string(dilations[i]) + "; dilations must be >= 1");
    // output_padding adds to one side what a stride or dilation leaves out; more would be
    // output no input reaches (onnxruntime and PyTorch refuse it too).
    if (out_pad[i] < 0 || (out_pad[i] >= strides[i] && out_pad[i] >= dilations[i]))
      ctx.fail("the output padding" + axis + std::to_string(out_pad[i]) + "; it must be >= 0 and smaller than the stride (" +
               std::to_string(strides[i]) + ") or the dilation (" + std::to_string(dilations[i]) + ")");
  }
  const std::vector<int64_t> output_shape = ctx.attr_ints("output_shape");
  if (!output_shape.empty()) {
    if (output_shape.size() != k) ctx.fail("output_shape has " + std::to_string(output_shape.size()) + " entries, expected " + std::to_string(k));
    for (int64_t v : output_shape) out.push_back(ctx.dim(v, "an entry of output_shape"));
    ctx.set_output(0, ctx.input_dtype(0), output_layout(std::move(out), last));
    return;
  }
  for (size_t i = 0; i < k; ++i) {
    const Dim& in = x[i + 2];
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      out.push_back(in * Dim(strides[i]));
      continue;
    }
    if (kernel.size() != k || kernel[i] < 1) {
      out.push_back(Dim());
      continue;
    }
    // stride * (in - 1) + out_pad + (kernel - 1) * dilation + 1 - pads = stride * in + rest,
    // in checked arithmetic: attributes can hold anything.
    const int64_t total_pad = auto_pad == "VALID" ? 0 : ctx.add(pads[i], pads[i + k], "the padding");
    if (total_pad == std::numeric_limits<int64_t>::min()) ctx.fail("the padding overflows int64");
    int64_t rest = ctx.add(out_pad[i], ctx.mul(kernel[i] - 1, dilations[i], "the dilated kernel size"), "the output size");
    rest = ctx.add(ctx.add(rest, 1, "the output size"), -total_pad, "the output size");
    rest = ctx.add(rest, -strides[i], "the output size");
    if (!in.is_known()) {
      out.push_back(rest == 0 ? in * Dim(strides[i]) : Dim());  // a symbolic size stays a monomial
      continue;
    }
    const int64_t v = ctx.add(ctx.mul(strides[i], in.value(), "the output size"), rest, "the output size");
    if (v < 0) ctx.fail("output size on spatial axis " + std::to_string(i) + " would be negative");
    out.push_back(Dim(v));
  }
  ctx.set_output(0, ctx.input_dtype(0), output_layout(std::move(out), last));
}

void pool(InferContext& ctx) {
  const bool last = channels_last(ctx);
  const Shape x = channels_first_view(ctx, last);
  const DType dt = ctx.input_dtype(0);
  if (!x.has_rank()) {
    ctx.set_output(0, dt, Shape());
    return;
  }
  if (x.rank() < 3) ctx.fail("input must have rank >= 3 (N, C, spatial...), got " + x.to_string());
  const std::vector<int64_t> kernel = ctx.attr_ints("kernel_shape");
  if (kernel.size() != x.rank() - 2)
    ctx.fail("kernel_shape has " + std::to_string(kernel.size()) + " entries for " + std::to_string(x.rank() - 2) +
             " spatial axes");
  Window win = window(ctx, kernel);
  // A pad as long as the kernel would make windows wholly of padding, which have no value to
  // pool (onnxruntime refuses them too).
  for (size_t i = 0; i < kernel.size() && win.auto_pad == "NOTSET"; ++i)
    for (const int64_t p : {win.pads[i], win.pads[i + kernel.size()]})
      if (p >= kernel[i])
        ctx.fail("a pad of " + std::to_string(p) + " on spatial axis " + std::to_string(i) +
                 " is not smaller than the kernel size " + std::to_string(kernel[i]));
  std::vector<Dim> out{x[0], x[1]};
  for (size_t i = 0; i < kernel.size(); ++i) out.push_back(window_out(ctx, win, i, x[i + 2]));
  Shape shape = output_layout(std::move(out), last);
  ctx.set_output(0, dt, shape);
  ctx.set_output(1, DType::kInt64, shape);  // MaxPool's Indices
}

void global_pool(InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  if (!x.has_rank()) {
    ctx.set_output(0, ctx.input_dtype(0), Shape());
    return;
  }
  if (x.rank() < 2) ctx.fail("input must have rank >= 2, got " + x.to_string());
  // ai.tether's channels-last form: [N, spatial..., C] -> [N, 1, ..., C].
  const bool last = channels_last(ctx);
  std::vector<Dim> out{x[0], last ? Dim(1) : x[1]};
  for (size_t i = 2; i < x.rank(); ++i) out.push_back(last && i + 1 == x.rank() ? x[i] : Dim(1));
  ctx.set_output(0, ctx.input_dtype(0), Shape(std::move(out)));
}

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

void depth_to_space(InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  const int64_t b = ctx.attr_int("blocksize", 0);
  if (b < 1) ctx.fail("blocksize must be >= 1");
  if (!x.has_rank()) {
    ctx.set_output(0, ctx.input_dtype(0), Shape());
    return;
  }
  if (x.rank() != 4) ctx.fail("input must be 4-D, got " + x.to_string());
  const bool to_space = ctx.node().op_type() == "DepthToSpace";
  std::vector<Dim> out{x[0]};
  if (to_space) {
    const int64_t b2 = ctx.mul(b, b, "blocksize^2");
    auto c = x[1].divide(Dim(b2));
    if (x[1].is_known() && !c) ctx.fail("channels " + x[1].to_string() + " are not divisible by blocksize^2 = " + std::to_string(b2));
    out.push_back(c ? *c : Dim());
    out.push_back(x[2] * Dim(b));
    out.push_back(x[3] * Dim(b));
  } else {
    out.push_back(x[1] * Dim(ctx.mul(b, b, "blocksize^2")));
    for (size_t i : {2, 3}) {
      auto d = x[i].divide(Dim(b));
      if (x[i].is_known() && !d) ctx.fail("spatial dim " + x[i].to_string() + " is not divisible by blocksize " + std::to_string(b));
      out.push_back(d ? *d : Dim());
    }
  }
  ctx.set_output(0, ctx.input_dtype(0), Shape(std::move(out)));
}

void recurrent(InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  const DType dt = ctx.input_dtype(0);
  const int64_t hidden = ctx.attr_int("hidden_size", -1);
  // R alone holds gates * hidden^2 values: a hidden size past 2^32 cannot be real, and sizes
  // derived from it would overflow.
  if (hidden > (int64_t{1} << 32)) ctx.fail("hidden_size is " + std::to_string(hidden) + "; it must be at most 2^32");
  const std::string direction = ctx.attr_string("direction", "forward");
  const int64_t dirs = direction == "bidirectional" ? 2 : 1;
  const bool batch_first = ctx.attr_int("layout", 0) != 0;
  Dim seq, batch;
  if (x.has_rank()) {
    if (x.rank() != 3) ctx.fail("input must be 3-D, got " + x.to_string());
    seq = x[batch_first ? 1 : 0];
    batch = x[batch_first ? 0 : 1];
  }
  const Dim h = hidden > 0 ? Dim(hidden) : Dim();
  const Dim nd(dirs);
  // W [dirs, gates*h, input], R [dirs, gates*h, h], B [dirs, 2*gates*h], each dim checked when known.
  const std::string& op = ctx.node().op_type();
  const int64_t gates = op == "LSTM" ? 4 : op == "GRU" ? 3 : 1;
  const Dim gh = hidden > 0 ? Dim(gates * hidden) : Dim();
  const Dim input = x.has_rank() ? x[2] : Dim();
  auto expect = [&](size_t i, const char* name, const std::vector<Dim>& want) {
    if (i >= ctx.num_inputs() || !ctx.has_input(i)) return;
    const Shape& s = ctx.input_shape(i);
    if (!s.has_rank()) return;
    bool ok = s.rank() == want.size();
    for (size_t k = 0; ok && k < want.size(); ++k)
      ok = !(s[k].is_known() && want[k].is_known() && s[k].value() != want[k].value());
    if (!ok) ctx.fail(std::string(name) + " has shape " + s.to_string() + ", expected " + Shape(want).to_string() +
                      " (direction " + direction + ", hidden_size " + std::to_string(hidden) + ")");
  };
  expect(1, "W", {nd, gh, input});
  expect(2, "R", {nd, gh, h});
  expect(3, "B", {nd, hidden > 0 ? Dim(2 * gates * hidden) : Dim()});
  ctx.set_output(0, dt, batch_first ? Shape({batch, seq, nd, h}) : Shape({seq, nd, batch, h}));
  const Shape state = batch_first ? Shape({batch, nd, h}) : Shape({nd, batch, h});
  ctx.set_output(1, dt, state);
  ctx.set_output(2, dt, state);  // LSTM's Y_c
}

// Attention (opset 23). Q, K, V are 4-D (batch, heads, seq, head_size) or 3-D (batch, seq,
// heads * head_size) with q_num_heads / kv_num_heads. Outputs: Y, present_key,
// present_value (past_seq + kv_seq on the sequence axis), qk_matmul_output.
// RotaryEmbedding (opset 23): X [batch, heads, seq, head] or [batch, seq, hidden] with
// num_heads; cos_cache and sin_cache of one shape, [positions, rot / 2] with position_ids or
// [batch, seq, rot / 2] without; rot (rotary_embedding_dim, else the head size) even and at
// most the head size.
void rotary(InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  const int64_t heads = ctx.attr_int("num_heads", 0);
  const int64_t rot_attr = ctx.attr_int("rotary_embedding_dim", 0);
  if (rot_attr < 0) ctx.fail("rotary_embedding_dim is " + std::to_string(rot_attr) + "; it must be >= 0");
  Dim head;
  if (x.has_rank()) {
    if (x.rank() != 3 && x.rank() != 4) ctx.fail("input must be 3-D or 4-D, got " + x.to_string());
    if (x.rank() == 3) {
      if (heads <= 0) ctx.fail("a 3-D input needs a positive num_heads attribute, got " + std::to_string(heads));
      if (x[2].is_known() && x[2].value() % heads != 0)
        ctx.fail("hidden size " + x[2].to_string() + " is not a multiple of num_heads " + std::to_string(heads));
      if (x[2].is_known()) head = Dim(x[2].value() / heads);
    } else {
      head = x[3];
    }
  }
  const Dim rot = rot_attr > 0 ? Dim(rot_attr) : head;
  if (rot.is_known() && rot.value() % 2 != 0) ctx.fail("the rotated size " + rot.to_string() + " must be even");
  if (rot_attr > 0 && head.is_known() && rot_attr > head.value())
    ctx.fail("rotary_embedding_dim " + std::to_string(rot_attr) + " exceeds the head size " + head.to_string());
  const Shape& cos = ctx.input_shape(1);
  const Shape& sin = ctx.input_shape(2);
  const bool by_position = ctx.num_inputs() > 3 && ctx.has_input(3);
  const size_t cache_rank = by_position ? 2 : 3;
  for (const Shape* c : {&cos, &sin}) {
    if (!c->has_rank()) continue;
    const char* name = c == &cos ? "cos_cache" : "sin_cache";
    if (c->rank() != cache_rank)
      ctx.fail(std::string(name) + " must be " + std::to_string(cache_rank) + "-D " +
               (by_position ? "[positions, rot / 2] with position_ids" : "[batch, sequence, rot / 2] without position_ids") +
               ", got " + c->to_string());
    const Dim& last = (*c)[cache_rank - 1];
    if (last.is_known() && rot.is_known() && last.value() != rot.value() / 2)
      ctx.fail(std::string(name) + " " + c->to_string() + " must end in rot / 2 = " + std::to_string(rot.value() / 2));
  }
  if (cos.has_rank() && sin.has_rank()) {
    bool same = cos.rank() == sin.rank();
    for (size_t k = 0; same && k < cos.rank(); ++k)
      same = !(cos[k].is_known() && sin[k].is_known() && cos[k].value() != sin[k].value());
    if (!same) ctx.fail("cos_cache " + cos.to_string() + " and sin_cache " + sin.to_string() + " must have one shape");
  }
  ctx.set_output(0, ctx.input_type(0));
}

void attention(InferContext& ctx) {
  const Shape& q = ctx.input_shape(0);
  const Shape& k = ctx.input_shape(1);
  const Shape& v = ctx.input_shape(2);
  const DType dt = ctx.input_dtype(0);
  if (!q.has_rank() || !k.has_rank() || !v.has_rank()) {
    ctx.set_output(0, dt, q.has_rank() ? Shape(std::vector<Dim>(q.rank())) : Shape());
    return;
  }
  for (const Shape* s : {&q, &k, &v})
    if (s->rank() != 3 && s->rank() != 4) ctx.fail("Q, K and V must be 3-D or 4-D, got " + s->to_string());
  const int64_t q_heads = ctx.attr_int("q_num_heads", 0), kv_heads = ctx.attr_int("kv_num_heads", 0);
  if ((q.rank() == 3 && q_heads <= 0) || (k.rank() == 3 && kv_heads <= 0))
    ctx.fail("3-D inputs need positive q_num_heads and kv_num_heads attributes, got " + std::to_string(q_heads) +
             " and " + std::to_string(kv_heads));
  const Dim qh = q.rank() == 4 ? q[1] : Dim(q_heads);
  const Dim kvh = k.rank() == 4 ? k[1] : Dim(kv_heads);
  auto per_head = [&](const Shape& s, const Dim& heads, const char* what) -> Dim {
    if (s.rank() == 4) return s[3];
    auto d = s[2].divide(heads);
    if (s[2].is_known() && heads.is_known() && !d)
      ctx.fail(std::string(what) + " hidden size " + s[2].to_string() + " is not a multiple of " + heads.to_string() +
               " heads");
    return d ? *d : Dim();
  };
  const Dim batch = q[0];
  const Dim q_seq = q.rank() == 4 ? q[2] : q[1];
  const Dim kv_seq = k.rank() == 4 ? k[2] : k[1];
  const Dim q_head = per_head(q, qh, "Q");
  const Dim head = per_head(k, kvh, "K");
  const Dim v_head = per_head(v, kvh, "V");
  if (q_head.is_known() && head.is_known() && q_head.value() != head.value())
    ctx.fail("Q and K head sizes differ: " + q_head.to_string() + " vs " + head.to_string());
  ctx.set_output(0, dt, q.rank() == 4 ? Shape({batch, qh, q_seq, v_head}) : Shape({batch, q_seq, qh * v_head}));
  Dim total = kv_seq;
  if (ctx.has_input(4)) {
    const Dim past = dim_at(ctx.input_shape(4), 2);
    total = past.is_known() && kv_seq.is_known() ? Dim(past.value() + kv_seq.value()) : Dim();
  }
  ctx.set_output(1, dt, Shape({batch, kvh, total, head}));
  ctx.set_output(2, dt, Shape({batch, kvh, total, v_head}));
  ctx.set_output(3, dt, Shape({batch, qh, q_seq, total}));
}

// True when the shape is known to hold exactly one element.
bool one_element(const Shape& s) {
  if (!s.has_rank()) return false;
  for (const Dim& d : s.dims())
    if (!d.is_known() || d.value() != 1) return false;
  return true;
}

// Checks the scale (input 1) and zero point (input 2) of QuantizeLinear / DequantizeLinear
// against x (input 0), as far as shapes are known. Without block_size, one element means
// per-tensor (as in onnxruntime and the ONNX reference, whatever the rank) and a 1-D scale
// per-axis along `axis`; with block_size > 0 the scale has x's rank with ceil(d / block_size)
// entries along `axis` (onnxruntime refuses a scalar there; the reference would take it).
void check_quant_params(const InferContext& ctx) {
  const int64_t block = ctx.attr_int("block_size", 0);
  if (block < 0) ctx.fail("block_size is " + std::to_string(block) + ", expected >= 0");
  const Shape& xs = ctx.input_shape(0);
  const Shape& ss = ctx.input_shape(1);
  const std::string scale = ctx.node().op_type() == "QuantizeLinear" ? "y_scale" : "x_scale";
  if (ctx.has_input(2)) {
    const Shape& zs = ctx.input_shape(2);
    bool differ = ss.has_rank() && zs.has_rank() && ss.rank() != zs.rank() && !(one_element(ss) && one_element(zs));
    for (size_t i = 0; !differ && ss.has_rank() && zs.has_rank() && i < ss.rank() && i < zs.rank(); ++i)
      differ = ss[i].is_known() && zs[i].is_known() && ss[i].value() != zs[i].value();
    if (differ)
      ctx.fail("the zero point has shape " + zs.to_string() + " and " + scale + " " + ss.to_string() +
               "; they must have the same shape");
  }
  if (!ss.has_rank() || (block == 0 && one_element(ss))) return;
  const int64_t axis = ctx.attr_int("axis", 1);
  if (block == 0) {
    if (ss.rank() > 1)
      ctx.fail(scale + " has shape " + ss.to_string() +
               "; expected one element (per tensor) or a 1-D scale (per axis); blocked quantization needs block_size > 0");
    if (ss.rank() == 0 || !xs.has_rank()) return;
    const size_t a = ctx.axis(axis, xs.rank());
    if (ss[0].is_known() && xs[a].is_known() && ss[0].value() != xs[a].value())
      ctx.fail(scale + " has " + ss[0].to_string() + " entries, expected " + xs[a].to_string() + " (dim " +
               std::to_string(a) + " of x, shape " + xs.to_string() + ")");
    return;
  }
  if (!xs.has_rank()) return;
  if (ss.rank() != xs.rank())
    ctx.fail(scale + " has shape " + ss.to_string() + "; blocked quantization (block_size " + std::to_string(block) +
             ") expects the rank of x, shape " + xs.to_string());
  const size_t a = ctx.axis(axis, xs.rank());
  for (size_t d = 0; d < xs.rank(); ++d) {
    if (!ss[d].is_known() || !xs[d].is_known()) continue;
    const int64_t want = d == a ? ceil_div(xs[d].value(), block) : xs[d].value();
    if (ss[d].value() != want)
      ctx.fail(scale + " has shape " + ss.to_string() + ", expected " + std::to_string(want) + " in dim " +
               std::to_string(d) + (d == a ? " (ceil(" + std::to_string(xs[d].value()) + " / block_size " +
                                                 std::to_string(block) + "))"
                                           : " (as x, shape " + xs.to_string() + ")"));
  }
}

void quantize(InferContext& ctx) {
  const DType zp = ctx.has_input(2) ? ctx.input_dtype(2) : DType::kUndefined;
  const DType attr = ctx.attr_dtype("output_dtype", DType::kUndefined);
  if (zp != DType::kUndefined && attr != DType::kUndefined && zp != attr)
    ctx.fail("output_dtype is " + std::string(ir::dtype_name(attr)) + " but y_zero_point is " +
             std::string(ir::dtype_name(zp)) + "; they must agree");
  check_quant_params(ctx);
  const DType dt = zp != DType::kUndefined ? zp : attr != DType::kUndefined ? attr : DType::kUInt8;
  ctx.set_output(0, dt, ctx.input_shape(0));
}

void dequantize(InferContext& ctx) {
  const DType x = ctx.input_dtype(0);
  const DType zp = ctx.has_input(2) ? ctx.input_dtype(2) : DType::kUndefined;
  if (x != DType::kUndefined && zp != DType::kUndefined && x != zp)
    ctx.fail("x is " + std::string(ir::dtype_name(x)) + " but x_zero_point is " + std::string(ir::dtype_name(zp)) +
             "; they must agree");
  check_quant_params(ctx);
  ctx.set_output(0, ctx.attr_dtype("output_dtype", ctx.input_dtype(1)), ctx.input_shape(0));
}

void dynamic_quantize(InferContext& ctx) {
  ctx.set_output(0, DType::kUInt8, ctx.input_shape(0));
  ctx.set_output(1, DType::kFloat32, Shape(std::vector<Dim>{}));
  ctx.set_output(2, DType::kUInt8, Shape(std::vector<Dim>{}));
}

void same_as_input(InferContext& ctx) { ctx.set_output(0, ctx.input_type(0)); }

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

}  // namespace

void register_nn(Registry& r) {
  r.add("Conv", conv);
  r.add("ConvInteger", conv);
  r.add("QLinearConv", conv);
  r.add("DeformConv", conv);  // (X, W, offset, B, mask): sized like Conv from X and W
  r.add("ConvTranspose", conv_transpose);
  for (const char* op : {"MaxPool", "AveragePool", "LpPool"}) r.add(op, pool);
  for (const char* op : {"GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"}) r.add(op, global_pool);
  r.add("BatchNormalization", batch_norm);
  r.add("LayerNormalization", layer_norm);
  r.add("RMSNormalization", same_as_input);
  r.add("RotaryEmbedding", rotary);
  r.add("InstanceNormalization", instance_norm);
  r.add("LRN", lrn);
  r.add("GroupNormalization", group_norm);
  r.add("Attention", attention);
  r.add("Resize", resize);
  r.add("Upsample", resize);
  r.add("DepthToSpace", depth_to_space);
  r.add("SpaceToDepth", depth_to_space);
  for (const char* op : {"LSTM", "GRU", "RNN"}) r.add(op, recurrent);
  r.add("QuantizeLinear", quantize);
  r.add("DequantizeLinear", dequantize);
  r.add("DynamicQuantizeLinear", dynamic_quantize);
}

}  // namespace tether::ops
