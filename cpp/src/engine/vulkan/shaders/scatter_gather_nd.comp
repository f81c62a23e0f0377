// GatherND: output element i is element k of the slice that index tuple t = i / slice points
// at (k = i % slice): data offset (t / per_batch) * batch_stride + sum over j of idx[t q + j]
// * strides[j], negative indices from the end. Indices are int32 or int64 words; one outside
// [-dims[j], dims[j]) sets the fault words (the run then raises ArgumentError).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"
#include "elements.glsl"

layout(constant_id = 1) const uint KIND = 0;
layout(constant_id = 2) const bool INDEX64 = true;

ELEMENT_VIEWS(0, x, readonly)
layout(std430, binding = 1) readonly buffer Indices { int indices[]; };
ELEMENT_VIEWS(2, y, writeonly)
layout(std430, binding = 3) buffer Fault { uint fault[]; };
layout(push_constant, std430) uniform Push {
  uint n, slice, q, per_batch, batch_stride;
  int dims[6];
  uint strides[6];
} p;

void main() {
  uint i = flat_id();
  if (i >= p.n) return;
  uint t = i / p.slice, k = i % p.slice;
  uint off = (t / p.per_batch) * p.batch_stride;
  for (uint j = 0; j < p.q; ++j) {
    uint at = t * p.q + j;
    int lo = INDEX64 ? indices[2u * at] : indices[at];
    int hi = INDEX64 ? indices[2u * at + 1u] : (lo < 0 ? -1 : 0);
    if (hi != (lo < 0 ? -1 : 0) || lo < -p.dims[j] || lo >= p.dims[j]) {
      fault[1] = uint(lo);
      fault[2] = uint(hi);
      fault[0] = 1u;
      return;
    }
    off += uint(lo < 0 ? lo + p.dims[j] : lo) * p.strides[j];
  }
  MOVE(y, i, x, off + k, KIND)
}
