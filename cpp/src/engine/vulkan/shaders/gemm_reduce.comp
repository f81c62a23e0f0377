// The second half of a GEMM or implicit-GEMM convolution split along K (gemm_tiled.glsl):
// C[z][m][n] = act(alpha * (sum over s of partial[z][s][m][n]) + beta * bias + sum[z][m][n]),
// the S partial sums added in order (so a run gives the same bits every time). The bias of
// batch element z, row m and column n is bias[((z % G) M + m) bias_rs + n bias_cs]: G is 1 for
// Gemm and MatMul, the convolution's groups otherwise (its bias per output channel).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"
#include "activation.glsl"

layout(constant_id = 4) const bool HAS_BIAS = false;
layout(constant_id = 5) const bool HAS_SUM = false;

layout(std430, binding = 0) readonly buffer Partial { float partial[]; };
layout(std430, binding = 1) readonly buffer Bias { act_t bias[]; };
layout(std430, binding = 2) readonly buffer Sum { act_t sum[]; };
layout(std430, binding = 3) writeonly buffer C { act_t c[]; };
layout(push_constant, std430) uniform Push {
  uint total;  // batch elements times M times N
  uint M, N, S, G;
  uint bias_rs, bias_cs;
  float alpha, beta;
} p;

void main() {
  const uint i = flat_id();
  if (i >= p.total) return;
  const uint n = i % p.N, t = i / p.N, m = t % p.M, z = t / p.M;
  float v = 0.0;
  for (uint s = 0; s < p.S; ++s) v += partial[((z * p.S + s) * p.M + m) * p.N + n];
  v *= p.alpha;
  if (HAS_BIAS) v += p.beta * LD(bias[((z % p.G) * p.M + m) * p.bias_rs + n * p.bias_cs]);
  if (HAS_SUM) v += LD(sum[i]);
  c[i] = ST(activate(v));
}
