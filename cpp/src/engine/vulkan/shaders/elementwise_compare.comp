// Comparisons and logic to bool bytes, with numpy broadcasting: Equal, Less, Greater,
// LessOrEqual, GreaterOrEqual on any element kind (elements.glsl: floats compared as floats,
// so NaN is equal to nothing; integers exactly, int64 included), And, Or, Xor and Not on bools
// (Not reads a alone). OP is vulkan::CompareOp in elementwise_logic.cc.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"
#include "elements.glsl"

layout(constant_id = 1) const uint KIND = 0;
layout(constant_id = 2) const uint OP = 0;

ELEMENT_VIEWS(0, a, readonly)
ELEMENT_VIEWS(1, b, readonly)
ELEMENT_VIEWS(2, y, writeonly)
layout(push_constant, std430) uniform Push {
  uint n, rank;
  uint dims[6];
  uint sa[6], sb[6];
} p;

void main() {
  uint i = flat_id();
  if (i >= p.n) return;
  uint rest = i, ia = 0, ib = 0;
  for (int d = int(p.rank) - 1; d >= 0; --d) {
    uint k = rest % p.dims[d];
    rest /= p.dims[d];
    ia += k * p.sa[d];
    ib += k * p.sb[d];
  }
  bool r;
  if (OP >= 5u) {  // logic on bools
    bool u = a_b[ia] != uint8_t(0), v = b_b[ib] != uint8_t(0);
    r = OP == 5u ? (u && v) : OP == 6u ? (u || v) : OP == 7u ? (u != v) : !u;
  } else if (KIND == kFloat) {
    float u = LD(a_f[ia]), v = LD(b_f[ib]);
    r = OP == 0u ? u == v : OP == 1u ? u < v : OP == 2u ? u > v : OP == 3u ? u <= v : u >= v;
  } else {
    int c = compare_ints(LOAD_INT(a, KIND, ia), LOAD_INT(b, KIND, ib));
    r = OP == 0u ? c == 0 : OP == 1u ? c < 0 : OP == 2u ? c > 0 : OP == 3u ? c <= 0 : c >= 0;
  }
  y_b[i] = uint8_t(r ? 1 : 0);
}
