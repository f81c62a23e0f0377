// Direct 2-D convolution (1-D as height 1), NCHW, any groups, strides, dilations and pads,
// with the bias, a summand of the output's shape (a fused residual Add) and an activation
// fused. One invocation computes PX consecutive output pixels of a row for OCB consecutive
// output channels of one group: each input value it loads serves OCB weights and each weight
// PX pixels, so that loads, not arithmetic, stop being what a pixel costs (on lavapipe every
// load is a loop over the vector's lanes: PX + OCB loads per PX OCB multiply-adds).
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
const uint PX = 4;  // output pixels per invocation, along the row

layout(std430, binding = 0) readonly buffer X { act_t x[]; };
layout(std430, binding = 1) readonly buffer W { act_t w[]; };
layout(std430, binding = 2) readonly buffer Bias { act_t bias[]; };
layout(std430, binding = 3) readonly buffer Sum { act_t sum[]; };
layout(std430, binding = 4) writeonly buffer Y { act_t y[]; };
layout(push_constant, std430) uniform Push {
  uint n;                 // invocations: N * (M / OCB) * OH * ceil(OW / PX)
  uint C, H, W;           // input channels and size
  uint M, OH, OW;         // output channels and size
  uint KH, KW;
  int SH, SW, PH, PW, DH, DW;  // strides, pads at the start, dilations
  uint G;                 // groups
} p;

void main() {
  uint i = flat_id();
  if (i >= p.n) return;
  uint qw = (p.OW + PX - 1) / PX;
  uint ow0 = (i % qw) * PX, t = i / qw;
  uint oh = t % p.OH;
  t /= p.OH;
  uint blocks = p.M / OCB;
  uint m0 = (t % blocks) * OCB, b = t / blocks;
  uint cg = p.C / p.G, mg = p.M / p.G, g = m0 / mg;
  uint taps = p.KH * p.KW, wstep = cg * taps;  // from one output channel's weights to the next
  int h0 = int(oh) * p.SH - p.PH, w0 = int(ow0) * p.SW - p.PW;
  float acc[kMaxOcb][PX];
  for (uint j = 0; j < OCB; ++j)
    for (uint q = 0; q < PX; ++q) acc[j][q] = 0.0;
  for (uint c = 0; c < cg; ++c) {
    uint xbase = (b * p.C + g * cg + c) * p.H * p.W;
    uint wbase = (m0 * cg + c) * taps;
    for (uint kh = 0; kh < p.KH; ++kh) {
      int ih = h0 + int(kh) * p.DH;
      if (ih < 0 || ih >= int(p.H)) continue;
      uint xrow = xbase + uint(ih) * p.W;
      for (uint kw = 0; kw < p.KW; ++kw) {
        float v[PX];
        for (uint q = 0; q < PX; ++q) {
          int iw = w0 + int(q) * p.SW + int(kw) * p.DW;
          v[q] = iw >= 0 && iw < int(p.W) ? LD(x[xrow + uint(iw)]) : 0.0;
        }
        uint k = wbase + kh * p.KW + kw;
        for (uint j = 0; j < OCB; ++j) {
          float wv = LD(w[k + j * wstep]);
          for (uint q = 0; q < PX; ++q) acc[j][q] += v[q] * wv;
        }
      }
    }
  }
  for (uint j = 0; j < OCB; ++j) {
    uint m = m0 + j;
    for (uint q = 0; q < PX; ++q) {
      uint ow = ow0 + q;
      if (ow >= p.OW) break;
      uint o = ((b * p.M + m) * p.OH + oh) * p.OW + ow;
      float v = acc[j][q];
      if (HAS_BIAS) v += LD(bias[m]);
      if (HAS_SUM) v += LD(sum[o]);
      y[o] = ST(activate(v));
    }
  }
}
