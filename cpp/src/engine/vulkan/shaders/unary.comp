// y = f(x) element by element; f is chosen by specialisation (activation.glsl).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"
#include "activation.glsl"

layout(std430, binding = 0) readonly buffer X { act_t x[]; };
layout(std430, binding = 1) writeonly buffer Y { act_t y[]; };
layout(push_constant, std430) uniform Push { uint n; } p;

void main() {
  uint i = flat_id();
  if (i < p.n) y[i] = ST(activate(LD(x[i])));
}
