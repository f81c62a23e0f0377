// LayerNormalization as layernorm.comp (same bindings and push constants), one workgroup per
// row: the form for GPUs. Mean, then the variance of the differences from it (two passes, as
// layernorm.comp), each reduced over the workgroup.
// Included by the .comp of its name and its _subgroup form, after rows.glsl.

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
  const uint r = row_id(), t = gl_LocalInvocationID.x, n = gl_WorkGroupSize.x;
  if (r >= p.rows) return;  // the whole workgroup
  const uint base = r * p.len;
  float s = 0.0;
  for (uint j = t; j < p.len; j += n) s += LD(x[base + j]);
  const float mean = reduce_rows(s, false) / float(p.len);
  float v = 0.0;
  for (uint j = t; j < p.len; j += n) {
    const float d = LD(x[base + j]) - mean;
    v += d * d;
  }
  const float inv = 1.0 / sqrt(reduce_rows(v, false) / float(p.len) + p.epsilon);
  for (uint j = t; j < p.len; j += n) {
    float o = (LD(x[base + j]) - mean) * inv * LD(scale[j * p.scale_step]);
    if (HAS_BIAS) o += LD(bias[j * p.bias_step]);
    y[base + j] = ST(o);
  }
}
