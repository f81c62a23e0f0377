// Gather along an axis (indices checked when the plan is made; negative ones count from the
// end): the data seen as [outer, axis_len, inner], the output as [outer, count, inner].
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Data { word_t data[]; };
layout(std430, binding = 1) readonly buffer Indices { int indices[]; };
layout(std430, binding = 2) writeonly buffer Y { word_t y[]; };
layout(push_constant, std430) uniform Push { uint n, count, inner, axis_len; } p;

void main() {
  uint i = flat_id();
  if (i >= p.n) return;
  uint k = i % p.inner, t = i / p.inner;
  uint j = t % p.count, o = t / p.count;
  int at = indices[j];
  uint a = uint(at < 0 ? at + int(p.axis_len) : at);
  y[i] = data[(o * p.axis_len + a) * p.inner + k];
}
