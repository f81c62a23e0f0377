// Gather with indices computed at run time (int32 or int64 words): the data seen as
// [outer, axis_len, inner], the output as [outer, count, inner], elements of any kind
// (elements.glsl). An index outside [-axis_len, axis_len) sets the fault words (the run then
// raises ArgumentError) and writes nothing.
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
layout(push_constant, std430) uniform Push { uint n, count, inner, axis_len; } p;

void main() {
  uint i = flat_id();
  if (i >= p.n) return;
  uint k = i % p.inner, t = i / p.inner;
  uint j = t % p.count, o = t / p.count;
  int lo = INDEX64 ? indices[2u * j] : indices[j];
  int hi = INDEX64 ? indices[2u * j + 1u] : (lo < 0 ? -1 : 0);
  int len = int(p.axis_len);
  if (hi != (lo < 0 ? -1 : 0) || lo < -len || lo >= len) {
    fault[1] = uint(lo);
    fault[2] = uint(hi);
    fault[0] = 1u;
    return;
  }
  uint a = uint(lo < 0 ? lo + len : lo);
  uint src = (o * p.axis_len + a) * p.inner + k;
  MOVE(y, i, x, src, KIND)
}
