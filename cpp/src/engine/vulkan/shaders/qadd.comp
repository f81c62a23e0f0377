// ai.tether QLinearAdd and QLinearMul (MUL) of two 8-bit tensors that broadcast (numpy), with
// an optional Relu: y = Q(DQ(a) + DQ(b)), or Q(DQ(a) * DQ(b)), computed as the unfused nodes
// compute it, each operand dequantized by a float32 product, a float32 sum or product (no
// multiply-add contraction: `precise`), then QuantizeLinear's float32 division and
// round-half-to-even, as on the CPU engine.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
#include "q_common.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"

layout(constant_id = 1) const bool A_SIGNED = true;
layout(constant_id = 2) const bool B_SIGNED = true;
layout(constant_id = 3) const float A_SCALE = 1.0;
layout(constant_id = 4) const int A_ZERO = 0;
layout(constant_id = 5) const float B_SCALE = 1.0;
layout(constant_id = 6) const int B_ZERO = 0;
layout(constant_id = 7) const float Y_SCALE = 1.0;
layout(constant_id = 8) const int Y_ZERO = 0;
layout(constant_id = 9) const int Y_LO = -128;  // the output's clamp (a fused Relu raises it)
layout(constant_id = 10) const int Y_HI = 127;
layout(constant_id = 11) const bool MUL = false;  // ai.tether QLinearMul: the product of the two

layout(std430, binding = 0) readonly buffer A { uint8_t a[]; };
layout(std430, binding = 1) readonly buffer B { uint8_t b[]; };
layout(std430, binding = 2) writeonly buffer Y { uint8_t y[]; };
layout(push_constant, std430) uniform Push {
  uint n, rank;
  uint dims[6];    // the output's, merged where both operands allow
  uint sa[6], sb[6];  // a's and b's strides over them (0 where one broadcasts)
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
  precise float va = float(byte_value(uint(a[ia]), A_SIGNED) - A_ZERO) * A_SCALE;
  precise float vb = float(byte_value(uint(b[ib]), B_SIGNED) - B_ZERO) * B_SCALE;
  precise float v = (MUL ? va * vb : va + vb) / Y_SCALE;
  y[i] = byte_of(requantize(v, float(Y_LO - Y_ZERO), float(Y_HI - Y_ZERO), Y_ZERO));
}
