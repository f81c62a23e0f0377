// Where: y = cond ? x : z, the three broadcast to y's dims (numpy rules; strides 0 where an
// operand is broadcast), any element kind for x, z and y (elements.glsl), cond as bytes.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"
#include "elements.glsl"

layout(constant_id = 1) const uint KIND = 0;

ELEMENT_VIEWS(0, c, readonly)
ELEMENT_VIEWS(1, x, readonly)
ELEMENT_VIEWS(2, z, readonly)
ELEMENT_VIEWS(3, y, writeonly)
layout(push_constant, std430) uniform Push {
  uint n, rank;
  uint dims[6];
  uint sc[6], sx[6], sz[6];
} p;

void main() {
  uint i = flat_id();
  if (i >= p.n) return;
  uint rest = i, ic = 0, ix = 0, iz = 0;
  for (int d = int(p.rank) - 1; d >= 0; --d) {
    uint k = rest % p.dims[d];
    rest /= p.dims[d];
    ic += k * p.sc[d];
    ix += k * p.sx[d];
    iz += k * p.sz[d];
  }
  if (c_b[ic] != uint8_t(0)) {
    MOVE(y, i, x, ix, KIND)
  } else {
    MOVE(y, i, z, iz, KIND)
  }
}
