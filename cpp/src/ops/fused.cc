// Shape inference for tether's fused ops (domain ai.tether), which the passes create:
// FusedConv, FusedGemm and FusedMatMul compute what their ONNX op computes, then a bias
// (FusedMatMul) or a summand of the output's own shape (FusedConv's optional fourth input,
// a residual Add), and an activation; their shapes are the ONNX op's. QLinearConv and
// QLinearMatMul (from the QDQ pass) are the ONNX ops with an activation and a bias;
// QLinearConv and MaxPool with channels_last = 1 read and write [N, spatial..., C];
// MatMulIntegerToFloat is MatMulInteger -> Cast -> Mul (-> Add) (-> activation) as one node,
// ConvIntegerToFloat the same after a ConvInteger.
#include "ops/infer_context.h"

namespace tether::ops {

namespace {

template <const char* kOp>
void as_onnx(InferContext& ctx) {
  // Looked up at call time: the registry is complete by then.
  registry().find("", kOp)(ctx);
}

constexpr char kGemm[] = "Gemm";
constexpr char kMatMul[] = "MatMul";
constexpr char kQLinearConv[] = "QLinearConv";
constexpr char kQLinearMatMul[] = "QLinearMatMul";
constexpr char kMaxPool[] = "MaxPool";
constexpr char kAveragePool[] = "AveragePool";
constexpr char kConvTranspose[] = "ConvTranspose";
constexpr char kGlobalAveragePool[] = "GlobalAveragePool";
constexpr char kGlobalMaxPool[] = "GlobalMaxPool";

// FusedConv(X, W, B, Sum): Conv's shape; Sum, when present, is added without broadcasting, so
// it must have the output's type and every dim that both know must agree.
void fused_conv(InferContext& ctx) {
  registry().find("", "Conv")(ctx);
  if (ctx.num_inputs() < 4 || !ctx.has_input(3)) return;
  if (ctx.num_inputs() > 4) ctx.fail("takes at most 4 inputs (X, W, B, Sum), got " + std::to_string(ctx.num_inputs()));
  const ValueType& out = ctx.outputs()[0];
  const DType dt = ctx.input_dtype(3);
  if (dt != DType::kUndefined && out.dtype() != DType::kUndefined && dt != out.dtype())
    ctx.fail("the summand (input 3) is " + std::string(ir::dtype_name(dt)) + ", the output " +
             std::string(ir::dtype_name(out.dtype())));
  const Shape& sum = ctx.input_shape(3);
  const Shape& y = out.shape();
  if (!sum.has_rank() || !y.has_rank()) return;
  bool same = sum.rank() == y.rank();
  for (size_t i = 0; same && i < y.rank(); ++i)
    same = !(sum[i].is_known() && y[i].is_known() && sum[i].value() != y[i].value());
  if (!same) ctx.fail("the summand (input 3) has shape " + sum.to_string() + ", the output " + y.to_string());
}

// QLinearAdd(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp): the sum of two quantized
// tensors of one shape (no broadcasting), quantized with y's parameters; y has y_zp's type.
void qlinear_add(InferContext& ctx) {
  if (ctx.num_inputs() != 8) ctx.fail("takes 8 inputs (a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, "
                                      "y_zero_point), got " + std::to_string(ctx.num_inputs()));
  const Shape& a = ctx.input_shape(0);
  const Shape& b = ctx.input_shape(3);
  if (a.has_rank() && b.has_rank()) {
    bool same = a.rank() == b.rank();
    for (size_t i = 0; same && i < a.rank(); ++i) same = !(a[i].is_known() && b[i].is_known() && a[i].value() != b[i].value());
    if (!same) ctx.fail("a has shape " + a.to_string() + " and b " + b.to_string() + "; they must be the same");
  }
  ctx.set_output(0, ctx.input_dtype(7), a);
}

// MatMulIntegerToFloat(A, B, scale, a_zero_point, b_zero_point, bias): MatMulInteger's shape,
// float32 (the sums times scale, plus bias, then the activation).
void matmul_integer_to_float(InferContext& ctx) {
  registry().find("", "MatMulInteger")(ctx);
  ctx.set_output(0, DType::kFloat32, ctx.outputs()[0].shape());
}

// ConvIntegerToFloat(X, W, scale, x_zero_point, w_zero_point, bias), with ConvInteger's
// attributes: ConvInteger's shape, float32 (the sums times scale, plus bias, then the activation).
void conv_integer_to_float(InferContext& ctx) {
  registry().find("", "ConvInteger")(ctx);
  ctx.set_output(0, DType::kFloat32, ctx.outputs()[0].shape());
}

// QLinearMul (passes/qdq_fuse.cc): QLinearAdd's inputs; a and b broadcast (numpy), y has
// y_zero_point's type.
void qlinear_mul(InferContext& ctx) {
  if (ctx.num_inputs() != 8) ctx.fail("takes 8 inputs (a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, "
                                      "y_zero_point), got " + std::to_string(ctx.num_inputs()));
  ctx.set_output(0, ctx.input_dtype(7), broadcast_shapes(ctx, {ctx.input_shape(0), ctx.input_shape(3)}));
}

// QLinearLookup(X, table) (passes/qdq_lookup.cc): Y[i] = table[X[i]'s byte], X 8-bit, the table
// 256 values of Y's type.
void qlinear_lookup(InferContext& ctx) {
  if (ctx.num_inputs() != 2) ctx.fail("takes 2 inputs (X, table), got " + std::to_string(ctx.num_inputs()));
  const DType x = ctx.input_dtype(0);
  if (x != DType::kInt8 && x != DType::kUInt8 && x != DType::kUndefined)
    ctx.fail("X is " + std::string(ir::dtype_name(x)) + "; it must be int8 or uint8");
  const Shape& t = ctx.input_shape(1);
  if (t.has_rank() && (t.rank() != 1 || (t[0].is_known() && t[0].value() != 256)))
    ctx.fail("the table has shape " + t.to_string() + ", expected [256]");
  ctx.set_output(0, ctx.input_dtype(1), ctx.input_shape(0));
}

// com.microsoft QLinearAdd(A, A_scale, A_zero_point?, B, B_scale, B_zero_point?, C_scale,
// C_zero_point?), as onnxruntime's QOperator format writes it: A and B broadcast; C has A's type.
void ms_qlinear_add(InferContext& ctx) {
  if (ctx.num_inputs() < 7 || ctx.num_inputs() > 8)
    ctx.fail("takes 7 or 8 inputs (A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point), got " +
             std::to_string(ctx.num_inputs()));
  ctx.set_output(0, ctx.input_dtype(0), broadcast_shapes(ctx, {ctx.input_shape(0), ctx.input_shape(3)}));
}

// com.microsoft QGemm(A, a_scale, a_zero_point, B, b_scale, b_zero_point, C?, y_scale?,
// y_zero_point?): Gemm's [M, N]; the output is float32 without y_scale, else y_zero_point's type.
void ms_qgemm(InferContext& ctx) {
  if (ctx.num_inputs() < 6 || ctx.num_inputs() > 9)
    ctx.fail("takes 6 to 9 inputs (A, a_scale, a_zero_point, B, b_scale, b_zero_point, C, y_scale, y_zero_point), got " +
             std::to_string(ctx.num_inputs()));
  const Shape& a = ctx.input_shape(0);
  const Shape& b = ctx.input_shape(3);
  const DType dt = ctx.has_input(8) ? ctx.input_dtype(8) : DType::kFloat32;
  if (!a.has_rank() || !b.has_rank()) {
    ctx.set_output(0, dt, Shape({Dim(), Dim()}));
    return;
  }
  if (a.rank() != 2 || b.rank() != 2)
    ctx.fail("A and B must be 2-D, got ranks " + std::to_string(a.rank()) + " and " + std::to_string(b.rank()));
  const bool ta = ctx.attr_int("transA", 0) != 0, tb = ctx.attr_int("transB", 0) != 0;
  const Dim& ka = a[ta ? 0 : 1];
  const Dim& kb = b[tb ? 1 : 0];
  if (ka.is_known() && kb.is_known() && ka.value() != kb.value())
    ctx.fail("inner dims differ: A is " + a.to_string() + (ta ? " (transA)" : "") + " and B is " + b.to_string() +
             (tb ? " (transB)" : ""));
  ctx.set_output(0, dt, Shape({a[ta ? 1 : 0], b[tb ? 0 : 1]}));
}

// com.microsoft QLinearGlobalAveragePool(X, x_scale, x_zero_point, y_scale, y_zero_point):
// the spatial dims become 1 ([N, C, 1, ...], or [N, 1, ..., C] with channels_last = 1).
void ms_qlinear_global_average_pool(InferContext& ctx) {
  if (ctx.num_inputs() != 5) ctx.fail("takes 5 inputs (X, x_scale, x_zero_point, y_scale, y_zero_point), got " +
                                      std::to_string(ctx.num_inputs()));
  const Shape& x = ctx.input_shape(0);
  if (!x.has_rank()) {
    ctx.set_output(0, ctx.input_dtype(0), Shape());
    return;
  }
  if (x.rank() < 3) ctx.fail("X must have rank >= 3, got " + x.to_string());
  const bool last = ctx.attr_int("channels_last", 0) != 0;
  std::vector<Dim> d;
  for (size_t i = 0; i < x.rank(); ++i) {
    const bool channel = last ? i + 1 == x.rank() : i == 1;
    d.push_back(i == 0 || channel ? x[i] : Dim(1));
  }
  ctx.set_output(0, ctx.input_dtype(0), Shape(std::move(d)));
}

}  // namespace

void register_fused(Registry& r) {
  r.add("FusedConv", fused_conv, "ai.tether");
  r.add("FusedGemm", as_onnx<kGemm>, "ai.tether");
  r.add("FusedMatMul", as_onnx<kMatMul>, "ai.tether");
  // The QDQ pass's integer nodes: the ONNX op's shapes (the activation and QLinearMatMul's
  // int32 bias, input 8, change no shape).
  r.add("QLinearConv", as_onnx<kQLinearConv>, "ai.tether");
  r.add("QLinearMatMul", as_onnx<kQLinearMatMul>, "ai.tether");
  r.add("QLinearAdd", qlinear_add, "ai.tether");
  r.add("QLinearMul", qlinear_mul, "ai.tether");
  r.add("QLinearLookup", qlinear_lookup, "ai.tether");
  r.add("MatMulIntegerToFloat", matmul_integer_to_float, "ai.tether");
  r.add("ConvIntegerToFloat", conv_integer_to_float, "ai.tether");
  r.add("Gelu", [](InferContext& ctx) { ctx.set_output(0, ctx.input_type(0)); }, "ai.tether");  // fuse_gelu, opset < 20
  // onnxruntime's contrib ops of its QOperator format.
  r.add("QLinearAdd", ms_qlinear_add, "com.microsoft");
  r.add("QGemm", ms_qgemm, "com.microsoft");
  r.add("QLinearGlobalAveragePool", ms_qlinear_global_average_pool, "com.microsoft");
  // Pooling channels last (channels_last = 1; passes/channels_last.cc for 8-bit MaxPool,
  // passes/channels_last_float.cc for float pooling).
  r.add("MaxPool", as_onnx<kMaxPool>, "ai.tether");
  r.add("AveragePool", as_onnx<kAveragePool>, "ai.tether");
  r.add("GlobalAveragePool", as_onnx<kGlobalAveragePool>, "ai.tether");
  r.add("GlobalMaxPool", as_onnx<kGlobalMaxPool>, "ai.tether");
  r.add("ConvTranspose", as_onnx<kConvTranspose>, "ai.tether");
}

}  // namespace tether::ops
