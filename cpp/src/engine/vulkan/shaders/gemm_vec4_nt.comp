// gemm_vec4.comp for a transposed B: C[b] = act(alpha * A[b] @ B[b]^T + beta * bias + sum[b])
// with B stored as N rows of K (a Linear layer's weight, Gemm's transB = 1). Each invocation
// computes RM rows x CN columns of C as dot products of A's and B's rows, read as vec4s along
// K (RM + CN loads for RM CN vec4 multiply-adds per step of 4), then sums each vec4 of partial
// products. For CPU-type devices (lavapipe), like gemm_vec4.comp.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"
#include "activation.glsl"

layout(constant_id = 4) const bool HAS_BIAS = false;
layout(constant_id = 5) const bool HAS_SUM = false;
const uint RM = 4;  // rows per invocation
const uint CN = 4;  // columns per invocation

#ifdef TETHER_FP16
#define act4_t f16vec4
#else
#define act4_t vec4
#endif

layout(std430, binding = 0) readonly buffer A { act4_t a[]; };
layout(std430, binding = 1) readonly buffer B { act4_t b[]; };
layout(std430, binding = 2) readonly buffer Bias { act_t bias[]; };
layout(std430, binding = 3) readonly buffer Sum { act_t sum[]; };
layout(std430, binding = 4) writeonly buffer C { act_t c[]; };
#include "gemm_push.glsl"

void main() {
  // Invocation x takes columns x + g * (the grid's width) for g < CN.
  const uint width = gl_WorkGroupSize.x * gl_NumWorkGroups.x;
  const uint row0 = gl_WorkGroupID.y * RM;
  const uint batch = gl_WorkGroupID.z;
  uint aoff, boff;
  batch_offsets(batch, aoff, boff);
  const uint k4 = p.K / 4;
  uint arow[RM], brow[CN];
  for (uint i = 0; i < RM; ++i) arow[i] = (aoff + min(row0 + i, p.M - 1) * p.a_rs) / 4;
  for (uint g = 0; g < CN; ++g) brow[g] = (boff + min(gl_GlobalInvocationID.x + g * width, p.N - 1) * p.b_cs) / 4;
  vec4 acc[RM][CN];
  for (uint i = 0; i < RM; ++i)
    for (uint g = 0; g < CN; ++g) acc[i][g] = vec4(0.0);
  for (uint kq = 0; kq < k4; ++kq) {
    vec4 av[RM];
    for (uint i = 0; i < RM; ++i) av[i] = vec4(a[arow[i] + kq]);
    for (uint g = 0; g < CN; ++g) {
      const vec4 bv = vec4(b[brow[g] + kq]);
      for (uint i = 0; i < RM; ++i) acc[i][g] += av[i] * bv;
    }
  }
  for (uint g = 0; g < CN; ++g) {
    const uint col = gl_GlobalInvocationID.x + g * width;
    if (col >= p.N) continue;
    for (uint i = 0; i < RM; ++i) {
      const uint row = row0 + i;
      if (row >= p.M) continue;
      const vec4 s = acc[i][g];
      float v = p.alpha * ((s.x + s.y) + (s.z + s.w));
      if (HAS_BIAS) v += p.beta * LD(bias[row * p.bias_rs + col * p.bias_cs]);
      const uint o = (batch * p.M + row) * p.N + col;
      if (HAS_SUM) v += LD(sum[o]);
      c[o] = ST(activate(v));
    }
  }
}
