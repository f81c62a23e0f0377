// C[b] = act(alpha * A[b] @ B[b] + beta * bias + sum[b]), as gemm.comp, for products whose rows
// of A, rows of B and rows of C are runs of whole vec4s (K, N and the row strides multiples of
// 4, A and B not transposed): each invocation computes RM rows x 4 CN columns of C in registers,
// reading A and B from memory as vec4s, with no shared memory and no barrier.
//
// This is the form for devices that run invocations as lanes of a CPU's vector registers
// (lavapipe): there every load from a storage buffer or from shared memory is a loop over the
// lanes, so the cost of a product is its number of load instructions, and a vec4 load brings
// four floats for one. Per step of 4 along K an invocation issues RM + 4 CN loads for
// 4 RM CN vec4 multiply-adds (RM = 8, CN = 2: 16 loads for 64), where the shared-memory tiles of
// gemm.comp take two loads per four multiply-adds. The rows of a workgroup are the same for
// all its invocations (they differ by columns only), so A's loads are uniform.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"
#include "activation.glsl"

layout(constant_id = 4) const bool HAS_BIAS = false;
layout(constant_id = 5) const bool HAS_SUM = false;
const uint RM = 8;  // rows per invocation
const uint CN = 2;  // vec4s of columns per invocation

#ifdef TETHER_FP16
#define act4_t f16vec4
#else
#define act4_t vec4
#endif

layout(std430, binding = 0) readonly buffer A { act4_t a[]; };
layout(std430, binding = 1) readonly buffer B { act4_t b[]; };
layout(std430, binding = 2) readonly buffer Bias { act_t bias[]; };
layout(std430, binding = 3) readonly buffer Sum { act4_t sum[]; };
layout(std430, binding = 4) writeonly buffer C { act4_t c[]; };
#include "gemm_push.glsl"

void main() {
  // Invocation x takes column vec4s x + g * (the workgroup's width) for g < CN: neighbouring
  // invocations read neighbouring vec4s of B.
  const uint width = gl_WorkGroupSize.x * gl_NumWorkGroups.x;
  const uint row0 = gl_WorkGroupID.y * RM;
  const uint batch = gl_WorkGroupID.z;
  uint aoff, boff;
  batch_offsets(batch, aoff, boff);
  const uint n4 = p.N / 4, k4 = p.K / 4;
  uint cols[CN];
  for (uint g = 0; g < CN; ++g) cols[g] = min(gl_GlobalInvocationID.x + g * width, n4 - 1);
  // Rows past M read the last row (any valid memory) and are not stored.
  uint arow[RM];
  for (uint i = 0; i < RM; ++i) arow[i] = (aoff + min(row0 + i, p.M - 1) * p.a_rs) / 4;
  vec4 acc[RM][CN];
  for (uint i = 0; i < RM; ++i)
    for (uint g = 0; g < CN; ++g) acc[i][g] = vec4(0.0);
  uint brow = boff / 4;
  const uint bstep = p.b_rs / 4;
  for (uint kq = 0; kq < k4; ++kq) {
    vec4 av[RM];
    for (uint i = 0; i < RM; ++i) av[i] = vec4(a[arow[i] + kq]);
    for (uint kk = 0; kk < 4; ++kk) {
      for (uint g = 0; g < CN; ++g) {
        const vec4 bv = vec4(b[brow + cols[g]]);
        for (uint i = 0; i < RM; ++i) acc[i][g] += av[i][kk] * bv;
      }
      brow += bstep;
    }
  }
  for (uint g = 0; g < CN; ++g) {
    const uint col4 = gl_GlobalInvocationID.x + g * width;
    if (col4 >= n4) continue;
    for (uint i = 0; i < RM; ++i) {
      const uint row = row0 + i;
      if (row >= p.M) continue;
      vec4 v = p.alpha * acc[i][g];
      const uint o4 = ((batch * p.M + row) * p.N) / 4 + col4;
      for (uint e = 0; e < 4; ++e) {
        if (HAS_BIAS) v[e] += p.beta * LD(bias[row * p.bias_rs + (col4 * 4 + e) * p.bias_cs]);
      }
      if (HAS_SUM) v += vec4(sum[o4]);
      for (uint e = 0; e < 4; ++e) v[e] = activate(v[e]);
      c[o4] = act4_t(v);
    }
  }
}
