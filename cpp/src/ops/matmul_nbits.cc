// Shape and type inference for com.microsoft MatMulNBits, onnxruntime's weight-only quantized
// MatMul: Y = A @ dequantize(B)^T (+ bias), with B [N, K] quantized to `bits` bits in blocks of
// `block_size` along K, each block with a scale and a zero point.
//
// The packed tensors' sizes follow from the attributes; a model whose tensors disagree would
// make a kernel read past them, so every size is checked here against what K, N, bits and
// block_size imply (known dims only: a symbolic one is checked again when it is known).
#include "ops/infer_context.h"

namespace tether::ops {

namespace {

struct NBitsGeometry {
  int64_t k = 0, n = 0, bits = 4, block_size = 0;
  int64_t k_blocks = 0;        // ceil(K / block_size)
  int64_t blob = 0;            // bytes per block of one column: block_size * bits / 8
  int64_t packed_zp_cols = 0;  // bytes of packed zero points per column: ceil(k_blocks * bits / 8)
};

int64_t required_attr(const InferContext& ctx, const char* name) {
  if (!ctx.has_attr(name)) ctx.fail(std::string("attribute '") + name + "' is required");
  return ctx.attr_int(name, 0);
}

NBitsGeometry geometry(const InferContext& ctx) {
  NBitsGeometry g;
  g.k = required_attr(ctx, "K");
  g.n = required_attr(ctx, "N");
  g.block_size = required_attr(ctx, "block_size");
  g.bits = ctx.attr_int("bits", 4);
  if (g.k < 1) ctx.fail("attribute 'K' must be positive, got " + std::to_string(g.k));
  if (g.n < 1) ctx.fail("attribute 'N' must be positive, got " + std::to_string(g.n));
  if (g.bits != 2 && g.bits != 4 && g.bits != 8)
    ctx.fail("attribute 'bits' must be 2, 4 or 8, got " + std::to_string(g.bits));
  const int64_t bs = g.block_size;
  if (bs < 16 || (bs & (bs - 1)) != 0)
    ctx.fail("attribute 'block_size' must be a power of two >= 16, got " + std::to_string(bs));
  g.k_blocks = g.k / bs + (g.k % bs != 0 ? 1 : 0);
  g.blob = ctx.mul(bs, g.bits, "block_size * bits") / 8;
  const int64_t zp_bits = ctx.mul(g.k_blocks, g.bits, "k_blocks * bits");
  g.packed_zp_cols = zp_bits / 8 + (zp_bits % 8 != 0 ? 1 : 0);
  return g;
}

std::string sizes_text(std::initializer_list<int64_t> dims) {
  std::string s = "[";
  for (int64_t d : dims) s += (s.size() > 1 ? ", " : "") + std::to_string(d);
  return s + "]";
}

// True when `s` (known rank) agrees with `want` in every known dim.
bool agrees(const Shape& s, const std::vector<int64_t>& want) {
  if (s.rank() != want.size()) return false;
  for (size_t i = 0; i < want.size(); ++i)
    if (s[i].is_known() && s[i].value() != want[i]) return false;
  return true;
}

// A per-block tensor (scales, unpacked zero points) or packed zero points: [n, cols] or its
// flattening [n * cols], as onnxruntime accepts both.
void check_table(const InferContext& ctx, size_t i, const char* what, int64_t n, int64_t cols) {
  const Shape& s = ctx.input_shape(i);
  if (!s.has_rank()) return;
  const int64_t flat = ctx.mul(n, cols, what);
  if (!agrees(s, {n, cols}) && !agrees(s, {flat}))
    ctx.fail(std::string(what) + " (input " + std::to_string(i) + ") has shape " + s.to_string() + "; K, N, bits and " +
             "block_size imply " + sizes_text({n, cols}) + " or " + sizes_text({flat}));
}

void check_float(const InferContext& ctx, size_t i, const char* what, DType a) {
  const DType t = ctx.input_dtype(i);
  if (t != DType::kUndefined && a != DType::kUndefined && t != a)
    ctx.fail(std::string(what) + " (input " + std::to_string(i) + ") is " + std::string(ir::dtype_name(t)) +
             "; it must have A's type, " + std::string(ir::dtype_name(a)));
}

// B: uint8 [N, k_blocks, blob]. An omitted projection replaces dims with 0 (the output is then
// the bias, or zeros); returns true for that case.
bool check_b(const InferContext& ctx, const NBitsGeometry& g) {
  const DType t = ctx.input_dtype(1);
  if (t != DType::kUndefined && t != DType::kUInt8)
    ctx.fail("B (input 1) is " + std::string(ir::dtype_name(t)) + "; it must be uint8 (packed weights)");
  if (ctx.attr_int("weight_prepacked", 0) != 0) return false;  // a device layout: the kernel decides
  const Shape& b = ctx.input_shape(1);
  if (!b.has_rank()) return false;
  const std::vector<int64_t> want{g.n, g.k_blocks, g.blob};
  bool ok = b.rank() == 3, empty = false;
  for (size_t i = 0; ok && i < 3; ++i) {
    if (!b[i].is_known()) continue;
    empty = empty || b[i].value() == 0;
    ok = b[i].value() == want[i] || b[i].value() == 0;
  }
  if (!ok)
    ctx.fail("B (input 1) has shape " + b.to_string() + "; K = " + std::to_string(g.k) + ", N = " + std::to_string(g.n) +
             ", bits = " + std::to_string(g.bits) + " and block_size = " + std::to_string(g.block_size) + " imply " +
             sizes_text({g.n, g.k_blocks, g.blob}) + " (N, k_blocks, blob_size)");
  return empty;
}

void matmul_nbits(InferContext& ctx) {
  if (ctx.num_inputs() < 3 || ctx.num_inputs() > 6)
    ctx.fail("takes 3 to 6 inputs (A, B, scales, zero_points, g_idx, bias), got " + std::to_string(ctx.num_inputs()));
  const NBitsGeometry g = geometry(ctx);
  const DType at = ctx.input_dtype(0);
  if (at != DType::kUndefined && at != DType::kFloat32 && at != DType::kFloat16 && at != DType::kBFloat16)
    ctx.fail("A (input 0) is " + std::string(ir::dtype_name(at)) + "; it must be float32, float16 or bfloat16");
  const bool empty = check_b(ctx, g);
  check_float(ctx, 2, "scales", at);
  if (!empty) check_table(ctx, 2, "scales", g.n, g.k_blocks);
  if (ctx.num_inputs() > 3 && ctx.has_input(3)) {
    const DType zt = ctx.input_dtype(3);
    if (zt == DType::kUInt8) {
      if (!empty) check_table(ctx, 3, "zero_points", g.n, g.packed_zp_cols);
    } else {
      check_float(ctx, 3, "zero_points", at);
      if (!empty) check_table(ctx, 3, "zero_points", g.n, g.k_blocks);
    }
  }
  if (ctx.num_inputs() > 4 && ctx.has_input(4)) {
    const DType t = ctx.input_dtype(4);
    if (t != DType::kUndefined && t != DType::kInt32)
      ctx.fail("g_idx (input 4) is " + std::string(ir::dtype_name(t)) + "; it must be int32");
  }
  if (ctx.num_inputs() > 5 && ctx.has_input(5)) {
    check_float(ctx, 5, "bias", at);
    const Shape& s = ctx.input_shape(5);
    if (s.has_rank() && !agrees(s, {g.n}))
      ctx.fail("bias (input 5) has shape " + s.to_string() + "; it must be [N] = " + sizes_text({g.n}));
  }
  const Shape& a = ctx.input_shape(0);
  if (!a.has_rank()) {
    ctx.set_output(0, at, Shape());
    return;
  }
  if (a.rank() < 1) ctx.fail("A (input 0) must have rank >= 1, got a scalar");
  const Dim& ka = a[a.rank() - 1];
  if (ka.is_known() && ka.value() != g.k)
    ctx.fail("A (input 0) has shape " + a.to_string() + "; its last dim must be K = " + std::to_string(g.k));
  std::vector<Dim> y;
  for (size_t i = 0; i + 1 < a.rank(); ++i) y.push_back(a[i]);
  y.emplace_back(g.n);
  ctx.set_output(0, at, Shape(std::move(y)));
}

}  // namespace

void register_matmul_nbits(Registry& r) { r.add("MatMulNBits", matmul_nbits, "com.microsoft"); }

}  // namespace tether::ops
