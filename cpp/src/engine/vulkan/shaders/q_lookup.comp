// ai.tether QLinearLookup: y[i] = table[x[i]], each an 8-bit byte, the table the 256 values
// passes/qdq_lookup.cc computed for DequantizeLinear -> op -> QuantizeLinear.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
#include "q_common.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"

layout(std430, binding = 0) readonly buffer X { uint8_t x[]; };
layout(std430, binding = 1) readonly buffer Table { uint8_t table[]; };
layout(std430, binding = 2) writeonly buffer Y { uint8_t y[]; };
layout(push_constant, std430) uniform Push { uint n; } p;

void main() {
  uint i = flat_id();
  if (i >= p.n) return;
  y[i] = table[uint(x[i])];
}
