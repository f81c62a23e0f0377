// Slice whose starts are computed (read here, int32 or int64 words; axes and steps fixed when
// the plan is made): each output element reads x at sum over dims of (start_d + k_d * step_d)
// * stride_d, start_d the clamped start of a sliced dim (0 for the others), as ONNX defines it.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"
#include "elements.glsl"

layout(constant_id = 1) const uint KIND = 0;
layout(constant_id = 2) const bool INDEX64 = true;

ELEMENT_VIEWS(0, x, readonly)
layout(std430, binding = 1) readonly buffer Starts { int starts[]; };
ELEMENT_VIEWS(2, y, writeonly)
layout(push_constant, std430) uniform Push {
  uint n, rank;
  uint dims[6];     // the output's
  uint strides[6];  // the input's, row-major
  int slot[6];      // the entry of starts for each dim, -1 when the dim is not sliced
  int step[6];
  int len[6];       // the input's dims
} p;

// Start `j` clamped to [0, len] (step > 0) or [0, len - 1] (step < 0), negatives from the end.
int start_of(int j, int len, int step) {
  int lo = INDEX64 ? starts[2 * j] : starts[j];
  int hi = INDEX64 ? starts[2 * j + 1] : (lo < 0 ? -1 : 0);
  int top = step > 0 ? len : len - 1;
  if (hi != (lo < 0 ? -1 : 0)) return hi < 0 ? 0 : top;  // past 32 bits: before the start or past the end
  int s = lo < 0 ? lo + len : lo;
  return clamp(s, 0, top);
}

void main() {
  uint i = flat_id();
  if (i >= p.n) return;
  uint rest = i;
  int src = 0;
  for (int d = int(p.rank) - 1; d >= 0; --d) {
    int k = int(rest % p.dims[d]);
    rest /= p.dims[d];
    int s = p.slot[d] < 0 ? 0 : start_of(p.slot[d], p.len[d], p.step[d]);
    src += (s + k * p.step[d]) * int(p.strides[d]);
  }
  MOVE(y, i, x, uint(src), KIND)
}
