// ConvTranspose, 1-D (as height 1) and 2-D, NCHW, with groups, strides, dilations and pads:
// each output element gathers the input elements whose scatter reaches it. The weights are
// [C, M / groups, KH, KW]. One invocation computes one output element.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"

layout(constant_id = 1) const bool HAS_BIAS = false;

layout(std430, binding = 0) readonly buffer X { act_t x[]; };
layout(std430, binding = 1) readonly buffer W { act_t w[]; };
layout(std430, binding = 2) readonly buffer Bias { act_t bias[]; };
layout(std430, binding = 3) writeonly buffer Y { act_t y[]; };
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
  uint cg = p.C / p.G, mg = p.M / p.G, g = m / mg, mo = m % mg;
  float acc = HAS_BIAS ? LD(bias[m]) : 0.0;
  for (uint c = 0; c < cg; ++c) {
    uint ci = g * cg + c;
    uint xbase = (b * p.C + ci) * p.H * p.W;
    uint wbase = (ci * mg + mo) * p.KH * p.KW;
    for (uint kh = 0; kh < p.KH; ++kh) {
      int th = int(oh) + p.PH - int(kh) * p.DH;
      if (th < 0 || th % p.SH != 0) continue;
      uint ih = uint(th / p.SH);
      if (ih >= p.H) continue;
      for (uint kw = 0; kw < p.KW; ++kw) {
        int tw = int(ow) + p.PW - int(kw) * p.DW;
        if (tw < 0 || tw % p.SW != 0) continue;
        uint iw = uint(tw / p.SW);
        if (iw >= p.W) continue;
        acc += LD(x[xbase + ih * p.W + iw]) * LD(w[wbase + kh * p.KW + kw]);
      }
    }
  }
  y[i] = ST(acc);
}
