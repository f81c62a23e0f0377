// The channels-last depthwise convolution of the integer path (see qlinear.h): per ISA, one
// output pixel at a time where a window crosses the input's border, whole rows of pixels
// where it does not.
#include "util/simd.h"

#include <cstring>
#include <type_traits>

#include "engine/cpu/qlinear.h"
#include "util/cpu_features.h"

namespace tether::engine::cpu::qlinear {

namespace {

template <typename T, typename Y>
void depthwise_pixel_generic(const DwPixel& p, const T* const* __restrict src, Y* __restrict y, int64_t c = 0) {
  for (; c < p.channels; ++c) {
    int32_t s = p.corr[c];
    for (int64_t t = 0; t < p.taps; ++t) s += static_cast<int32_t>(src[t][c]) * p.w[t * p.channels + c];
    y[c] = static_cast<Y>(requantized(static_cast<float>(s) * p.scale[c], p.lo, p.hi, p.y_zero));
  }
}

#if defined(__x86_64__)
template <typename T, typename Y>
__attribute__((target("avx2"))) void depthwise_pixel_avx2(const DwPixel& p, const T* const* __restrict src,
                                                           Y* __restrict y) {
  const __m256 lo = _mm256_set1_ps(p.lo), hi = _mm256_set1_ps(p.hi);
  const __m256i zero = _mm256_set1_epi32(p.y_zero);
  int64_t c = 0;
  for (; c + 8 <= p.channels; c += 8) {
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.corr + c));
    for (int64_t t = 0; t < p.taps; ++t) {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src[t] + c));
      const __m256i x = std::is_signed_v<T> ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
      a = _mm256_add_epi32(a, _mm256_mullo_epi32(x, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.w + t * p.channels + c))));
    }
    __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(a), _mm256_loadu_ps(p.scale + c));
    v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
    const __m256i q = _mm256_add_epi32(_mm256_cvtps_epi32(v), zero);  // MXCSR: round half to even
    // Eight int32 in the output's range to eight bytes.
    const __m128i w16 = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    const __m128i w8 = std::is_signed_v<Y> ? _mm_packs_epi16(w16, w16) : _mm_packus_epi16(w16, w16);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(y + c), w8);
  }
  depthwise_pixel_generic(p, src, y, c);
}

// y = round_half_even(clamp(float(a) * scale, lo, hi)) + zero on the lanes of `m`, stored as
// bytes (in range after the clamp, so the saturating narrow is exact). vcvtps2dq rounds half
// to even in the default rounding mode.
template <typename Y>
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline void requantize16(Y* y, __mmask16 m, __m512i a,
                                                                              __m512 scale, __m512 lo, __m512 hi,
                                                                              __m512i zero) {
  __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(a), scale);
  v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
  const __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(v), zero);
  if constexpr (std::is_signed_v<Y>) _mm512_mask_cvtsepi32_storeu_epi8(y, m, q);
  else _mm512_mask_cvtusepi32_storeu_epi8(y, m, q);
}

template <typename T, typename Y>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void depthwise_pixel_avx512(const DwPixel& p, const T* const* __restrict src,
                                                                         Y* __restrict y) {
  const __m512 lo = _mm512_set1_ps(p.lo), hi = _mm512_set1_ps(p.hi);
  const __m512i zero = _mm512_set1_epi32(p.y_zero);
  for (int64_t c = 0; c < p.channels; c += 16) {
    const __mmask16 m = p.channels - c >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (p.channels - c)) - 1);
    __m512i a = _mm512_maskz_loadu_epi32(m, p.corr + c);
    for (int64_t t = 0; t < p.taps; ++t) {
      const __m128i b = _mm_maskz_loadu_epi8(m, src[t] + c);
      const __m512i x = std::is_signed_v<T> ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b);
      a = _mm512_add_epi32(a, _mm512_mullo_epi32(x, _mm512_maskz_loadu_epi32(m, p.w + t * p.channels + c)));
    }
    requantize16(y + c, m, a, _mm512_maskz_loadu_ps(m, p.scale + c), lo, hi, zero);
  }
}

// Output pixels [ox0, ox1) of one output row whose windows lie inside the input across
// (above and below, rows[i] is input row oy * sh - ph + i * dh, or a row of zero points):
// the pixel loop runs inside each block of 16 channels, reading each tap at a fixed offset.
// Any filter size: the pixel loop runs inside each block of 16 channels, reading each tap at
// a fixed offset from the pixel's window.
template <typename T, typename Y>
__attribute__((target("avx512f,avx512bw,avx512vl"))) void depthwise_row_avx512_any(const DwPixel& p, const DwRow& r,
                                                                                    const T* const* __restrict rows,
                                                                                    Y* __restrict y) {
  const __m512 lo = _mm512_set1_ps(p.lo), hi = _mm512_set1_ps(p.hi);
  const __m512i zero = _mm512_set1_epi32(p.y_zero);
  const int64_t ch = p.channels, kh = r.kh, kw = r.kw, tap_step = r.dw * ch;
  for (int64_t c = 0; c < ch; c += 16) {
    const __mmask16 m = ch - c >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (ch - c)) - 1);
    const __m512i corr = _mm512_maskz_loadu_epi32(m, p.corr + c);
    const __m512 scale = _mm512_maskz_loadu_ps(m, p.scale + c);
    Y* out = y + r.ox0 * ch + c;
    for (int64_t ox = r.ox0; ox < r.ox1; ++ox, out += ch) {
      __m512i a = corr;
      const int64_t at = (ox * r.sw - r.pw) * ch + c;
      for (int64_t i = 0; i < kh; ++i) {
        const T* row = rows[i] + at;
        const int32_t* w = p.w + i * kw * ch + c;
        for (int64_t j = 0; j < kw; ++j) {
          const __m128i b = _mm_maskz_loadu_epi8(m, row + j * tap_step);
          const __m512i x = std::is_signed_v<T> ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b);
          a = _mm512_add_epi32(a, _mm512_mullo_epi32(x, _mm512_maskz_loadu_epi32(m, w + j * ch)));
        }
      }
      requantize16(out, m, a, scale, lo, hi, zero);
    }
  }
}

// The 3 x 3 row with AVX-512 VNNI, every output pixel of it (a column outside the input reads
// r.zeros): vpdpwssd multiplies int16 pairs and adds both products to an int32 lane, so each
// window row takes one instruction for its first two taps (their inputs packed as the low and
// high halves of a lane, the filter likewise) and one for the third (high half zero). Inputs
// and filters fit int16 (|w - w_zp| <= 255), the sums are exact. At stride 1 each input column
// is loaded and widened once and kept in registers for the three windows that read it, at
// stride 2 the column two windows share.
// Pixel ix of an input row, or the pixel of zero points when ix lies outside the row.
template <typename T>
inline const T* ix_in(const T* row, const T* zeros, int64_t ix, int64_t iw, int64_t ch) {
  return ix >= 0 && ix < iw ? row + ix * ch : zeros;
}

// The 16 (mask m) bytes at src as int32 lanes holding the value in their low half.
template <typename T>
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m512i dw_column(const T* src, __mmask16 m) {
  const __m128i b = _mm_maskz_loadu_epi8(m, src);
  if constexpr (std::is_signed_v<T>) return _mm512_and_si512(_mm512_cvtepi8_epi32(b), _mm512_set1_epi32(0xFFFF));
  else return _mm512_cvtepu8_epi32(b);
}

template <typename T, typename Y>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) void depthwise_row3x3_avx512vnni(
    const DwPixel& p, const DwRow& r, const T* const* __restrict rows, Y* __restrict y) {
  const __m512 lo = _mm512_set1_ps(p.lo), hi = _mm512_set1_ps(p.hi);
  const __m512i zero = _mm512_set1_epi32(p.y_zero);
  const int64_t ch = p.channels, sw = r.sw, dw = r.dw, iw = r.iw, ox0 = r.ox0, ox1 = r.ox1;
  const T* zeros = static_cast<const T*>(r.zeros);
  const bool unit = sw == 1 && dw == 1;
  for (int64_t c = 0; c < ch; c += 16) {
    const __mmask16 m = ch - c >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (ch - c)) - 1);
    const __m512i corr = _mm512_maskz_loadu_epi32(m, p.corr + c);
    const __m512 scale = _mm512_maskz_loadu_ps(m, p.scale + c);
    __m512i pair[3], single[3];
    for (int i = 0; i < 3; ++i) {
      pair[i] = _mm512_maskz_loadu_epi32(m, p.pairs3x3 + (2 * i) * ch + c);
      single[i] = _mm512_maskz_loadu_epi32(m, p.pairs3x3 + (2 * i + 1) * ch + c);
    }
    Y* out = y + ox0 * ch + c;
    if (unit) {
      __m512i x0[3], x1[3];
      for (int i = 0; i < 3; ++i) {
        x0[i] = dw_column(ix_in(rows[i], zeros, ox0 - r.pw, iw, ch) + c, m);
        x1[i] = dw_column(ix_in(rows[i], zeros, ox0 - r.pw + 1, iw, ch) + c, m);
      }
      for (int64_t ox = ox0; ox < ox1; ++ox, out += ch) {
        __m512i a = corr, t = _mm512_setzero_si512();  // two chains: pairs, thirds
        for (int i = 0; i < 3; ++i) {
          const __m512i x2 = dw_column(ix_in(rows[i], zeros, ox - r.pw + 2, iw, ch) + c, m);
          a = _mm512_dpwssd_epi32(a, _mm512_or_si512(x0[i], _mm512_slli_epi32(x1[i], 16)), pair[i]);
          t = _mm512_dpwssd_epi32(t, x2, single[i]);
          x0[i] = x1[i];
          x1[i] = x2;
        }
        requantize16(out, m, _mm512_add_epi32(a, t), scale, lo, hi, zero);
      }
    } else if (sw == 2 && dw == 1) {  // the window's last column is the next one's first
      __m512i x0[3];
      for (int i = 0; i < 3; ++i) x0[i] = dw_column(ix_in(rows[i], zeros, ox0 * 2 - r.pw, iw, ch) + c, m);
      for (int64_t ox = ox0; ox < ox1; ++ox, out += ch) {
        __m512i a = corr, t = _mm512_setzero_si512();  // two chains: pairs, thirds
        const int64_t ix = ox * 2 - r.pw;
        for (int i = 0; i < 3; ++i) {
          const __m512i x1 = dw_column(ix_in(rows[i], zeros, ix + 1, iw, ch) + c, m);
          const __m512i x2 = dw_column(ix_in(rows[i], zeros, ix + 2, iw, ch) + c, m);
          a = _mm512_dpwssd_epi32(a, _mm512_or_si512(x0[i], _mm512_slli_epi32(x1, 16)), pair[i]);
          t = _mm512_dpwssd_epi32(t, x2, single[i]);
          x0[i] = x2;
        }
        requantize16(out, m, _mm512_add_epi32(a, t), scale, lo, hi, zero);
      }
    } else {
      for (int64_t ox = ox0; ox < ox1; ++ox, out += ch) {
        __m512i a = corr, t = _mm512_setzero_si512();  // two chains: pairs, thirds
        const int64_t ix = ox * sw - r.pw;
        for (int i = 0; i < 3; ++i) {
          const __m512i x0 = dw_column(ix_in(rows[i], zeros, ix, iw, ch) + c, m);
          const __m512i x1 = dw_column(ix_in(rows[i], zeros, ix + dw, iw, ch) + c, m);
          const __m512i x2 = dw_column(ix_in(rows[i], zeros, ix + 2 * dw, iw, ch) + c, m);
          a = _mm512_dpwssd_epi32(a, _mm512_or_si512(x0, _mm512_slli_epi32(x1, 16)), pair[i]);
          t = _mm512_dpwssd_epi32(t, x2, single[i]);
        }
        requantize16(out, m, _mm512_add_epi32(a, t), scale, lo, hi, zero);
      }
    }
  }
}
#endif  // __x86_64__

template <typename T, typename Y>
using DepthwisePixel = void (*)(const DwPixel&, const T* const*, Y*);
template <typename T, typename Y>
using DepthwiseRow = void (*)(const DwPixel&, const DwRow&, const T* const*, Y*);

// The widest variant this machine runs (TETHER_ISA caps it).
template <typename T, typename Y>
DepthwisePixel<T, Y> depthwise_pixel_for_isa() {
#if defined(__x86_64__)
  const util::CpuFeatures& f = util::cpu_features();
  if (f.avx512) return depthwise_pixel_avx512<T, Y>;
  if (f.avx2) return depthwise_pixel_avx2<T, Y>;
#endif
  return [](const DwPixel& p, const T* const* src, Y* y) { depthwise_pixel_generic(p, src, y); };
}

template <typename T, typename Y>
void depthwise_nhwc_run(const RunContext& ctx, const View& x, View& y, const ConvGeometry& g, const DwPixel& pixel,
                        const std::byte* zeros, const std::byte* zero_row, int64_t slot) {
  static const DepthwisePixel<T, Y> kernel = depthwise_pixel_for_isa<T, Y>();
  const int64_t ih = x.dims[1], iw = x.dims[2], oh = y.dims[1], ow = y.dims[2], c = y.dims[3];
  const int64_t kh = g.kernel[0], kw = g.kernel[1];
  // The row kernel: 3 x 3 with VNNI takes whole rows, borders included; the general AVX-512
  // one the output columns whose windows lie inside the input across (ox * sw - pw >= 0 and
  // ox * sw - pw + (kw - 1) * dw < iw), the pixel kernel the rest. (AVX-512 without VNNI, a
  // CPU generation before Cascade Lake, runs 3 x 3 filters on the general row: one path less
  // to keep right.)
  DwRow across{kh, kw, g.strides[1], g.dilations[1], g.pad_begin[1], 0, ow, iw, zeros};
  DepthwiseRow<T, Y> row_kernel = nullptr;
#if defined(__x86_64__)
  const util::CpuFeatures& f = util::cpu_features();
  if (f.avx512 && f.avx512_vnni && pixel.pairs3x3 != nullptr) {
    row_kernel = depthwise_row3x3_avx512vnni<T, Y>;
  } else if (f.avx512) {
    row_kernel = depthwise_row_avx512_any<T, Y>;
    across.ox0 = std::min(ow, (g.pad_begin[1] + g.strides[1] - 1) / g.strides[1]);
    const int64_t last = iw - 1 - (kw - 1) * g.dilations[1] + g.pad_begin[1];  // ox * sw <= last
    across.ox1 = last < 0 ? across.ox0 : std::max(across.ox0, std::min(ow, last / g.strides[1] + 1));
  }
#endif
  auto rows = [&](int thread, int64_t r0, int64_t r1) {
    auto* src = reinterpret_cast<const T**>(ctx.scratch + thread * slot);
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t img = r / oh, oy = r % oh;
      const T* xi = x.as<T>() + img * ih * iw * c;
      if (row_kernel != nullptr && across.ox1 > across.ox0) {
        // Rows of the window (a row of zero points outside the input), then the row kernel.
        const T** in_rows = src + kh * kw;
        for (int64_t i = 0; i < kh; ++i) {
          const int64_t iy = oy * g.strides[0] - g.pad_begin[0] + i * g.dilations[0];
          in_rows[i] = iy >= 0 && iy < ih ? xi + iy * iw * c : reinterpret_cast<const T*>(zero_row);
        }
        row_kernel(pixel, across, in_rows, y.as<Y>() + r * ow * c);
      }
      for (int64_t ox = 0; ox < ow; ++ox) {
        if (row_kernel != nullptr && ox >= across.ox0 && ox < across.ox1) continue;
        for (int64_t i = 0; i < kh; ++i) {
          const int64_t iy = oy * g.strides[0] - g.pad_begin[0] + i * g.dilations[0];
          for (int64_t j = 0; j < kw; ++j) {
            const int64_t ix = ox * g.strides[1] - g.pad_begin[1] + j * g.dilations[1];
            src[i * kw + j] = iy >= 0 && iy < ih && ix >= 0 && ix < iw ? xi + (iy * iw + ix) * c
                                                                       : reinterpret_cast<const T*>(zeros);
          }
        }
        kernel(pixel, src, y.as<Y>() + (r * ow + ox) * c);
      }
    }
  };
  const int64_t total = x.dims[0] * oh;
  if (ctx.pool == nullptr) rows(0, 0, total);
  else ctx.pool->parallel_for_indexed(total, 1, rows);
}

}  // namespace

void depthwise_nhwc_rows(const RunContext& ctx, const View& x, View& y, const ConvGeometry& g, const DwPixel& pixel,
                         const std::byte* zeros, const std::byte* zero_row, int64_t slot) {
  const bool s8 = x.dtype == DType::kInt8, y8 = y.dtype == DType::kInt8;
  if (s8 && y8) depthwise_nhwc_run<int8_t, int8_t>(ctx, x, y, g, pixel, zeros, zero_row, slot);
  else if (s8) depthwise_nhwc_run<int8_t, uint8_t>(ctx, x, y, g, pixel, zeros, zero_row, slot);
  else if (y8) depthwise_nhwc_run<uint8_t, int8_t>(ctx, x, y, g, pixel, zeros, zero_row, slot);
  else depthwise_nhwc_run<uint8_t, uint8_t>(ctx, x, y, g, pixel, zeros, zero_row, slot);
}

}  // namespace tether::engine::cpu::qlinear
