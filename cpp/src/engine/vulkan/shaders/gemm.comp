// C[b] = act(alpha * op(A)[b] @ op(B)[b] + beta * bias + sum[b]): Gemm, MatMul (batched, with
// numpy broadcasting of the batch dims), their fused forms, and 1x1 convolutions. A TS x TS
// workgroup computes a TS x TS tile of C, staging TS x TS tiles of A and B in shared memory.
// Strides describe op(A) as M x K and op(B) as K x N, so transposes cost nothing.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
layout(local_size_x_id = 0, local_size_y_id = 6) in;
#include "common.glsl"
#include "activation.glsl"

layout(constant_id = 4) const bool HAS_BIAS = false;
layout(constant_id = 5) const bool HAS_SUM = false;
layout(constant_id = 7) const uint TS = 16;  // equals the workgroup's x and y sizes

layout(std430, binding = 0) readonly buffer A { act_t a[]; };
layout(std430, binding = 1) readonly buffer B { act_t b[]; };
layout(std430, binding = 2) readonly buffer Bias { act_t bias[]; };
layout(std430, binding = 3) readonly buffer Sum { act_t sum[]; };
layout(std430, binding = 4) writeonly buffer C { act_t c[]; };
layout(push_constant, std430) uniform Push {
  uint M, N, K;
  uint bdims[4];          // the batch dims, outermost first (padded with 1)
  uint a_bs[4], b_bs[4];  // A's and B's strides along them (0 where broadcast)
  uint a_rs, a_cs;        // op(A)[i][k] = a[a_rs * i + a_cs * k]
  uint b_rs, b_cs;        // op(B)[k][j] = b[b_rs * k + b_cs * j]
  uint bias_rs, bias_cs;  // bias[i][j] = bias[bias_rs * i + bias_cs * j]
  float alpha, beta;
} p;

shared float As[TS * TS];
shared float Bs[TS * TS];

void main() {
  uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
  uint col = gl_WorkGroupID.x * TS + tx;
  uint row = gl_WorkGroupID.y * TS + ty;
  uint batch = gl_WorkGroupID.z;
  uint r = batch, aoff = 0, boff = 0;
  for (int d = 3; d >= 0; --d) {
    uint i = r % p.bdims[d];
    r /= p.bdims[d];
    aoff += i * p.a_bs[d];
    boff += i * p.b_bs[d];
  }
  float acc = 0.0;
  for (uint k0 = 0; k0 < p.K; k0 += TS) {
    uint ka = k0 + tx, kb = k0 + ty;
    As[ty * TS + tx] = row < p.M && ka < p.K ? LD(a[aoff + row * p.a_rs + ka * p.a_cs]) : 0.0;
    Bs[ty * TS + tx] = kb < p.K && col < p.N ? LD(b[boff + kb * p.b_rs + col * p.b_cs]) : 0.0;
    barrier();
    for (uint k = 0; k < TS; ++k) acc += As[ty * TS + k] * Bs[k * TS + tx];
    barrier();
  }
  if (row >= p.M || col >= p.N) return;
  float v = p.alpha * acc;
  if (HAS_BIAS) v += p.beta * LD(bias[row * p.bias_rs + col * p.bias_cs]);
  uint o = (batch * p.M + row) * p.N + col;
  if (HAS_SUM) v += LD(sum[o]);
  c[o] = ST(activate(v));
}
