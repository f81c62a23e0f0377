// TopK along an axis, one invocation per lane (the data seen as [outer, len, inner]): the k
// wanted elements in order, found one after another, each the first in the order (value,
// then lower index; NaN the largest value) after the one before it: O(k len) per lane, for the
// small k models take. Values of float32, int32 or int64 (elements.glsl); int64 indices.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"
#include "elements.glsl"

layout(constant_id = 1) const uint KIND = 0;
layout(constant_id = 2) const bool LARGEST = true;

ELEMENT_VIEWS(0, x, readonly)
ELEMENT_VIEWS(1, y, writeonly)
layout(std430, binding = 2) writeonly buffer Indices { int indices[]; };
layout(push_constant, std430) uniform Push { uint lanes, len, inner, k, write_values, write_indices; } p;

// Whether element (a at ia) comes before (b at ib) in the output's order.
bool before(uint ia, uint ib, uint base) {
  uint pa = base + ia * p.inner, pb = base + ib * p.inner;
  int c;
  if (KIND == kFloat) {
    float a = LD(x_f[pa]), b = LD(x_f[pb]);
    bool na = isnan(a), nb = isnan(b);
    if (na || nb) return na && nb ? ia < ib : (LARGEST ? na : nb);
    c = a < b ? -1 : a > b ? 1 : 0;
  } else {
    c = compare_ints(LOAD_INT(x, KIND, pa), LOAD_INT(x, KIND, pb));
  }
  if (c != 0) return LARGEST ? c > 0 : c < 0;
  return ia < ib;
}

void main() {
  uint t = flat_id();
  if (t >= p.lanes) return;
  uint o = t / p.inner, i = t % p.inner;
  uint base = o * p.len * p.inner + i;
  uint out_base = o * p.k * p.inner + i;
  uint prev = 0;
  for (uint j = 0; j < p.k; ++j) {
    uint best = 0xffffffffu;
    for (uint q = 0; q < p.len; ++q) {
      if (j > 0u && !before(prev, q, base)) continue;  // taken already
      if (best == 0xffffffffu || before(q, best, base)) best = q;
    }
    prev = best;
    uint at = out_base + j * p.inner;
    if (p.write_values != 0u) { MOVE(y, at, x, base + best * p.inner, KIND) }
    if (p.write_indices != 0u) {
      indices[2u * at] = int(best);
      indices[2u * at + 1u] = 0;
    }
  }
}
