// f32_v<op>__avx2: exp, erf, tanh, sigmoid, SiLU and GELU on 8 lanes with FMA. Compiled with
// -mavx2 -mfma; called only when the CPU has them (elementwise.h).
//
// exp, tanh and sigmoid use util/fastmath.h's range reduction; e^r - 1 is a polynomial of one
// degree more, evaluated by Estrin's scheme, accurate enough relative to e^r - 1 for tanh to be
// formed from e^(2|x|) - 1 with no series near 0. erf is different: fastmath.h's erfc form needs a
// division and an exponential, which made Erf and GELU the slowest of these ops; here |x| below
// 4 is cut into 4 intervals of width 1, each with a degree-8 polynomial (a near-minimax fit of
// erf, relative on the first interval so that small arguments keep their relative accuracy;
// absolute error below 2e-7 over all floats), whose coefficients one in-lane permute per term
// picks per lane.
#include "util/simd.h"

#include "engine/cpu/elementwise.h"

namespace tether::engine::cpu {

namespace {

// Per-lane masks of the first r lanes (1 <= r <= 7) for the tail: a window into this table.
alignas(32) constexpr int32_t kTailMask[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

// Runs f over x in steps of 8 lanes; the last n % 8 elements through masked loads and stores,
// so that nothing past x[n - 1] or y[n - 1] is touched.
template <typename F>
inline void for_each8(const float* x, float* y, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, f(_mm256_loadu_ps(x + i)));
  if (i < n) {
    const __m256i m = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kTailMask + 8 - (n - i)));
    _mm256_maskstore_ps(y + i, m, f(_mm256_maskload_ps(x + i, m)));
  }
}

inline __m256 abs8(__m256 x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }
inline __m256 sign8(__m256 x) { return _mm256_and_ps(_mm256_set1_ps(-0.0f), x); }
// min(x, hi) and max(x, lo) that keep a NaN x: vminps and vmaxps return their second operand
// when either is NaN.
inline __m256 min_keep_nan(__m256 x, float hi) { return _mm256_min_ps(_mm256_set1_ps(hi), x); }
inline __m256 max_keep_nan(__m256 x, float lo) { return _mm256_max_ps(_mm256_set1_ps(lo), x); }

// x = n ln2 + r with |r| <= ln2 / 2 (as util::fast_exp): e^r - 1 (kept apart from the 1 so that
// callers can form e^x - 1 without cancellation), and the bits of n + 1.5 * 2^23, whose low bits
// hold the integer n.
struct Reduced {
  __m256 em1;
  __m256i n_bits;
};

inline Reduced exp_reduce(__m256 x) {
  const __m256 magic = _mm256_set1_ps(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  const __m256 t = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), magic);
  const __m256 n = _mm256_sub_ps(t, magic);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), r);
  // e^r - 1 = r + r^2 q(r), q to r^5 from the Taylor series (truncation below 1.4e-8 of e^r - 1:
  // tanh's e^(2a) - 1 needs that relative accuracy, which a minimax fit of e^r lacks near 0).
  // Estrin's scheme rather than Horner's: the chain of dependent operations per lane is what
  // bounds these loops (more than the count of operations), and it is half as long.
  const __m256 r2 = _mm256_mul_ps(r, r);
  const __m256 r4 = _mm256_mul_ps(r2, r2);
  const __m256 q01 = _mm256_fmadd_ps(r, _mm256_set1_ps(1.0f / 6), _mm256_set1_ps(0.5f));
  const __m256 q23 = _mm256_fmadd_ps(r, _mm256_set1_ps(1.0f / 120), _mm256_set1_ps(1.0f / 24));
  const __m256 q45 = _mm256_fmadd_ps(r, _mm256_set1_ps(1.0f / 5040), _mm256_set1_ps(1.0f / 720));
  const __m256 q = _mm256_fmadd_ps(q45, r4, _mm256_fmadd_ps(q23, r2, q01));
  return {_mm256_fmadd_ps(q, r2, r), _mm256_castps_si256(t)};
}

// 2^(n - 1) for n in [-125, 128] from exp_reduce's bits: the exponent field (n + 126) << 23,
// where the shift drops the 1.5 * 2^23 above bit 22.
inline __m256 pow2_half(__m256i n_bits) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n_bits, _mm256_set1_epi32(126)), 23));
}

// e^x for x in [-86.6, 88.73] (callers clamp; NaN passes) as 2 (2^(n-1) e^r): the doubling is
// exact, and overflows to +inf where e^x does (x above ln FLT_MAX, n = 128).
inline __m256 exp_normal(__m256 x) {
  const Reduced e = exp_reduce(x);
  const __m256 h = pow2_half(e.n_bits);
  const __m256 y = _mm256_fmadd_ps(h, e.em1, h);
  return _mm256_add_ps(y, y);
}

// e^x over the whole float range, as util::fast_exp: 2^n in two normal factors, so that
// subnormal results (n down to -150) are rounded once, from the exact product.
inline __m256 exp_full(__m256 x) {
  x = min_keep_nan(max_keep_nan(x, -103.9721f), 88.72284f);
  const Reduced e = exp_reduce(x);
  const __m256 p = _mm256_add_ps(e.em1, _mm256_set1_ps(1.0f));
  const __m256i n = _mm256_sub_epi32(e.n_bits, _mm256_set1_epi32(0x4B400000));
  const __m256i half = _mm256_srai_epi32(n, 1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(n, half), bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

// erf on [0, 4): interval k = floor(z) holds erf(z) ~ sum_j kErf[j + 1][k] (z - kErf[0][k])^j.
// Interval 0 is centred on 0 with no constant term, so that erf(z) / z stays accurate as z -> 0.
// Four entries a row: vpermilps picks them within each 128-bit half, which is cheaper on AMD
// cores than vpermps across the register.
alignas(16) constexpr float kErf[10][4] = {
    {0.0f, 1.5f, 2.5f, 3.5f},
    {0.0f, 0.966105163f, 0.999593019f, 0.999999285f},
    {1.12837923f, 0.118930079f, 0.00217831787f, 5.39730081e-06f},
    {-4.08317783e-06f, -0.178395405f, -0.00544575369f, -1.88953018e-05f},
    {-0.376065224f, 0.138763443f, 0.00834829081f, 4.24089558e-05f},
    {-0.000288968731f, -0.0445996411f, -0.00862118788f, -6.77916614e-05f},
    {0.113046773f, -0.0150328968f, 0.00614333386f, 8.04831216e-05f},
    {0.00219210819f, 0.0193346534f, -0.00281032687f, -7.70125262e-05f},
    {-0.0341782011f, -0.00383562222f, 0.000403151091f, 6.68868306e-05f},
    {0.0096192034f, -0.00240435079f, 0.000310539705f, -3.73036492e-05f},
};

// The table in registers (each row in both halves), loaded once per call.
struct ErfTables {
  __m256 row[10];
  ErfTables() {
    for (int j = 0; j < 10; ++j) row[j] = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(kErf[j]));
  }
};

// erf(z) for z = |x| >= 0 or NaN. Above the last float below 4 erf rounds to 1 (erfc(4) is
// 1.5e-8), so z is capped there; a NaN z turns into index 0 (vcvttps2dq gives 0x80000000)
// and stays NaN through the polynomial. The result never exceeds 1.
inline __m256 erf_abs(__m256 z, const ErfTables& t) {
  z = min_keep_nan(z, 3.99999976f);
  const __m256i k = _mm256_cvttps_epi32(z);
  const auto c = [&](int j) { return _mm256_permutevar_ps(t.row[j + 1], k); };
  const __m256 u = _mm256_sub_ps(z, _mm256_permutevar_ps(t.row[0], k));
  const __m256 u2 = _mm256_mul_ps(u, u);
  const __m256 u4 = _mm256_mul_ps(u2, u2);
  const __m256 p03 = _mm256_fmadd_ps(_mm256_fmadd_ps(c(3), u, c(2)), u2, _mm256_fmadd_ps(c(1), u, c(0)));
  const __m256 p47 = _mm256_fmadd_ps(_mm256_fmadd_ps(c(7), u, c(6)), u2, _mm256_fmadd_ps(c(5), u, c(4)));
  const __m256 p48 = _mm256_fmadd_ps(c(8), u4, p47);
  return min_keep_nan(_mm256_fmadd_ps(p48, u4, p03), 1.0f);
}

// tanh(|x|) for a = |x| (or NaN) as m / (m + 2) with m = e^(2a) - 1 = 2^n (e^r - 1) + (2^n - 1):
// both terms and the quotient keep their relative accuracy as a -> 0 (m is then e^r - 1 alone),
// so one formula serves the whole range with no series near 0. a is capped at 9.5, past which
// tanh rounds to 1 (m stays finite there).
inline __m256 tanh_abs(__m256 a) {
  const __m256 y = min_keep_nan(_mm256_add_ps(a, a), 19.0f);
  const Reduced e = exp_reduce(y);
  const __m256 h = pow2_half(e.n_bits);
  const __m256 s = _mm256_add_ps(h, h);  // 2^n, n in [0, 27]
  const __m256 m = _mm256_fmadd_ps(s, e.em1, _mm256_sub_ps(s, _mm256_set1_ps(1.0f)));
  return _mm256_div_ps(m, _mm256_add_ps(m, _mm256_set1_ps(2.0f)));
}

// 1 + e^-x, with -x clamped to [-86.6, 88.73]: 1 above x = 86.6 (where sigmoid rounds to 1),
// +inf below x = -88.73 (sigmoid's 1 / (1 + e^-x) is then 0, as the limit).
inline __m256 one_plus_exp_neg(__m256 x) {
  const __m256 neg = min_keep_nan(max_keep_nan(_mm256_sub_ps(_mm256_setzero_ps(), x), -86.6f), 88.72284f);
  return _mm256_add_ps(_mm256_set1_ps(1.0f), exp_normal(neg));
}

}  // namespace

void f32_vexp__avx2(const float* x, float* y, int64_t n) {
  for_each8(x, y, n, [](__m256 v) { return exp_full(v); });
}

void f32_verf__avx2(const float* x, float* y, int64_t n) {
  const ErfTables t;
  for_each8(x, y, n, [&t](__m256 v) { return _mm256_or_ps(erf_abs(abs8(v), t), sign8(v)); });
}

void f32_vtanh__avx2(const float* x, float* y, int64_t n) {
  for_each8(x, y, n, [](__m256 v) { return _mm256_or_ps(tanh_abs(abs8(v)), sign8(v)); });
}

void f32_vsigmoid__avx2(const float* x, float* y, int64_t n) {
  for_each8(x, y, n, [](__m256 v) { return _mm256_div_ps(_mm256_set1_ps(1.0f), one_plus_exp_neg(v)); });
}

void f32_vsilu__avx2(const float* x, float* y, int64_t n) {
  for_each8(x, y, n, [](__m256 v) { return _mm256_div_ps(v, one_plus_exp_neg(v)); });
}

void f32_vgelu__avx2(const float* x, float* y, int64_t n) {
  const ErfTables t;
  for_each8(x, y, n, [&t](__m256 v) {
    const __m256 half_x = _mm256_mul_ps(v, _mm256_set1_ps(0.5f));
    const __m256 e = erf_abs(_mm256_mul_ps(abs8(v), _mm256_set1_ps(0.70710678118654752f)), t);
    return _mm256_fmadd_ps(half_x, _mm256_or_ps(e, sign8(v)), half_x);
  });
}

void f32_vgelu_tanh__avx2(const float* x, float* y, int64_t n) {
  for_each8(x, y, n, [](__m256 v) {
    const __m256 half_x = _mm256_mul_ps(v, _mm256_set1_ps(0.5f));
    const __m256 cube = _mm256_mul_ps(_mm256_mul_ps(v, v), v);
    const __m256 u = _mm256_mul_ps(_mm256_fmadd_ps(cube, _mm256_set1_ps(0.044715f), v),
                                   _mm256_set1_ps(0.79788456080286536f));
    return _mm256_fmadd_ps(half_x, _mm256_or_ps(tanh_abs(abs8(u)), sign8(u)), half_x);
  });
}

}  // namespace tether::engine::cpu
