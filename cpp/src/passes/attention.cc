// Scaled dot-product attention as exporters spell it, one op per step:
//
//   scores = MatMul(Q [B, H, S, D], Transpose(K, perm 0 1 3 2))        K [B, Hkv, T, D]
//   scores = Mul(scores, c) or Div(scores, c)                           c: a constant scalar (optional)
//   scores = Add(scores, mask)                                          mask: float, broadcast (optional)
//   probs  = Softmax(scores, last axis)
//   Y      = MatMul(probs, V)                                           V [B, Hkv, T, Dv]
//
// with K and V either given per query head (Hkv = H) or repeated for grouped-query attention
// (Unsqueeze -> Expand -> Reshape, see match_kv_repeat), becomes one ai.tether Attention node
// (ONNX's Attention, opset 23, with 4-D inputs; attention.cc in the CPU backend). The fused
// node reads K and V in place: no transposed copy of the keys, no repeated heads, no scores
// tensor of B x H x S x T, and on a decoding step one node instead of about ten whose shapes
// change with the cache.
//
// What must agree for the node to compute what the chain computes, checked on the inferred
// shapes (dims equal symbol for symbol; an unknown dim matches nothing):
//   - Q, K and V of rank 4, float32, one batch dim B, K and V one length T, Q and K one head
//     size D, and H = Hkv x G for the repeat's group G (G = 1 without a repeat);
//   - the scale a one-element float constant; Mul before Add (Attention scales the scores,
//     then adds the mask);
//   - the mask float32, of rank 1 to 4, its last dim T (a shorter mask would mean "masked" to
//     the node but broadcast to the Add) and each other dim 1 or the scores' own; the Add's
//     output the scores' shape;
//   - Softmax over the last axis (opset 13's default, or axis -1 / 3 given; before opset 13
//     axis 3 only);
//   - each intermediate read by the next node alone and no graph output or kept value.
// A row whose every key the mask hides with -inf is NaN after Softmax (exp(-inf + inf)); the
// node's nan_when_fully_masked = 1 keeps that, where ONNX's Attention writes zeros.
#include <algorithm>
#include <unordered_map>

#include "passes/passes.h"
#include "passes/rewrite.h"

namespace tether::passes {

namespace {

// K or V as the product reads it: the heads themselves, or their repeat for grouped queries.
struct Heads {
  ir::Value* value = nullptr;  // [B, Hkv, T, D]
  int64_t group = 1;           // query heads per key/value head
  std::vector<ir::Node*> nodes;
};

std::optional<Heads> match_heads(ir::Value* v, const ir::Node& reader) {
  if (std::optional<KvRepeat> rep = match_kv_repeat(v, reader)) return Heads{rep->kv, rep->group, rep->nodes};
  if (dims_of(v, 4) == nullptr) return std::nullopt;
  return Heads{v, 1, {}};
}

// Softmax over the last axis of a rank-4 input.
bool softmax_over_last_axis(const ir::Node& sm, int64_t opset) {
  const ir::Attribute* a = sm.attr("axis");
  const int64_t axis = a != nullptr ? sm.attr_int("axis", 0) : (opset >= 13 ? -1 : 1);
  if (opset >= 13) return axis == -1 || axis == 3;
  return axis == 3;  // before 13, axis k flattens [k, rank) into the softmax's row
}

// A constant holding one float32 value.
std::optional<float> scalar_constant(const ir::Value* v) {
  std::optional<ir::Tensor> t = constant_of(v);
  if (!t || t->dtype() != ir::DType::kFloat32 || t->num_elements() != 1) return std::nullopt;
  return t->data<float>()[0];
}

// The mask broadcasts to the scores [B, H, S, T] along every axis but the last, which is T.
bool mask_fits(const ir::Value* mask, const std::vector<ir::Dim>& scores) {
  if (mask == nullptr || !mask->type().is_tensor() || mask->type().dtype() != ir::DType::kFloat32) return false;
  const ir::Shape& s = mask->type().shape();
  if (!s.has_rank() || s.rank() < 1 || s.rank() > 4) return false;
  const std::vector<ir::Dim>& m = s.dims();
  if (!(m.back() == scores[3])) return false;
  for (size_t k = 1; k < m.size(); ++k) {
    const ir::Dim& have = m[m.size() - 1 - k];
    const ir::Dim& want = scores[3 - k];
    if (!((have.is_known() && have.value() == 1) || have == want)) return false;
  }
  return true;
}

bool same_dims(const std::vector<ir::Dim>& a, const std::vector<ir::Dim>& b) {
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k)
    if (!(a[k] == b[k])) return false;
  return true;
}

struct Match {
  ir::Value *q = nullptr, *k = nullptr, *v = nullptr, *mask = nullptr;
  float scale = 1.0f;
  std::vector<ir::Node*> nodes;
};

// The chain ending in `mm2` = MatMul(Softmax(...), V), when every condition above holds.
std::optional<Match> match(ir::Node& mm2, int64_t opset) {
  if (!is_onnx(mm2, "MatMul") || mm2.inputs().size() != 2 || mm2.output(0) == nullptr) return std::nullopt;
  Match m;
  ir::Node* sm = sole_producer(mm2.input(0), "Softmax", mm2);
  if (sm == nullptr || !softmax_over_last_axis(*sm, opset)) return std::nullopt;
  const std::vector<ir::Dim>* scores = dims_of(sm->output(0), 4);
  if (scores == nullptr || sm->output(0)->type().dtype() != ir::DType::kFloat32) return std::nullopt;
  std::optional<Heads> v = match_heads(mm2.input(1), mm2);
  if (!v) return std::nullopt;
  m.nodes = {sm, &mm2};

  // Back from the Softmax: Add of the mask, Mul or Div by the scale, then the product.
  ir::Value* x = sm->input(0);
  ir::Node* prev = sm;
  if (ir::Node* add = sole_producer(x, "Add", *prev)) {
    const std::vector<ir::Dim>* out = dims_of(add->output(0), 4);
    if (out == nullptr || !same_dims(*out, *scores)) return std::nullopt;
    ir::Value* scores_in = nullptr;
    for (int side = 0; side < 2 && scores_in == nullptr; ++side) {
      ir::Value* a = add->input(side);
      ir::Value* b = add->input(1 - side);
      if (a == b || !mask_fits(b, *scores)) continue;
      ir::Node* p = a != nullptr ? a->producer() : nullptr;
      if (p != nullptr && (is_onnx(*p, "MatMul") || is_onnx(*p, "Mul") || is_onnx(*p, "Div"))) {
        scores_in = a;
        m.mask = b;
      }
    }
    if (scores_in == nullptr) return std::nullopt;
    m.nodes.push_back(add);
    x = scores_in;
    prev = add;
  }
  ir::Node* p = x != nullptr ? x->producer() : nullptr;
  if (p != nullptr && (is_onnx(*p, "Mul") || is_onnx(*p, "Div")) && only_reader(*x, *prev)) {
    const bool div = is_onnx(*p, "Div");
    int side = -1;
    std::optional<float> c;
    for (int k = div ? 1 : 0; k < 2 && side < 0; ++k)
      if ((c = scalar_constant(p->input(k)))) side = k;
    if (side < 0) return std::nullopt;
    const std::vector<ir::Dim>* out = dims_of(p->output(0), 4);
    if (out == nullptr || !same_dims(*out, *scores)) return std::nullopt;  // the scalar broadcasts nothing
    m.scale = div ? 1.0f / *c : *c;
    m.nodes.push_back(p);
    x = p->input(1 - side);
    prev = p;
  }
  ir::Node* mm1 = sole_producer(x, "MatMul", *prev);
  if (mm1 == nullptr) return std::nullopt;
  ir::Node* t = sole_producer(mm1->input(1), "Transpose", *mm1);
  if (t == nullptr || t->attr_ints("perm") != std::vector<int64_t>{0, 1, 3, 2}) return std::nullopt;
  std::optional<Heads> k = match_heads(t->input(0), *t);
  if (!k) return std::nullopt;
  m.nodes.push_back(mm1);
  m.nodes.push_back(t);
  m.q = mm1->input(0);
  m.k = k->value;
  m.v = v->value;

  // Shapes: Q [B, H, S, D], K [B, Hkv, T, D], V [B, Hkv, T, Dv], scores [B, H, S, T].
  const std::vector<ir::Dim>* q = dims_of(m.q, 4);
  const std::vector<ir::Dim>* kd = dims_of(m.k, 4);
  const std::vector<ir::Dim>* vd = dims_of(m.v, 4);
  if (q == nullptr || kd == nullptr || vd == nullptr) return std::nullopt;
  for (const ir::Value* in : {m.q, m.k, m.v})
    if (in->type().dtype() != ir::DType::kFloat32) return std::nullopt;
  if (!((*q)[0] == (*kd)[0] && (*q)[0] == (*vd)[0] && (*kd)[1] == (*vd)[1] && (*kd)[2] == (*vd)[2] &&
        (*q)[3] == (*kd)[3]))
    return std::nullopt;
  if (k->group != v->group) return std::nullopt;
  if (k->group == 1) {
    if (!((*q)[1] == (*kd)[1])) return std::nullopt;
  } else if (!(*q)[1].is_known() || !(*kd)[1].is_known() || (*q)[1].value() != (*kd)[1].value() * k->group) {
    return std::nullopt;
  }
  if (!same_dims(*scores, {(*q)[0], (*q)[1], (*q)[2], (*kd)[2]})) return std::nullopt;
  for (const std::vector<ir::Node*>* extra : {&k->nodes, &v->nodes})
    m.nodes.insert(m.nodes.end(), extra->begin(), extra->end());
  return m;
}

}  // namespace

int fuse_attention(ir::Model& model) {
  ir::Graph& g = model.graph();
  const int64_t opset = model.opset("");
  int fused = 0;
  const std::vector<ir::Node*> order = g.topological_order();
  std::unordered_map<const ir::Node*, size_t> position;
  for (size_t i = 0; i < order.size(); ++i) position[order[i]] = i;
  for (ir::Node* mm2 : order) {
    std::optional<Match> m = match(*mm2, opset);
    if (!m) continue;
    std::sort(m->nodes.begin(), m->nodes.end(),
              [&](const ir::Node* a, const ir::Node* b) { return position.at(a) < position.at(b); });
    std::vector<ir::Value*> inputs = {m->q, m->k, m->v};
    if (m->mask != nullptr) inputs.push_back(m->mask);
    import_tether_opset(model);
    replace_chain(g, m->nodes, "Attention", "ai.tether", inputs,
                  {ir::Attribute::f("scale", m->scale), ir::Attribute::i("nan_when_fully_masked", 1)});
    ++fused;
  }
  return fused;
}

}  // namespace tether::passes
