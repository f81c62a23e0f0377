// RNN, GRU and LSTM, one dispatch per phase of a time step, one invocation per (direction,
// batch row, hidden unit), as ONNX defines them (gates z r h for GRU, i o f c for LSTM). The
// state lives in float32 scratch: two hidden-state buffers used in turn, the cell state, and
// for GRU without linear_before_reset the products r * h of phase 1. PHASE (push): 0 sets the
// state from initial_h / initial_c (or zeros) and zeroes Y past each row's length; 1 is GRU's
// reset gate; 2 a step; 3 writes Y_h and Y_c.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"

layout(constant_id = 1) const uint CELL = 0;  // 0 RNN, 1 GRU, 2 LSTM
// Activations per direction and slot (f, g, h): kind codes of act() and their alpha, beta.
layout(constant_id = 2) const uint K00 = 2;
layout(constant_id = 3) const uint K01 = 1;
layout(constant_id = 4) const uint K02 = 1;
layout(constant_id = 5) const uint K10 = 2;
layout(constant_id = 6) const uint K11 = 1;
layout(constant_id = 7) const uint K12 = 1;
layout(constant_id = 8) const float A00 = 0.0;
layout(constant_id = 9) const float A01 = 0.0;
layout(constant_id = 10) const float A02 = 0.0;
layout(constant_id = 11) const float A10 = 0.0;
layout(constant_id = 12) const float A11 = 0.0;
layout(constant_id = 13) const float A12 = 0.0;
layout(constant_id = 14) const float B00 = 0.0;
layout(constant_id = 15) const float B01 = 0.0;
layout(constant_id = 16) const float B02 = 0.0;
layout(constant_id = 17) const float B10 = 0.0;
layout(constant_id = 18) const float B11 = 0.0;
layout(constant_id = 19) const float B12 = 0.0;

layout(std430, binding = 0) readonly buffer X { act_t x[]; };
layout(std430, binding = 1) readonly buffer W { act_t w[]; };
layout(std430, binding = 2) readonly buffer R { act_t r[]; };
layout(std430, binding = 3) readonly buffer Bias { act_t bias[]; };
layout(std430, binding = 4) readonly buffer Lens { int lens[]; };
layout(std430, binding = 5) readonly buffer H0 { act_t h0[]; };
layout(std430, binding = 6) readonly buffer C0 { act_t c0[]; };
layout(std430, binding = 7) readonly buffer Peep { act_t peep[]; };
layout(std430, binding = 8) writeonly buffer Y { act_t y[]; };
layout(std430, binding = 9) writeonly buffer YH { act_t yh[]; };
layout(std430, binding = 10) writeonly buffer YC { act_t yc[]; };
layout(std430, binding = 11) buffer State { float state[]; };
layout(std430, binding = 12) buffer Fault { uint fault[]; };  // a sequence length outside [0, seq]
layout(push_constant, std430) uniform Push {
  uint seq, batch, in_size, hidden, dirs, step, phase;
  uint flags;  // kHas* bits below
  float clip;  // 0: none
} p;

const uint kBias = 1u, kLens = 2u, kLens64 = 4u, kH0 = 8u, kC0 = 16u, kPeep = 32u, kY = 64u, kYH = 128u, kYC = 256u,
           kBatchFirst = 512u, kReverse = 1024u, kLinearBeforeReset = 2048u, kInputForget = 4096u;

bool has(uint bit) { return (p.flags & bit) != 0u; }

float apply(uint kind, float a, float b, float v) {
  if (kind == 0u) return max(v, 0.0);                                  // Relu
  if (kind == 1u) return tanh_(v);                                     // Tanh
  if (kind == 2u) return 1.0 / (1.0 + exp(-v));                        // Sigmoid
  if (kind == 3u) return a * v + b;                                    // Affine
  if (kind == 4u) return v >= 0.0 ? v : a * v;                         // LeakyRelu
  if (kind == 5u) return v > a ? v : 0.0;                              // ThresholdedRelu
  if (kind == 6u) return a * tanh_(b * v);                             // ScaledTanh
  if (kind == 7u) return clamp(a * v + b, 0.0, 1.0);                   // HardSigmoid
  if (kind == 8u) return v >= 0.0 ? v : a * (exp(v) - 1.0);            // Elu
  if (kind == 9u) return v / (1.0 + abs(v));                           // Softsign
  return v > 20.0 ? v : log(1.0 + exp(v));                             // Softplus
}

float act(uint d, uint slot, float v) {
  if (d == 0u) {
    if (slot == 0u) return apply(K00, A00, B00, v);
    if (slot == 1u) return apply(K01, A01, B01, v);
    return apply(K02, A02, B02, v);
  }
  if (slot == 0u) return apply(K10, A10, B10, v);
  if (slot == 1u) return apply(K11, A11, B11, v);
  return apply(K12, A12, B12, v);
}

float clipped(float v) { return p.clip > 0.0 ? clamp(v, -p.clip, p.clip) : v; }

uint gates() { return CELL == 0u ? 1u : CELL == 1u ? 3u : 4u; }

// x_t . W[gate] row j + bias of the input side.
float input_part(uint d, uint gate, uint j, uint xrow) {
  uint row = ((d * gates() + gate) * p.hidden + j) * p.in_size;
  float s = 0.0;
  for (uint k = 0; k < p.in_size; ++k) s += LD(x[xrow + k]) * LD(w[row + k]);
  if (has(kBias)) s += LD(bias[d * 2u * gates() * p.hidden + gate * p.hidden + j]);
  return s;
}

// v . R[gate] row j (v at `at` in the state) + bias of the recurrent side.
float recurrent_part(uint d, uint gate, uint j, uint at) {
  uint row = ((d * gates() + gate) * p.hidden + j) * p.hidden;
  float s = 0.0;
  for (uint k = 0; k < p.hidden; ++k) s += state[at + k] * LD(r[row + k]);
  if (has(kBias)) s += LD(bias[d * 2u * gates() * p.hidden + (gates() + gate) * p.hidden + j]);
  return s;
}

uint length_of(uint b) {
  if (!has(kLens)) return p.seq;
  int lo = has(kLens64) ? lens[2u * b] : lens[b];
  int hi = has(kLens64) ? lens[2u * b + 1u] : (lo < 0 ? -1 : 0);
  if (hi != (lo < 0 ? -1 : 0)) return hi < 0 ? 0u : p.seq;
  return uint(clamp(lo, 0, int(p.seq)));
}

uint y_index(uint t, uint d, uint b, uint j) {
  return has(kBatchFirst) ? ((b * p.seq + t) * p.dirs + d) * p.hidden + j : ((t * p.dirs + d) * p.batch + b) * p.hidden + j;
}

uint state_index(uint d, uint b, uint j) {  // [dirs, batch, hidden] as Y_h (layout 0)
  return (d * p.batch + b) * p.hidden + j;
}

void main() {
  uint i = flat_id();
  uint n = p.dirs * p.batch * p.hidden;
  if (i >= n) return;
  uint j = i % p.hidden, b = (i / p.hidden) % p.batch, d = i / (p.hidden * p.batch);
  uint hs = has(kBatchFirst) ? (b * p.dirs + d) * p.hidden + j : i;  // Y_h / initial_h index
  uint len = length_of(b);
  if (p.phase == 0u) {
    if (has(kLens) && j == 0u && d == 0u) {
      int lo = has(kLens64) ? lens[2u * b] : lens[b];
      int hi = has(kLens64) ? lens[2u * b + 1u] : (lo < 0 ? -1 : 0);
      if (hi != 0 || lo < 0 || lo > int(p.seq)) {
        fault[1] = uint(lo);
        fault[2] = uint(hi);
        fault[0] = 1u;
      }
    }
    state[i] = has(kH0) ? LD(h0[hs]) : 0.0;
    state[2u * n + i] = has(kC0) ? LD(c0[hs]) : 0.0;
    if (has(kY))
      for (uint t = len; t < p.seq; ++t) y[y_index(t, d, b, j)] = ST(0.0);
    return;
  }
  uint cur = (p.step % 2u) * n, next = n - cur;  // the two hidden-state buffers, in turn
  if (p.phase == 3u) {
    if (has(kYH)) yh[hs] = ST(state[cur + i]);
    if (has(kYC)) yc[hs] = ST(state[2u * n + i]);
    return;
  }
  bool reverse = has(kReverse) || d == 1u;
  if (p.step >= len) {  // past this row's length: the state carries over
    if (p.phase == 2u) state[next + i] = state[cur + i];
    return;
  }
  uint t = reverse ? len - 1u - p.step : p.step;
  uint xrow = (has(kBatchFirst) ? b * p.seq + t : t * p.batch + b) * p.in_size;
  uint hrow = cur + (d * p.batch + b) * p.hidden;  // this row's h_{t-1} in the state
  float h_prev = state[cur + i];
  float h_new;
  if (CELL == 1u && p.phase == 1u) {  // GRU's reset gate, for r * h_{t-1} in the candidate
    float rg = act(d, 0u, clipped(input_part(d, 1u, j, xrow) + recurrent_part(d, 1u, j, hrow)));
    state[3u * n + i] = rg * h_prev;
    return;
  }
  if (CELL == 0u) {
    h_new = act(d, 0u, clipped(input_part(d, 0u, j, xrow) + recurrent_part(d, 0u, j, hrow)));
  } else if (CELL == 1u) {
    float z = act(d, 0u, clipped(input_part(d, 0u, j, xrow) + recurrent_part(d, 0u, j, hrow)));
    float cand;
    if (has(kLinearBeforeReset)) {
      float rg = act(d, 0u, clipped(input_part(d, 1u, j, xrow) + recurrent_part(d, 1u, j, hrow)));
      cand = input_part(d, 2u, j, xrow) + rg * recurrent_part(d, 2u, j, hrow);
    } else {
      cand = input_part(d, 2u, j, xrow) + recurrent_part(d, 2u, j, 3u * n + (d * p.batch + b) * p.hidden);
    }
    cand = act(d, 1u, clipped(cand));
    h_new = (1.0 - z) * cand + z * h_prev;
  } else {
    float c_prev = state[2u * n + i];
    uint pe = d * 3u * p.hidden + j;
    float pi = has(kPeep) ? LD(peep[pe]) : 0.0, po = has(kPeep) ? LD(peep[pe + p.hidden]) : 0.0,
          pf = has(kPeep) ? LD(peep[pe + 2u * p.hidden]) : 0.0;
    float ig = act(d, 0u, clipped(input_part(d, 0u, j, xrow) + recurrent_part(d, 0u, j, hrow) + pi * c_prev));
    float fg = has(kInputForget) ? 1.0 - ig
                                 : act(d, 0u, clipped(input_part(d, 2u, j, xrow) + recurrent_part(d, 2u, j, hrow) + pf * c_prev));
    float cg = act(d, 1u, clipped(input_part(d, 3u, j, xrow) + recurrent_part(d, 3u, j, hrow)));
    float c_new = fg * c_prev + ig * cg;
    float og = act(d, 0u, clipped(input_part(d, 1u, j, xrow) + recurrent_part(d, 1u, j, hrow) + po * c_new));
    h_new = og * act(d, 2u, c_new);
    state[2u * n + i] = c_new;
  }
  state[next + i] = h_new;
  if (has(kY)) y[y_index(t, d, b, j)] = ST(h_new);
}
