// Attention (opset 23 on) and RotaryEmbedding (opset 23) as kernels, float32.
//
// Attention runs per (batch, query head, block of query rows) on one thread: the scores of the
// block against every key (one GEMM reading Q and K in place, 3-D or 4-D), scaled, soft-capped,
// masked (attn_mask, causal, window, padding) and soft-maxed row by row in a per-thread buffer,
// then multiplied by V (a second GEMM) straight into Y. Nothing of size sequence x sequence is
// written unless the qk_matmul_output output is asked for. Grouped-query attention reads each
// key/value head for its group of query heads; past_key/past_value are joined with K/V into
// present_key/present_value, which the products then read.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/cpu/attention.h"
#include "engine/cpu/cpu.h"
#include "engine/cpu/gemm.h"
#include "util/fastmath.h"
#include "util/multiversion.h"

namespace tether::engine::cpu {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Where head h's rows of a [B, S, H * D] (3-D) or [B, H, S, D] (4-D) tensor are.
struct Heads {
  const float* data = nullptr;
  int64_t batch = 0, heads = 0, seq = 0, size = 0;  // size: per head
  bool rank3 = false;

  const float* rows(int64_t b, int64_t h) const {
    return rank3 ? data + (b * seq * heads + h) * size : data + ((b * heads + h) * seq) * size;
  }
  int64_t stride() const { return rank3 ? heads * size : size; }  // floats between rows
};

Heads heads_of(const View& v, int64_t heads_attr) {
  Heads h;
  h.data = v.as<float>();
  h.batch = v.dims[0];
  h.rank3 = v.rank() == 3;
  if (h.rank3) {
    h.heads = heads_attr;
    h.seq = v.dims[1];
    h.size = heads_attr > 0 ? v.dims[2] / heads_attr : 0;
  } else {
    h.heads = v.dims[1];
    h.seq = v.dims[2];
    h.size = v.dims[3];
  }
  return h;
}

std::string dims_str(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

}  // namespace

// Written as loops the compiler vectorises (the max and the sum over 16 lanes), one copy per
// x86-64 level.
TETHER_MULTIVERSION void softmax_scaled(float* x, int64_t n, float scale, float softcap) {
  constexpr int kLanes = 16;
  if (n <= 0) return;
  if (softcap > 0.0f) {
    for (int64_t j = 0; j < n; ++j) x[j] = softcap * util::fast_tanh(x[j] * scale / softcap);
  } else {
    for (int64_t j = 0; j < n; ++j) x[j] *= scale;
  }
  float lane[kLanes];
  for (float& v : lane) v = kNegInf;
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] = x[j + l] > lane[l] ? x[j + l] : lane[l];
  float mx = kNegInf;
  for (; j < n; ++j) mx = x[j] > mx ? x[j] : mx;
  for (float v : lane) mx = v > mx ? v : mx;
  for (j = 0; j < n; ++j) x[j] = util::fast_exp(x[j] - mx);
  for (float& v : lane) v = 0.0f;
  for (j = 0; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] += x[j + l];
  float sum = 0.0f;
  for (; j < n; ++j) sum += x[j];
  for (float v : lane) sum += v;
  const float inv = 1.0f / sum;
  for (j = 0; j < n; ++j) x[j] *= inv;
}

namespace {

// A block this small (a decoding step: one row per head, or one key/value head's group of
// query heads) reads K and V in place, row by row, instead of packing them for the GEMM: the
// pack of K^T gathers every key's values one column at a time, which cost more than the product.
constexpr int64_t kInPlaceRows = 8;

// scores[r * ld + j] = q_r . k_j, each key read once for all the rows; the dot products in 16
// lanes the compiler vectorises, one copy per x86-64 level.
TETHER_MULTIVERSION void scores_in_place(const float* q, int64_t q_stride, int64_t rows, int64_t d, const float* k,
                                         int64_t k_stride, int64_t keys, float* scores, int64_t ld) {
  constexpr int kLanes = 16;
  for (int64_t j = 0; j < keys; ++j) {
    const float* kj = k + j * k_stride;
    for (int64_t r = 0; r < rows; ++r) {
      const float* qr = q + r * q_stride;
      float lane[kLanes] = {};
      int64_t p = 0;
      for (; p + kLanes <= d; p += kLanes)
        for (int l = 0; l < kLanes; ++l) lane[l] += qr[p + l] * kj[p + l];
      for (int w = kLanes / 2; w > 0; w /= 2)  // a tree of vector adds, not 16 scalar ones
        for (int l = 0; l < w; ++l) lane[l] += lane[l + w];
      float sum = lane[0];
      for (; p < d; ++p) sum += qr[p] * kj[p];
      scores[r * ld + j] = sum;
    }
  }
}

// y_r = sum_j p[r * ld + j] * v_j, each value read once for all the rows (in key order per
// output element, so the loops over it vectorise as they stand).
TETHER_MULTIVERSION void mix_in_place(const float* p, int64_t ld, int64_t rows, const float* v, int64_t v_stride,
                                      int64_t keys, int64_t dv, float* y, int64_t y_stride) {
  for (int64_t r = 0; r < rows; ++r) std::fill(y + r * y_stride, y + r * y_stride + dv, 0.0f);
  for (int64_t j = 0; j < keys; ++j) {
    const float* vj = v + j * v_stride;
    for (int64_t r = 0; r < rows; ++r) {
      const float w = p[r * ld + j];
      float* yr = y + r * y_stride;
      for (int64_t c = 0; c < dv; ++c) yr[c] += w * vj[c];
    }
  }
}

}  // namespace

void attention_scores(const AttentionBlock& a, int64_t k0, int64_t keys, float* scores, int64_t ld, float* gemm_scratch) {
  if (a.rows <= kInPlaceRows) {
    scores_in_place(a.q, a.q_stride, a.rows, a.d, a.k + k0 * a.k_stride, a.k_stride, keys, scores, ld);
    return;
  }
  GemmA lhs;
  lhs.data = a.q;
  lhs.lda = a.q_stride;
  const float* kp = a.k + k0 * a.k_stride;
  const int64_t ks = a.k_stride;
  GemmB kt;  // K^T: column j is key j, read in place
  kt.pack = [kp, ks](const RunContext&, int64_t, int64_t p0, int64_t pc, int64_t n0, int64_t nc, float* dst) {
    PackedMatrix::pack_into(dst, kp + n0 * ks + p0, pc, nc, 1, ks, gemm_isa().nr);
  };
  sgemm(RunContext{}, a.rows, keys, a.d, lhs, kt, scores, ld, GemmEpilogue{}, gemm_scratch);
}

void attention_mix(const AttentionBlock& a, const float* p, int64_t ld, int64_t k0, int64_t keys, float* gemm_scratch) {
  if (a.rows <= kInPlaceRows) {
    mix_in_place(p, ld, a.rows, a.v + k0 * a.v_stride, a.v_stride, keys, a.dv, a.y, a.y_stride);
    return;
  }
  GemmA lhs;
  lhs.data = p;
  lhs.lda = ld;
  const float* vp = a.v + k0 * a.v_stride;
  const int64_t vs = a.v_stride;
  GemmB vb;
  vb.pack = [vp, vs](const RunContext&, int64_t, int64_t p0, int64_t pc, int64_t n0, int64_t nc, float* dst) {
    PackedMatrix::pack_into(dst, vp + p0 * vs + n0, pc, nc, vs, 1, gemm_isa().nr);
  };
  sgemm(RunContext{}, a.rows, a.dv, keys, lhs, vb, a.y, a.y_stride, GemmEpilogue{}, gemm_scratch);
}

int64_t attention_gemm_scratch_floats(int64_t rows, int64_t keys, int64_t d, int64_t dv) {
  return std::max(sgemm_scratch_floats(rows, keys, d, 1), sgemm_scratch_floats(rows, dv, keys, 1));
}

void rotate_head(const float* x, float* y, const float* cos, const float* sin, int64_t rot, int64_t size,
                 bool interleaved) {
  const int64_t half = rot / 2;
  for (int64_t k = 0; k < half; ++k) {
    const int64_t i1 = interleaved ? 2 * k : k, i2 = interleaved ? 2 * k + 1 : k + half;
    const float a = x[i1], b = x[i2];
    y[i1] = a * cos[k] - b * sin[k];
    y[i2] = a * sin[k] + b * cos[k];
  }
  if (y != x)
    for (int64_t k = rot; k < size; ++k) y[k] = x[k];
}

namespace {

// The largest |k| over these keys; infinity when one is NaN or infinite.
float key_max(const float* k, int64_t keys, int64_t k_stride, int64_t d) {
  float k_max = 0.0f;
  for (int64_t n = 0; n < keys; ++n)
    for (int64_t c = 0; c < d; ++c) {
      const float v = std::fabs(k[n * k_stride + c]);
      if (std::isnan(v)) return std::numeric_limits<float>::infinity();
      k_max = std::max(k_max, v);
    }
  return k_max;
}

// True when every score q . k of these query rows against keys of largest magnitude k_max is
// finite: each |q . k| is at most sum|q| * k_max, kept well under float's range (rounding adds
// less than the margin). A NaN or infinity in Q or K fails it.
bool scores_stay_finite(const float* q, int64_t rows, int64_t q_stride, int64_t d, float k_max) {
  if (!(k_max < 1e30f)) return false;
  for (int64_t r = 0; r < rows; ++r) {
    double q_sum = 0.0;
    for (int64_t c = 0; c < d; ++c) q_sum += std::fabs(static_cast<double>(q[r * q_stride + c]));
    if (!(q_sum * k_max < 1e37)) return false;
  }
  return true;
}

class AttentionKernel final : public HostKernel {
 public:
  explicit AttentionKernel(const KernelInit& init)
      : q_heads_(init.node.attr_int("q_num_heads", 0)),
        kv_heads_(init.node.attr_int("kv_num_heads", 0)),
        causal_(init.node.attr_int("is_causal", 0) != 0),
        mode_(init.node.attr_int("qk_matmul_output_mode", 0)),
        softcap_(init.node.attr_float("softcap", 0.0f)),
        left_(init.node.attr_int("left_window_size", -1)),
        right_(init.node.attr_int("right_window_size", -1)),
        double_softmax_(init.node.attr_int("softmax_precision", 0) == static_cast<int64_t>(DType::kFloat64)),
        has_scale_(init.node.attr("scale") != nullptr),
        scale_(init.node.attr_float("scale", 1.0f)),
        nan_when_fully_masked_(init.node.attr_int("nan_when_fully_masked", 0) != 0),
        threads_(init.threads),
        name_(init.node.describe()) {}

  // Per thread: the score block and the scratch of its two single-threaded GEMMs; then the
  // joined key/value cache when past is given but present is not an output.
  int64_t scratch_bytes(const std::vector<View>& in, const std::vector<View>&) const override {
    const Geometry g = geometry(in, false);
    int64_t floats = threads_ * (per_thread_floats(g) + 16);
    if (in.size() > 4 && in[4].rank() == 4) floats += g.batch * g.kv_heads * g.total * (g.d + g.dv) + 32;
    return floats * static_cast<int64_t>(sizeof(float));
  }

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    const Geometry g = geometry(in, true);
    auto* scratch = reinterpret_cast<float*>(ctx.scratch);
    Heads q = heads_of(in[0], q_heads_), k = heads_of(in[1], kv_heads_), v = heads_of(in[2], kv_heads_);

    // K and V with the past in front: the present outputs, or scratch when they are not asked for.
    float* cache = scratch + threads_ * (per_thread_floats(g) + 16);
    if (present(in, 4)) {
      float* pk = out.size() > 1 && out[1].data != nullptr ? out[1].as<float>() : cache;
      float* pv = out.size() > 2 && out[2].data != nullptr ? out[2].as<float>() : cache + g.batch * g.kv_heads * g.total * g.d;
      join(in[4], k, g, g.d, pk);
      join(in[5], v, g, g.dv, pv);
      k = Heads{pk, g.batch, g.kv_heads, g.total, g.d, false};
      v = Heads{pv, g.batch, g.kv_heads, g.total, g.dv, false};
    } else {
      if (out.size() > 1 && out[1].data != nullptr) copy_heads(k, out[1].as<float>());
      if (out.size() > 2 && out[2].data != nullptr) copy_heads(v, out[2].as<float>());
    }
    Heads y{out[0].as<float>(), g.batch, g.q_heads, g.q_seq, g.dv, in[0].rank() == 3};
    float* qk_out = out.size() > 3 && out[3].data != nullptr ? out[3].as<float>() : nullptr;

    const float scale = has_scale_ ? scale_ : 1.0f / std::sqrt(static_cast<float>(g.d));
    const std::vector<int64_t> nonpad = present(in, 6) ? int_values(in[6]) : std::vector<int64_t>{};
    if (!nonpad.empty() && static_cast<int64_t>(nonpad.size()) != g.batch)
      throw ArgumentError(name_ + ": nonpad_kv_seqlen has " + std::to_string(nonpad.size()) + " entries for a batch of " +
                          std::to_string(g.batch));
    const int64_t block = row_block(g);
    const int64_t blocks = (g.q_seq + block - 1) / block;
    // Causal attention alone (no other mask) skips the keys past each block's last row.
    const bool only_causal = causal_ && !present(in, 3) && left_ < 0 && right_ < 0 && nonpad.empty() && qk_out == nullptr;
    const int64_t items = g.batch * g.q_heads * blocks;
    const int64_t group = g.q_heads / g.kv_heads;
    const int64_t slot = per_thread_floats(g) + 16;
    auto work = [&](int thread, int64_t i0, int64_t i1) {
      int64_t k_max_of = -1;  // the (batch, kv head) whose key_max is in k_max: blocks of a head run in turn
      float k_max = 0.0f;
      float* scores = scratch + thread * slot;
      float* gemm_scratch = scores + block * g.total;
      for (int64_t item = i0; item < i1; ++item) {
        const int64_t blk = item % blocks, bh = item / blocks, h = bh % g.q_heads, b = bh / g.q_heads;
        const int64_t r0 = blk * block, rows = std::min(block, g.q_seq - r0);
        const int64_t kh = h / group;
        // The skipped scores must be ones the causal mask's -inf absorbs: a NaN or +inf score
        // there makes the row NaN, as the operator adds its masks. They are, when no |q . k|
        // can overflow; else the block takes the general path and computes them.
        if (only_causal && k_max_of != b * g.kv_heads + kh) {
          k_max = key_max(k.rows(b, kh), g.total, k.stride(), g.d);
          k_max_of = b * g.kv_heads + kh;
        }
        const bool skip = only_causal && scores_stay_finite(q.rows(b, h) + r0 * q.stride(), rows, q.stride(), g.d, k_max);
        const int64_t keys = skip ? std::clamp<int64_t>(r0 + rows + g.past, 0, g.total) : g.total;
        AttentionBlock blk_io;
        blk_io.q = q.rows(b, h) + r0 * q.stride();
        blk_io.q_stride = q.stride();
        blk_io.k = k.rows(b, kh);
        blk_io.k_stride = k.stride();
        blk_io.v = v.rows(b, kh);
        blk_io.v_stride = v.stride();
        blk_io.y = const_cast<float*>(y.rows(b, h)) + r0 * y.stride();
        blk_io.y_stride = y.stride();
        blk_io.rows = rows;
        blk_io.d = g.d;
        blk_io.dv = g.dv;
        if (keys > 0) attention_scores(blk_io, 0, keys, scores, g.total, gemm_scratch);
        for (int64_t r = 0; r < rows; ++r) {
          float* row = scores + r * g.total;
          if (skip) {  // keys up to the row's own position (past included), the rest zero
            const int64_t n = std::clamp<int64_t>(r0 + r + g.past + 1, 0, keys);
            softmax_scaled(row, n, scale, softcap_);
            std::fill(row + n, row + keys, 0.0f);
            continue;
          }
          finish_row(row, g, in, nonpad.empty() ? nullptr : nonpad.data(), b, h, r0 + r, scale,
                     qk_out != nullptr ? qk_out + ((b * g.q_heads + h) * g.q_seq + r0 + r) * g.total : nullptr);
        }
        float* yr = blk_io.y;
        if (keys > 0) {
          attention_mix(blk_io, scores, g.total, 0, keys, gemm_scratch);
        } else {  // no key at all: zero rows
          for (int64_t r = 0; r < rows; ++r) std::fill(yr + r * y.stride(), yr + r * y.stride() + g.dv, 0.0f);
        }
      }
    };
    if (ctx.pool == nullptr || items == 1) {
      work(0, 0, items);
    } else {
      ctx.pool->parallel_for_indexed(items, 1, work);
    }
  }

 private:
  struct Geometry {
    int64_t batch = 0, q_heads = 0, kv_heads = 0, q_seq = 0, kv_seq = 0, past = 0, total = 0, d = 0, dv = 0;
  };

  Geometry geometry(const std::vector<View>& in, bool check) const {
    const Heads q = heads_of(in[0], q_heads_), k = heads_of(in[1], kv_heads_), v = heads_of(in[2], kv_heads_);
    Geometry g;
    g.batch = q.batch;
    g.q_heads = q.heads;
    g.kv_heads = k.heads;
    g.q_seq = q.seq;
    g.kv_seq = k.seq;
    // (Planning passes views without data: a past of rank 4 is given.)
    g.past = in.size() > 4 && in[4].rank() == 4 ? in[4].dims[2] : 0;
    g.total = g.past + g.kv_seq;
    g.d = q.size;
    g.dv = v.size;
    if (!check) return g;
    if (g.kv_heads <= 0 || g.q_heads % g.kv_heads != 0)
      throw ArgumentError(name_ + ": " + std::to_string(g.q_heads) + " query heads do not split into groups of " +
                          std::to_string(g.kv_heads) + " key/value heads");
    if (k.size != g.d || v.heads != g.kv_heads || k.batch != g.batch || v.batch != g.batch || v.seq != g.kv_seq)
      throw ArgumentError(name_ + ": Q " + dims_str(in[0].dims) + ", K " + dims_str(in[1].dims) + " and V " +
                          dims_str(in[2].dims) + " do not agree on batch, heads, sequence and head sizes");
    if (present(in, 4) != present(in, 5))
      throw ArgumentError(name_ + ": past_key and past_value must be given together");
    if (present(in, 4) && (in[4].rank() != 4 || in[4].dims[0] != g.batch || in[4].dims[1] != g.kv_heads ||
                           in[4].dims[3] != g.d || in[5].rank() != 4 || in[5].dims[2] != g.past || in[5].dims[3] != g.dv))
      throw ArgumentError(name_ + ": past_key " + dims_str(in[4].dims) + " and past_value " + dims_str(in[5].dims) +
                          " must be [batch, kv_heads, past, head_size] matching K and V");
    if (present(in, 3)) {
      const View& m = in[3];
      if (m.rank() == 0 || m.rank() > 4 || m.dims.back() > g.total)
        throw ArgumentError(name_ + ": attn_mask " + dims_str(m.dims) + " does not broadcast to [" + std::to_string(g.batch) +
                            ", " + std::to_string(g.q_heads) + ", " + std::to_string(g.q_seq) + ", " +
                            std::to_string(g.total) + "]");
      const int64_t want[4] = {g.batch, g.q_heads, g.q_seq, g.total};
      for (size_t d = 0; d + 1 < m.rank(); ++d) {
        const int64_t have = m.dims[m.rank() - 1 - d - 1];
        const int64_t target = want[2 - d];
        if (have != 1 && have != target)
          throw ArgumentError(name_ + ": attn_mask " + dims_str(m.dims) + " does not broadcast to [" +
                              std::to_string(g.batch) + ", " + std::to_string(g.q_heads) + ", " + std::to_string(g.q_seq) +
                              ", " + std::to_string(g.total) + "]");
      }
    }
    return g;
  }

  // Query rows per work item: whole heads when there are enough of them to go round (K and V
  // are then packed once per head), else heads split so that every thread gets two items; and
  // at most what keeps a block of scores within 256 KB.
  int64_t row_block(const Geometry& g) const {
    const int64_t heads = std::max<int64_t>(1, g.batch * g.q_heads);
    const int64_t splits = std::max<int64_t>(1, (2 * threads_ + heads - 1) / heads);
    const int64_t rows = (g.q_seq + splits - 1) / splits;
    return std::max<int64_t>(1, std::min({rows, std::max<int64_t>(16, 65536 / std::max<int64_t>(1, g.total)), g.q_seq}));
  }

  int64_t per_thread_floats(const Geometry& g) const {
    const int64_t rows = row_block(g);
    return rows * g.total + attention_gemm_scratch_floats(rows, g.total, g.d, g.dv);
  }

  // [B, H, past + S, size]: the past, then the new rows.
  static void join(const View& past, const Heads& now, const Geometry& g, int64_t size, float* dst) {
    for (int64_t b = 0; b < g.batch; ++b)
      for (int64_t h = 0; h < g.kv_heads; ++h) {
        float* o = dst + ((b * g.kv_heads + h) * g.total) * size;
        std::memcpy(o, past.as<float>() + ((b * g.kv_heads + h) * g.past) * size,
                    static_cast<size_t>(g.past * size) * sizeof(float));
        copy_tile(o + g.past * size, size, now.rows(b, h), now.stride(), g.kv_seq, size);
      }
  }

  static void copy_heads(const Heads& src, float* dst) {
    for (int64_t b = 0; b < src.batch; ++b)
      for (int64_t h = 0; h < src.heads; ++h)
        copy_tile(dst + ((b * src.heads + h) * src.seq) * src.size, src.size, src.rows(b, h), src.stride(), src.seq, src.size);
  }

  // The additive bias of key j for query row i of (b, h): 0, a float mask's value, or -inf.
  float bias(const std::vector<View>& in, const Geometry& g, const int64_t* nonpad, int64_t b, int64_t h, int64_t i,
             int64_t j) const {
    float acc = 0.0f;
    if (present(in, 3)) {
      const View& m = in[3];
      if (j >= m.dims.back()) return kNegInf;  // a mask shorter than the keys: padded with "masked"
      int64_t idx[4] = {b, h, i, j}, off = 0, stride = 1;
      for (size_t d = 0; d < m.rank(); ++d) {
        const size_t md = m.rank() - 1 - d;
        const int64_t size = m.dims[md];
        if (size != 1) off += idx[3 - d] * stride;
        stride *= size;
      }
      if (m.dtype == DType::kBool) {
        if (m.as<uint8_t>()[off] == 0) return kNegInf;
      } else {
        acc += m.as<float>()[off];
      }
    }
    const int64_t offset = nonpad != nullptr ? nonpad[b] - g.q_seq : g.past;
    const bool masked = (causal_ && j > i + offset) || (left_ >= 0 && (i + offset) - j > left_) ||
                        (right_ >= 0 && j - (i + offset) > right_) || (nonpad != nullptr && j >= nonpad[b]);
    // Added, as the operator's definition adds its masks: a NaN (or +inf) in attn_mask where
    // another mask hides the key still makes the row NaN.
    return masked ? acc + kNegInf : acc;
  }

  // Scale, soft-cap, bias and softmax of one row of scores, in place.
  void finish_row(float* s, const Geometry& g, const std::vector<View>& in, const int64_t* nonpad, int64_t b, int64_t h,
                  int64_t i, float scale, float* qk) const {
    const bool any_bias = present(in, 3) || causal_ || left_ >= 0 || right_ >= 0 || present(in, 6);
    if (!any_bias && qk == nullptr && !double_softmax_) {
      softmax_scaled(s, g.total, scale, softcap_);
      return;
    }
    float mx = kNegInf;
    bool all_masked = any_bias;
    for (int64_t j = 0; j < g.total; ++j) {
      float x = s[j] * scale;
      if (softcap_ > 0.0f) x = softcap_ * std::tanh(x / softcap_);
      if (qk != nullptr && mode_ <= 1) qk[j] = x;
      if (any_bias) {
        const float bj = bias(in, g, nonpad, b, h, i, j);
        if (bj != kNegInf) all_masked = false;
        x += bj;
      }
      if (qk != nullptr && mode_ == 2) qk[j] = x;
      s[j] = x;
      mx = std::max(mx, x);
    }
    if (all_masked) {  // no key to attend: the row is zero (as the reference has it), or NaN as Softmax has it
      std::fill(s, s + g.total, nan_when_fully_masked_ ? std::numeric_limits<float>::quiet_NaN() : 0.0f);
      if (qk != nullptr && mode_ == 3) std::fill(qk, qk + g.total, 0.0f);
      return;
    }
    if (double_softmax_) {  // softmax_precision = double: exponentials and their sum in float64
      double sum = 0.0;
      for (int64_t j = 0; j < g.total; ++j) sum += s[j] == kNegInf ? 0.0 : std::exp(static_cast<double>(s[j]) - mx);
      for (int64_t j = 0; j < g.total; ++j)
        s[j] = s[j] == kNegInf && sum == sum ? 0.0f : static_cast<float>(std::exp(static_cast<double>(s[j]) - mx) / sum);
    } else {
      float sum = 0.0f;
      for (int64_t j = 0; j < g.total; ++j) {
        const float e = s[j] == kNegInf ? 0.0f : util::fast_exp(s[j] - mx);
        s[j] = e;
        sum += e;
      }
      // An infinite score makes inf - inf: the sum is NaN, and so is the whole row (the
      // reference's answer), not only the infinite key's weight.
      if (sum != sum) {
        std::fill(s, s + g.total, sum);
      } else {
        const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        for (int64_t j = 0; j < g.total; ++j) s[j] *= inv;
      }
    }
    if (qk != nullptr && mode_ == 3) std::memcpy(qk, s, static_cast<size_t>(g.total) * sizeof(float));
  }

  int64_t q_heads_, kv_heads_;
  bool causal_;
  int64_t mode_;
  float softcap_;
  int64_t left_, right_;
  bool double_softmax_;
  bool has_scale_;
  float scale_;
  bool nan_when_fully_masked_;  // ai.tether's form: Softmax's answer for a row with no key left
  int threads_;
  std::string name_;
};

std::string attention_check(const KernelInit& init) {
  for (size_t i : {0, 1, 2, 4, 5})
    if (init.node.input(i) != nullptr)
      if (std::string why = require_dtype(init, i, {DType::kFloat32}); !why.empty()) return why;
  if (init.node.input(3) != nullptr)
    if (std::string why = require_dtype(init, 3, {DType::kFloat32, DType::kBool}); !why.empty()) return why;
  if (init.node.input(6) != nullptr)
    if (std::string why = require_dtype(init, 6, {DType::kInt64, DType::kInt32}); !why.empty()) return why;
  for (size_t i = 0; i < 3; ++i) {
    const ir::Shape& s = init.input_types[i].shape();
    if (s.has_rank() && s.rank() != 3 && s.rank() != 4) return "input " + std::to_string(i) + " must be 3-D or 4-D";
  }
  const int64_t prec = init.node.attr_int("softmax_precision", 0);
  if (prec != 0 && prec != static_cast<int64_t>(DType::kFloat32) && prec != static_cast<int64_t>(DType::kFloat16) &&
      prec != static_cast<int64_t>(DType::kBFloat16) && prec != static_cast<int64_t>(DType::kFloat64))
    return "softmax_precision " + std::to_string(prec) + " is not supported (float64, and float32 or lower: computed in float32)";
  const int64_t mode = init.node.attr_int("qk_matmul_output_mode", 0);
  if (mode < 0 || mode > 3) return "qk_matmul_output_mode " + std::to_string(mode) + " is not 0 to 3";
  return "";
}

// ---- RotaryEmbedding --------------------------------------------------------------------------

// Rotates the first rotary_embedding_dim entries of each head by the cached angles of its
// position: halves (x1, x2) or interleaved pairs, (x1 cos - x2 sin, x1 sin + x2 cos); the rest
// of the head is copied.
class RotaryKernel final : public HostKernel {
 public:
  explicit RotaryKernel(const KernelInit& init)
      : interleaved_(init.node.attr_int("interleaved", 0) != 0),
        rotary_dim_(init.node.attr_int("rotary_embedding_dim", 0)),
        heads_(init.node.attr_int("num_heads", 0)),
        name_(init.node.describe()) {}

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    const View& x = in[0];
    const bool rank3 = x.rank() == 3;
    // Shape inference checked all this on the planned shapes; a kernel never indexes past them.
    TETHER_CHECK((rank3 && heads_ > 0 && x.dims[2] % heads_ == 0) || x.rank() == 4, "RotaryEmbedding: bad input rank");
    TETHER_CHECK(in[1].rank() >= 2 && in[1].dims == in[2].dims, "RotaryEmbedding: caches of different shapes");
    const int64_t batch = x.dims[0];
    const int64_t seq = rank3 ? x.dims[1] : x.dims[2];
    const int64_t heads = rank3 ? heads_ : x.dims[1];
    const int64_t size = rank3 ? x.dims[2] / heads : x.dims[3];
    const int64_t rot = rotary_dim_ > 0 ? rotary_dim_ : size;
    const int64_t half = rot / 2;
    TETHER_CHECK(rot % 2 == 0 && rot <= size, "RotaryEmbedding: rotated size odd or past the head");
    const View& cos = in[1];
    const View& sin = in[2];
    const bool by_position = present(in, 3);
    if (cos.dims.back() != half || sin.dims.back() != half)
      throw ArgumentError(name_ + ": cos_cache " + dims_str(cos.dims) + " and sin_cache " + dims_str(sin.dims) +
                          " must end in rotary_embedding_dim / 2 = " + std::to_string(half));
    const int64_t positions = by_position ? cos.dims[0] : 0;
    if (!by_position && (cos.rank() != 3 || cos.dims[0] != batch || cos.dims[1] != seq))
      throw ArgumentError(name_ + ": without position_ids, cos_cache must be [batch, sequence, rotary_dim / 2] = [" +
                          std::to_string(batch) + ", " + std::to_string(seq) + ", " + std::to_string(half) + "], got " +
                          dims_str(cos.dims));
    const std::vector<int64_t> pos = by_position ? int_values(in[3]) : std::vector<int64_t>{};
    if (by_position && static_cast<int64_t>(pos.size()) != batch * seq)
      throw ArgumentError(name_ + ": position_ids " + dims_str(in[3].dims) + " must be [" + std::to_string(batch) + ", " +
                          std::to_string(seq) + "]");
    for (size_t t = 0; t < pos.size(); ++t)
      if (pos[t] < 0 || pos[t] >= positions)
        throw ArgumentError(name_ + ": position_ids[" + std::to_string(static_cast<int64_t>(t) / seq) + ", " +
                            std::to_string(static_cast<int64_t>(t) % seq) + "] is " + std::to_string(pos[t]) +
                            ", outside the cache's " + std::to_string(positions) + " positions");
    const float* xp = x.as<float>();
    float* yp = out[0].as<float>();
    parallel(ctx, batch * seq, 8, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t b = t / seq, s = t % seq;
        const int64_t row = by_position ? pos[static_cast<size_t>(t)] : t;
        const float* c = cos.as<float>() + row * half;
        const float* sn = sin.as<float>() + row * half;
        for (int64_t h = 0; h < heads; ++h) {
          const int64_t off = rank3 ? (t * heads + h) * size : ((b * heads + h) * seq + s) * size;
          const float* xi = xp + off;
          float* yo = yp + off;
          rotate_head(xi, yo, c, sn, rot, size, interleaved_);
        }
      }
    });
  }

 private:
  bool interleaved_;
  int64_t rotary_dim_, heads_;
  std::string name_;
};

std::string rotary_check(const KernelInit& init) {
  for (size_t i : {0, 1, 2})
    if (std::string why = require_dtype(init, i, {DType::kFloat32}); !why.empty()) return why;
  if (init.node.input(3) != nullptr) return require_dtype(init, 3, {DType::kInt64, DType::kInt32});
  return "";
}

}  // namespace

void register_attention(KernelRegistry& r) {
  TETHER_ADD(r, "Attention",
        [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<AttentionKernel>(i); },
        attention_check);
  TETHER_ADD_IN(r, "ai.tether", "Attention",
        [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<AttentionKernel>(i); },
        attention_check);
  TETHER_ADD(r, "RotaryEmbedding",
        [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<RotaryKernel>(i); },
        rotary_check);
}

}  // namespace tether::engine::cpu
