// Range: y[i] = start + i * delta, the count from the output's dims (which the plan knows).
// Floats in float32; int32 exactly; int64 exactly from a 64-bit product and sum of 32-bit
// words, for a start and delta within 32 bits (else the fault words are set and the run
// raises ArgumentError).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"
#include "elements.glsl"

layout(constant_id = 1) const uint KIND = 0;

ELEMENT_VIEWS(0, a, readonly)  // start
ELEMENT_VIEWS(1, d, readonly)  // delta
ELEMENT_VIEWS(2, y, writeonly)
layout(std430, binding = 3) buffer Fault { uint fault[]; };
layout(push_constant, std430) uniform Push { uint n; } p;

void main() {
  uint i = flat_id();
  if (i >= p.n) return;
  if (KIND == kFloat) {
    y_f[i] = ST(LD(a_f[0]) + float(i) * LD(d_f[0]));
    return;
  }
  ivec2 s = LOAD_INT(a, KIND, 0u), step = LOAD_INT(d, KIND, 0u);
  if (s.y != (s.x < 0 ? -1 : 0) || step.y != (step.x < 0 ? -1 : 0)) {
    ivec2 bad = s.y != (s.x < 0 ? -1 : 0) ? s : step;
    fault[1] = uint(bad.x);
    fault[2] = uint(bad.y);
    fault[0] = 1u;
    return;
  }
  int phi, plo;
  imulExtended(int(i), step.x, phi, plo);
  uint carry;
  uint lo = uaddCarry(uint(plo), uint(s.x), carry);
  ivec2 v = ivec2(int(lo), phi + s.y + int(carry));
  STORE_INT(y, KIND, i, v);
}
