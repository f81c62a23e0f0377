// Data movement of 8-bit tensors (quant_shape.cc), a byte per invocation:
// y[y_base + sum of index * y_stride] = x[base + sum of index * stride] over the output's
// dims, collapsed to at most 6: Transpose (permuted strides), Slice (strides times steps,
// negative for reversed runs) and Concat (each input into its slab of the output, y_strides
// the output's). Bytes move as they are, so one build serves int8 and uint8.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
#include "q_common.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"

layout(std430, binding = 0) readonly buffer X { uint8_t x[]; };
layout(std430, binding = 1) writeonly buffer Y { uint8_t y[]; };
layout(push_constant, std430) uniform Push {
  uint n;
  uint rank;
  int base, y_base;
  uint dims[6];
  int strides[6];
  int y_strides[6];
} p;

void main() {
  uint i = flat_id();
  if (i >= p.n) return;
  uint r = i;
  int s = p.base, t = p.y_base;
  for (int d = int(p.rank) - 1; d >= 0; --d) {
    int k = int(r % p.dims[d]);
    s += k * p.strides[d];
    t += k * p.y_strides[d];
    r /= p.dims[d];
  }
  y[t] = x[s];
}
