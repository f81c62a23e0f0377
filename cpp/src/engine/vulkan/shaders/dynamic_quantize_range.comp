// DynamicQuantizeLinear, the first of its three dispatches (quant_dynamic.cc): each workgroup's
// minimum, maximum and count of NaN over its grid-strided share of x. A NaN fails every
// comparison, so it never becomes an extreme; it is counted from its bits, which no float
// optimisation of the driver can fold away. Without NaN the extremes do not depend on the
// order of the comparisons, so the result is the CPU engine's whatever the grid.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
layout(local_size_x = 64) in;
#include "common.glsl"

layout(std430, binding = 0) readonly buffer X { act_t x[]; };
layout(std430, binding = 1) writeonly buffer Parts { vec4 parts[]; };  // per workgroup: lo, hi, NaN count (bits)
layout(push_constant, std430) uniform Push {
  uint n;  // elements of x
} p;

shared float s_lo[64];
shared float s_hi[64];
shared uint s_nan[64];

bool is_nan_bits(float v) { return (floatBitsToUint(v) & 0x7fffffffu) > 0x7f800000u; }

void main() {
  uint lid = gl_LocalInvocationID.x;
  uint stride = gl_NumWorkGroups.x * 64u;
  float lo = kInf, hi = -kInf;
  uint nans = 0u;
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
    float v = LD(x[i]);
    lo = v < lo ? v : lo;
    hi = v > hi ? v : hi;
    nans += is_nan_bits(v) ? 1u : 0u;
  }
  s_lo[lid] = lo;
  s_hi[lid] = hi;
  s_nan[lid] = nans;
  barrier();
  for (uint half_ = 32u; half_ > 0u; half_ >>= 1) {
    if (lid < half_) {
      float l = s_lo[lid + half_], h = s_hi[lid + half_];
      s_lo[lid] = l < s_lo[lid] ? l : s_lo[lid];
      s_hi[lid] = h > s_hi[lid] ? h : s_hi[lid];
      s_nan[lid] += s_nan[lid + half_];
    }
    barrier();
  }
  if (lid == 0u) parts[gl_WorkGroupID.x] = vec4(s_lo[0], s_hi[0], uintBitsToFloat(s_nan[0]), 0.0);
}
