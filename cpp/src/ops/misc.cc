// Shape inference for constants, generators, control flow and rearrangements: Constant,
// ConstantOfShape, Range, EyeLike, Random*, Multinomial, If, Loop, DepthToSpace, SpaceToDepth.
#include <cmath>
#include <cstring>
#include <limits>

#include "ops/constant.h"
#include "ops/infer_context.h"

namespace tether::ops {

ir::Tensor constant_value(const ir::Node& n) {
  if (const ir::Attribute* a = n.attr("value")) return a->as_tensor();
  if (const ir::Attribute* a = n.attr("value_float")) {
    float v = a->as_float();
    return ir::Tensor::copy_of(DType::kFloat32, {}, &v, sizeof v);
  }
  if (const ir::Attribute* a = n.attr("value_int")) {
    int64_t v = a->as_int();
    return ir::Tensor::copy_of(DType::kInt64, {}, &v, sizeof v);
  }
  if (const ir::Attribute* a = n.attr("value_floats")) {
    const auto& v = a->as_floats();
    return ir::Tensor::copy_of(DType::kFloat32, {static_cast<int64_t>(v.size())}, v.data(),
                               static_cast<int64_t>(v.size() * sizeof(float)));
  }
  if (const ir::Attribute* a = n.attr("value_ints")) {
    const auto& v = a->as_ints();
    return ir::Tensor::copy_of(DType::kInt64, {static_cast<int64_t>(v.size())}, v.data(),
                               static_cast<int64_t>(v.size() * sizeof(int64_t)));
  }
  if (const ir::Attribute* a = n.attr("value_string")) return ir::Tensor::strings({}, {a->as_string()});
  if (const ir::Attribute* a = n.attr("value_strings"))
    return ir::Tensor::strings({static_cast<int64_t>(a->as_strings().size())}, a->as_strings());
  if (n.attr("sparse_value") != nullptr)
    throw UnsupportedError(n.describe() + ": Constant with a sparse value is not supported");
  throw ModelError(n.describe() + ": Constant has no value attribute");
}

namespace {

void constant(InferContext& ctx) {
  const ir::Node& n = ctx.node();
  if (n.attr("value_string") != nullptr) {
    ctx.set_output(0, DType::kString, Shape(std::vector<Dim>{}));
  } else if (const ir::Attribute* a = n.attr("value_strings")) {
    ctx.set_output(0, DType::kString, Shape::of({static_cast<int64_t>(a->as_strings().size())}));
  } else if (const ir::Attribute* a = n.attr("sparse_value")) {
    const ir::SparseTensor& s = a->as_sparse_tensor();
    ctx.set_output(0, s.values.dtype(), Shape::of(s.dims));
  } else if (n.attr("value") || n.attr("value_float") || n.attr("value_floats") || n.attr("value_int") ||
             n.attr("value_ints")) {
    ctx.set_output_constant(0, constant_value(n));
  } else {
    ctx.fail("has none of the value attributes");
  }
}

// The integer fill value of ConstantOfShape, when it has one.
std::optional<int64_t> int_fill(const ir::Attribute* value) {
  if (value == nullptr) return std::nullopt;
  const ir::Tensor& t = value->as_tensor();
  if (t.num_elements() != 1) return std::nullopt;
  if (t.dtype() == DType::kInt64) return t.data<int64_t>()[0];
  if (t.dtype() == DType::kInt32) return t.data<int32_t>()[0];
  return std::nullopt;
}

void constant_of_shape(InferContext& ctx) {
  DType dt = DType::kFloat32;
  const ir::Attribute* value = ctx.node().attr("value");
  if (value != nullptr) {
    const ir::Tensor& t = value->as_tensor();
    // The fill is "a one-element tensor": an empty one has no value to fill with.
    if (t.num_elements() != 1)
      ctx.fail("value must hold one element, got a tensor of " + std::to_string(t.num_elements()));
    dt = t.dtype();
  }
  if (auto v = ctx.input_values(0)) {
    std::vector<Dim> dims;
    for (const SymInt& e : *v) {
      if (e.negative < 0) ctx.fail("the shape has negative entry " + std::to_string(e.negative));
      dims.push_back(e.dim);
    }
    // A short 1-D integer fill is a shape value too (TorchScript's expand pattern builds
    // [1, 1, 1] this way before comparing it with the target shape).
    const auto fill = int_fill(value);
    if (fill && dims.size() == 1 && dims[0].is_known() && dims[0].value() <= 256)
      ctx.set_output_values(0, std::vector<SymInt>(static_cast<size_t>(dims[0].value()), SymInt::of(*fill)));
    ctx.set_output(0, dt, Shape(std::move(dims)));
    return;
  }
  const Shape& s = ctx.input_shape(0);
  ctx.set_output(0, dt, s.has_rank() && s.rank() == 1 ? shape_of_rank(s[0]) : Shape());
}

std::optional<double> scalar(const ir::Tensor* t) {
  if (t == nullptr || t->num_elements() != 1) return std::nullopt;
  switch (t->dtype()) {
    case DType::kFloat32: return t->data<float>()[0];
    case DType::kFloat64: return t->data<double>()[0];
    case DType::kInt64: return static_cast<double>(t->data<int64_t>()[0]);
    case DType::kInt32: return t->data<int32_t>()[0];
    case DType::kInt16: return t->data<int16_t>()[0];
    default: return std::nullopt;
  }
}

// A scalar input of Range: a constant, or an integer tracked through shape computations.
std::optional<double> range_operand(const InferContext& ctx, size_t i) {
  if (auto v = scalar(ctx.input_constant(i))) return v;
  if (auto v = ctx.input_values(i); v && v->size() == 1)
    if (auto k = v->front().known()) return static_cast<double>(*k);
  return std::nullopt;
}

// Range's length for integer operands, exactly: through double, 2^62 + 1 would round.
std::optional<int64_t> int_range_length(const InferContext& ctx) {
  auto start = ctx.input_ints(0), limit = ctx.input_ints(1), delta = ctx.input_ints(2);
  if (!start || !limit || !delta || start->size() != 1 || limit->size() != 1 || delta->size() != 1)
    return std::nullopt;
  const int64_t s = start->front(), l = limit->front(), d = delta->front();
  if (d == 0) ctx.fail("delta is 0");
  if ((d > 0 && l <= s) || (d < 0 && l >= s)) return 0;
  // The distance and step as magnitudes: l - s and -d overflow int64 at the extremes.
  const uint64_t distance = d > 0 ? static_cast<uint64_t>(l) - static_cast<uint64_t>(s)
                                  : static_cast<uint64_t>(s) - static_cast<uint64_t>(l);
  const uint64_t step = d > 0 ? static_cast<uint64_t>(d) : uint64_t{0} - static_cast<uint64_t>(d);
  const uint64_t n = distance / step + (distance % step != 0 ? 1 : 0);
  if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    ctx.fail("start " + std::to_string(s) + ", limit " + std::to_string(l) + " and delta " + std::to_string(d) +
             " give " + std::to_string(n) + " elements, more than int64 can count");
  return static_cast<int64_t>(n);
}

void range(InferContext& ctx) {
  const DType dt = ctx.input_dtype(0);
  if (auto n = int_range_length(ctx)) {
    ctx.set_output(0, dt, Shape({Dim(*n)}));
    return;
  }
  auto start = range_operand(ctx, 0), limit = range_operand(ctx, 1), delta = range_operand(ctx, 2);
  if (start && limit && delta) {
    if (*delta == 0) ctx.fail("delta is 0");
    const double n = std::ceil((*limit - *start) / *delta);
    // NaN or infinity in any operand, or a length past int64, has no size to give.
    if (std::isnan(n) || n >= 9223372036854775808.0)
      ctx.fail("start " + float_text(*start) + ", limit " + float_text(*limit) + " and delta " +
               float_text(*delta) + " give no length that int64 can hold");
    ctx.set_output(0, dt, Shape({Dim(static_cast<int64_t>(std::max(n, 0.0)))}));
    return;
  }
  // Range(0, n, 1) over a size n (torch's position ids) has n entries, symbolic n included.
  if (start == 0.0 && delta == 1.0)
    if (auto v = ctx.input_values(1); v && v->size() == 1 && v->front().negative == 0) {
      ctx.set_output(0, dt, Shape({v->front().dim}));
      return;
    }
  ctx.set_output(0, dt, Shape({Dim()}));
}

void eye_like(InferContext& ctx) {
  ctx.set_output(0, ctx.attr_dtype("dtype", ctx.input_dtype(0)), ctx.input_shape(0));
}

void random(InferContext& ctx) {
  const DType dt = ctx.attr_dtype("dtype", DType::kFloat32);
  std::vector<Dim> dims;
  for (int64_t d : ctx.attr_ints("shape")) dims.push_back(ctx.dim(d, "an entry of attribute 'shape'"));
  ctx.set_output(0, dt, Shape(std::move(dims)));
}

void random_like(InferContext& ctx) {
  ctx.set_output(0, ctx.attr_dtype("dtype", ctx.input_dtype(0)), ctx.input_shape(0));
}

void multinomial(InferContext& ctx) {
  // (batch, class_size) -> (batch, sample_size) of indices, int32 unless `dtype` says int64.
  const int64_t dt = ctx.attr_int("dtype", static_cast<int64_t>(DType::kInt32));
  if (dt != static_cast<int64_t>(DType::kInt32) && dt != static_cast<int64_t>(DType::kInt64))
    ctx.fail("attribute 'dtype' is " + std::to_string(dt) + ", expected int32 (6) or int64 (7)");
  const Shape& x = ctx.input_shape(0);
  if (x.has_rank() && x.rank() != 2) ctx.fail("input must be 2-D (batch, class_size), got " + x.to_string());
  const int64_t samples = ctx.attr_int("sample_size", 1);
  if (samples < 1) ctx.fail("sample_size is " + std::to_string(samples) + ", expected >= 1");
  ctx.set_output(0, static_cast<DType>(dt), Shape({dim_at(x, 0), Dim(samples)}));
}

// The type both branches agree on: equal dims are kept, differing ones become unknown.
ValueType join(const ValueType& a, const ValueType& b) {
  if (!a.is_tensor() || !b.is_tensor() || a.dtype() != b.dtype()) return ValueType();
  if (!a.shape().has_rank() || !b.shape().has_rank() || a.shape().rank() != b.shape().rank())
    return ValueType::tensor(a.dtype());
  std::vector<Dim> dims;
  for (size_t i = 0; i < a.shape().rank(); ++i)
    dims.push_back(a.shape()[i].same_as(b.shape()[i]) ? a.shape()[i] : Dim());
  return ValueType::tensor(a.dtype(), Shape(std::move(dims)));
}

void if_op(InferContext& ctx) {
  const ir::Attribute* then_b = ctx.node().attr("then_branch");
  const ir::Attribute* else_b = ctx.node().attr("else_branch");
  if (then_b == nullptr || else_b == nullptr) ctx.fail("needs then_branch and else_branch");
  const auto& t_out = then_b->as_graph()->outputs();
  const auto& e_out = else_b->as_graph()->outputs();
  if (t_out.size() != ctx.num_outputs() || e_out.size() != ctx.num_outputs())
    ctx.fail("branches have " + std::to_string(t_out.size()) + " and " + std::to_string(e_out.size()) +
             " outputs, the node has " + std::to_string(ctx.num_outputs()));
  for (size_t i = 0; i < ctx.num_outputs(); ++i) ctx.set_output(i, join(ctx.type_of(*t_out[i]), ctx.type_of(*e_out[i])));
}

void loop(InferContext& ctx) {
  const ir::Attribute* body_attr = ctx.node().attr("body");
  if (body_attr == nullptr) ctx.fail("needs a body");
  const auto& outs = body_attr->as_graph()->outputs();
  const size_t carried = ctx.num_inputs() >= 2 ? ctx.num_inputs() - 2 : 0;
  // The body takes (iteration, condition, carried...) and gives (condition, carried..., scans...);
  // the node gives the carried values and the scan outputs.
  const size_t body_ins = body_attr->as_graph()->inputs().size();
  if (body_ins != carried + 2 || outs.size() < carried + 1 || ctx.num_outputs() != outs.size() - 1)
    ctx.fail("the body has " + std::to_string(body_ins) + " inputs and " + std::to_string(outs.size()) +
             " outputs, the node " + std::to_string(ctx.num_inputs()) + " inputs and " + std::to_string(ctx.num_outputs()) +
             " outputs; with " + std::to_string(carried) + " loop-carried values the body needs " +
             std::to_string(carried + 2) + " inputs and one output more than the node");
  // A loop-carried value keeps its dtype: the node's initial value, the body's input and the
  // body's output (of no iterations the output is the initial value itself).
  const auto& ins = body_attr->as_graph()->inputs();
  for (size_t i = 0; i < carried; ++i) {
    // (M and cond may be empty; a loop-carried value needs its initial value.)
    if (!ctx.has_input(i + 2))
      ctx.fail("loop-carried value " + std::to_string(i) + " (input " + std::to_string(i + 2) +
               ") is empty; each needs an initial value");
    const DType init = ctx.input_dtype(i + 2);
    for (const ir::Value* v : {ins[i + 2], outs[i + 1]}) {
      const DType body = ctx.type_of(*v).dtype();
      if (init != DType::kUndefined && body != DType::kUndefined && body != init)
        ctx.fail("loop-carried value " + std::to_string(i) + " is " + std::string(dtype_name(init)) + " but the body's '" +
                 v->name() + "' is " + std::string(dtype_name(body)));
    }
  }
  for (size_t i = 0; i < ctx.num_outputs(); ++i) {
    if (i < carried) {
      const bool from_body = i + 1 < outs.size() && !ctx.type_of(*outs[i + 1]).is_unknown();
      ctx.set_output(i, from_body ? ctx.type_of(*outs[i + 1]) : ctx.input_type(i + 2));
    } else if (1 + i < outs.size() && ctx.type_of(*outs[1 + i]).is_tensor()) {
      // Scan outputs stack one body output per iteration.
      const ValueType& t = ctx.type_of(*outs[1 + i]);
      if (!t.shape().has_rank()) {
        ctx.set_output(i, t.dtype(), Shape());
        continue;
      }
      std::vector<Dim> dims{Dim()};
      dims.insert(dims.end(), t.shape().dims().begin(), t.shape().dims().end());
      ctx.set_output(i, t.dtype(), Shape(std::move(dims)));
    }
  }
}

// Scan: the final states as the body gives them, and each scan output's per-step value
// stacked along its axis, the sequence length long.
void scan(InferContext& ctx) {
  if (ctx.opset() < 9) return;  // opset 8's Scan has a batch axis and sequence_lens first
  const ir::Attribute* body_attr = ctx.node().attr("body");
  if (body_attr == nullptr) ctx.fail("needs a body");
  const auto& outs = body_attr->as_graph()->outputs();
  const auto scans = static_cast<size_t>(ctx.attr_int("num_scan_inputs", 0));
  if (scans == 0 || scans > ctx.num_inputs()) ctx.fail("num_scan_inputs is " + std::to_string(scans));
  const size_t states = ctx.num_inputs() - scans;
  // The body takes (states..., one step of each scan input...) and gives (states..., scan outputs...),
  // as the node does.
  const size_t body_ins = body_attr->as_graph()->inputs().size();
  if (body_ins != ctx.num_inputs() || outs.size() != ctx.num_outputs() || ctx.num_outputs() < states)
    ctx.fail("the body has " + std::to_string(body_ins) + " inputs and " + std::to_string(outs.size()) +
             " outputs, the node " + std::to_string(ctx.num_inputs()) + " inputs and " + std::to_string(ctx.num_outputs()) +
             " outputs with " + std::to_string(states) + " states; the body's inputs and outputs must match the node's");
  // A state keeps its dtype through the body (of no steps the final state is the initial one).
  for (size_t i = 0; i < states; ++i) {
    const DType init = ctx.has_input(i) ? ctx.input_dtype(i) : DType::kUndefined;
    for (const ir::Value* v : {body_attr->as_graph()->inputs()[i], outs[i]}) {
      const DType body = ctx.type_of(*v).dtype();
      if (init != DType::kUndefined && body != DType::kUndefined && body != init)
        ctx.fail("state " + std::to_string(i) + " is " + std::string(dtype_name(init)) + " but the body's '" + v->name() +
                 "' is " + std::string(dtype_name(body)));
    }
  }
  const std::vector<int64_t> in_axes = ctx.node().attr_ints("scan_input_axes", std::vector<int64_t>(scans, 0));
  Dim len;
  if (const Shape& s0 = ctx.input_shape(states); s0.has_rank() && !in_axes.empty())
    len = s0[ctx.axis(in_axes[0], s0.rank(), "scan_input_axes entry")];
  const size_t scan_outs = ctx.num_outputs() > states ? ctx.num_outputs() - states : 0;
  const std::vector<int64_t> out_axes = ctx.node().attr_ints("scan_output_axes", std::vector<int64_t>(scan_outs, 0));
  for (size_t i = 0; i < ctx.num_outputs() && i < outs.size(); ++i) {
    const ValueType& t = ctx.type_of(*outs[i]);
    if (i < states) {
      ctx.set_output(i, !t.is_unknown() ? t : ctx.input_type(i));
      continue;
    }
    if (!t.is_tensor() || !t.shape().has_rank()) {
      ctx.set_output(i, t.dtype(), Shape());
      continue;
    }
    std::vector<Dim> dims = t.shape().dims();
    const size_t k = i - states;
    const size_t ax = k < out_axes.size() ? ctx.axis(out_axes[k], dims.size() + 1, "scan_output_axes entry") : 0;
    dims.insert(dims.begin() + static_cast<std::ptrdiff_t>(ax), len);
    ctx.set_output(i, t.dtype(), Shape(std::move(dims)));
  }
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

}  // namespace

void register_misc(Registry& r) {
  r.add("Scan", scan);
  r.add("Constant", constant);
  r.add("DepthToSpace", depth_to_space);
  r.add("SpaceToDepth", depth_to_space);
  r.add("ConstantOfShape", constant_of_shape);
  r.add("Range", range);
  r.add("EyeLike", eye_like);
  r.add("RandomNormal", random);
  r.add("RandomUniform", random);
  r.add("RandomNormalLike", random_like);
  r.add("RandomUniformLike", random_like);
  r.add("Bernoulli", random_like);
  r.add("Multinomial", multinomial);
  r.add("If", if_op);
  r.add("Loop", loop);
}

}  // namespace tether::ops
