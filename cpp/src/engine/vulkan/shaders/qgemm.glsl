// The integer product of the INT8 kernels (quant_gemm.cc), included by qgemm.comp (plain
// int32 multiply-adds) and qgemm_dot.comp (TETHER_INT_DOT: OpSDotKHR of
// VK_KHR_shader_integer_dot_product on packed 4 x 8-bit words). QLinearMatMul and
// MatMulInteger over A's rows, and QLinearConv and ConvInteger as an implicit GEMM (CONV: each
// row an output pixel, each column an output channel of a group, A the im2col matrix read in
// place, the zero point where the window leaves the input).
//
// Every operand is taken as int8: a uint8 byte v as v ^ 0x80 = v - 128, its zero point less
// 128 alike, so differences are unchanged. The sums are then
//   s = sum (a - za)(w - zw) + bias = sum a w - zw sum a - za sum w + K za zw + bias,
// with sum w, zw and the bias per column from the host (the weights are constants, packed
// there as words of 4 bytes along K, the tail zero), and sum a from the same dot products, so
// that za may be computed on the device (DynamicQuantizeLinear). The requantization is the CPU
// engine's: round_half_even(clamp(float(s) * scale, lo - zy, hi - zy)) + zy, scale =
// float(a_scale * w_scale) / y_scale from the host; the float product is correctly rounded, so
// results match the CPU engine's bit for bit. ai.tether MatMulIntegerToFloat (OUT_KIND 2) ends
// in floats instead, as its unfused Cast, Mul, Add and activation compute them, each rounded:
// activate(float(s) * scale + bias), the scale (one, or one per column) and the bias read from
// the device, since the scale comes from DynamicQuantizeLinear at run time. com.microsoft QGemm
// without y_scale (OUT_KIND 3) writes float(s) * scale, the scale a_scale * b_scale[j] in the
// column table.
//
// A MatMul whose B is computed at run time or has batch dims reads B as qgemm_pack.comp packed
// it on the device, in the same layout; with B's batch dims (BATCHED), invocations run over the
// output's matrices, each reading its matrix of A and of the packed B by their strides over the
// output's batch dims (0 where one broadcasts). A's zero point may be one per row of A
// (MatMulInteger's per-row quantization), the row's within its matrix.
#extension GL_EXT_spirv_intrinsics : require
#include "storage.glsl"
#include "q_common.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"
#include "activation.glsl"  // constants 1-3: MatMulIntegerToFloat's activation

layout(constant_id = 4) const bool CONV = false;
layout(constant_id = 5) const bool A_SIGNED = true;
layout(constant_id = 6) const bool HAS_AZ = false;   // a zero point to read (binding 3)
layout(constant_id = 7) const uint OUT_KIND = 0;     // 0: 8-bit (binding 4), 1: int32 (5), 2 and 3: float (8)
layout(constant_id = 8) const bool Y_SIGNED = true;
layout(constant_id = 9) const int Y_ZERO = 0;
layout(constant_id = 10) const int Y_LO = -128;  // the output's clamp (a fused activation narrows it)
layout(constant_id = 11) const int Y_HI = 127;
layout(constant_id = 12) const bool SCALE_PER_COLUMN = false;  // OUT_KIND 2: one scale per column, else one
layout(constant_id = 13) const bool HAS_BIAS = false;          // OUT_KIND 2: a float bias per column
layout(constant_id = 14) const bool A_WORDS = false;  // not CONV, K a multiple of 4: A's rows read as words (binding 9)
layout(constant_id = 15) const bool BATCHED = false;  // not CONV: one B per output matrix, by bd, as, bs
const uint CB = 4;  // columns per invocation: each word of A serves CB dot products
// Rows per invocation, each word of W serving RB dot products: 4, or 1 for a single row (a
// matrix-vector product, which the extra rows would only slow).
layout(constant_id = 16) const uint RB = 4;

layout(std430, binding = 0) readonly buffer A { uint8_t a[]; };
layout(std430, binding = 1) readonly buffer W { int w[]; };       // [columns][K4], bytes as int8
layout(std430, binding = 2) readonly buffer Cols { ivec4 cols[]; };  // sum w, zw, bias, scale bits
layout(std430, binding = 3) readonly buffer Az { uint8_t az[]; };
layout(std430, binding = 4) writeonly buffer Y8 { uint8_t y8[]; };
layout(std430, binding = 5) writeonly buffer Y32 { int y32[]; };
layout(std430, binding = 6) readonly buffer Scale { act_t scale[]; };
layout(std430, binding = 7) readonly buffer Bias { act_t bias[]; };
layout(std430, binding = 8) writeonly buffer YF { act_t yf[]; };
layout(std430, binding = 9) readonly buffer A32 { uint a32[]; };  // A again, 4 bytes a word
layout(push_constant, std430) uniform Push {
  uint n;           // invocations: batch * ceil(N / CB) * ceil(rows / RB)
  uint rows, N;     // per batch element (an image and group for CONV)
  uint K, K4;       // depth, and in words
  uint C, H, W, OW, KH, KW;
  int SH, SW, PH, PW, DH, DW;
  uint G, M;        // groups, output channels (CONV); rows of A's matrices (not CONV)
  uint zrows;       // A's zero point: one per row of A's matrices (M of them), or 1 for one value
  uint bd[3];       // BATCHED: the output's batch dims, merged, innermost last
  uint as[3], bs[3];  // BATCHED: A's and B's strides over them, in matrices
} p;

#ifdef TETHER_INT_DOT
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int sdot_packed(int x, int y, spirv_literal int packed_format);
int dot4(int x, int y) { return sdot_packed(x, y, 0); }
#else
int dot4(int x, int y) {
  return bitfieldExtract(x, 0, 8) * bitfieldExtract(y, 0, 8) + bitfieldExtract(x, 8, 8) * bitfieldExtract(y, 8, 8) +
         bitfieldExtract(x, 16, 8) * bitfieldExtract(y, 16, 8) + bitfieldExtract(x, 24, 8) * bitfieldExtract(y, 24, 8);
}
#endif

const uint FLIP = A_SIGNED ? 0u : 0x80u;  // a raw byte to its int8 form

void main() {
  uint i = flat_id();
  if (i >= p.n) return;
  uint row_blocks = (p.rows + RB - 1) / RB;
  uint r0 = (i % row_blocks) * RB, t = i / row_blocks;
  uint blocks = (p.N + CB - 1) / CB;
  uint j0 = (t % blocks) * CB, b = t / blocks;
  // CONV: b is image * G + group; the input plane it starts from, and each row's window corner.
  uint img = b / p.G, g = b % p.G, cg = p.C / p.G;
  uint xbase = (img * p.C + g * cg) * p.H * p.W;
  int h0[RB], w0[RB];
  uint zero_raw[RB];  // each row's raw zero-point byte (0 without one: -128 in int8 form for uint8)
  uint rs[RB];        // the rows; past the last, the last again (computed, never stored)
  for (uint rr = 0; rr < RB; ++rr) {
    uint r = min(r0 + rr, p.rows - 1);
    rs[rr] = r;
    h0[rr] = int(r / p.OW) * p.SH - p.PH;
    w0[rr] = int(r % p.OW) * p.SW - p.PW;
    zero_raw[rr] = HAS_AZ ? uint(az[r % p.zrows]) : 0u;
  }
  // BATCHED: the first rows of this matrix of A and of the output, and the first column of its B.
  uint a_row0 = 0, y_row0 = 0, b_col0 = 0;
  if (BATCHED) {
    uint rest = b, am = 0, bm = 0;
    for (int d = 2; d >= 0; --d) {
      uint at = rest % p.bd[d];
      rest /= p.bd[d];
      am += at * p.as[d];
      bm += at * p.bs[d];
    }
    a_row0 = am * p.rows;
    y_row0 = b * p.rows;
    b_col0 = bm * p.N;
  }
  uint col0 = CONV ? g * p.N + j0 : b_col0 + j0;
  // Where the window is, (c, kh, kw) of k, stepped along with k.
  uint c = 0, kh = 0, kw = 0;
  int acc[RB][CB];
  int sum_a[RB];
  for (uint rr = 0; rr < RB; ++rr) {
    sum_a[rr] = 0;
    for (uint jj = 0; jj < CB; ++jj) acc[rr][jj] = 0;
  }
  for (uint k4 = 0; k4 < p.K4; ++k4) {
    int wv[CB];  // each word of W serves RB rows
    for (uint jj = 0; jj < CB; ++jj) wv[jj] = j0 + jj < p.N ? w[(col0 + jj) * p.K4 + k4] : 0;
    uint word[RB];
    for (uint rr = 0; rr < RB; ++rr) word[rr] = A_WORDS ? a32[(a_row0 + rs[rr]) * p.K4 + k4] ^ (FLIP * 0x01010101u) : 0u;
    for (uint q = 0; q < (A_WORDS ? 0u : 4u); ++q) {
      uint k = k4 * 4 + q;
      for (uint rr = 0; rr < RB; ++rr) {
        uint raw = FLIP;  // past K: 0 in int8 form
        if (k < p.K) {
          if (CONV) {
            int ih = h0[rr] + int(kh) * p.DH, iw = w0[rr] + int(kw) * p.DW;
            raw = ih >= 0 && ih < int(p.H) && iw >= 0 && iw < int(p.W) ? uint(a[xbase + (c * p.H + uint(ih)) * p.W + uint(iw)])
                                                                       : zero_raw[rr];
          } else {
            raw = uint(a[(a_row0 + rs[rr]) * p.K + k]);
          }
        }
        word[rr] |= ((raw ^ FLIP) & 0xffu) << (8 * q);
      }
      if (CONV && k < p.K && ++kw == p.KW) {
        kw = 0;
        if (++kh == p.KH) {
          kh = 0;
          ++c;
        }
      }
    }
    for (uint rr = 0; rr < RB; ++rr) {
      int aw = int(word[rr]);
      sum_a[rr] += dot4(aw, 0x01010101);
      for (uint jj = 0; jj < CB; ++jj) acc[rr][jj] += dot4(aw, wv[jj]);
    }
  }
  for (uint rr = 0; rr < RB; ++rr) {
    uint r = r0 + rr;
    if (r >= p.rows) break;
    int za = byte_value(zero_raw[rr] ^ FLIP, true);
    for (uint jj = 0; jj < CB; ++jj) {
      uint j = j0 + jj;
      if (j >= p.N) break;
      ivec4 col = cols[col0 + jj];
      int s = acc[rr][jj] - col.y * sum_a[rr] - za * col.x + int(p.K) * za * col.y + col.z;
      uint o = CONV ? ((img * p.M + g * p.N + j) * p.rows + r) : (y_row0 + r) * p.N + j;
      uint chan = CONV ? g * p.N + j : j;  // the output channel or column, for scale and bias
      if (OUT_KIND == 1u) {
        y32[o] = s;
      } else if (OUT_KIND == 2u) {
        precise float v = float(s) * LD(scale[SCALE_PER_COLUMN ? chan : 0u]);
        if (HAS_BIAS) v = v + LD(bias[chan]);
        yf[o] = ST(activate(v));
      } else if (OUT_KIND == 3u) {  // QGemm's float output: the scale a_scale * b_scale[j] from the table
        precise float v = float(s) * intBitsToFloat(col.w);
        yf[o] = ST(v);
      } else {
        precise float v = float(s) * intBitsToFloat(col.w);
        y8[o] = byte_of(requantize(v, float(Y_LO - Y_ZERO), float(Y_HI - Y_ZERO), Y_ZERO));
      }
    }
  }
}
