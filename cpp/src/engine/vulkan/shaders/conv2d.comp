// Direct 2-D convolution (1-D as height 1), NCHW, any groups, strides, dilations and pads,
// with the bias, a summand of the output's shape (a fused residual Add) and an activation
// fused. One invocation computes one output pixel for OCB consecutive output channels of one
// group: each input value it loads serves OCB weights, so that loads of the input, not
// arithmetic, stop being what a pixel costs.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"
#include "activation.glsl"

layout(constant_id = 4) const bool HAS_BIAS = false;
layout(constant_id = 5) const bool HAS_SUM = false;
layout(constant_id = 6) const uint OCB = 1;  // output channels per invocation: 1, 2, 4 or 8, dividing M / G
const uint kMaxOcb = 8;

layout(std430, binding = 0) readonly buffer X { act_t x[]; };
layout(std430, binding = 1) readonly buffer W { act_t w[]; };
layout(std430, binding = 2) readonly buffer Bias { act_t bias[]; };
layout(std430, binding = 3) readonly buffer Sum { act_t sum[]; };
layout(std430, binding = 4) writeonly buffer Y { act_t y[]; };
layout(push_constant, std430) uniform Push {
  uint n;                 // invocations: N * (M / OCB) * OH * OW
  uint C, H, W;           // input channels and size
  uint M, OH, OW;         // output channels and size
  uint KH, KW;
  int SH, SW, PH, PW, DH, DW;  // strides, pads at the start, dilations
  uint G;                 // groups
} p;

void main() {
  uint i = flat_id();
  if (i >= p.n) return;
  uint ow = i % p.OW, t = i / p.OW;
  uint oh = t % p.OH;
  t /= p.OH;
  uint blocks = p.M / OCB;
  uint m0 = (t % blocks) * OCB, b = t / blocks;
  uint cg = p.C / p.G, mg = p.M / p.G, g = m0 / mg;
  uint taps = p.KH * p.KW, wstep = cg * taps;  // from one output channel's weights to the next
  int h0 = int(oh) * p.SH - p.PH, w0 = int(ow) * p.SW - p.PW;
  float acc[kMaxOcb];
  for (uint j = 0; j < OCB; ++j) acc[j] = 0.0;
  for (uint c = 0; c < cg; ++c) {
    uint xbase = (b * p.C + g * cg + c) * p.H * p.W;
    uint wbase = (m0 * cg + c) * taps;
    for (uint kh = 0; kh < p.KH; ++kh) {
      int ih = h0 + int(kh) * p.DH;
      if (ih < 0 || ih >= int(p.H)) continue;
      for (uint kw = 0; kw < p.KW; ++kw) {
        int iw = w0 + int(kw) * p.DW;
        if (iw < 0 || iw >= int(p.W)) continue;
        float v = LD(x[xbase + uint(ih) * p.W + uint(iw)]);
        uint k = wbase + kh * p.KW + kw;
        for (uint j = 0; j < OCB; ++j) acc[j] += v * LD(w[k + j * wstep]);
      }
    }
  }
  for (uint j = 0; j < OCB; ++j) {
    uint m = m0 + j;
    uint o = ((b * p.M + m) * p.OH + oh) * p.OW + ow;
    float v = acc[j];
    if (HAS_BIAS) v += LD(bias[m]);
    if (HAS_SUM) v += LD(sum[o]);
    y[o] = ST(activate(v));
  }
}
