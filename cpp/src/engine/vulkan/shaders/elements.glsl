// Elements of any dtype the data-movement, comparison and cast shaders take: an operand's
// buffer is declared in three views on one binding (float data as act_t, 32-bit words, bytes),
// and a kind code, vulkan::ElementKind in ops.h, says which one holds its elements:
// float32 (float16 under precision fp16), int32, int64 (two words, low first), bool or other
// bytes. Integers are handled as (low, high) word pairs, so int64 needs no shaderInt64.
// Needs storage.glsl first.
#extension GL_EXT_shader_8bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require

#define kFloat 0u
#define kInt32 1u
#define kInt64 2u
#define kByte 3u

#define ELEMENT_VIEWS(B, N, Q)                                      \
  layout(std430, binding = B) Q buffer N##_F { act_t N##_f[]; };   \
  layout(std430, binding = B) Q buffer N##_W { int N##_w[]; };     \
  layout(std430, binding = B) Q buffer N##_B { uint8_t N##_b[]; };

// Element i of operand N as an integer pair (low, high): floats truncated toward zero.
#define LOAD_INT(N, kind, i) int_of(kind, kind == kFloat ? LD(N##_f[i]) : 0.0,     \
                                    kind == kInt32 ? N##_w[i] : kind == kInt64 ? N##_w[2u * (i)] : 0, \
                                    kind == kInt64 ? N##_w[2u * (i) + 1u] : 0, kind == kByte ? uint(N##_b[i]) : 0u)
// Element i of operand N as a float.
#define LOAD_FLOAT(N, kind, i) (kind == kFloat ? float(LD(N##_f[i])) : float_of(LOAD_INT(N, kind, i)))

ivec2 int_of(uint kind, float f, int lo, int hi, uint b) {
  if (kind == kInt32) return ivec2(lo, lo < 0 ? -1 : 0);
  if (kind == kInt64) return ivec2(lo, hi);
  if (kind == kByte) return ivec2(int(b), 0);
  f = trunc(f);
  if (abs(f) < 2147483648.0) {
    int v = int(f);
    return ivec2(v, v < 0 ? -1 : 0);
  }
  float high = floor(f / 4294967296.0);
  return ivec2(int(uint(f - high * 4294967296.0)), int(high));
}

float float_of(ivec2 v) {
  if (v.y == (v.x < 0 ? -1 : 0)) return float(v.x);  // within 32 bits: exact to float's precision
  bool negative = v.y < 0;
  if (negative) {  // two's complement negation of the pair
    uint carry;
    uint lo = uaddCarry(~uint(v.x), 1u, carry);
    v = ivec2(int(lo), int(~uint(v.y) + carry));
  }
  float m = float(uint(v.y)) * 4294967296.0 + float(uint(v.x));
  return negative ? -m : m;
}

// -1, 0 or 1 as a < b, a == b, a > b for integer pairs.
int compare_ints(ivec2 a, ivec2 b) {
  if (a.y != b.y) return a.y < b.y ? -1 : 1;
  if (a.x != b.x) return uint(a.x) < uint(b.x) ? -1 : 1;
  return 0;
}

// Element j of operand N copied to element i of operand M, both of `kind`, bit for bit.
#define MOVE(M, i, N, j, kind)                                  \
  if (kind == kFloat) M##_f[i] = N##_f[j];                      \
  else if (kind == kInt32) M##_w[i] = N##_w[j];                 \
  else if (kind == kInt64) {                                    \
    M##_w[2u * (i)] = N##_w[2u * (j)];                          \
    M##_w[2u * (i) + 1u] = N##_w[2u * (j) + 1u];                \
  } else M##_b[i] = N##_b[j];

// Stores an integer pair as element i of operand M of `kind` (not kFloat).
#define STORE_INT(M, kind, i, v)                                \
  if (kind == kInt32) M##_w[i] = v.x;                           \
  else if (kind == kInt64) {                                    \
    M##_w[2u * (i)] = v.x;                                      \
    M##_w[2u * (i) + 1u] = v.y;                                 \
  } else M##_b[i] = uint8_t(v.x);
