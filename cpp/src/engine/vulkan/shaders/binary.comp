// y = a op b with numpy broadcasting: the output's dims (collapsed to at most 6) and each
// operand's strides over them (0 where it is broadcast).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"

// 0 Add, 1 Sub, 2 Mul, 3 Div, 4 Pow, 5 Max, 6 Min, 7 PRelu (vulkan::BinaryOp).
layout(constant_id = 1) const uint OP = 0;

layout(std430, binding = 0) readonly buffer A { act_t a[]; };
layout(std430, binding = 1) readonly buffer B { act_t b[]; };
layout(std430, binding = 2) writeonly buffer Y { act_t y[]; };
layout(push_constant, std430) uniform Push {
  uint n;
  uint rank;
  uint dims[6];
  uint sa[6];
  uint sb[6];
} p;

// x^e for any sign of x: exact for the exponents 1 and 2, sqrt for 0.5; a negative base
// takes an integer exponent only (NaN otherwise), as C's pow.
float pow_(float x, float e) {
  if (e == 0.0) return 1.0;
  if (e == 1.0) return x;
  if (e == 2.0) return x * x;
  if (e == 0.5 && x >= 0.0) return sqrt(x);
  if (x == 0.0) return e < 0.0 ? kInf : 0.0;
  float r = pow(abs(x), e);
  if (x < 0.0) {
    if (floor(e) != e) return kNaN;
    if (mod(e, 2.0) == 1.0) r = -r;
  }
  return r;
}

void main() {
  uint i = flat_id();
  if (i >= p.n) return;
  uint r = i, ia = 0, ib = 0;
  for (int d = int(p.rank) - 1; d >= 0; --d) {
    uint c = r % p.dims[d];
    r /= p.dims[d];
    ia += c * p.sa[d];
    ib += c * p.sb[d];
  }
  float u = LD(a[ia]), v = LD(b[ib]), o;
  if (OP == 0u) o = u + v;
  else if (OP == 1u) o = u - v;
  else if (OP == 2u) o = u * v;
  else if (OP == 3u) o = u / v;
  else if (OP == 4u) o = pow_(u, v);
  else if (OP == 5u) o = isnan(u) || isnan(v) ? kNaN : (u > v ? u : v);
  else if (OP == 6u) o = isnan(u) || isnan(v) ? kNaN : (u < v ? u : v);
  else o = u < 0.0 ? u * v : u;
  y[i] = ST(o);
}
