// MaxPool of an int8 or uint8 tensor over the last two dims (1-D as height 1): pads, strides,
// dilations; padding never wins. The maximum of quantized values is the quantized maximum
// (dequantization is increasing), which is how the QDQ pass leaves MaxPool on integers.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
#include "q_common.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"

layout(constant_id = 1) const bool SIGNED = true;

layout(std430, binding = 0) readonly buffer X { uint8_t x[]; };
layout(std430, binding = 1) writeonly buffer Y { uint8_t y[]; };
layout(push_constant, std430) uniform Push {
  uint n;            // output elements: planes * OH * OW
  uint H, W, OH, OW;
  int KH, KW, SH, SW, PH, PW, DH, DW;  // PH, PW: pads at the start
} p;

void main() {
  uint i = flat_id();
  if (i >= p.n) return;
  uint ow = i % p.OW, t = i / p.OW;
  uint oh = t % p.OH, plane = t / p.OH;
  int h0 = int(oh) * p.SH - p.PH, w0 = int(ow) * p.SW - p.PW;
  uint base = plane * p.H * p.W;
  int acc = SIGNED ? -128 : 0;
  for (int kh = 0; kh < p.KH; ++kh) {
    int ih = h0 + kh * p.DH;
    if (ih < 0 || ih >= int(p.H)) continue;
    for (int kw = 0; kw < p.KW; ++kw) {
      int iw = w0 + kw * p.DW;
      if (iw < 0 || iw >= int(p.W)) continue;
      acc = max(acc, byte_value(uint(x[base + uint(ih) * p.W + uint(iw)]), SIGNED));
    }
  }
  y[i] = byte_of(acc);
}
