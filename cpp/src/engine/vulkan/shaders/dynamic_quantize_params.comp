// DynamicQuantizeLinear, the second of its three dispatches (quant_dynamic.cc): one workgroup
// combines the partial ranges of dynamic_quantize_range.comp and computes y_scale and
// y_zero_point as the CPU engine does (engine/cpu/quantize.cc, after onnxruntime): the range
// widened to include 0, scale = (hi - lo) / 255 (1 for an empty range), zero point =
// round_half_even(max(0, min(255, 0 - lo / scale))), min and max written as std::min and
// std::max compare, so that -inf in x gives the same zero point (NaN from -inf / inf clamps to
// 255). The third dispatch is quantize.comp, reading the scale's bits and the zero point that
// this one leaves in `params`. NaN in x sets the fault words (the run raises ArgumentError).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
#include "q_common.glsl"
layout(local_size_x = 64) in;
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Parts { vec4 parts[]; };
layout(std430, binding = 1) writeonly buffer Params { uvec2 params[]; };  // for quantize.comp: scale bits, zero point
layout(std430, binding = 2) writeonly buffer Scale { act_t y_scale[]; };
layout(std430, binding = 3) writeonly buffer Zero { uint8_t y_zero[]; };
layout(std430, binding = 4) buffer Fault { uint fault[]; };
layout(push_constant, std430) uniform Push {
  uint count;  // partial ranges
} p;

shared float s_lo[64];
shared float s_hi[64];
shared uint s_nan[64];

void main() {
  uint lid = gl_LocalInvocationID.x;
  float lo = kInf, hi = -kInf;
  uint nans = 0u;
  for (uint j = lid; j < p.count; j += 64u) {
    vec4 part = parts[j];
    lo = part.x < lo ? part.x : lo;
    hi = part.y > hi ? part.y : hi;
    nans += floatBitsToUint(part.z);
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
  if (lid != 0u) return;
  if (s_nan[0] != 0u) {
    fault[1] = s_nan[0];
    fault[2] = 0u;
    fault[0] = 1u;
  }
  precise float l = 0.0 < s_lo[0] ? 0.0 : s_lo[0];  // std::min(lo, 0.0f)
  precise float h = s_hi[0] < 0.0 ? 0.0 : s_hi[0];  // std::max(hi, 0.0f)
  precise float scale = h == l ? 1.0 : (h - l) / 255.0;
  precise float initial = 0.0 - l / scale;
  precise float upper = initial < 255.0 ? initial : 255.0;  // std::min(255.0f, initial)
  precise float zero = 0.0 < upper ? upper : 0.0;            // std::max(0.0f, upper)
  uint z = uint(roundEven(zero));
  params[0] = uvec2(floatBitsToUint(scale), z);
  y_scale[0] = ST(scale);
  y_zero[0] = uint8_t(z);
}
