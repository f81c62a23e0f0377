// Attention (ONNX, opset 23 on) and ai.tether Attention (what compile fuses from the
// MatMul -> scale -> Add mask -> Softmax -> MatMul chain): shaders/attention.glsl, a workgroup per
// query row with the softmax kept online, so no S x T scores are written. Q, K and V of rank 4
// ([B, H, S, D]) or 3 ([B, S, H D] with q_num_heads and kv_num_heads), grouped-query heads, a
// float attn_mask broadcast over [B, H, S, T], is_causal, scale, softcap and
// nan_when_fully_masked, as engine/cpu/attention.cc computes them. A key/value cache (past_key,
// past_value, the present outputs), nonpad_kv_seqlen, a bool mask, sliding windows, the
// qk_matmul_output output and softmax_precision double run on the CPU.
#include <cmath>

#include "engine/session.h"
#include "engine/vulkan/ops.h"

namespace tether::engine::vulkan {

namespace {

// Invocations per query row (a power of two, for rows.glsl): a block of keys.
constexpr uint32_t kAttentionGroup = 64;

struct AttentionPush {
  uint32_t rows, heads, seq, keys, d, dv, group;
  uint32_t qb, qh, qs, kb, kh, kt, vb, vh, vt, yb, yh, ys;
  uint32_t mb, mh, ms, mlen;
  float scale, softcap;
};
static_assert(sizeof(AttentionPush) <= 128, "push constants past the 128 bytes every device takes");

bool given(const ir::Node& n, size_t i) { return i < n.inputs().size() && n.input(i) != nullptr; }

std::string attention_check(const KernelInit& init) {
  const ir::Node& n = init.node;
  for (size_t i : {0u, 1u, 2u})
    if (init.input_dtype(i) != ir::DType::kFloat32) return "input " + std::to_string(i) + " is not float32";
  if (init.output_dtype(0) != ir::DType::kFloat32) return "its output is not float32";
  if (std::string why = require_rank(init, 0, {3, 4}); !why.empty()) return why;
  for (size_t i : {1u, 2u}) {
    const ir::Shape& s = init.input_types[i].shape();
    if (!s.has_rank() || s.rank() != init.input_types[0].shape().rank()) return "Q, K and V differ in rank";
  }
  if (init.input_types[0].shape().rank() == 3 && (n.attr_int("q_num_heads", 0) <= 0 || n.attr_int("kv_num_heads", 0) <= 0))
    return "3-D inputs without q_num_heads and kv_num_heads";
  if (given(n, 4) || given(n, 5)) return "a key/value cache (past_key, past_value) runs on the CPU";
  if (given(n, 6)) return "nonpad_kv_seqlen runs on the CPU";
  for (size_t k = 1; k < n.outputs().size(); ++k)
    if (n.output(k) != nullptr) return "its present_key, present_value and qk_matmul_output outputs are not computed on Vulkan";
  if (given(n, 3) && init.input_dtype(3) != ir::DType::kFloat32) return "attn_mask is not float32 (a bool mask runs on the CPU)";
  if (n.attr_int("left_window_size", -1) >= 0 || n.attr_int("right_window_size", -1) >= 0)
    return "sliding windows run on the CPU";
  if (n.attr_int("softmax_precision", 0) == static_cast<int64_t>(ir::DType::kFloat64))
    return "softmax_precision double runs on the CPU";
  return "";
}

class AttentionKernel final : public GpuKernel {
 public:
  explicit AttentionKernel(const KernelInit& init)
      : node_(init.node),
        q_heads_(init.node.attr_int("q_num_heads", 0)),
        kv_heads_(init.node.attr_int("kv_num_heads", 0)),
        has_scale_(init.node.attr("scale") != nullptr),
        scale_(init.node.attr_float("scale", 1.0f)),
        softcap_(init.node.attr_float("softcap", 0.0f)),
        spec_{kAttentionGroup, given(init.node, 3) ? 1u : 0u, init.node.attr_int("is_causal", 0) != 0 ? 1u : 0u,
              init.node.attr_int("nan_when_fully_masked", 0) != 0 ? 1u : 0u} {}

  bool reads_on_device(size_t i) const override { return i <= 3; }

  void prepare(Gpu& gpu) override { pipeline_ = &gpu.pipeline(row_shader(gpu.device, "attention"), 5, sizeof(AttentionPush), spec_); }

  void record(Recorder& rec, const std::vector<GpuTensor>& in, const std::vector<GpuTensor>& out) const override {
    const std::vector<int64_t>&qd = in[0].dims, &kd = in[1].dims, &vd = in[2].dims;
    const bool rank3 = qd.size() == 3;
    const int64_t batch = qd[0];
    const int64_t heads = rank3 ? q_heads_ : qd[1], kv_heads = rank3 ? kv_heads_ : kd[1];
    const int64_t seq = rank3 ? qd[1] : qd[2], keys = rank3 ? kd[1] : kd[2];
    const int64_t d = rank3 ? qd[2] / heads : qd[3], dk = rank3 ? kd[2] / kv_heads : kd[3];
    const int64_t dv = rank3 ? vd[2] / kv_heads : vd[3];
    const bool split = !rank3 || (qd[2] % heads == 0 && kd[2] % kv_heads == 0 && vd[2] % kv_heads == 0);
    const int64_t v_keys = rank3 ? vd[1] : vd[2];
    if (!split || kd[0] != batch || vd[0] != batch || (!rank3 && vd[1] != kv_heads) || v_keys != keys || dk != d ||
        kv_heads <= 0 || heads % kv_heads != 0)
      throw ArgumentError(node_.describe() + ": Q " + dims_text(qd) + ", K " + dims_text(kd) + " and V " + dims_text(vd) +
                          " do not agree (heads " + std::to_string(heads) + " over " + std::to_string(kv_heads) +
                          " key/value heads)");
    for (const GpuTensor& t : {in[0], in[1], in[2], out[0]}) check_u32(node_, t.numel(), "an operand");
    AttentionPush p{};
    p.rows = static_cast<uint32_t>(batch * heads * seq);
    p.heads = static_cast<uint32_t>(heads);
    p.seq = static_cast<uint32_t>(seq);
    p.keys = static_cast<uint32_t>(keys);
    p.d = static_cast<uint32_t>(d);
    p.dv = static_cast<uint32_t>(dv);
    p.group = static_cast<uint32_t>(heads / kv_heads);
    // [B, H, S, size] or [B, S, H size]: the strides of batch, head and position.
    auto strides = [rank3](int64_t h, int64_t s, int64_t size, uint32_t& sb, uint32_t& sh, uint32_t& ss) {
      sb = static_cast<uint32_t>(h * s * size);
      sh = static_cast<uint32_t>(rank3 ? size : s * size);
      ss = static_cast<uint32_t>(rank3 ? h * size : size);
    };
    strides(heads, seq, d, p.qb, p.qh, p.qs);
    strides(kv_heads, keys, d, p.kb, p.kh, p.kt);
    strides(kv_heads, keys, dv, p.vb, p.vh, p.vt);
    strides(heads, seq, dv, p.yb, p.yh, p.ys);
    if (spec_[1] != 0) mask_strides(in[3].dims, batch, heads, seq, keys, p);
    p.scale = has_scale_ ? scale_ : 1.0f / std::sqrt(static_cast<float>(d));
    p.softcap = softcap_;
    if (p.rows == 0 || dv == 0) return;
    const Range mask = spec_[1] != 0 ? in[3].range : rec.unused();
    dispatch_rows(rec, *pipeline_, {in[0].range, in[1].range, in[2].range, mask, out[0].range}, &p, sizeof p, p.rows);
  }

 private:
  // attn_mask broadcast over [B, H, S, T] (its last dim at most T, the keys past it masked): its
  // strides over batch, head and position, 0 where it broadcasts.
  void mask_strides(const std::vector<int64_t>& m, int64_t batch, int64_t heads, int64_t seq, int64_t keys,
                    AttentionPush& p) const {
    const int64_t want[4] = {batch, heads, seq, keys};
    bool fits = !m.empty() && m.size() <= 4 && m.back() <= keys;
    uint32_t stride[4] = {0, 0, 0, 0};
    int64_t run = 1;
    for (size_t k = 0; fits && k < m.size(); ++k) {
      const size_t dim = m.size() - 1 - k, axis = 3 - k;
      if (axis < 3 && m[dim] != 1 && m[dim] != want[axis]) fits = false;
      stride[axis] = m[dim] == 1 && axis < 3 ? 0u : static_cast<uint32_t>(run);
      run *= m[dim];
    }
    if (!fits)
      throw ArgumentError(node_.describe() + ": attn_mask " + dims_text(m) + " does not broadcast to [" + std::to_string(batch) +
                          ", " + std::to_string(heads) + ", " + std::to_string(seq) + ", " + std::to_string(keys) + "]");
    p.mb = stride[0];
    p.mh = stride[1];
    p.ms = stride[2];
    p.mlen = static_cast<uint32_t>(m.back());
  }

  const ir::Node& node_;
  int64_t q_heads_, kv_heads_;
  bool has_scale_;
  float scale_, softcap_;
  std::vector<uint32_t> spec_;
  const Pipeline* pipeline_ = nullptr;
};

}  // namespace

void register_attention(KernelRegistry& r) {
  auto make = [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<AttentionKernel>(i); };
  r.add("Attention", make, attention_check);
  r.add("Attention", make, attention_check, "ai.tether");
}

}  // namespace tether::engine::vulkan
