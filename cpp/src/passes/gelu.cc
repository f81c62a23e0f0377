// GELU written out in elementary ops, as exporters before ONNX's Gelu (opset 20) spell it, and
// as models that define their own GELU (GPT-2's) still do:
//
//   0.5 * x * (1 + Erf(x / sqrt(2)))                                 (Erf over x * 1/sqrt(2) too)
//   0.5 * x * (1 + Tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))       (x^3 as Pow(x, 3) or x * x * x)
//
// becomes one Gelu node (approximate "none" or "tanh"): one pass over the tensor instead of six
// to eight, and an activation the fusion pass can then fold into the product before it. The
// three factors of the outer product may be multiplied in any order and association, each
// binary op may take its operands either way round, and the constants must match to float32
// precision; every intermediate value must be read by the chain alone.
#include <algorithm>
#include <cmath>

#include "passes/passes.h"
#include "passes/rewrite.h"

namespace tether::passes {

namespace {

// The float32 scalar constant `v` holds (any rank, one element).
std::optional<float> scalar(const ir::Value* v) {
  if (v == nullptr || v->type().dtype() != ir::DType::kFloat32) return std::nullopt;
  std::optional<ir::Tensor> t = constant_of(v);
  if (!t || t->dtype() != ir::DType::kFloat32 || t->num_elements() != 1) return std::nullopt;
  return *t->data<float>();
}

bool near(std::optional<float> got, double want) {
  return got && std::fabs(static_cast<double>(*got) - want) <= 1e-6 * std::fabs(want);
}

// The node producing `v` when it is the ONNX op `op` with two inputs and `v` is read only by
// `reader`; nullptr otherwise.
ir::Node* only_into(ir::Value* v, const char* op, const ir::Node& reader) {
  ir::Node* p = v != nullptr ? v->producer() : nullptr;
  if (p == nullptr || !is_onnx(*p, op) || p->output(0) != v || !only_reader(*v, reader)) return nullptr;
  return p;
}

// Binary `n`'s operand that is not `known` (either order), or nullptr when neither is it.
ir::Value* other_than(const ir::Node& n, const ir::Value* known) {
  if (n.inputs().size() != 2) return nullptr;
  if (n.input(0) == known) return n.input(1);
  if (n.input(1) == known) return n.input(0);
  return nullptr;
}

// Binary `n`'s operand beside a scalar constant near `want` (c * v, v * c, 1 + v, ...): v.
ir::Value* beside_constant(const ir::Node& n, double want) {
  if (n.inputs().size() != 2) return nullptr;
  for (size_t side = 0; side < 2; ++side)
    if (near(scalar(n.input(side)), want)) return n.input(1 - side);
  return nullptr;
}

struct Match {
  ir::Value* x = nullptr;
  std::vector<ir::Node*> chain;  // every node of the pattern but the last
  bool tanh = false;
};

// `s` = 1 + Erf(x / sqrt 2) or 1 + Tanh(sqrt(2/pi) (x + 0.044715 x^3)), read only by `reader`.
bool one_plus_f(ir::Value* s, ir::Value* x, const ir::Node& reader, Match& m) {
  ir::Node* add = only_into(s, "Add", reader);
  if (add == nullptr) return false;
  ir::Value* f = beside_constant(*add, 1.0);
  if (f == nullptr) return false;
  ir::Node* fn = f->producer();
  if (fn == nullptr || fn->output(0) != f || !only_reader(*f, *add) || fn->inputs().size() != 1) return false;
  ir::Value* arg = fn->input(0);
  ir::Node* scale = arg != nullptr ? arg->producer() : nullptr;
  if (scale == nullptr || !only_reader(*arg, *fn)) return false;
  std::vector<ir::Node*> nodes;
  if (is_onnx(*fn, "Erf")) {
    const bool div = is_onnx(*scale, "Div") && scale->inputs().size() == 2 && scale->input(0) == x &&
                     near(scalar(scale->input(1)), std::sqrt(2.0));
    const bool mul = is_onnx(*scale, "Mul") && beside_constant(*scale, 1.0 / std::sqrt(2.0)) == x;
    if (!div && !mul) return false;
    nodes = {scale};
  } else if (is_onnx(*fn, "Tanh")) {
    // sqrt(2/pi) * inner, inner = x + 0.044715 * x^3
    if (!is_onnx(*scale, "Mul")) return false;
    ir::Value* inner = beside_constant(*scale, std::sqrt(2.0 / M_PI));
    ir::Node* sum = inner != nullptr ? only_into(inner, "Add", *scale) : nullptr;
    ir::Value* cubic_term = sum != nullptr ? other_than(*sum, x) : nullptr;
    ir::Node* coef = cubic_term != nullptr ? only_into(cubic_term, "Mul", *sum) : nullptr;
    ir::Value* cube = coef != nullptr ? beside_constant(*coef, 0.044715) : nullptr;
    ir::Node* pow = cube != nullptr ? cube->producer() : nullptr;
    if (pow == nullptr || !only_reader(*cube, *coef)) return false;
    if (is_onnx(*pow, "Pow") && pow->inputs().size() == 2 && pow->input(0) == x && near(scalar(pow->input(1)), 3.0)) {
      nodes = {pow, coef, sum, scale};
    } else if (is_onnx(*pow, "Mul") && pow->inputs().size() == 2) {
      // x * (x * x), either way round
      ir::Value* sq = other_than(*pow, x);
      ir::Node* square = sq != nullptr ? only_into(sq, "Mul", *pow) : nullptr;
      if (square == nullptr || square->input(0) != x || square->input(1) != x) return false;
      nodes = {square, pow, coef, sum, scale};
    } else {
      return false;
    }
    m.tanh = true;
  } else {
    return false;
  }
  m.chain.insert(m.chain.end(), nodes.begin(), nodes.end());
  m.chain.push_back(fn);
  m.chain.push_back(add);
  return true;
}

// `out` = the product of x, 0.5 and S = 1 + f(x), in any order and association: out =
// Mul(Mul(u, v), w) with {u, v, w} = {x, 0.5, S}.
std::optional<Match> match(ir::Node& out) {
  if (!is_onnx(out, "Mul") || out.inputs().size() != 2 || out.output(0) == nullptr) return std::nullopt;
  if (out.output(0)->type().dtype() != ir::DType::kFloat32) return std::nullopt;
  for (size_t side = 0; side < 2; ++side) {
    ir::Node* inner = only_into(out.input(side), "Mul", out);
    if (inner == nullptr || inner->inputs().size() != 2) continue;
    ir::Value* const factors[3] = {inner->input(0), inner->input(1), out.input(1 - side)};
    for (int half = 0; half < 3; ++half) {
      if (!near(scalar(factors[half]), 0.5)) continue;
      for (int xi = 0; xi < 3; ++xi) {
        const int si = 3 - half - xi;
        if (xi == half) continue;
        ir::Value* x = factors[xi];
        if (x == nullptr || constant_of(x)) continue;
        Match m;
        // S is read by the Mul that takes it: the outer one when it is the third factor.
        if (!one_plus_f(factors[si], x, si == 2 ? out : static_cast<const ir::Node&>(*inner), m)) continue;
        m.x = x;
        m.chain.push_back(inner);
        return m;
      }
    }
  }
  return std::nullopt;
}

}  // namespace

int fuse_gelu(ir::Model& model) {
  ir::Graph& g = model.graph();
  const bool onnx_gelu = model.opset("") >= 20;
  int fused = 0;
  // Each match removes only nodes before its last one (they compute its inputs), so the walk
  // never meets a removed node.
  for (ir::Node* out : g.topological_order()) {
    std::optional<Match> m = match(*out);
    if (!m || m->x->type().dtype() != ir::DType::kFloat32) continue;
    std::vector<ir::Node*> chain = m->chain;
    std::sort(chain.begin(), chain.end(), [&](const ir::Node* a, const ir::Node* b) { return g.stored_before(a, b); });
    chain.push_back(out);
    replace_chain(g, chain, "Gelu", onnx_gelu ? "" : "ai.tether", {m->x},
                  {ir::Attribute::s("approximate", m->tanh ? "tanh" : "none")});
    if (!onnx_gelu) import_tether_opset(model);
    ++fused;
  }
  return fused;
}

}  // namespace tether::passes
