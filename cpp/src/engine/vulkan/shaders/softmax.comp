// Softmax and LogSoftmax along one axis: the tensor seen as [outer, len, inner], one
// invocation per (outer, inner) row.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"

layout(constant_id = 1) const bool LOG = false;

layout(std430, binding = 0) readonly buffer X { act_t x[]; };
layout(std430, binding = 1) writeonly buffer Y { act_t y[]; };
layout(push_constant, std430) uniform Push { uint rows, len, inner; } p;

void main() {
  uint r = flat_id();
  if (r >= p.rows) return;
  uint base = (r / p.inner) * p.len * p.inner + r % p.inner;
  float m = -kInf;
  for (uint j = 0; j < p.len; ++j) m = max(m, LD(x[base + j * p.inner]));
  float s = 0.0;
  for (uint j = 0; j < p.len; ++j) s += exp(LD(x[base + j * p.inner]) - m);
  if (LOG) {
    float l = m + log(s);
    for (uint j = 0; j < p.len; ++j) y[base + j * p.inner] = ST(LD(x[base + j * p.inner]) - l);
  } else {
    float inv = 1.0 / s;
    for (uint j = 0; j < p.len; ++j) y[base + j * p.inner] = ST(exp(LD(x[base + j * p.inner]) - m) * inv);
  }
}
