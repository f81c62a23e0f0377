// Shape inference for matrix products: MatMul (numpy semantics), Gemm, MatMulInteger,
// QLinearMatMul, Einsum, and Det.
#include <cctype>
#include <map>

#include "ops/infer_context.h"

namespace tether::ops {

namespace {

void check_same(const InferContext& ctx, const Dim& a, const Dim& b, const std::string& what) {
  if (a.is_known() && b.is_known() && a.value() != b.value())
    ctx.fail(what + ": " + a.to_string() + " vs " + b.to_string());
}

Shape matmul_shape(const InferContext& ctx, const Shape& a, const Shape& b) {
  if (!a.has_rank() || !b.has_rank()) return Shape();
  if (a.rank() == 0 || b.rank() == 0) ctx.fail("MatMul inputs must have rank >= 1");
  // 1-D operands are promoted to matrices, and the added dim is dropped from the result.
  std::vector<Dim> ad = a.dims(), bd = b.dims();
  const bool a_vec = ad.size() == 1, b_vec = bd.size() == 1;
  if (a_vec) ad.insert(ad.begin(), Dim(1));
  if (b_vec) bd.push_back(Dim(1));
  const Dim& ka = ad.back();
  const Dim& kb = bd[bd.size() - 2];
  if (ka.is_known() && kb.is_known() && ka.value() != kb.value())
    ctx.fail("inner dims of MatMul differ: A is " + a.to_string() + " and B is " + b.to_string() + " (" +
             ka.to_string() + " vs " + kb.to_string() + ")");
  Shape batch = broadcast_shapes(ctx, {Shape(std::vector<Dim>(ad.begin(), ad.end() - 2)),
                                       Shape(std::vector<Dim>(bd.begin(), bd.end() - 2))});
  std::vector<Dim> out = batch.dims();
  if (!a_vec) out.push_back(ad[ad.size() - 2]);
  if (!b_vec) out.push_back(bd.back());
  return Shape(std::move(out));
}

void matmul(InferContext& ctx) {
  check_same_dtype(ctx, {0, 1});
  ctx.set_output(0, ctx.input_dtype(0), matmul_shape(ctx, ctx.input_shape(0), ctx.input_shape(1)));
}

// MatMulInteger's zero point of operand `op` (input `i`): a scalar, one value per row of a
// (column of b) as a 1-D tensor, or the operand's shape with its contracted dim 1.
void check_zero_point(const InferContext& ctx, size_t i, size_t op, const char* name) {
  if (i >= ctx.num_inputs() || !ctx.has_input(i)) return;
  const Shape& z = ctx.input_shape(i);
  const Shape& x = ctx.input_shape(op);
  if (!z.has_rank() || !x.has_rank() || x.rank() == 0) return;
  const bool row = op == 0;  // a's zero point goes per row, b's per column
  std::vector<Dim> want = x.dims();
  if (z.rank() >= 2 && x.rank() < 2)
    ctx.fail(std::string("input '") + name + "' has shape " + z.to_string() + ", expected a scalar or a 1-D tensor");
  if (z.rank() <= 1) {
    const Dim n = z.rank() == 0 ? Dim(1) : z[0];
    const Dim per = x.rank() >= 2 ? x[row ? x.rank() - 2 : x.rank() - 1] : Dim(1);  // a vector is one row (column)
    if (n.is_known() && n.value() != 1 && per.is_known() && n.value() != per.value())
      ctx.fail(std::string("input '") + name + "' has " + n.to_string() + " values, expected 1 or " + per.to_string() +
               (row ? " (one per row of A)" : " (one per column of B)"));
    return;
  }
  want[row ? x.rank() - 1 : x.rank() - 2] = Dim(1);
  bool ok = z.rank() == want.size();
  for (size_t d = 0; ok && d < want.size(); ++d)
    ok = !(z[d].is_known() && want[d].is_known() && z[d].value() != want[d].value());
  if (!ok)
    ctx.fail(std::string("input '") + name + "' has shape " + z.to_string() + ", expected a scalar, a 1-D tensor or " +
             Shape(want).to_string());
}

void matmul_integer(InferContext& ctx) {
  // ai.tether's MatMulIntegerToFloat shares this rule, with a scale before its zero points.
  const size_t zp = ctx.node().domain() == "ai.tether" ? 3 : 2;
  check_zero_point(ctx, zp, 0, "a_zero_point");
  check_zero_point(ctx, zp + 1, 1, "b_zero_point");
  ctx.set_output(0, DType::kInt32, matmul_shape(ctx, ctx.input_shape(0), ctx.input_shape(1)));
}

// QLinearMatMul takes (a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale,
// y_zero_point); y has y_zero_point's element type.
void qlinear_matmul(InferContext& ctx) {
  ctx.set_output(0, ctx.input_dtype(7), matmul_shape(ctx, ctx.input_shape(0), ctx.input_shape(3)));
}

void det(InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  if (!x.has_rank()) {
    ctx.set_output(0, ctx.input_dtype(0), Shape());
    return;
  }
  if (x.rank() < 2) ctx.fail("input must have rank >= 2 ([*, M, M]), got " + x.to_string());
  check_same(ctx, x[x.rank() - 2], x[x.rank() - 1], "Det needs square matrices");
  ctx.set_output(0, ctx.input_dtype(0), Shape(std::vector<Dim>(x.dims().begin(), x.dims().end() - 2)));
}

void gemm(InferContext& ctx) {
  check_same_dtype(ctx);
  const Shape& a = ctx.input_shape(0);
  const Shape& b = ctx.input_shape(1);
  const DType dt = ctx.input_dtype(0);
  if (!a.has_rank() || !b.has_rank()) {
    ctx.set_output(0, dt, Shape({Dim(), Dim()}));
    return;
  }
  if (a.rank() != 2 || b.rank() != 2) ctx.fail("Gemm inputs must be 2-D, got ranks " + std::to_string(a.rank()) +
                                               " and " + std::to_string(b.rank()));
  const bool ta = ctx.attr_int("transA", 0) != 0, tb = ctx.attr_int("transB", 0) != 0;
  const Dim& m = a[ta ? 1 : 0];
  const Dim& ka = a[ta ? 0 : 1];
  const Dim& kb = b[tb ? 1 : 0];
  const Dim& n = b[tb ? 0 : 1];
  if (ka.is_known() && kb.is_known() && ka.value() != kb.value())
    ctx.fail("inner dims of Gemm differ: A is " + a.to_string() + (ta ? " (transA)" : "") + " and B is " +
             b.to_string() + (tb ? " (transB)" : "") + " (" + ka.to_string() + " vs " + kb.to_string() + ")");
  Shape out({m, n});
  // C broadcasts to (M, N) one way only: a C of more dims, or wider, would make the kernel
  // read past it.
  if (ctx.has_input(2) && ctx.input_type(2).is_tensor())
    check_unidirectional(ctx, ctx.input_shape(2), out, "input 'C' (Gemm's bias)");
  ctx.set_output(0, dt, out);
}

// A term is letters with at most one '...'; anything else would make the walk over an
// operand's dims below go past its rank.
void check_term(const InferContext& ctx, const std::string& eq, const std::string& term) {
  const size_t ell = term.find("...");
  for (size_t k = 0; k < term.size(); ++k) {
    if (k == ell) {
      k += 2;
      continue;
    }
    if (!std::isalpha(static_cast<unsigned char>(term[k])))
      ctx.fail("equation '" + eq + "': term '" + term + "' has '" + term[k] +
               "'; terms are letters with at most one '...'");
  }
}

// Einsum with explicit or implicit output, and '...' for broadcast dims.
void einsum(InferContext& ctx) {
  std::string eq = ctx.attr_string("equation", "");
  std::string spaceless;
  for (char c : eq)
    if (c != ' ') spaceless += c;
  const size_t arrow = spaceless.find("->");
  const std::string lhs = spaceless.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != ctx.num_inputs())
    ctx.fail("equation '" + eq + "' names " + std::to_string(terms.size()) + " operands, the node has " +
             std::to_string(ctx.num_inputs()));
  std::map<char, Dim> sizes;
  std::map<char, int> counts;
  std::vector<Shape> ellipsis_shapes;
  for (size_t i = 0; i < terms.size(); ++i) {
    const Shape& s = ctx.input_shape(i);
    if (!s.has_rank()) {
      ctx.set_output(0, ctx.input_dtype(0), Shape());
      return;
    }
    std::string t = terms[i];
    check_term(ctx, eq, t);
    const size_t ell = t.find("...");
    const size_t letters = t.size() - (ell == std::string::npos ? 0 : 3);
    if (letters > s.rank() || (ell == std::string::npos && letters != s.rank()))
      ctx.fail("operand " + std::to_string(i) + " has rank " + std::to_string(s.rank()) + ", equation term '" + t +
               "' says otherwise");
    const size_t ell_rank = s.rank() - letters;
    size_t d = 0;
    std::vector<Dim> ell_dims;
    for (size_t k = 0; k < t.size(); ++k) {
      if (t.compare(k, 3, "...") == 0) {
        for (size_t e = 0; e < ell_rank; ++e) ell_dims.push_back(s[d++]);
        k += 2;
        continue;
      }
      const char c = t[k];
      ++counts[c];
      auto it = sizes.find(c);
      const Dim& dim = s[d++];
      if (it == sizes.end() || (it->second.is_known() && it->second.value() == 1)) sizes[c] = dim;
      else if (!(dim.is_known() && dim.value() == 1)) check_same(ctx, it->second, dim, std::string("label '") + c + "' sizes differ");
    }
    ellipsis_shapes.push_back(Shape(std::move(ell_dims)));
  }
  std::string out_term;
  if (arrow != std::string::npos) {
    out_term = spaceless.substr(arrow + 2);
    check_term(ctx, eq, out_term);
  } else {  // implicit: '...' then the labels used once, in alphabetical order
    if (lhs.find("...") != std::string::npos) out_term = "...";
    for (const auto& [c, n] : counts)
      if (n == 1) out_term += c;
  }
  // Named, not iterated as a temporary: a range-for over a temporary's member dangles.
  const Shape ellipsis = broadcast_shapes(ctx, ellipsis_shapes);
  std::vector<Dim> out;
  for (size_t k = 0; k < out_term.size(); ++k) {
    if (out_term.compare(k, 3, "...") == 0) {
      for (const Dim& d : ellipsis.dims()) out.push_back(d);
      k += 2;
      continue;
    }
    auto it = sizes.find(out_term[k]);
    if (it == sizes.end()) ctx.fail(std::string("output label '") + out_term[k] + "' appears in no operand");
    out.push_back(it->second);
  }
  ctx.set_output(0, ctx.input_dtype(0), Shape(std::move(out)));
}

}  // namespace

void register_matmul(Registry& r) {
  r.add("MatMul", matmul);
  r.add("MatMulInteger", matmul_integer);
  r.add("Gemm", gemm);
  r.add("QLinearMatMul", qlinear_matmul);
  r.add("Einsum", einsum);
  r.add("Det", det);
}

}  // namespace tether::ops
