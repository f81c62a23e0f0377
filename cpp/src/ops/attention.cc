// Shape inference for the ONNX attention ops: Attention and RotaryEmbedding (opset 23).
#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/infer_context.h"

namespace tether::ops {

namespace {

// Attention (opset 23). Q, K, V are 4-D (batch, heads, seq, head_size) or 3-D (batch, seq,
// heads * head_size) with q_num_heads / kv_num_heads. Outputs: Y, present_key,
// present_value (past_seq + kv_seq on the sequence axis), qk_matmul_output.
// RotaryEmbedding (opset 23): X [batch, heads, seq, head] or [batch, seq, hidden] with
// num_heads; cos_cache and sin_cache of one shape, [positions, rot / 2] with position_ids or
// [batch, seq, rot / 2] without; rot (rotary_embedding_dim, else the head size) even and at
// most the head size.
void rotary(InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  const int64_t heads = ctx.attr_int("num_heads", 0);
  const int64_t rot_attr = ctx.attr_int("rotary_embedding_dim", 0);
  if (rot_attr < 0) ctx.fail("rotary_embedding_dim is " + std::to_string(rot_attr) + "; it must be >= 0");
  Dim head;
  if (x.has_rank()) {
    if (x.rank() != 3 && x.rank() != 4) ctx.fail("input must be 3-D or 4-D, got " + x.to_string());
    if (x.rank() == 3) {
      if (heads <= 0) ctx.fail("a 3-D input needs a positive num_heads attribute, got " + std::to_string(heads));
      if (x[2].is_known() && x[2].value() % heads != 0)
        ctx.fail("hidden size " + x[2].to_string() + " is not a multiple of num_heads " + std::to_string(heads));
      if (x[2].is_known()) head = Dim(x[2].value() / heads);
    } else {
      head = x[3];
    }
  }
  const Dim rot = rot_attr > 0 ? Dim(rot_attr) : head;
  if (rot.is_known() && rot.value() % 2 != 0) ctx.fail("the rotated size " + rot.to_string() + " must be even");
  if (rot_attr > 0 && head.is_known() && rot_attr > head.value())
    ctx.fail("rotary_embedding_dim " + std::to_string(rot_attr) + " exceeds the head size " + head.to_string());
  const Shape& cos = ctx.input_shape(1);
  const Shape& sin = ctx.input_shape(2);
  const bool by_position = ctx.num_inputs() > 3 && ctx.has_input(3);
  const size_t cache_rank = by_position ? 2 : 3;
  for (const Shape* c : {&cos, &sin}) {
    if (!c->has_rank()) continue;
    const char* name = c == &cos ? "cos_cache" : "sin_cache";
    if (c->rank() != cache_rank)
      ctx.fail(std::string(name) + " must be " + std::to_string(cache_rank) + "-D " +
               (by_position ? "[positions, rot / 2] with position_ids" : "[batch, sequence, rot / 2] without position_ids") +
               ", got " + c->to_string());
    const Dim& last = (*c)[cache_rank - 1];
    if (last.is_known() && rot.is_known() && last.value() != rot.value() / 2)
      ctx.fail(std::string(name) + " " + c->to_string() + " must end in rot / 2 = " + std::to_string(rot.value() / 2));
  }
  if (cos.has_rank() && sin.has_rank()) {
    bool same = cos.rank() == sin.rank();
    for (size_t k = 0; same && k < cos.rank(); ++k)
      same = !(cos[k].is_known() && sin[k].is_known() && cos[k].value() != sin[k].value());
    if (!same) ctx.fail("cos_cache " + cos.to_string() + " and sin_cache " + sin.to_string() + " must have one shape");
  }
  ctx.set_output(0, ctx.input_type(0));
}

void attention(InferContext& ctx) {
  const Shape& q = ctx.input_shape(0);
  const Shape& k = ctx.input_shape(1);
  const Shape& v = ctx.input_shape(2);
  const DType dt = ctx.input_dtype(0);
  if (!q.has_rank() || !k.has_rank() || !v.has_rank()) {
    ctx.set_output(0, dt, q.has_rank() ? Shape(std::vector<Dim>(q.rank())) : Shape());
    return;
  }
  for (const Shape* s : {&q, &k, &v})
    if (s->rank() != 3 && s->rank() != 4) ctx.fail("Q, K and V must be 3-D or 4-D, got " + s->to_string());
  const int64_t q_heads = ctx.attr_int("q_num_heads", 0), kv_heads = ctx.attr_int("kv_num_heads", 0);
  if ((q.rank() == 3 && q_heads <= 0) || (k.rank() == 3 && kv_heads <= 0))
    ctx.fail("3-D inputs need positive q_num_heads and kv_num_heads attributes, got " + std::to_string(q_heads) +
             " and " + std::to_string(kv_heads));
  const Dim qh = q.rank() == 4 ? q[1] : Dim(q_heads);
  const Dim kvh = k.rank() == 4 ? k[1] : Dim(kv_heads);
  auto per_head = [&](const Shape& s, const Dim& heads, const char* what) -> Dim {
    if (s.rank() == 4) return s[3];
    auto d = s[2].divide(heads);
    if (s[2].is_known() && heads.is_known() && !d)
      ctx.fail(std::string(what) + " hidden size " + s[2].to_string() + " is not a multiple of " + heads.to_string() +
               " heads");
    return d ? *d : Dim();
  };
  const Dim batch = q[0];
  const Dim q_seq = q.rank() == 4 ? q[2] : q[1];
  const Dim kv_seq = k.rank() == 4 ? k[2] : k[1];
  const Dim q_head = per_head(q, qh, "Q");
  const Dim head = per_head(k, kvh, "K");
  const Dim v_head = per_head(v, kvh, "V");
  if (q_head.is_known() && head.is_known() && q_head.value() != head.value())
    ctx.fail("Q and K head sizes differ: " + q_head.to_string() + " vs " + head.to_string());
  ctx.set_output(0, dt, q.rank() == 4 ? Shape({batch, qh, q_seq, v_head}) : Shape({batch, q_seq, qh * v_head}));
  Dim total = kv_seq;
  if (ctx.has_input(4)) {
    const Dim past = dim_at(ctx.input_shape(4), 2);
    total = past.is_known() && kv_seq.is_known() ? Dim(past.value() + kv_seq.value()) : Dim();
  }
  ctx.set_output(1, dt, Shape({batch, kvh, total, head}));
  ctx.set_output(2, dt, Shape({batch, kvh, total, v_head}));
  ctx.set_output(3, dt, Shape({batch, qh, q_seq, total}));
}

}  // namespace

void register_attention(Registry& r) {
  r.add("Attention", attention);
  // passes/attention.cc's fused node: ONNX's Attention (4-D inputs) at any opset, with
  // nan_when_fully_masked.
  r.add("Attention", attention, "ai.tether");
  r.add("RotaryEmbedding", rotary);
}

}  // namespace tether::ops
