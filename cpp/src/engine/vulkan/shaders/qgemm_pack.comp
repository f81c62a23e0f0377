// B of an integer MatMul computed at run time (QLinearMatMul, MatMulInteger and ai.tether
// MatMulIntegerToFloat between two activations, or with B's batch dims), packed on the device
// as quant_gemm.cc packs constant weights on the host, for qgemm.glsl to read: each column of
// each of B's matrices as K bytes in int8 form (uint8 less 128) in words of 4 along K, the tail
// zero, and beside it (sum of the column, its zero point in int8 form, bias, scale bits), the
// last two from the host's table of one entry per column.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
#include "q_common.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"

layout(constant_id = 1) const bool B_SIGNED = true;
layout(constant_id = 2) const bool HAS_BZ = false;         // a zero point to read (binding 1)
layout(constant_id = 3) const bool BZ_PER_COLUMN = false;  // one per column, else one value

layout(std430, binding = 0) readonly buffer B { uint8_t b[]; };  // [matrices][K][N]
layout(std430, binding = 1) readonly buffer Bz { uint8_t bz[]; };
layout(std430, binding = 2) readonly buffer Table { ivec4 table[]; };  // [N]: -, -, bias, scale bits
layout(std430, binding = 3) writeonly buffer W { int w[]; };          // [matrices][N][K4]
layout(std430, binding = 4) writeonly buffer Cols { ivec4 cols[]; };  // [matrices][N]
layout(push_constant, std430) uniform Push { uint n, N, K, K4; } p;  // n: matrices * N

const uint FLIP = B_SIGNED ? 0u : 0x80u;  // a raw byte to its int8 form

void main() {
  uint i = flat_id();
  if (i >= p.n) return;
  uint j = i % p.N, base = (i / p.N) * p.K * p.N + j;
  int sum = 0;
  for (uint k4 = 0; k4 < p.K4; ++k4) {
    uint word = 0;
    for (uint q = 0; q < 4u; ++q) {
      uint k = k4 * 4u + q;
      if (k >= p.K) break;
      uint v = (uint(b[base + k * p.N]) ^ FLIP) & 0xffu;
      sum += byte_value(v, true);
      word |= v << (8u * q);
    }
    w[i * p.K4 + k4] = int(word);
  }
  uint zero_raw = HAS_BZ ? uint(bz[BZ_PER_COLUMN ? j : 0u]) : 0u;
  ivec4 t = table[j];
  cols[i] = ivec4(sum, byte_value(zero_raw ^ FLIP, true), t.z, t.w);
}
