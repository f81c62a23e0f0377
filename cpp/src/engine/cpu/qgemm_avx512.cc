// qs8_gemm_12x32__avx512vnni: R rows x 32 columns of int32 sums in 2R ZMM accumulators
// (R = 1..12 by the tile's rows). A packed step holds 4 depths: one 64-byte load of B gives
// 16 columns x 4 int8, A's 4 uint8 of a row are broadcast, and one vpdpbusd adds the four
// products into each int32 lane, exactly (no saturating step). Also the integer GEMM's tile
// epilogue compiled for AVX-512. Compiled with AVX-512 (F, BW, DQ, VL, VNNI) flags; called only
// when the CPU has them.
#include "util/simd.h"

#include <cstring>
#include <type_traits>

#include "engine/cpu/avx512_math.h"
#include "engine/cpu/qgemm_kernels.h"

namespace tether::engine::cpu {

#include "engine/cpu/qgemm_epilogue.inc"

namespace {

constexpr int kMr = 12;
constexpr int kNr = 32;

template <int kRows>
void gemm_rows_x32(int64_t groups, const uint8_t* a, int64_t lda, const int8_t* b, int32_t* acc) {
  __m512i c[kRows][2];
#pragma GCC unroll 12
  for (int r = 0; r < kRows; ++r) c[r][0] = c[r][1] = _mm512_setzero_si512();
  for (int64_t g = 0; g < groups; ++g) {
    const __m512i b0 = _mm512_load_si512(b + g * 4 * kNr);
    const __m512i b1 = _mm512_load_si512(b + g * 4 * kNr + 64);
#pragma GCC unroll 12
    for (int r = 0; r < kRows; ++r) {
      int32_t a4;
      std::memcpy(&a4, a + r * lda + 4 * g, 4);
      const __m512i av = _mm512_set1_epi32(a4);
      c[r][0] = _mm512_dpbusd_epi32(c[r][0], av, b0);
      c[r][1] = _mm512_dpbusd_epi32(c[r][1], av, b1);
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < kRows; ++r) {
    _mm512_store_si512(acc + r * kNr, c[r][0]);
    _mm512_store_si512(acc + r * kNr + 16, c[r][1]);
  }
}

using RowsKernel = void (*)(int64_t, const uint8_t*, int64_t, const int8_t*, int32_t*);

constexpr RowsKernel kByRows[kMr] = {
    gemm_rows_x32<1>, gemm_rows_x32<2>, gemm_rows_x32<3>, gemm_rows_x32<4>,  gemm_rows_x32<5>,  gemm_rows_x32<6>,
    gemm_rows_x32<7>, gemm_rows_x32<8>, gemm_rows_x32<9>, gemm_rows_x32<10>, gemm_rows_x32<11>, gemm_rows_x32<12>,
};

}  // namespace

void qs8_gemm_12x32__avx512vnni(int64_t groups, const void* a, int64_t lda, const void* b, int32_t* acc,
                                int64_t rows) {
  kByRows[rows - 1](groups, static_cast<const uint8_t*>(a), lda, static_cast<const int8_t*>(b), acc);
}

namespace {

// The requantizing epilogue in registers, for the common tile: int8 / uint8 output stored in
// rows (col_stride 1), zero points that need no product terms (B's uniform, A's per tensor).
// Per 16 columns: the sums plus the column and row terms, float, times the scale, clamped,
// rounded half to even by vcvtps2dq (the default rounding mode; the same integer as
// tile_epilogue's float rounding for |v| < 2^22), plus the zero point, narrowed to bytes
// (in range after the clamp, so the saturating narrow is exact).
template <typename T>
void requantize_rows(const int32_t* acc, int64_t ld, int64_t rows, int64_t cols, const QTileTerms& t,
                     const QGemmOutput& out, int64_t i0, int64_t j0) {
  const __m512 lo = _mm512_set1_ps(static_cast<float>(out.lo - out.zero_point));
  const __m512 hi = _mm512_set1_ps(static_cast<float>(out.hi - out.zero_point));
  const __m512i zero = _mm512_set1_epi32(out.zero_point);
  const float* scale = out.scale + (out.scale_per_column ? j0 : 0);
  T* c = static_cast<T*>(out.c) + i0 * out.row_stride + j0;
  for (int64_t q = 0; q < cols; q += 16) {
    const __mmask16 m = cols - q >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (cols - q)) - 1);
    const __m512i col = _mm512_maskz_loadu_epi32(m, t.col_add + q);
    const __m512 sc = out.scale_per_column ? _mm512_maskz_loadu_ps(m, scale + q) : _mm512_set1_ps(scale[0]);
    for (int64_t r = 0; r < rows; ++r) {
      const __m512i s = _mm512_add_epi32(_mm512_add_epi32(_mm512_maskz_loadu_epi32(m, acc + r * ld + q), col),
                                         _mm512_set1_epi32(t.row_add[r]));
      __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(s), sc);
      v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
      const __m512i y = _mm512_add_epi32(_mm512_cvtps_epi32(v), zero);
      if constexpr (std::is_signed_v<T>) _mm512_mask_cvtsepi32_storeu_epi8(c + r * out.row_stride + q, m, y);
      else _mm512_mask_cvtusepi32_storeu_epi8(c + r * out.row_stride + q, m, y);
    }
  }
}

// Gelu(x) = x / 2 (1 + erf(x / sqrt 2)) on 16 lanes, erf as util::fast_erf computes it
// (erfc(|v|) = t exp(-v^2 + P(t)), t = 1 / (1 + |v| / 2)) with t from vrcp14ps and a Newton
// step: within 1e-6 of the scalar epilogue, without its division.
inline __m512 gelu16(__m512 x) {
  const __m512 v = _mm512_mul_ps(x, _mm512_set1_ps(0.70710678118654752f));
  const __m512 z = _mm512_abs_ps(v);
  const __m512 d = _mm512_fmadd_ps(z, _mm512_set1_ps(0.5f), _mm512_set1_ps(1.0f));
  __m512 t = _mm512_rcp14_ps(d);
  t = _mm512_mul_ps(t, _mm512_fnmadd_ps(d, t, _mm512_set1_ps(2.0f)));
  __m512 p = _mm512_set1_ps(0.17087277f);
  for (float c : {-0.82215223f, 1.48851587f, -1.13520398f, 0.27886807f, -0.18628806f, 0.09678418f, 0.37409196f,
                  1.00002368f, -1.26551223f})
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(c));
  const __m512 erfc = _mm512_mul_ps(t, exp16(_mm512_fnmadd_ps(z, z, p)));
  __m512 e = _mm512_sub_ps(_mm512_set1_ps(1.0f), erfc);
  e = _mm512_mask_sub_ps(e, _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ), _mm512_setzero_ps(), e);
  return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

// The dequantizing epilogue in registers, for rows stored contiguously with no product terms:
// float(s) * scale (+ bias), each rounded on its own as tile_epilogue rounds them (this file
// is built without FMA contraction), then the clamp, or the activation over the stored row.
template <bool kGelu>
void dequantize_rows(const int32_t* acc, int64_t ld, int64_t rows, int64_t cols, const QTileTerms& t,
                     const QGemmOutput& out, int64_t i0, int64_t j0) {
  const float* scale = out.scale + (out.scale_per_column ? j0 : 0);
  const float* bias = out.float_bias == nullptr ? nullptr : out.float_bias + (out.float_bias_per_column ? j0 : 0);
  const __m512 lo = _mm512_set1_ps(t.act_lo), hi = _mm512_set1_ps(t.act_hi);
  float* c = static_cast<float*>(out.c) + i0 * out.row_stride + j0;
  for (int64_t q = 0; q < cols; q += 16) {
    const __mmask16 m = cols - q >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (cols - q)) - 1);
    const __m512i col = _mm512_maskz_loadu_epi32(m, t.col_add + q);
    const __m512 sc = out.scale_per_column ? _mm512_maskz_loadu_ps(m, scale + q) : _mm512_set1_ps(scale[0]);
    const __m512 b = bias == nullptr ? _mm512_setzero_ps()
                     : out.float_bias_per_column ? _mm512_maskz_loadu_ps(m, bias + q) : _mm512_set1_ps(bias[0]);
    for (int64_t r = 0; r < rows; ++r) {
      const __m512i s = _mm512_add_epi32(_mm512_add_epi32(_mm512_maskz_loadu_epi32(m, acc + r * ld + q), col),
                                         _mm512_set1_epi32(t.row_add[r]));
      __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(s), sc);
      if (bias != nullptr) v = _mm512_add_ps(v, b);
      if (t.act_clamp) v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
      if (kGelu) v = gelu16(v);
      _mm512_mask_storeu_ps(c + r * out.row_stride + q, m, v);
    }
  }
  if (!kGelu && !t.act_fused)
    for (int64_t r = 0; r < rows; ++r) out.act.apply(c + r * out.row_stride, cols);
}

}  // namespace

void qs8_gemm_epilogue__avx512(const int32_t* acc, int64_t ld, int64_t rows, int64_t cols, const QTileTerms& terms,
                               const QGemmOutput& out, int64_t i0, int64_t j0) {
  const bool bytes = out.kind == QGemmOutput::Kind::kInt8 || out.kind == QGemmOutput::Kind::kUInt8;
  if (bytes && out.col_stride == 1 && terms.products == 0) {
    if (out.kind == QGemmOutput::Kind::kInt8) requantize_rows<int8_t>(acc, ld, rows, cols, terms, out, i0, j0);
    else requantize_rows<uint8_t>(acc, ld, rows, cols, terms, out, i0, j0);
    return;
  }
  if (out.kind == QGemmOutput::Kind::kFloat32 && out.col_stride == 1 && terms.products == 0) {
    if (out.act.act == Epilogue::Act::kGelu) dequantize_rows<true>(acc, ld, rows, cols, terms, out, i0, j0);
    else dequantize_rows<false>(acc, ld, rows, cols, terms, out, i0, j0);
    return;
  }
  tile_epilogue(acc, ld, rows, cols, terms, out, i0, j0);
}

}  // namespace tether::engine::cpu
