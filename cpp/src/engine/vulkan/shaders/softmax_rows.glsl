// Softmax and LogSoftmax as softmax.comp (same bindings and push constants), one workgroup per
// (outer, inner) row: the form for GPUs, where a row's elements are spread over a
// workgroup's invocations instead of one invocation walking the row alone.
// Included by the .comp of its name and its _subgroup form, after rows.glsl.

layout(constant_id = 1) const bool LOG = false;

layout(std430, binding = 0) readonly buffer X { act_t x[]; };
layout(std430, binding = 1) writeonly buffer Y { act_t y[]; };
layout(push_constant, std430) uniform Push { uint rows, len, inner; } p;

void main() {
  const uint r = row_id(), t = gl_LocalInvocationID.x, n = gl_WorkGroupSize.x;
  if (r >= p.rows) return;  // the whole workgroup: no barrier is left waiting
  const uint base = (r / p.inner) * p.len * p.inner + r % p.inner;
  float m = -kInf;
  for (uint j = t; j < p.len; j += n) m = max(m, LD(x[base + j * p.inner]));
  m = reduce_rows(m, true);
  float s = 0.0;
  for (uint j = t; j < p.len; j += n) s += exp(LD(x[base + j * p.inner]) - m);
  s = reduce_rows(s, false);
  if (LOG) {
    const float l = m + log(s);
    for (uint j = t; j < p.len; j += n) y[base + j * p.inner] = ST(LD(x[base + j * p.inner]) - l);
  } else {
    const float inv = 1.0 / s;
    for (uint j = t; j < p.len; j += n) y[base + j * p.inner] = ST(exp(LD(x[base + j * p.inner]) - m) * inv);
  }
}
