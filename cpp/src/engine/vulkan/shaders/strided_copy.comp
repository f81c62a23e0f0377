// y[i] = x[base + sum over dims of index * stride]: Transpose (permuted strides), Slice
// (strides times steps, negative for reversed runs), Expand (stride 0 where broadcast). The
// output's dims are collapsed to at most 6. Words: any 4-byte type moves bit for bit.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"

layout(std430, binding = 0) readonly buffer X { word_t x[]; };
layout(std430, binding = 1) writeonly buffer Y { word_t y[]; };
layout(push_constant, std430) uniform Push {
  uint n;
  uint rank;
  int base;
  uint dims[6];
  int strides[6];
} p;

void main() {
  uint i = flat_id();
  if (i >= p.n) return;
  uint r = i;
  int s = p.base;
  for (int d = int(p.rank) - 1; d >= 0; --d) {
    s += int(r % p.dims[d]) * p.strides[d];
    r /= p.dims[d];
  }
  y[i] = x[s];
}
