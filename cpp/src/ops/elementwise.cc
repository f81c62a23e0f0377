// Shape inference for elementwise ops: unary, binary and variadic with broadcasting,
// comparisons, logic, Where, Cast. Small integer shape computations are tracked by value.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/infer_context.h"

namespace tether::ops {

namespace {

// Output 0: the broadcast of every present input, with input `dtype_from`'s element type
// (or `fixed` when given).
void broadcast(InferContext& ctx, size_t dtype_from, std::optional<DType> fixed = std::nullopt) {
  std::vector<Shape> shapes;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) continue;
    if (!ctx.input_type(i).is_tensor()) {
      shapes.push_back(Shape());
      continue;
    }
    shapes.push_back(ctx.input_shape(i));
  }
  ctx.set_output(0, fixed ? *fixed : ctx.input_dtype(dtype_from), broadcast_shapes(ctx, shapes));
}

// Applies `op` entry-wise to the tracked values of inputs `first` and `first + 1` (a
// one-entry side broadcasts); nothing when either side is untracked. An entry `op` cannot
// compute becomes unknown, so the known entries beside it (Shape(x) * [1, 2, 1] on
// [N, 3, 4]) still reach the Reshape downstream.
template <typename Op>
void propagate_binary(InferContext& ctx, Op op, size_t first = 0) {
  auto a = ctx.input_values(first);
  auto b = ctx.input_values(first + 1);
  if (!a || !b) return;
  if (a->size() != b->size() && a->size() != 1 && b->size() != 1) return;
  // A one-entry side broadcasts to the other's length, an empty one included: max() of the
  // sizes would read entry 0 of an empty side.
  const size_t n = a->size() == 1 ? b->size() : a->size();
  std::vector<SymInt> out;
  bool any = false;
  for (size_t k = 0; k < n; ++k) {
    std::optional<SymInt> r = op((*a)[a->size() == 1 ? 0 : k], (*b)[b->size() == 1 ? 0 : k]);
    any = any || (r && !(r->negative == 0 && r->dim.is_unknown()));
    out.push_back(r ? *r : SymInt{Dim(), 0});
  }
  if (any) ctx.set_output_values(0, std::move(out));
}

// f(x, y) when both are numbers and f gives one; f returns false when the result overflows
// (the model's constants are arbitrary, and an entry that cannot be computed stays untracked).
std::optional<SymInt> known_pair(const SymInt& x, const SymInt& y, bool (*f)(int64_t, int64_t, int64_t*)) {
  if (!x.known() || !y.known()) return std::nullopt;
  int64_t r = 0;
  if (!f(*x.known(), *y.known(), &r)) return std::nullopt;
  return SymInt::of(r);
}

void add(InferContext& ctx) {
  check_same_dtype(ctx);
  broadcast(ctx, 0);
  propagate_binary(ctx, [](const SymInt& x, const SymInt& y) -> std::optional<SymInt> {
    if (x.known() == 0) return y;
    if (y.known() == 0) return x;
    return known_pair(x, y, [](int64_t p, int64_t q, int64_t* r) { return !__builtin_add_overflow(p, q, r); });
  });
}

void sub(InferContext& ctx) {
  check_same_dtype(ctx);
  broadcast(ctx, 0);
  propagate_binary(ctx, [](const SymInt& x, const SymInt& y) -> std::optional<SymInt> {
    if (y.known() == 0) return x;
    return known_pair(x, y, [](int64_t p, int64_t q, int64_t* r) { return !__builtin_sub_overflow(p, q, r); });
  });
}

void mul(InferContext& ctx) {
  check_same_dtype(ctx);
  broadcast(ctx, 0);
  propagate_binary(ctx, [](const SymInt& x, const SymInt& y) -> std::optional<SymInt> {
    if (x.negative == 0 && y.negative == 0 && !x.dim.is_unknown() && !y.dim.is_unknown())
      return SymInt::of(x.dim * y.dim);
    return known_pair(x, y, [](int64_t p, int64_t q, int64_t* r) { return !__builtin_mul_overflow(p, q, r); });
  });
}

void div(InferContext& ctx) {
  check_same_dtype(ctx);
  broadcast(ctx, 0);
  if (!dtype_is_integer(ctx.input_dtype(0))) return;
  propagate_binary(ctx, [](const SymInt& x, const SymInt& y) -> std::optional<SymInt> {
    if (y.known() == 0) return std::nullopt;
    if (x.negative == 0 && y.negative == 0) {
      if (auto q = x.dim.divide(y.dim)) return SymInt::of(*q);
    }
    // Integer Div truncates toward zero; INT64_MIN / -1 has no int64 result.
    return known_pair(x, y, [](int64_t p, int64_t q, int64_t* r) {
      if (p == std::numeric_limits<int64_t>::min() && q == -1) return false;
      *r = p / q;
      return true;
    });
  });
}

void binary(InferContext& ctx) { broadcast(ctx, 0); }
// Inputs of one element type T (ONNX's constraint for Mod, Sum, the bitwise ops, ...).
void binary_same(InferContext& ctx) {
  check_same_dtype(ctx);
  broadcast(ctx, 0);
}
void compare(InferContext& ctx) {
  check_same_dtype(ctx);
  broadcast(ctx, 0, DType::kBool);
}

// Equal on shape values: the TorchScript exporter's expand pattern compares a shape with
// -1 (Where(Equal(shape, -1), 1, shape)). Entries are 0 / 1; a size (known, or a symbol)
// never equals a negative number.
void equal(InferContext& ctx) {
  compare(ctx);
  propagate_binary(ctx, [](const SymInt& x, const SymInt& y) -> std::optional<SymInt> {
    if (x.known() && y.known()) return SymInt::of(*x.known() == *y.known() ? 1 : 0);
    if (x.negative == 0 && y.negative == 0 && x.dim.same_as(y.dim)) return SymInt::of(1);
    const bool x_size = x.negative == 0 && !x.dim.is_unknown(), y_size = y.negative == 0 && !y.dim.is_unknown();
    if ((x_size && y.negative < 0) || (y_size && x.negative < 0)) return SymInt::of(0);
    return std::nullopt;
  });
}

void where(InferContext& ctx) {
  check_same_dtype(ctx, {1, 2});
  broadcast(ctx, 1);
  auto c = ctx.input_values(0);
  auto x = ctx.input_values(1);
  auto y = ctx.input_values(2);
  if (!c || !x || !y) return;
  const size_t n = std::max({c->size(), x->size(), y->size()});
  for (size_t len : {c->size(), x->size(), y->size()})
    if (len != n && len != 1) return;
  auto at = [n](const std::vector<SymInt>& v, size_t k) -> const SymInt& { return v[v.size() == 1 ? 0 : k]; };
  std::vector<SymInt> out;
  for (size_t k = 0; k < n; ++k) {
    const SymInt& xk = at(*x, k);
    const SymInt& yk = at(*y, k);
    if (auto pick = at(*c, k).known()) out.push_back(*pick != 0 ? xk : yk);
    else if (xk.negative == yk.negative && (xk.negative < 0 || xk.dim.same_as(yk.dim))) out.push_back(xk);
    else out.push_back(SymInt{Dim(), 0});
  }
  ctx.set_output_values(0, std::move(out));
}

void prelu(InferContext& ctx) {
  // The slope broadcasts to X (unidirectionally): the output is X's shape.
  check_unidirectional(ctx, ctx.input_shape(1), ctx.input_shape(0), "slope");
  same_as_input(ctx);
}

void bool_unary(InferContext& ctx) { ctx.set_output(0, DType::kBool, ctx.input_shape(0)); }

void cast(InferContext& ctx) {
  const int64_t to = ctx.attr_int("to", 0);
  // Compared as int64: a narrowing cast first would take 2^32 + 1 for float32.
  if (to < 1 || to > ir::kMaxDType) ctx.fail("attribute 'to' is not a data type: " + std::to_string(to));
  const auto dtype = static_cast<DType>(to);
  ctx.set_output(0, dtype, ctx.input_shape(0));
  if (ir::dtype_is_integer(dtype))
    if (auto v = ctx.input_values(0)) ctx.set_output_values(0, *v);
}

void cast_like(InferContext& ctx) { ctx.set_output(0, ctx.input_dtype(1), ctx.input_shape(0)); }

void identity(InferContext& ctx) {
  same_as_input(ctx);
  if (auto v = ctx.input_values(0)) ctx.set_output_values(0, *v);
}

void dropout(InferContext& ctx) {
  // The kernel reads the first element of each.
  ctx.require_one_value(1, "input 'ratio'");
  ctx.require_one_value(2, "input 'training_mode'");
  same_as_input(ctx);
  ctx.set_output(1, DType::kBool, ctx.input_shape(0));
}

void min_max(InferContext& ctx) {
  check_same_dtype(ctx);
  broadcast(ctx, 0);
  if (ctx.num_inputs() != 2) return;
  const bool is_max = ctx.node().op_type() == "Max";
  propagate_binary(ctx, [is_max](const SymInt& x, const SymInt& y) -> std::optional<SymInt> {
    if (x.dim.same_as(y.dim) && x.negative == 0 && y.negative == 0) return x;
    if (!x.known() || !y.known()) return std::nullopt;
    return SymInt::of(is_max ? std::max(*x.known(), *y.known()) : std::min(*x.known(), *y.known()));
  });
}

// Trilu keeps the upper or lower triangle of the last two dims: rank >= 2.
void trilu(InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  if (x.has_rank() && x.rank() < 2) ctx.fail("input must have rank >= 2, got " + x.to_string());
  if (ctx.num_inputs() > 1 && ctx.has_input(1)) {
    const Shape& k = ctx.input_shape(1);
    if (k.has_rank() && (k.rank() > 1 || (k.rank() == 1 && k[0].is_known() && k[0].value() != 1)))
      ctx.fail("k must be a scalar, got shape " + k.to_string());
  }
  same_as_input(ctx);
}

// CumSum / CumProd (X, axis): axis a scalar (or one value) within X's rank when known.
void cumulative(InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  const Shape& a = ctx.input_shape(1);
  if (a.has_rank() && !(a.rank() == 0 || (a.rank() == 1 && a[0].is_known() && a[0].value() == 1)))
    ctx.fail("axis must be a scalar, got shape " + a.to_string());
  if (x.has_rank() && x.rank() == 0) ctx.fail("input must have rank >= 1, got a scalar");
  if (const auto v = ctx.input_ints(1); v && v->size() == 1 && x.has_rank()) ctx.axis((*v)[0], x.rank());
  same_as_input(ctx);
}

}  // namespace

// Celu divides by alpha: 0 is not a Celu (its formula gives NaN for x >= 0).
void celu(InferContext& ctx) {
  const float alpha = ctx.attr_float("alpha", 1.0f);
  if (alpha == 0.0f || !std::isfinite(alpha))
    ctx.fail("alpha is " + std::to_string(alpha) + "; Celu divides by it, so it must be finite and nonzero");
  same_as_input(ctx);
}

// Clip's bounds (opset 11 on) are scalars: the kernel reads one value of each.
void clip(InferContext& ctx) {
  ctx.require_one_value(1, "min");
  ctx.require_one_value(2, "max");
  same_as_input(ctx);
}

void register_elementwise(Registry& r) {
  for (const char* op : {"Relu", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Gelu", "Softplus",
                         "Softsign", "Elu", "Selu", "Mish", "ThresholdedRelu", "Shrink", "Sqrt", "Exp", "Log",
                         "Neg", "Abs", "Reciprocal", "Erf", "Floor", "Ceil", "Round", "Sign", "Sin", "Cos", "Tan",
                         "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "BitwiseNot",
                         "ReverseSequence", "Swish"})
    r.add(op, same_as_input);
  r.add("Celu", celu);
  r.add("Clip", clip);
  r.add("Trilu", trilu);
  r.add("CumSum", cumulative);
  r.add("CumProd", cumulative);
  r.add("Add", add);
  r.add("Sub", sub);
  r.add("Mul", mul);
  r.add("Div", div);
  r.add("Pow", binary);  // base and exponent may differ in type (T and T1)
  for (const char* op : {"Mod", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Sum", "Mean"})
    r.add(op, binary_same);
  r.add("Min", min_max);
  r.add("Max", min_max);
  for (const char* op : {"Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor"}) r.add(op, compare);
  r.add("Equal", equal);
  r.add("StringConcat", binary);
  r.add("RegexFullMatch", bool_unary);
  r.add("Not", bool_unary);
  r.add("IsNaN", bool_unary);
  r.add("IsInf", bool_unary);
  r.add("Where", where);
  r.add("PRelu", prelu);
  r.add("Cast", cast);
  r.add("CastLike", cast_like);
  r.add("Identity", identity);
  r.add("Dropout", dropout);
}

}  // namespace tether::ops
