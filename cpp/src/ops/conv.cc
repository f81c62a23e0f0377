// Shape inference for convolutions: Conv, ConvInteger, QLinearConv, DeformConv and
// ConvTranspose, and the sliding-window arithmetic pools share (ops/window.h).
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/infer_context.h"
#include "ops/window.h"

namespace tether::ops {

std::vector<int64_t> attr_or(const InferContext& ctx, const char* name, size_t n, int64_t fill) {
  std::vector<int64_t> v = ctx.attr_ints(name);
  // Only an absent attribute takes the default: an empty list is a list of the wrong length.
  if (v.empty() && !ctx.has_attr(name)) v.assign(n, fill);
  if (v.size() != n) ctx.fail(std::string("attribute '") + name + "' has " + std::to_string(v.size()) +
                              " entries, expected " + std::to_string(n));
  return v;
}

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

bool channels_last(const InferContext& ctx) {
  return ctx.node().domain() == "ai.tether" && ctx.attr_int("channels_last", 0) != 0;
}

Shape channels_first_view(const InferContext& ctx, bool last) {
  const Shape& x = ctx.input_shape(0);
  if (!last || !x.has_rank()) return x;
  if (x.rank() < 3) ctx.fail("input must have rank >= 3 (N, spatial..., C), got " + x.to_string());
  std::vector<Dim> d = {x[0], x[x.rank() - 1]};
  for (size_t i = 1; i + 1 < x.rank(); ++i) d.push_back(x[i]);
  return Shape(std::move(d));
}

Shape output_layout(std::vector<Dim> out, bool last) {
  if (last) std::rotate(out.begin() + 1, out.begin() + 2, out.end());
  return Shape(std::move(out));
}


namespace {

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

}  // namespace

void register_conv(Registry& r) {
  r.add("Conv", conv);
  r.add("ConvInteger", conv);
  r.add("QLinearConv", conv);
  r.add("DeformConv", conv);  // (X, W, offset, B, mask): sized like Conv from X and W
  r.add("ConvTranspose", conv_transpose);
}

}  // namespace tether::ops
