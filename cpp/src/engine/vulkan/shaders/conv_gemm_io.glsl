// The operands of conv_gemm.comp and conv_gemm_coop.comp: the convolution's weights (A), its
// input read as the im2col matrix (B), bias, summand and output. Included after storage.glsl,
// common.glsl and activation.glsl.
layout(constant_id = 4) const bool HAS_BIAS = false;
layout(constant_id = 5) const bool HAS_SUM = false;

layout(std430, binding = 0) readonly buffer X { act_t x[]; };
layout(std430, binding = 1) readonly buffer W { act_t w[]; };
layout(std430, binding = 2) readonly buffer Bias { act_t bias[]; };
layout(std430, binding = 3) readonly buffer Sum { act_t sum[]; };
layout(std430, binding = 4) writeonly buffer Y { act_t y[]; };
layout(push_constant, std430) uniform Push {
  uint n;                      // batch elements: images times groups
  uint C, H, W;                // input channels and size
  uint M, OH, OW;              // output channels and size
  uint KH, KW;
  int SH, SW, PH, PW, DH, DW;  // strides, pads at the start, dilations
  uint G;                      // groups
} p;

uint xoff, woff, yoff, moff;

uint dim_m() { return p.M / p.G; }
uint dim_n() { return p.OH * p.OW; }
uint dim_k() { return p.C / p.G * p.KH * p.KW; }
uint batch_count() { return p.n; }
void tile_setup(uint z) {
  const uint g = z % p.G;
  xoff = z * (p.C / p.G) * p.H * p.W;  // image z / G, its channels of group g
  moff = g * dim_m();
  woff = moff * dim_k();
  yoff = z * dim_m() * dim_n();
}
float load_a(uint m, uint k) { return LD(w[woff + m * dim_k() + k]); }
float load_b(uint k, uint n) {
  const uint taps = p.KH * p.KW, c = k / taps, r = k % taps;
  const int ih = int(n / p.OW) * p.SH - p.PH + int(r / p.KW) * p.DH;
  const int iw = int(n % p.OW) * p.SW - p.PW + int(r % p.KW) * p.DW;
  if (ih < 0 || ih >= int(p.H) || iw < 0 || iw >= int(p.W)) return 0.0;
  return LD(x[xoff + (c * p.H + uint(ih)) * p.W + uint(iw)]);
}
bool a_k_contiguous() { return true; }
bool b_n_contiguous() { return true; }
void store_c(uint m, uint n, float v) {
  if (HAS_BIAS) v += LD(bias[moff + m]);
  const uint o = yoff + m * dim_n() + n;
  if (HAS_SUM) v += LD(sum[o]);
  y[o] = ST(activate(v));
}

