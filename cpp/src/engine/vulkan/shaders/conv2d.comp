// Direct 2-D convolution (1-D as height 1), NCHW, any groups, strides, dilations and pads,
// with the bias, a summand of the output's shape (a fused residual Add) and an activation
// fused. One invocation computes one output element.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"
#include "activation.glsl"

layout(constant_id = 4) const bool HAS_BIAS = false;
layout(constant_id = 5) const bool HAS_SUM = false;

layout(std430, binding = 0) readonly buffer X { act_t x[]; };
layout(std430, binding = 1) readonly buffer W { act_t w[]; };
layout(std430, binding = 2) readonly buffer Bias { act_t bias[]; };
layout(std430, binding = 3) readonly buffer Sum { act_t sum[]; };
layout(std430, binding = 4) writeonly buffer Y { act_t y[]; };
layout(push_constant, std430) uniform Push {
  uint n;                 // output elements: N * M * OH * OW
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
  uint m = t % p.M, b = t / p.M;
  uint cg = p.C / p.G, mg = p.M / p.G, g = m / mg;
  int h0 = int(oh) * p.SH - p.PH, w0 = int(ow) * p.SW - p.PW;
  float acc = 0.0;
  for (uint c = 0; c < cg; ++c) {
    uint xbase = (b * p.C + g * cg + c) * p.H * p.W;
    uint wbase = (m * cg + c) * p.KH * p.KW;
    for (uint kh = 0; kh < p.KH; ++kh) {
      int ih = h0 + int(kh) * p.DH;
      if (ih < 0 || ih >= int(p.H)) continue;
      for (uint kw = 0; kw < p.KW; ++kw) {
        int iw = w0 + int(kw) * p.DW;
        if (iw < 0 || iw >= int(p.W)) continue;
        acc += LD(x[xbase + uint(ih) * p.W + uint(iw)]) * LD(w[wbase + kh * p.KW + kw]);
      }
    }
  }
  if (HAS_BIAS) acc += LD(bias[m]);
  if (HAS_SUM) acc += LD(sum[i]);
  y[i] = ST(activate(acc));
}
