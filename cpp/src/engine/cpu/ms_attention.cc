// com.microsoft RotaryEmbedding and GroupQueryAttention, float32, on the cores of attention.cc.
//
// GroupQueryAttention joins each batch entry's past (the first past_b rows of past_key /
// past_value, BNSH) with its new keys and values (rotated first when do_rotary) into
// present_key / present_value, then runs causal attention per (batch, query head, block of
// query rows) against its key/value head: one GEMM for the scores of the block over the keys
// its rows may see, a scaled, soft-capped softmax per row over that row's own range (causal,
// local window, the entry's length), and one GEMM with V straight into the output. A step of
// one token runs per (batch, key/value head) instead, its group of query heads the block's
// rows, so each key/value head is read once per step rather than once per query head.
//
// Lengths follow onnxruntime: entry b holds T_b = seqlens_k[b] + 1 keys after the step. A
// first prompt (sequence_length == total_sequence_length) has no past, and its rows past T_b
// (right padding) see all T_b keys; otherwise past_b = T_b - sequence_length. The present
// length is max(past length, total_sequence_length); rows past an entry's keys are zero.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>

#include "engine/cpu/attention.h"
#include "engine/cpu/cpu.h"

namespace tether::engine::cpu {

namespace {

std::string dims_text(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

// ---- RotaryEmbedding (com.microsoft) ------------------------------------------------------------

// Inputs: input ([B, S, hidden] or [B, N, S, H]), position_ids ([1]: an offset for every entry,
// or [B, S]), cos_cache and sin_cache [positions, rot / 2]. The `scale` attribute is read by
// no onnxruntime CPU kernel and is ignored here too.
class MsRotaryKernel final : public HostKernel {
 public:
  explicit MsRotaryKernel(const KernelInit& init)
      : interleaved_(init.node.attr_int("interleaved", 0) != 0),
        rotary_dim_(init.node.attr_int("rotary_embedding_dim", 0)),
        heads_(init.node.attr_int("num_heads", 0)),
        name_(init.node.describe()) {}

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    const View& x = in[0];
    const View& cos = in[2];
    const View& sin = in[3];
    const bool rank3 = x.rank() == 3;
    TETHER_CHECK((rank3 || x.rank() == 4) && cos.rank() == 2 && cos.dims == sin.dims,
                 "RotaryEmbedding: shapes were not validated");
    const int64_t half = cos.dims[1], rows = cos.dims[0];
    const int64_t rot = rotary_dim_ > 0 ? rotary_dim_ : 2 * half;
    const int64_t batch = x.dims[0], seq = rank3 ? x.dims[1] : x.dims[2];
    const int64_t size = rank3 ? (heads_ > 0 ? x.dims[2] / heads_ : rot) : x.dims[3];
    const int64_t heads = rank3 ? (size > 0 ? x.dims[2] / size : 0) : x.dims[1];
    TETHER_CHECK(rot == 2 * half && rot <= size, "RotaryEmbedding: rotary size was not validated");
    const std::vector<int64_t> pos = int_values(in[1]);
    const bool offset = pos.size() == 1 && in[1].rank() == 1;
    if (!offset && static_cast<int64_t>(pos.size()) != batch * seq)
      throw ArgumentError(name_ + ": position_ids " + dims_text(in[1].dims) + " must be [1] or [batch, sequence] = [" +
                          std::to_string(batch) + ", " + std::to_string(seq) + "]");
    auto position = [&](int64_t b, int64_t s) { return offset ? pos[0] + s : pos[static_cast<size_t>(b * seq + s)]; };
    for (int64_t b = 0; b < (offset ? 1 : batch); ++b)
      for (int64_t s = 0; s < seq; ++s)
        if (const int64_t p = position(b, s); p < 0 || p >= rows)
          throw ArgumentError(name_ + ": position " + std::to_string(p) + " (batch " + std::to_string(b) + ", token " +
                              std::to_string(s) + ") is outside cos_cache's " + std::to_string(rows) + " positions");
    const float* xp = x.as<float>();
    float* yp = out[0].as<float>();
    parallel(ctx, batch * seq, 8, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t b = t / seq, s = t % seq, p = position(b, s);
        for (int64_t h = 0; h < heads; ++h) {
          const int64_t at = rank3 ? (t * heads + h) * size : ((b * heads + h) * seq + s) * size;
          rotate_head(xp + at, yp + at, cos.as<float>() + p * half, sin.as<float>() + p * half, rot, size, interleaved_);
        }
      }
    });
  }

 private:
  bool interleaved_;
  int64_t rotary_dim_, heads_;
  std::string name_;
};

std::string ms_rotary_check(const KernelInit& init) {
  for (size_t i : {0, 2, 3})
    if (std::string why = require_dtype(init, i, {DType::kFloat32}); !why.empty()) return why;
  if (init.node.attr_int("is_packed_batching", 0) != 0)
    return "is_packed_batching = 1 (ragged batches packed into one row) is not supported";
  return require_dtype(init, 1, {DType::kInt64});
}

// ---- GroupQueryAttention ------------------------------------------------------------------------

enum GqaInput : size_t { kQuery, kKey, kValue, kPastKey, kPastValue, kSeqlens, kTotal, kCos, kSin };

struct GqaGeometry {
  int64_t batch = 0, seq = 0, heads = 0, kv_heads = 0, size = 0;
  int64_t past_len = 0;  // past_key's sequence dim (0 without a past)
  int64_t total = 0, present = 0;
  int64_t q_stride = 0;  // floats between tokens of query (packed QKV holds K and V after Q)
  bool packed = false;
  std::vector<int64_t> past, keys;  // per entry: past_b and T_b
};

class GqaCore {
 public:
  explicit GqaCore(const KernelInit& init)
      : heads_(init.node.attr_int("num_heads", 0)),
        kv_heads_(init.node.attr_int("kv_num_heads", 0)),
        has_scale_(init.node.attr("scale") != nullptr && init.node.attr_float("scale", 0.0f) != 0.0f),
        scale_(init.node.attr_float("scale", 0.0f)),
        softcap_(init.node.attr_float("softcap", 0.0f)),
        window_(init.node.attr_int("local_window_size", -1)),
        rotary_(init.node.attr_int("do_rotary", 0) != 0),
        interleaved_(init.node.attr_int("rotary_interleaved", 0) != 0),
        threads_(init.threads),
        name_(init.node.describe()) {}

  // The sizes from the input shapes (and values, when `values`): every check a run needs.
  GqaGeometry geometry(const std::vector<View>& in, bool values) const {
    GqaGeometry g;
    const View& q = in[kQuery];
    TETHER_CHECK(q.rank() == 3 && heads_ > 0 && kv_heads_ > 0, "GroupQueryAttention: shapes were not validated");
    g.batch = q.dims[0];
    g.seq = q.dims[1];
    g.heads = heads_;
    g.kv_heads = kv_heads_;
    g.packed = in.size() <= kKey || in[kKey].rank() != 3;
    g.size = q.dims[2] / (g.packed ? heads_ + 2 * kv_heads_ : heads_);
    g.q_stride = q.dims[2];
    g.past_len = in.size() > kPastKey && in[kPastKey].rank() == 4 ? in[kPastKey].dims[2] : 0;
    if (!values) return g;
    g.total = scalar_int(in[kTotal]);
    g.present = std::max(g.past_len, g.total);
    const std::vector<int64_t> lens = int_values(in[kSeqlens]);
    if (static_cast<int64_t>(lens.size()) != g.batch)
      throw ArgumentError(name_ + ": seqlens_k has " + std::to_string(lens.size()) + " entries for a batch of " +
                          std::to_string(g.batch));
    if (g.total < 1) throw ArgumentError(name_ + ": total_sequence_length is " + std::to_string(g.total) + "; it must be >= 1");
    const bool first_prompt = g.seq == g.total;
    for (int64_t b = 0; b < g.batch; ++b) {
      const int64_t t = lens[static_cast<size_t>(b)] + 1;
      const std::string which = name_ + ": seqlens_k[" + std::to_string(b) + "] = " + std::to_string(t - 1);
      if (t < 1 || t > g.total)
        throw ArgumentError(which + " is outside [0, total_sequence_length - 1 = " + std::to_string(g.total - 1) + "]");
      const int64_t past = first_prompt ? 0 : t - g.seq;
      if (past < 0)
        throw ArgumentError(which + " counts fewer keys than the " + std::to_string(g.seq) + " new tokens (not a first " +
                            "prompt: sequence_length " + std::to_string(g.seq) + " != total_sequence_length " +
                            std::to_string(g.total) + ")");
      if (past > g.past_len)
        throw ArgumentError(which + " needs " + std::to_string(past) + " past keys; past_key holds " +
                            std::to_string(g.past_len));
      g.past.push_back(past);
      g.keys.push_back(t);
    }
    if (rotary_) {
      const int64_t need = first_prompt ? g.seq : *std::max_element(g.keys.begin(), g.keys.end());
      if (in[kCos].dims[0] < need)
        throw ArgumentError(name_ + ": cos_cache has " + std::to_string(in[kCos].dims[0]) + " positions; the tokens " +
                            "reach position " + std::to_string(need - 1));
    }
    return g;
  }

  int64_t scratch_floats(const GqaGeometry& g) const {
    const int64_t q_copy = rotary_ ? g.batch * g.heads * g.seq * g.size : 0;
    return q_copy + threads_ * slot_floats(g) + 16;
  }

  // y: [B, S, N * H]; pk, pv: [B, NKV, present, H]; scratch: scratch_floats(g).
  void run(const RunContext& ctx, const std::vector<View>& in, const GqaGeometry& g, float* y, float* pk, float* pv,
           float* scratch) const {
    fill_present(ctx, in, g, pk, pv);
    const float* qp = in[kQuery].as<float>();
    int64_t q_stride = g.q_stride;
    float* q_copy = scratch;
    if (rotary_) {  // Q rotated into [B, N, S, H]
      rotate_queries(ctx, in, g, q_copy);
      qp = q_copy;
      q_stride = g.size;
    }
    float* per_thread = scratch + (rotary_ ? g.batch * g.heads * g.seq * g.size : 0);
    const int64_t block = row_block(g), blocks = (g.seq + block - 1) / block;
    const int64_t group = g.heads / g.kv_heads, slot = slot_floats(g);
    const bool grouped = by_group(g);
    const float scale = has_scale_ ? scale_ : 1.0f / std::sqrt(static_cast<float>(g.size));
    auto work = [&](int thread, int64_t i0, int64_t i1) {
      float* scores = per_thread + thread * slot;
      float* gemm_scratch = scores + std::max(block, grouped ? group : int64_t{0}) * g.present;
      for (int64_t item = i0; item < i1; ++item) {
        AttentionBlock a;
        a.d = a.dv = g.size;
        int64_t b = 0, kh = 0, r0 = 0;
        if (grouped) {
          // One token: the group's query heads are `group` consecutive rows of Q and Y (head
          // size apart), scored together against their key/value head, which is then read
          // once for all of them.
          b = item / g.kv_heads;
          kh = item % g.kv_heads;
          const int64_t h = kh * group;
          a.q = rotary_ ? qp + (b * g.heads + h) * g.size : qp + b * q_stride + h * g.size;
          a.q_stride = g.size;
          a.y = y + (b * g.heads + h) * g.size;
          a.y_stride = g.size;
          a.rows = group;
        } else {
          const int64_t blk = item % blocks, bh = item / blocks, h = bh % g.heads;
          b = bh / g.heads;
          kh = h / group;
          r0 = blk * block;
          a.q = rotary_ ? qp + ((b * g.heads + h) * g.seq + r0) * g.size : qp + (b * g.seq + r0) * q_stride + h * g.size;
          a.q_stride = q_stride;
          a.y = y + (b * g.seq + r0) * g.heads * g.size + h * g.size;
          a.y_stride = g.heads * g.size;
          a.rows = std::min(block, g.seq - r0);
        }
        const int64_t rows = a.rows;
        const int64_t past = g.past[static_cast<size_t>(b)], keys = g.keys[static_cast<size_t>(b)];
        // The keys token s attends to (every row of a group block is token 0).
        auto range = [&](int64_t s, int64_t& lo, int64_t& hi) {
          hi = std::min(past + s + 1, keys);
          lo = std::min(hi, window_ > 0 ? std::max<int64_t>(0, past + s + 1 - window_) : int64_t{0});
        };
        auto token = [&](int64_t r) { return grouped ? int64_t{0} : r0 + r; };
        int64_t k0 = 0, k1 = 0, unused = 0;
        range(token(0), k0, unused);
        range(token(rows - 1), unused, k1);
        a.k = pk + (b * g.kv_heads + kh) * g.present * g.size;
        a.v = pv + (b * g.kv_heads + kh) * g.present * g.size;
        a.k_stride = a.v_stride = g.size;
        const int64_t ld = k1 - k0;
        if (ld <= 0) {  // no key to attend (padding rows of a windowed prompt): zero rows
          for (int64_t r = 0; r < rows; ++r) std::fill(a.y + r * a.y_stride, a.y + r * a.y_stride + g.size, 0.0f);
          continue;
        }
        attention_scores(a, k0, ld, scores, ld, gemm_scratch);
        for (int64_t r = 0; r < rows; ++r) {
          int64_t lo = 0, hi = 0;
          range(token(r), lo, hi);
          float* row = scores + r * ld;
          std::fill(row, row + (lo - k0), 0.0f);
          if (hi > lo) softmax_scaled(row + (lo - k0), hi - lo, scale, softcap_);
          std::fill(row + (hi - k0), row + ld, 0.0f);
        }
        attention_mix(a, scores, ld, k0, ld, gemm_scratch);
      }
    };
    const int64_t items = grouped ? g.batch * g.kv_heads : g.batch * g.heads * blocks;
    if (ctx.pool == nullptr || items == 1) {
      work(0, 0, items);
    } else {
      ctx.pool->parallel_for_indexed(items, 1, work);
    }
  }

 private:
  // Decoding one token with several query heads per key/value head: work items are whole
  // groups (see run) rather than single heads.
  static bool by_group(const GqaGeometry& g) { return g.seq == 1 && g.heads > g.kv_heads; }

  // Query rows per work item: whole heads when there are enough to go round, else heads split
  // so that every thread gets two items; at most what keeps a block of scores within 256 KB.
  int64_t row_block(const GqaGeometry& g) const {
    const int64_t heads = std::max<int64_t>(1, g.batch * g.heads);
    const int64_t splits = std::max<int64_t>(1, (2 * threads_ + heads - 1) / heads);
    const int64_t rows = (g.seq + splits - 1) / splits;
    const int64_t cap = std::max<int64_t>(16, 65536 / std::max<int64_t>(1, g.present));
    return std::max<int64_t>(1, std::min({rows, cap, g.seq}));
  }

  int64_t slot_floats(const GqaGeometry& g) const {
    const int64_t rows = std::max(row_block(g), by_group(g) ? g.heads / g.kv_heads : int64_t{0});
    return rows * g.present + attention_gemm_scratch_floats(rows, g.present, g.size, g.size) + 16;
  }

  // Token s of entry b of the new keys (kv = 0) or values (kv = 1), head kh.
  const float* new_row(const std::vector<View>& in, const GqaGeometry& g, int kv, int64_t b, int64_t s, int64_t kh) const {
    if (g.packed)
      return in[kQuery].as<float>() + (b * g.seq + s) * g.q_stride + (g.heads + kv * g.kv_heads + kh) * g.size;
    return in[kv == 0 ? kKey : kValue].as<float>() + ((b * g.seq + s) * g.kv_heads + kh) * g.size;
  }

  const float* angles(const std::vector<View>& in, size_t which, int64_t position) const {
    return in[which].as<float>() + position * in[which].dims[1];
  }

  // present = the entry's past rows, its new rows (keys rotated), then zeros.
  void fill_present(const RunContext& ctx, const std::vector<View>& in, const GqaGeometry& g, float* pk, float* pv) const {
    const int64_t h = g.size, rot = rotary_ ? 2 * in[kCos].dims[1] : 0;
    parallel(ctx, g.batch * g.kv_heads, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t b = i / g.kv_heads, kh = i % g.kv_heads, past = g.past[static_cast<size_t>(b)];
        for (int kv = 0; kv < 2; ++kv) {
          float* dst = (kv == 0 ? pk : pv) + i * g.present * h;
          if (past > 0)
            std::memcpy(dst, in[kv == 0 ? kPastKey : kPastValue].as<float>() + i * g.past_len * h,
                        static_cast<size_t>(past * h) * sizeof(float));
          for (int64_t s = 0; s < g.seq; ++s) {
            const float* src = new_row(in, g, kv, b, s, kh);
            float* row = dst + (past + s) * h;
            if (kv == 0 && rotary_)
              rotate_head(src, row, angles(in, kCos, past + s), angles(in, kSin, past + s), rot, h, interleaved_);
            else
              std::memcpy(row, src, static_cast<size_t>(h) * sizeof(float));
          }
          std::fill(dst + (past + g.seq) * h, dst + g.present * h, 0.0f);
        }
      }
    });
  }

  void rotate_queries(const RunContext& ctx, const std::vector<View>& in, const GqaGeometry& g, float* dst) const {
    const int64_t rot = 2 * in[kCos].dims[1];
    const float* q = in[kQuery].as<float>();
    parallel(ctx, g.batch * g.seq, 4, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t b = t / g.seq, s = t % g.seq, p = g.past[static_cast<size_t>(b)] + s;
        for (int64_t hd = 0; hd < g.heads; ++hd)
          rotate_head(q + t * g.q_stride + hd * g.size, dst + ((b * g.heads + hd) * g.seq + s) * g.size,
                      angles(in, kCos, p), angles(in, kSin, p), rot, g.size, interleaved_);
      }
    });
  }

  int64_t heads_, kv_heads_;
  bool has_scale_;
  float scale_, softcap_;
  int64_t window_;
  bool rotary_, interleaved_;
  int threads_;
  std::string name_;
};

// Present outputs whose sizes a plan knows (total_sequence_length known during inference).
class GqaKernel final : public HostKernel {
 public:
  explicit GqaKernel(const KernelInit& init) : core_(init) {}

  int64_t scratch_bytes(const std::vector<View>& in, const std::vector<View>& out) const override {
    GqaGeometry g = core_.geometry(in, false);
    g.present = out[1].dims[2];
    return core_.scratch_floats(g) * static_cast<int64_t>(sizeof(float));
  }

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    const GqaGeometry g = core_.geometry(in, true);
    TETHER_CHECK(out[1].dims[2] == g.present && out[2].dims[2] == g.present,
                 "GroupQueryAttention: planned present length differs");
    core_.run(ctx, in, g, out[0].as<float>(), out[1].as<float>(), out[2].as<float>(),
              reinterpret_cast<float*>(ctx.scratch));
  }

 private:
  GqaCore core_;
};

// Present outputs sized by the run: total_sequence_length is only known then.
class GqaAllocKernel final : public AllocatingKernel {
 public:
  explicit GqaAllocKernel(const KernelInit& init)
      : core_(init),
        has_present_{init.node.outputs().size() > 1 && init.node.output(1) != nullptr,
                     init.node.outputs().size() > 2 && init.node.output(2) != nullptr} {}

  std::vector<ir::Tensor> run_alloc(const RunContext& ctx, const std::vector<View>& in,
                                    const std::vector<View>& out) const override {
    // The scratch is the run's own: its size follows total_sequence_length's value.
    const GqaGeometry g = core_.geometry(in, true);
    ir::Tensor y = ir::Tensor::zeros(DType::kFloat32, {g.batch, g.seq, g.heads * g.size});
    ir::Tensor pk = ir::Tensor::zeros(DType::kFloat32, {g.batch, g.kv_heads, g.present, g.size});
    ir::Tensor pv = ir::Tensor::zeros(DType::kFloat32, {g.batch, g.kv_heads, g.present, g.size});
    std::vector<float> scratch(static_cast<size_t>(core_.scratch_floats(g)));
    core_.run(ctx, in, g, y.mutable_data<float>(), pk.mutable_data<float>(), pv.mutable_data<float>(), scratch.data());
    std::vector<ir::Tensor> made{std::move(y)};
    made.push_back(has_present_[0] ? std::move(pk) : ir::Tensor());
    made.push_back(has_present_[1] ? std::move(pv) : ir::Tensor());
    made.resize(out.size());
    return made;
  }

 private:
  GqaCore core_;
  bool has_present_[2];
};

// True when the plan knows both present outputs' sizes (their sequence dim is not unknown).
bool present_planned(const KernelInit& init) {
  for (size_t i : {1, 2}) {
    if (init.node.outputs().size() <= i || init.node.output(i) == nullptr) return false;
    const ir::Shape& s = init.output_types[i].shape();
    if (!s.has_rank() || s.rank() != 4 || s[2].is_unknown()) return false;
  }
  return true;
}

std::unique_ptr<Kernel> make_gqa(const KernelInit& init) {
  if (present_planned(init)) return std::make_unique<GqaKernel>(init);
  return std::make_unique<GqaAllocKernel>(init);
}

std::string gqa_check(const KernelInit& init) {
  const ir::Node& n = init.node;
  for (size_t i : {kQuery, kKey, kValue, kPastKey, kPastValue, kCos, kSin})
    if (i < n.inputs().size() && n.input(i) != nullptr)
      if (std::string why = require_dtype(init, i, {DType::kFloat32}); !why.empty()) return why;
  static const char* const kExtra[] = {"position_ids", "attention_bias", "head_sink", "k_scale", "v_scale",
                                       "q_norm_weight", "k_norm_weight", "query_seqlens"};
  for (size_t i = 9; i < n.inputs().size(); ++i)
    if (n.input(i) != nullptr)
      return std::string(i - 9 < std::size(kExtra) ? kExtra[i - 9] : "an extra input") + " (input " + std::to_string(i) +
             ") is not supported";
  if (n.outputs().size() > 3 && n.output(3) != nullptr) return "output_qk (output 3) is not supported";
  if (n.attr_int("causal", 1) != 1) return "causal = 0 (bidirectional attention) is not supported";
  for (const char* a : {"sliding_window_cache", "smooth_softmax", "qk_output"})
    if (n.attr_int(a, 0) != 0) return std::string(a) + " = " + std::to_string(n.attr_int(a, 0)) + " is not supported";
  for (const char* a : {"k_quant_type", "v_quant_type"})
    if (const std::string t = n.attr_string(a, "NONE"); t != "NONE") return std::string(a) + " = " + t + " is not supported";
  return "";
}

}  // namespace

void register_ms_attention(KernelRegistry& r) {
  TETHER_ADD_IN(r, "com.microsoft", "RotaryEmbedding",
        [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<MsRotaryKernel>(i); },
        ms_rotary_check);
  TETHER_ADD_IN(r, "com.microsoft", "GroupQueryAttention", make_gqa, gqa_check);
}

}  // namespace tether::engine::cpu
