// LayerNormalization: each row of `len` elements (the dims from the axis on) normalised by its
// mean and variance (two passes), then scaled and shifted; one invocation per row.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"

layout(constant_id = 1) const bool HAS_BIAS = false;

layout(std430, binding = 0) readonly buffer X { act_t x[]; };
layout(std430, binding = 1) readonly buffer Scale { act_t scale[]; };
layout(std430, binding = 2) readonly buffer Bias { act_t bias[]; };
layout(std430, binding = 3) writeonly buffer Y { act_t y[]; };
layout(push_constant, std430) uniform Push {
  uint rows, len;
  float epsilon;
  uint scale_step, bias_step;  // 1, or 0 for a scale (bias) of one element
} p;

void main() {
  uint r = flat_id();
  if (r >= p.rows) return;
  uint base = r * p.len;
  float s = 0.0;
  for (uint j = 0; j < p.len; ++j) s += LD(x[base + j]);
  float mean = s / float(p.len);
  float v = 0.0;
  for (uint j = 0; j < p.len; ++j) {
    float d = LD(x[base + j]) - mean;
    v += d * d;
  }
  float inv = 1.0 / sqrt(v / float(p.len) + p.epsilon);
  for (uint j = 0; j < p.len; ++j) {
    float o = (LD(x[base + j]) - mean) * inv * LD(scale[j * p.scale_step]);
    if (HAS_BIAS) o += LD(bias[j * p.bias_step]);
    y[base + j] = ST(o);
  }
}
