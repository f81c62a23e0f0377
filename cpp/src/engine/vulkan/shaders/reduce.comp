// Reductions along a run of dims: the tensor seen as [outer, len, inner], one invocation per
// (outer, inner) output. Also GlobalAveragePool and GlobalMaxPool (inner 1).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"

// 0 Sum, 1 Mean, 2 Max, 3 Min, 4 Prod, 5 SumSquare, 6 L1, 7 L2, 8 LogSum, 9 LogSumExp
// (vulkan::ReduceOp). Max and Min propagate NaN.
layout(constant_id = 1) const uint OP = 0;

layout(std430, binding = 0) readonly buffer X { act_t x[]; };
layout(std430, binding = 1) writeonly buffer Y { act_t y[]; };
layout(push_constant, std430) uniform Push { uint rows, len, inner; } p;

void main() {
  uint r = flat_id();
  if (r >= p.rows) return;
  uint base = (r / p.inner) * p.len * p.inner + r % p.inner;
  float acc;
  if (OP == 2u || OP == 3u) {
    acc = OP == 2u ? -kInf : kInf;
    for (uint j = 0; j < p.len; ++j) {
      float v = LD(x[base + j * p.inner]);
      if (isnan(v) || (OP == 2u ? v > acc : v < acc)) acc = v;
      if (isnan(v)) break;
    }
  } else if (OP == 9u) {
    float m = -kInf;
    for (uint j = 0; j < p.len; ++j) m = max(m, LD(x[base + j * p.inner]));
    float s = 0.0;
    for (uint j = 0; j < p.len; ++j) s += exp(LD(x[base + j * p.inner]) - m);
    acc = p.len == 0u ? -kInf : m + log(s);
  } else {
    acc = OP == 4u ? 1.0 : 0.0;
    for (uint j = 0; j < p.len; ++j) {
      float v = LD(x[base + j * p.inner]);
      if (OP == 4u) acc *= v;
      else if (OP == 5u || OP == 7u) acc += v * v;
      else if (OP == 6u) acc += abs(v);
      else acc += v;
    }
    if (OP == 1u) acc /= float(p.len);
    else if (OP == 7u) acc = sqrt(acc);
    else if (OP == 8u) acc = log(acc);
  }
  y[r] = ST(acc);
}
