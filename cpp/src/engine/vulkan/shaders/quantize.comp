// QuantizeLinear, per tensor or per axis, to int8 or uint8:
// y = saturate(round_half_even(x / scale) + zero_point), the quotient a float32 division
// (never a product with the reciprocal), as on the CPU engine.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
#include "q_common.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"

layout(constant_id = 1) const bool SIGNED = true;  // int8 output, else uint8

layout(std430, binding = 0) readonly buffer X { act_t x[]; };
layout(std430, binding = 1) readonly buffer Params { uvec2 params[]; };  // per scale: its bits, the zero point
layout(std430, binding = 2) writeonly buffer Y { uint8_t y[]; };
layout(push_constant, std430) uniform Push {
  uint n;      // elements
  uint len;    // scales (1 per tensor, else the axis's length)
  uint inner;  // elements after the axis
} p;

void main() {
  uint i = flat_id();
  if (i >= p.n) return;
  uvec2 q = params[(i / p.inner) % p.len];
  int zero = int(q.y);
  precise float v = LD(x[i]) / uintBitsToFloat(q.x);
  y[i] = byte_of(requantize(v, float((SIGNED ? -128 : 0) - zero), float((SIGNED ? 127 : 255) - zero), zero));
}
