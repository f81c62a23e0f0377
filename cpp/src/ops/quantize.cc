// Shape inference for QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/infer_context.h"

namespace tether::ops {

namespace {

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

}  // namespace

void register_quantize(Registry& r) {
  r.add("QuantizeLinear", quantize);
  r.add("DequantizeLinear", dequantize);
  r.add("DynamicQuantizeLinear", dynamic_quantize);
}

}  // namespace tether::ops
