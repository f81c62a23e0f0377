// DequantizeLinear from int8, uint8 or int32 (a bias), per tensor or per axis:
// y = float(x - zero_point) * scale, as on the CPU engine (the float product correctly rounded).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
#include "q_common.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"

layout(constant_id = 1) const bool SIGNED = true;  // int8 input, else uint8
layout(constant_id = 2) const bool INT32 = false;  // int32 input (binding 3)

layout(std430, binding = 0) readonly buffer X { uint8_t x[]; };
layout(std430, binding = 1) readonly buffer Params { uvec2 params[]; };  // per scale: its bits, the zero point
layout(std430, binding = 2) writeonly buffer Y { act_t y[]; };
layout(std430, binding = 3) readonly buffer X32 { int x32[]; };
layout(push_constant, std430) uniform Push {
  uint n;      // elements
  uint len;    // scales (1 per tensor, else the axis's length)
  uint inner;  // elements after the axis
} p;

void main() {
  uint i = flat_id();
  if (i >= p.n) return;
  uvec2 q = params[(i / p.inner) % p.len];
  precise float v = float((INT32 ? x32[i] : byte_value(uint(x[i]), SIGNED)) - int(q.y)) * uintBitsToFloat(q.x);
  y[i] = ST(v);
}
