// MaxPool and AveragePool over the last two dims (1-D as height 1): pads, strides, dilations;
// the average counts the padded area when INCLUDE_PAD. As the CPU engine: a NaN never
// replaces a running maximum, and an average over no element is 0.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"

layout(constant_id = 1) const bool IS_MAX = true;
layout(constant_id = 2) const bool INCLUDE_PAD = false;

layout(std430, binding = 0) readonly buffer X { act_t x[]; };
layout(std430, binding = 1) writeonly buffer Y { act_t y[]; };
layout(push_constant, std430) uniform Push {
  uint n;            // output elements: planes * OH * OW
  uint H, W, OH, OW;
  int KH, KW, SH, SW, PH, PW, PEH, PEW, DH, DW;  // PH, PW: pads at the start; PEH, PEW: at the end
} p;

void main() {
  uint i = flat_id();
  if (i >= p.n) return;
  uint ow = i % p.OW, t = i / p.OW;
  uint oh = t % p.OH, plane = t / p.OH;
  int h0 = int(oh) * p.SH - p.PH, w0 = int(ow) * p.SW - p.PW;
  uint base = plane * p.H * p.W;
  float acc = IS_MAX ? -kInf : 0.0;
  int valid = 0, padded = 0;
  for (int kh = 0; kh < p.KH; ++kh) {
    int ih = h0 + kh * p.DH;
    for (int kw = 0; kw < p.KW; ++kw) {
      int iw = w0 + kw * p.DW;
      if (ih >= -p.PH && ih < int(p.H) + p.PEH && iw >= -p.PW && iw < int(p.W) + p.PEW) ++padded;
      if (ih < 0 || ih >= int(p.H) || iw < 0 || iw >= int(p.W)) continue;
      ++valid;
      float v = LD(x[base + uint(ih) * p.W + uint(iw)]);
      if (IS_MAX) acc = v > acc ? v : acc;
      else acc += v;
    }
  }
  if (!IS_MAX) {
    int count = INCLUDE_PAD ? padded : valid;
    acc = count > 0 ? acc / float(count) : 0.0;
  }
  y[i] = ST(acc);
}
