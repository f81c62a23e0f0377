// Cast between float32 (float16 under precision fp16), int32, int64 and bool (elements.glsl):
// floats to integers truncated toward zero, anything to bool as "not zero" (NaN included).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"
#include "elements.glsl"

layout(constant_id = 1) const uint FROM = 0;
layout(constant_id = 2) const uint TO = 0;

ELEMENT_VIEWS(0, x, readonly)
ELEMENT_VIEWS(1, y, writeonly)
layout(push_constant, std430) uniform Push { uint n; } p;

void main() {
  uint i = flat_id();
  if (i >= p.n) return;
  if (TO == kFloat) {
    y_f[i] = ST(LOAD_FLOAT(x, FROM, i));
  } else if (TO == kByte) {
    bool nonzero = FROM == kFloat ? LD(x_f[i]) != 0.0 || isnan(LD(x_f[i])) : LOAD_INT(x, FROM, i) != ivec2(0);
    y_b[i] = uint8_t(nonzero ? 1 : 0);
  } else if (TO == kInt32 && FROM == kFloat && !(abs(LD(x_f[i])) < 2147483648.0)) {
    y_w[i] = int(0x80000000u);  // out of range or NaN: what x86's conversion gives
  } else {
    ivec2 v = LOAD_INT(x, FROM, i);
    STORE_INT(y, TO, i, v);
  }
}
