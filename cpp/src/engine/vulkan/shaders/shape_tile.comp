// Tile: output element k_0..k_r reads x at sum over dims of (k_d mod in_d) * stride_d; the
// repeats follow from the output's dims, which the plan knows.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"
#include "elements.glsl"

layout(constant_id = 1) const uint KIND = 0;

ELEMENT_VIEWS(0, x, readonly)
ELEMENT_VIEWS(1, y, writeonly)
layout(push_constant, std430) uniform Push {
  uint n, rank;
  uint dims[6];  // the output's
  uint in_dims[6];
  uint strides[6];  // the input's, row-major
} p;

void main() {
  uint i = flat_id();
  if (i >= p.n) return;
  uint rest = i, src = 0;
  for (int d = int(p.rank) - 1; d >= 0; --d) {
    uint k = rest % p.dims[d];
    rest /= p.dims[d];
    src += (k % p.in_dims[d]) * p.strides[d];
  }
  MOVE(y, i, x, src, KIND)
}
