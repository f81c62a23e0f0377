// Shape inference for pooling: MaxPool, AveragePool, LpPool and their global forms.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/infer_context.h"
#include "ops/window.h"

namespace tether::ops {

namespace {

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

}  // namespace

void register_pool(Registry& r) {
  for (const char* op : {"MaxPool", "AveragePool", "LpPool"}) r.add(op, pool);
  for (const char* op : {"GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"}) r.add(op, global_pool);
}

}  // namespace tether::ops
