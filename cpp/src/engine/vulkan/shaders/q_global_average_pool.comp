// com.microsoft QLinearGlobalAveragePool: one invocation per (image, channel) sums the channel's
// positions in int32 and requantizes the mean as the CPU engine does,
// round_half_even(clamp(float(sum - count * x_zp) * scale, lo - y_zp, hi - y_zp)) + y_zp, with
// scale = x_scale / (y_scale * count) from the host. X is [N, C, ...], or [N, ..., C] with
// channels_last.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
#include "q_common.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"

layout(constant_id = 1) const bool X_SIGNED = true;  // Y has X's type
layout(constant_id = 2) const bool CHANNELS_LAST = false;
layout(constant_id = 3) const int X_ZERO = 0;
layout(constant_id = 4) const int Y_ZERO = 0;

layout(std430, binding = 0) readonly buffer X { uint8_t x[]; };
layout(std430, binding = 1) writeonly buffer Y { uint8_t y[]; };
layout(push_constant, std430) uniform Push { uint n, channels, count, scale; } p;

void main() {
  uint i = flat_id();
  if (i >= p.n) return;
  uint img = i / p.channels, ch = i % p.channels;
  uint base = CHANNELS_LAST ? img * p.count * p.channels + ch : i * p.count;
  uint step = CHANNELS_LAST ? p.channels : 1u;
  int sum = 0;
  for (uint k = 0; k < p.count; ++k) sum += byte_value(uint(x[base + k * step]), X_SIGNED);
  float lo = float((X_SIGNED ? -128 : 0) - Y_ZERO), hi = float((X_SIGNED ? 127 : 255) - Y_ZERO);
  precise float v = float(sum - int(p.count) * X_ZERO) * uintBitsToFloat(p.scale);
  y[i] = byte_of(requantize(v, lo, hi, Y_ZERO));
}
