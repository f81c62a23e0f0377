// Softmax and LogSoftmax along one axis: the tensor seen as [outer, len, inner], one
// invocation per (outer, inner) row.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x_id = 0) in;
#include "common.glsl"

layout(constant_id = 1) const bool LOG = false;

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
layout(push_constant, std430) uniform Push { uint rows, len, inner; } p;

void main() {
  uint r = flat_id();
  if (r >= p.rows) return;
  uint base = (r / p.inner) * p.len * p.inner + r % p.inner;
  float m = -kInf;
  for (uint j = 0; j < p.len; ++j) m = max(m, x[base + j * p.inner]);
  float s = 0.0;
  for (uint j = 0; j < p.len; ++j) s += exp(x[base + j * p.inner] - m);
  if (LOG) {
    float l = m + log(s);
    for (uint j = 0; j < p.len; ++j) y[base + j * p.inner] = x[base + j * p.inner] - l;
  } else {
    float inv = 1.0 / s;
    for (uint j = 0; j < p.len; ++j) y[base + j * p.inner] = exp(x[base + j * p.inner] - m) * inv;
  }
}
