// Resize over the last two dims, nearest or linear: each output value mixes at most two input
// rows and two input columns. Where and with what weights come from a table the host computed
// with the CPU engine's formulas (ops/resize_geometry.h), so that both backends pick the
// same input at exact halves: per output row, then per output column, (index 0, index 1,
// weight 0, weight 1). The sums are the CPU engine's: wa * (w0 a0 + w1 a1) + wb * (w0 b0 + w1 b1).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"

layout(constant_id = 1) const bool LINEAR_Y = false;  // two input rows per output row
layout(constant_id = 2) const bool LINEAR_X = false;  // two input columns per output column

layout(std430, binding = 0) readonly buffer X { act_t x[]; };
layout(std430, binding = 1) readonly buffer T { uvec4 taps[]; };  // OH rows, then OW columns
layout(std430, binding = 2) writeonly buffer Y { act_t y[]; };
layout(push_constant, std430) uniform Push {
  uint n;  // output elements: planes * OH * OW
  uint H, W, OH, OW;
} p;

float along(uint row, uvec4 c) {
  float v = uintBitsToFloat(c.z) * LD(x[row + c.x]);
  if (LINEAR_X) v += uintBitsToFloat(c.w) * LD(x[row + c.y]);
  return v;
}

void main() {
  uint i = flat_id();
  if (i >= p.n) return;
  uint ox = i % p.OW, t = i / p.OW;
  uint oy = t % p.OH, plane = t / p.OH;
  uvec4 r = taps[oy], c = taps[p.OH + ox];
  uint base = plane * p.H * p.W;
  float v = uintBitsToFloat(r.z) * along(base + r.x * p.W, c);
  if (LINEAR_Y) v += uintBitsToFloat(r.w) * along(base + r.y * p.W, c);
  y[i] = ST(v);
}
