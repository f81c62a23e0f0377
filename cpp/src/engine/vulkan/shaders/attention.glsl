// ONNX Attention (and ai.tether Attention, which compile fuses from MatMul -> scale -> Add mask ->
// Softmax -> MatMul), one workgroup per query row (batch, head, position), as
// engine/cpu/attention.cc computes it: x_j = q . k_j * scale, soft-capped
// (softcap tanh(x / softcap)), plus the mask (a float attn_mask broadcast over [B, H, S, T], -inf
// past its last dim; -inf past the row's position when causal), then softmax over the keys and
// the sum of the values it weighs. Nothing of size S x T is written: the keys go by in blocks of
// the workgroup's size, each invocation scoring one key of the block, and the softmax is kept
// online (a running maximum and sum, the partial output rescaled when the maximum grows), so one
// pass over K and V serves the row. Each invocation owns output columns t, t + n, ... (4 of them
// per pass; values wider than 4 n take more passes over the keys).
//
// A row none of whose keys the masks leave is NaN (NAN_WHEN_FULLY_MASKED: Softmax's answer, the
// fused chain's) or zero (ONNX Attention's). A NaN or +inf score makes the row NaN, as on the CPU.
// Included by attention.comp and attention_subgroup.comp, after rows.glsl.

layout(constant_id = 1) const bool HAS_MASK = false;
layout(constant_id = 2) const bool CAUSAL = false;
layout(constant_id = 3) const bool NAN_WHEN_FULLY_MASKED = false;

layout(std430, binding = 0) readonly buffer Q { act_t q[]; };
layout(std430, binding = 1) readonly buffer K { act_t k[]; };
layout(std430, binding = 2) readonly buffer V { act_t v[]; };
layout(std430, binding = 3) readonly buffer Mask { act_t mask[]; };
layout(std430, binding = 4) writeonly buffer Y { act_t y[]; };
layout(push_constant, std430) uniform Push {
  uint rows;            // B H S
  uint heads, seq;      // H, S
  uint keys, d, dv;     // T, D, Dv
  uint group;           // query heads per key/value head
  uint qb, qh, qs;      // element strides of Q's batch, head and position (its D run contiguous)
  uint kb, kh, kt;      // K's batch, head and key
  uint vb, vh, vt;      // V's
  uint yb, yh, ys;      // Y's batch, head and position
  uint mb, mh, ms;      // the mask's strides over batch, head and position (0 where it broadcasts)
  uint mlen;            // the mask's last dim: keys from here on are masked
  float scale, softcap;
} p;

const uint kCols = 4;  // output columns an invocation keeps per pass
shared float weight[gl_WorkGroupSize.x];  // the block's softmax numerators, one per key

void main() {
  const uint r = row_id(), t = gl_LocalInvocationID.x, n = gl_WorkGroupSize.x;
  if (r >= p.rows) return;  // the whole workgroup: no barrier is left waiting
  const uint i = r % p.seq, h = (r / p.seq) % p.heads, b = r / (p.seq * p.heads), kvh = h / p.group;
  const uint q0 = b * p.qb + h * p.qh + i * p.qs;
  const uint k0 = b * p.kb + kvh * p.kh, v0 = b * p.vb + kvh * p.vh;
  const uint y0 = b * p.yb + h * p.yh + i * p.ys;
  const uint m0 = b * p.mb + h * p.mh + i * p.ms;
  const bool any_bias = HAS_MASK || CAUSAL;
  for (uint c0 = 0; c0 < p.dv; c0 += kCols * n) {
    float acc[kCols] = float[kCols](0.0, 0.0, 0.0, 0.0);
    float m = -kInf, l = 0.0;
    bool open = false;  // a key whose bias is not -inf (any_bias)
    for (uint j0 = 0; j0 < p.keys; j0 += n) {
      const uint j = j0 + t;
      float x = -kInf;
      if (j < p.keys) {
        const uint kj = k0 + j * p.kt;
        float s = 0.0;
        for (uint c = 0; c < p.d; ++c) s += LD(q[q0 + c]) * LD(k[kj + c]);
        x = s * p.scale;
        if (p.softcap > 0.0) x = p.softcap * tanh_(x / p.softcap);
        if (any_bias) {
          float bias = 0.0;
          if (HAS_MASK) bias = j < p.mlen ? LD(mask[m0 + j]) : -kInf;
          if (CAUSAL && j > i) bias += -kInf;
          if (bias != -kInf) open = true;
          x += bias;
        }
      }
      const float m_new = max(m, reduce_rows(x, true));
      // exp(-inf - -inf) would be NaN: a masked key weighs 0, and nothing before a first open key
      // needs rescaling.
      const float e = x == -kInf ? 0.0 : exp(x - m_new);
      const float alpha = m == -kInf ? 0.0 : exp(m - m_new);
      weight[t] = e;
      l = l * alpha + reduce_rows(e, false);  // its barriers publish weight[]
      m = m_new;
      const uint block = min(n, p.keys - j0);
      for (uint cc = 0; cc < kCols; ++cc) {
        const uint c = c0 + t + cc * n;
        if (c >= p.dv) break;
        float sum = acc[cc] * alpha;
        for (uint jj = 0; jj < block; ++jj) sum += weight[jj] * LD(v[v0 + (j0 + jj) * p.vt + c]);
        acc[cc] = sum;
      }
      // The next block's reduce_rows barriers before weight[] is written again.
    }
    const bool masked = any_bias && reduce_rows(open ? 1.0 : 0.0, true) == 0.0;
    for (uint cc = 0; cc < kCols; ++cc) {
      const uint c = c0 + t + cc * n;
      if (c >= p.dv) break;
      float o = acc[cc] / l;
      if (masked) o = NAN_WHEN_FULLY_MASKED ? kNaN : 0.0;
      if (p.keys == 0u) o = 0.0;  // no key at all: a zero row, as on the CPU
      y[y0 + c] = ST(o);
    }
  }
}
