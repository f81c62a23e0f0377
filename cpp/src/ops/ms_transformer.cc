// Shape and type inference for the transformer ops onnxruntime's tools write (its model
// builder and transformer optimizer): com.microsoft SkipLayerNormalization,
// SkipSimplifiedLayerNormalization, RotaryEmbedding and GroupQueryAttention, and
// SimplifiedLayerNormalization, which onnxruntime registers in the default domain.
//
// The sizes a kernel indexes by (hidden sizes, heads, head sizes, cache widths) are checked
// here against each other as far as they are known, so that a malformed node fails with its
// name and the input at fault before anything runs.
#include "ops/infer_context.h"

namespace tether::ops {

namespace {

std::string input_text(size_t i, const char* name) { return std::string(name) + " (input " + std::to_string(i) + ")"; }

void require_rank(const InferContext& ctx, size_t i, const char* name, std::initializer_list<size_t> ranks) {
  const Shape& s = ctx.input_shape(i);
  if (!s.has_rank()) return;
  for (size_t r : ranks)
    if (s.rank() == r) return;
  std::string want;
  for (size_t r : ranks) want += (want.empty() ? "" : " or ") + std::to_string(r) + "-D";
  ctx.fail(input_text(i, name) + " must be " + want + ", got " + s.to_string());
}

// Fails unless known dims a and b agree.
void require_equal(const InferContext& ctx, const Dim& a, const Dim& b, const std::string& what) {
  if (a.is_known() && b.is_known() && a.value() != b.value())
    ctx.fail(what + ": " + a.to_string() + " vs " + b.to_string());
}

void require_dtype(const InferContext& ctx, size_t i, const char* name, std::initializer_list<DType> allowed) {
  const DType t = ctx.input_dtype(i);
  if (t == DType::kUndefined) return;
  for (DType a : allowed)
    if (a == t) return;
  std::string names;
  for (DType a : allowed) names += (names.empty() ? "" : " or ") + std::string(ir::dtype_name(a));
  ctx.fail(input_text(i, name) + " is " + std::string(ir::dtype_name(t)) + "; it must be " + names);
}

// ---- the normalisations ------------------------------------------------------------------------

// input [B, S, hidden] or [tokens, hidden]; skip of the input's shape, [1, S, hidden] or
// [S, hidden]; gamma, beta and bias [hidden]. RMSNorm (`rms`) has no beta.
void skip_norm(InferContext& ctx, bool rms) {
  const size_t max_inputs = rms ? 4 : 5;
  if (ctx.num_inputs() < 3 || ctx.num_inputs() > max_inputs)
    ctx.fail("takes 3 to " + std::to_string(max_inputs) + " inputs (input, skip, gamma" +
             (rms ? ", bias" : ", beta, bias") + "), got " + std::to_string(ctx.num_inputs()));
  check_same_dtype(ctx);
  require_dtype(ctx, 0, "input", {DType::kFloat32, DType::kFloat16, DType::kBFloat16});
  require_rank(ctx, 0, "input", {2, 3});
  require_rank(ctx, 1, "skip", {2, 3});
  const Shape& x = ctx.input_shape(0);
  const Shape& skip = ctx.input_shape(1);
  const Dim hidden = x.has_rank() ? x[x.rank() - 1] : Dim();
  if (x.has_rank() && skip.has_rank()) {
    bool fits = skip[skip.rank() - 1].is_known() && hidden.is_known() ? skip[skip.rank() - 1].value() == hidden.value() : true;
    // The input's shape, or its trailing [sequence, hidden] (with or without a leading 1).
    const size_t lead = x.rank() - (skip.rank() == 3 ? 3 : 2);
    if (skip.rank() > x.rank()) fits = false;
    for (size_t d = 0; fits && d + 1 < skip.rank(); ++d) {
      const Dim& s = skip[d];
      const Dim& want = x[lead + d];
      const bool may_be_one = skip.rank() == 3 && d == 0;
      if (s.is_known() && want.is_known() && s.value() != want.value() && !(may_be_one && s.value() == 1)) fits = false;
    }
    if (!fits)
      ctx.fail("skip (input 1) " + skip.to_string() + " must be the input's shape " + x.to_string() + ", [1, " +
               "sequence, hidden] or [sequence, hidden]");
  }
  const char* const names[] = {"input", "skip", "gamma", rms ? "bias" : "beta", "bias"};
  for (size_t i = 2; i < ctx.num_inputs(); ++i) {
    if (!ctx.has_input(i)) continue;
    require_rank(ctx, i, names[i], {1});
    const Shape& p = ctx.input_shape(i);
    if (p.has_rank()) require_equal(ctx, p[0], hidden, input_text(i, names[i]) + " must have the hidden size");
  }
  ctx.set_output(0, ctx.input_type(0));
  Shape stats;
  if (x.has_rank()) {
    std::vector<Dim> d = x.dims();
    d.back() = Dim(1);
    stats = Shape(d);
  }
  ctx.set_output(1, DType::kFloat32, stats);
  ctx.set_output(2, DType::kFloat32, stats);
  ctx.set_output(3, ctx.input_type(0));
}

void skip_layer_norm(InferContext& ctx) { skip_norm(ctx, false); }
void skip_simplified_layer_norm(InferContext& ctx) { skip_norm(ctx, true); }

// X normalised over the dims from `axis` by its root mean square, times scale (which
// broadcasts to those dims); outputs Y and inv_std_var (X's shape with the normalised dims 1).
void simplified_layer_norm(InferContext& ctx) {
  if (ctx.num_inputs() != 2) ctx.fail("takes 2 inputs (X, scale), got " + std::to_string(ctx.num_inputs()));
  const DType stash = ctx.attr_dtype("stash_type", DType::kFloat32);
  if (stash != DType::kFloat32) ctx.fail("stash_type is " + std::string(dtype_name(stash)) + "; only float (1) is supported");
  ctx.set_output(0, ctx.input_type(0));
  const Shape& x = ctx.input_shape(0);
  if (!x.has_rank()) {
    ctx.set_output(1, stash, Shape());
    return;
  }
  if (x.rank() == 0) ctx.fail("X (input 0) must have rank >= 1, got a scalar");
  const size_t axis = ctx.axis(ctx.attr_int("axis", -1), x.rank());
  const Shape normalised(std::vector<Dim>(x.dims().begin() + static_cast<std::ptrdiff_t>(axis), x.dims().end()));
  check_unidirectional(ctx, ctx.input_shape(1), normalised, "scale (normalising from axis " + std::to_string(axis) + ")");
  std::vector<Dim> reduced(x.dims().begin(), x.dims().begin() + static_cast<std::ptrdiff_t>(axis));
  reduced.resize(x.rank(), Dim(1));
  ctx.set_output(1, stash, Shape(reduced));
}

// ---- RotaryEmbedding (com.microsoft) -------------------------------------------------------------

// input [B, S, hidden] or [B, N, S, H]; position_ids int64 [1] (an offset) or [B, S]; cos_cache
// and sin_cache [positions, rot / 2]. rot is rotary_embedding_dim (which needs num_heads) or
// twice the caches' width; the head size is hidden / num_heads, or rot without num_heads.
void ms_rotary(InferContext& ctx) {
  if (ctx.num_inputs() != 4)
    ctx.fail("takes 4 inputs (input, position_ids, cos_cache, sin_cache), got " + std::to_string(ctx.num_inputs()));
  require_rank(ctx, 0, "input", {3, 4});
  require_rank(ctx, 1, "position_ids", {1, 2});
  require_rank(ctx, 2, "cos_cache", {2});
  require_rank(ctx, 3, "sin_cache", {2});
  require_dtype(ctx, 1, "position_ids", {DType::kInt64});
  check_same_dtype(ctx, {0, 2, 3});
  const int64_t heads = ctx.attr_int("num_heads", 0), rot_attr = ctx.attr_int("rotary_embedding_dim", 0);
  if (heads < 0 || rot_attr < 0)
    ctx.fail("num_heads (" + std::to_string(heads) + ") and rotary_embedding_dim (" + std::to_string(rot_attr) +
             ") must not be negative");
  if (rot_attr > 0 && heads == 0) ctx.fail("rotary_embedding_dim needs the num_heads attribute");
  const Shape& x = ctx.input_shape(0);
  const Shape& cos = ctx.input_shape(2);
  const Shape& sin = ctx.input_shape(3);
  if (cos.has_rank() && sin.has_rank())
    for (size_t d = 0; d < 2; ++d)
      require_equal(ctx, cos[d], sin[d], "cos_cache " + cos.to_string() + " and sin_cache " + sin.to_string() + " differ");
  const Dim half = dim_at(cos, 1);
  const Dim rot = rot_attr > 0 ? Dim(rot_attr) : half.is_known() ? Dim(2 * half.value()) : Dim();
  if (rot_attr > 0 && half.is_known() && 2 * half.value() != rot_attr)
    ctx.fail("cos_cache " + cos.to_string() + " must be rotary_embedding_dim / 2 = " + std::to_string(rot_attr / 2) +
             " wide");
  Dim head;
  if (x.has_rank() && x.rank() == 4) {
    head = x[3];
  } else if (x.has_rank()) {
    const Dim& hidden = x[2];
    const Dim per = heads > 0 ? Dim(heads) : rot;
    if (hidden.is_known() && per.is_known()) {
      if (per.value() == 0 || hidden.value() % per.value() != 0)
        ctx.fail("hidden size " + hidden.to_string() + " is not a multiple of " +
                 (heads > 0 ? "num_heads " + std::to_string(heads) : "the rotary size " + per.to_string()));
      head = heads > 0 ? Dim(hidden.value() / heads) : rot;
    }
  }
  if (head.is_known() && rot.is_known() && rot.value() > head.value())
    ctx.fail("the rotary size " + rot.to_string() + " exceeds the head size " + head.to_string());
  const Shape& pos = ctx.input_shape(1);
  if (pos.has_rank() && pos.rank() == 1) require_equal(ctx, pos[0], Dim(1), "position_ids of rank 1 must hold one offset");
  if (pos.has_rank() && pos.rank() == 2 && x.has_rank()) {
    require_equal(ctx, pos[0], x[0], "position_ids " + pos.to_string() + " must be [batch, sequence]; batch");
    require_equal(ctx, pos[1], x.rank() == 3 ? x[1] : x[2], "position_ids " + pos.to_string() + " must be [batch, sequence]; sequence");
  }
  ctx.set_output(0, ctx.input_type(0));
}

// ---- GroupQueryAttention -------------------------------------------------------------------------

// query [B, S, N * H] (or packed [B, S, (N + 2 NKV) * H] without key and value); key and value
// [B, S, NKV * H]; past_key and past_value [B, NKV, P, H]; seqlens_k int32 [B];
// total_sequence_length int32 (one value); cos_cache and sin_cache [positions, rot / 2] with
// do_rotary. Outputs: [B, S, N * H] and present [B, NKV, max(P, total), H].
void group_query_attention(InferContext& ctx) {
  if (ctx.num_inputs() < 7)
    ctx.fail("takes at least 7 inputs (query, key, value, past_key, past_value, seqlens_k, total_sequence_length), got " +
             std::to_string(ctx.num_inputs()));
  const int64_t n = ctx.attr_int("num_heads", 0), nkv = ctx.attr_int("kv_num_heads", 0);
  if (n <= 0 || nkv <= 0)
    ctx.fail("num_heads (" + std::to_string(n) + ") and kv_num_heads (" + std::to_string(nkv) + ") must be positive");
  if (n % nkv != 0)
    ctx.fail("num_heads " + std::to_string(n) + " is not a multiple of kv_num_heads " + std::to_string(nkv));
  if (const int64_t w = ctx.attr_int("local_window_size", -1); w == 0 || w < -1)
    ctx.fail("local_window_size is " + std::to_string(w) + "; it must be -1 (none) or positive");
  if (const float cap = ctx.attr_float("softcap", 0.0f); !(cap >= 0.0f))
    ctx.fail("softcap is " + float_text(cap) + "; it must be >= 0");
  const bool packed = !ctx.has_input(1);
  if (packed != !ctx.has_input(2)) ctx.fail("key (input 1) and value (input 2) must be given together (or neither: packed QKV)");
  const bool has_past = ctx.num_inputs() > 3 && ctx.has_input(3);
  if (has_past != (ctx.num_inputs() > 4 && ctx.has_input(4)))
    ctx.fail("past_key (input 3) and past_value (input 4) must be given together");
  for (size_t i : {0, 1, 2}) require_rank(ctx, i, i == 0 ? "query" : i == 1 ? "key" : "value", {3});
  if (has_past) {
    require_rank(ctx, 3, "past_key", {4});
    require_rank(ctx, 4, "past_value", {4});
  }
  require_rank(ctx, 5, "seqlens_k", {1});
  require_dtype(ctx, 5, "seqlens_k", {DType::kInt32});
  require_dtype(ctx, 6, "total_sequence_length", {DType::kInt32});
  ctx.require_one_value(6, "total_sequence_length (input 6)");
  check_same_dtype(ctx, {0, 1, 2, 3, 4});
  const Shape& q = ctx.input_shape(0);
  const DType dt = ctx.input_dtype(0);
  const Dim batch = dim_at(q, 0), seq = dim_at(q, 1);
  // The head size, from the query's width.
  Dim head;
  if (const Dim& width = dim_at(q, 2); width.is_known()) {
    const int64_t parts = packed ? n + 2 * nkv : n;
    if (width.value() % parts != 0)
      ctx.fail("query (input 0) " + q.to_string() + ": its last dim is not a multiple of " +
               (packed ? "num_heads + 2 * kv_num_heads = " : "num_heads = ") + std::to_string(parts));
    head = Dim(width.value() / parts);
  }
  if (!packed)
    for (size_t i : {1, 2}) {
      const Shape& s = ctx.input_shape(i);
      if (!s.has_rank()) continue;
      const std::string what = input_text(i, i == 1 ? "key" : "value") + " " + s.to_string();
      require_equal(ctx, s[0], batch, what + " and query " + q.to_string() + " differ in batch");
      require_equal(ctx, s[1], seq, what + " and query " + q.to_string() + " differ in sequence length");
      if (head.is_known()) require_equal(ctx, s[2], Dim(nkv * head.value()), what + ": kv_num_heads * head size");
    }
  const Shape& pk = has_past ? ctx.input_shape(3) : Shape();
  if (has_past)
    for (size_t i : {3, 4}) {
      const Shape& s = ctx.input_shape(i);
      if (!s.has_rank()) continue;
      const std::string what = input_text(i, i == 3 ? "past_key" : "past_value") + " " + s.to_string() +
                               " must be [batch, kv_num_heads, past, head size]";
      require_equal(ctx, s[0], batch, what + "; batch");
      require_equal(ctx, s[1], Dim(nkv), what + "; kv_num_heads");
      require_equal(ctx, s[3], head, what + "; head size");
      if (pk.has_rank()) require_equal(ctx, s[2], pk[2], what + "; past lengths of past_key and past_value");
    }
  if (const Shape& sl = ctx.input_shape(5); sl.has_rank())
    require_equal(ctx, sl[0], batch, "seqlens_k (input 5) " + sl.to_string() + " must have one entry per batch entry");
  const bool rotary = ctx.attr_int("do_rotary", 0) != 0;
  const bool has_cos = ctx.num_inputs() > 7 && ctx.has_input(7), has_sin = ctx.num_inputs() > 8 && ctx.has_input(8);
  if (rotary && !(has_cos && has_sin)) ctx.fail("do_rotary = 1 needs cos_cache (input 7) and sin_cache (input 8)");
  if (has_cos && has_sin) {
    require_rank(ctx, 7, "cos_cache", {2});
    require_rank(ctx, 8, "sin_cache", {2});
    const Shape& cos = ctx.input_shape(7);
    const Shape& sin = ctx.input_shape(8);
    if (cos.has_rank() && sin.has_rank())
      for (size_t d = 0; d < 2; ++d)
        require_equal(ctx, cos[d], sin[d], "cos_cache " + cos.to_string() + " and sin_cache " + sin.to_string() + " differ");
    if (cos.has_rank() && cos[1].is_known() && head.is_known() && 2 * cos[1].value() > head.value())
      ctx.fail("cos_cache " + cos.to_string() + " rotates " + std::to_string(2 * cos[1].value()) +
               " values, more than the head size " + head.to_string());
  }
  ctx.set_output(0, dt, Shape({batch, seq, head.is_known() ? Dim(n * head.value()) : Dim()}));
  // present: max(past, total), known when total_sequence_length is.
  Dim present;
  const auto total = ctx.input_ints(6);
  const Dim past = has_past ? dim_at(pk, 2) : Dim(0);
  if (total && total->size() == 1 && past.is_known()) present = Dim(std::max(past.value(), (*total)[0]));
  ctx.set_output(1, dt, Shape({batch, Dim(nkv), present, head}));
  ctx.set_output(2, dt, Shape({batch, Dim(nkv), present, head}));
}

}  // namespace

void register_ms_transformer(Registry& r) {
  r.add("SkipLayerNormalization", skip_layer_norm, "com.microsoft");
  r.add("SkipSimplifiedLayerNormalization", skip_simplified_layer_norm, "com.microsoft");
  r.add("RotaryEmbedding", ms_rotary, "com.microsoft");
  r.add("GroupQueryAttention", group_query_attention, "com.microsoft");
  r.add("SimplifiedLayerNormalization", simplified_layer_norm);
}

}  // namespace tether::ops
