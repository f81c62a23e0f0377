// C[b] = act(alpha * op(A)[b] @ op(B)[b] + beta * bias + sum[b]): Gemm, MatMul (batched, with
// numpy broadcasting of the batch dims), their fused forms, and 1x1 convolutions. A TS x TS
// workgroup computes a (TS R) x (TS R) tile of C, staging (TS R) x TS slabs of A and TS x (TS R)
// slabs of B in shared memory; each invocation keeps R x R outputs (rows ty + r TS, columns
// tx + c TS) in registers, so that each value it reads from shared memory serves R products.
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
layout(constant_id = 8) const uint R = 1;    // outputs per invocation along rows and columns: 1 to 4
const uint kMaxR = 4;

layout(std430, binding = 0) readonly buffer A { act_t a[]; };
layout(std430, binding = 1) readonly buffer B { act_t b[]; };
layout(std430, binding = 2) readonly buffer Bias { act_t bias[]; };
layout(std430, binding = 3) readonly buffer Sum { act_t sum[]; };
layout(std430, binding = 4) writeonly buffer C { act_t c[]; };
#include "gemm_push.glsl"

shared float As[TS * R * TS];  // row-major, TS R rows of TS
shared float Bs[TS * TS * R];  // row-major, TS rows of TS R

void main() {
  uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
  uint row0 = gl_WorkGroupID.y * TS * R, col0 = gl_WorkGroupID.x * TS * R;
  uint batch = gl_WorkGroupID.z;
  uint aoff, boff;
  batch_offsets(batch, aoff, boff);
  float acc[kMaxR][kMaxR];
  for (uint i = 0; i < R; ++i)
    for (uint j = 0; j < R; ++j) acc[i][j] = 0.0;
  for (uint k0 = 0; k0 < p.K; k0 += TS) {
    uint ka = k0 + tx, kb = k0 + ty;
    for (uint l = 0; l < R; ++l) {
      uint row = row0 + ty + l * TS, col = col0 + tx + l * TS;
      As[(ty + l * TS) * TS + tx] = row < p.M && ka < p.K ? LD(a[aoff + row * p.a_rs + ka * p.a_cs]) : 0.0;
      Bs[ty * TS * R + tx + l * TS] = kb < p.K && col < p.N ? LD(b[boff + kb * p.b_rs + col * p.b_cs]) : 0.0;
    }
    barrier();
    for (uint k = 0; k < TS; ++k) {
      float av[kMaxR], bv[kMaxR];
      for (uint i = 0; i < R; ++i) av[i] = As[(ty + i * TS) * TS + k];
      for (uint j = 0; j < R; ++j) bv[j] = Bs[k * TS * R + tx + j * TS];
      for (uint i = 0; i < R; ++i)
        for (uint j = 0; j < R; ++j) acc[i][j] += av[i] * bv[j];
    }
    barrier();
  }
  for (uint i = 0; i < R; ++i)
    for (uint j = 0; j < R; ++j) {
      uint row = row0 + ty + i * TS, col = col0 + tx + j * TS;
      if (row >= p.M || col >= p.N) continue;
      float v = p.alpha * acc[i][j];
      if (HAS_BIAS) v += p.beta * LD(bias[row * p.bias_rs + col * p.bias_cs]);
      uint o = (batch * p.M + row) * p.N + col;
      if (HAS_SUM) v += LD(sum[o]);
      c[o] = ST(activate(v));
    }
}
