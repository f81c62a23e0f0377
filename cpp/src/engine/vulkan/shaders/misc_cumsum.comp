// CumSum along an axis, one invocation per lane (the data seen as [outer, len, inner]): floats
// summed in float32 with Kahan's compensation (near the CPU engine's float64 sums), int32 in
// its own wrap-around arithmetic, int64 exactly in (low, high) words. Exclusive and reverse as
// ONNX defines them.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"
#include "elements.glsl"

layout(constant_id = 1) const uint KIND = 0;
layout(constant_id = 2) const bool EXCLUSIVE = false;
layout(constant_id = 3) const bool REVERSE = false;

ELEMENT_VIEWS(0, x, readonly)
ELEMENT_VIEWS(1, y, writeonly)
layout(push_constant, std430) uniform Push { uint lanes, len, inner; } p;

ivec2 add64(ivec2 a, ivec2 b) {
  uint carry;
  uint lo = uaddCarry(uint(a.x), uint(b.x), carry);
  return ivec2(int(lo), a.y + b.y + int(carry));
}

void main() {
  uint t = flat_id();
  if (t >= p.lanes) return;
  uint base = (t / p.inner) * p.len * p.inner + t % p.inner;
  precise float sum = 0.0, lost = 0.0;
  ivec2 acc = ivec2(0);
  for (uint j = 0; j < p.len; ++j) {
    uint at = base + (REVERSE ? p.len - 1u - j : j) * p.inner;
    if (KIND == kFloat) {
      if (EXCLUSIVE) y_f[at] = ST(sum);
      precise float v = LD(x_f[at]) - lost;
      precise float next = sum + v;
      lost = (next - sum) - v;
      sum = next;
      if (!EXCLUSIVE) y_f[at] = ST(sum);
    } else {
      if (EXCLUSIVE) { STORE_INT(y, KIND, at, acc); }
      ivec2 v = LOAD_INT(x, KIND, at);
      acc = KIND == kInt64 ? add64(acc, v) : ivec2(acc.x + v.x, 0);
      if (!EXCLUSIVE) { STORE_INT(y, KIND, at, acc); }
    }
  }
}
