// Pad: output element k reads x at k_d - begin_d per dim, begin_d read from the pads (int32
// or int64 words; computed or constant), outside the input the constant (mode 0: the value
// input or push constant), the nearest edge (1), the wrapped (2) or mirrored (3) element.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"
#include "elements.glsl"

layout(constant_id = 1) const uint KIND = 0;
layout(constant_id = 2) const uint MODE = 0;
layout(constant_id = 3) const bool PADS64 = true;
layout(constant_id = 4) const bool VALUE_INPUT = false;

ELEMENT_VIEWS(0, x, readonly)
layout(std430, binding = 1) readonly buffer Pads { int pads[]; };
ELEMENT_VIEWS(2, v, readonly)
ELEMENT_VIEWS(3, y, writeonly)
layout(push_constant, std430) uniform Push {
  uint n, rank;
  uint dims[6];     // the output's
  int in_dims[6];
  uint strides[6];  // the input's, row-major
  int slot[6];      // the entry of pads with each dim's begin, -1 for none
  uint value_bits;  // the fill without a value input: a float's bits, 0 otherwise
} p;

void main() {
  uint i = flat_id();
  if (i >= p.n) return;
  uint rest = i;
  int src = 0;
  bool outside = false;
  for (int d = int(p.rank) - 1; d >= 0; --d) {
    int k = int(rest % p.dims[d]);
    rest /= p.dims[d];
    int begin = p.slot[d] < 0 ? 0 : (PADS64 ? pads[2 * p.slot[d]] : pads[p.slot[d]]);
    int c = k - begin, len = p.in_dims[d];
    if (c < 0 || c >= len) {
      if (MODE == 0u || len == 0) {
        outside = true;
      } else if (MODE == 1u) {
        c = clamp(c, 0, len - 1);
      } else if (MODE == 2u) {
        c = ((c % len) + len) % len;
      } else {
        int period = 2 * (len - 1);
        if (period == 0) c = 0;
        else {
          c = ((c % period) + period) % period;
          if (c >= len) c = period - c;
        }
      }
    }
    src += c * int(p.strides[d]);
  }
  if (!outside) {
    MOVE(y, i, x, uint(src), KIND)
  } else if (VALUE_INPUT) {
    MOVE(y, i, v, 0u, KIND)
  } else if (KIND == kFloat) {
    y_f[i] = ST(uintBitsToFloat(p.value_bits));
  } else {
    STORE_INT(y, KIND, i, ivec2(0));
  }
}
