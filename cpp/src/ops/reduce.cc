// Shape inference for reductions: Reduce*, ArgMax / ArgMin, and the losses that reduce
// (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss).
#include "ops/infer_context.h"

namespace tether::ops {

namespace {

void reduce(InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  const DType dt = ctx.input_dtype(0);
  // Only 1 keeps the reduced dims, as in ONNX's own inference and onnxruntime.
  const bool keep = ctx.attr_int("keepdims", 1) == 1;
  std::optional<std::vector<int64_t>> axes;
  if (ctx.has_attr("axes")) axes = ctx.attr_ints("axes");
  else if (ctx.has_input(1)) axes = ctx.input_ints(1);
  else axes = std::vector<int64_t>{};
  if (!ctx.has_attr("axes") && ctx.has_input(1)) {
    const Shape& a = ctx.input_shape(1);
    if (a.has_rank() && a.rank() != 1) ctx.fail("axes must be 1-D, got shape " + a.to_string());
  }
  if (!x.has_rank()) {
    ctx.set_output(0, dt, Shape());
    return;
  }
  if (!axes) {  // axes computed at run time: only the rank is certain, and only with keepdims
    ctx.set_output(0, dt, keep ? Shape(std::vector<Dim>(x.rank())) : Shape());
    return;
  }
  std::vector<bool> reduced(x.rank(), axes->empty());
  if (axes->empty() && ctx.attr_int("noop_with_empty_axes", 0) == 1) {
    ctx.set_output(0, ctx.input_type(0));
    return;
  }
  for (size_t a : ctx.distinct_axes(*axes, x.rank())) reduced[a] = true;
  std::vector<Dim> out;
  for (size_t i = 0; i < x.rank(); ++i) {
    if (!reduced[i]) out.push_back(x[i]);
    else if (keep) out.push_back(Dim(1));
  }
  ctx.set_output(0, dt, Shape(std::move(out)));
}

void arg_reduce(InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  if (!x.has_rank()) {
    ctx.set_output(0, DType::kInt64, Shape());
    return;
  }
  const size_t a = ctx.axis(ctx.attr_int("axis", 0), x.rank());
  std::vector<Dim> out = x.dims();
  if (ctx.attr_int("keepdims", 1) == 1) out[a] = Dim(1);
  else out.erase(out.begin() + static_cast<std::ptrdiff_t>(a));
  ctx.set_output(0, DType::kInt64, Shape(std::move(out)));
}

// Loss per element (the target's shape) with reduction "none", else a scalar.
void loss(InferContext& ctx) {
  const std::string reduction = ctx.attr_string("reduction", "mean");
  if (reduction != "none" && reduction != "mean" && reduction != "sum")
    ctx.fail("reduction is '" + reduction + "', expected none, mean or sum");
  const DType dt = ctx.input_dtype(0);
  ctx.set_output(0, dt, reduction == "none" ? ctx.input_shape(1) : Shape(std::vector<Dim>{}));
  if (ctx.node().op_type() == "SoftmaxCrossEntropyLoss") ctx.set_output(1, dt, ctx.input_shape(0));  // log_prob
}

}  // namespace

void register_reduce(Registry& r) {
  for (const char* op : {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                         "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"})
    r.add(op, reduce);
  r.add("ArgMax", arg_reduce);
  r.add("ArgMin", arg_reduce);
  r.add("NegativeLogLikelihoodLoss", loss);
  r.add("SoftmaxCrossEntropyLoss", loss);
}

}  // namespace tether::ops
