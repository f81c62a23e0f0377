// The operands of gemm_tiled.comp and gemm_tiled_coop.comp: Gemm/MatMul's A, B, bias, summand and
// C, read and written as the GEMM bodies (gemm_tiled.glsl, gemm_coop.glsl) ask. Included after
// storage.glsl, common.glsl and activation.glsl.
layout(constant_id = 4) const bool HAS_BIAS = false;
layout(constant_id = 5) const bool HAS_SUM = false;

layout(std430, binding = 0) readonly buffer A { act_t a[]; };
layout(std430, binding = 1) readonly buffer B { act_t b[]; };
layout(std430, binding = 2) readonly buffer Bias { act_t bias[]; };
layout(std430, binding = 3) readonly buffer Sum { act_t sum[]; };
layout(std430, binding = 4) writeonly buffer C { act_t c[]; };
#include "gemm_push.glsl"

uint aoff, boff, coff;

uint dim_m() { return p.M; }
uint dim_n() { return p.N; }
uint dim_k() { return p.K; }
uint batch_count() { return p.bdims[0] * p.bdims[1] * p.bdims[2] * p.bdims[3]; }
void tile_setup(uint z) {
  batch_offsets(z, aoff, boff);
  coff = z * p.M * p.N;
}
float load_a(uint m, uint k) { return LD(a[aoff + m * p.a_rs + k * p.a_cs]); }
float load_b(uint k, uint n) { return LD(b[boff + k * p.b_rs + n * p.b_cs]); }
bool a_k_contiguous() { return p.a_cs == 1; }
bool b_n_contiguous() { return p.b_cs == 1; }
void store_c(uint m, uint n, float v) {
  v *= p.alpha;
  if (HAS_BIAS) v += p.beta * LD(bias[m * p.bias_rs + n * p.bias_cs]);
  const uint o = coff + m * p.N + n;
  if (HAS_SUM) v += LD(sum[o]);
  c[o] = ST(activate(v));
}

