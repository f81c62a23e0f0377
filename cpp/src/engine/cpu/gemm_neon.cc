// f32_gemm_<R>x16__neon: R rows x 16 columns of C in 4R quad-register accumulators (R = 6 for
// full tiles, as XNNPACK's and KleidiAI's 6x16 AArch64 float kernels; 4, 2, 1 for the rows
// left over). Each depth step loads the step's packed A values as vectors and multiplies B's
// four vectors by their lanes (FMLA by element): 24 accumulators, 4 B and 2 A registers of
// the 32. NEON is part of every AArch64 CPU; no flags needed.
#include <arm_neon.h>

#include <utility>

#include "engine/cpu/gemm.h"
#include "engine/cpu/tile_neon.h"

namespace tether::engine::cpu {

namespace {

// acc += b * A(row I): lane I of the step's first four A values, or lane I - 4 of the next two.
template <int I>
inline float32x4_t fma_lane(float32x4_t acc, float32x4_t b, float32x4_t a03, float32x2_t a45) {
  if constexpr (I < 4) return vfmaq_laneq_f32(acc, b, a03, I);
  else return vfmaq_lane_f32(acc, b, a45, I - 4);
}

template <int R, size_t... I>
inline void step(float32x4_t (&acc)[R][4], const float32x4_t (&b)[4], float32x4_t a03, float32x2_t a45,
                 std::index_sequence<I...>) {
  ((acc[I][0] = fma_lane<I>(acc[I][0], b[0], a03, a45), acc[I][1] = fma_lane<I>(acc[I][1], b[1], a03, a45),
    acc[I][2] = fma_lane<I>(acc[I][2], b[2], a03, a45), acc[I][3] = fma_lane<I>(acc[I][3], b[3], a03, a45)),
   ...);
}

// B's row p: panel + p * 16 (packed), or b + b_off[p] (rows read in place, see OffsetKernel).
// A's step p holds a_stride >= R floats, so loading R of them stays inside the step.
template <int R, bool kOffsets>
void gemm_rows_x16(int64_t k, const float* a, int64_t a_stride, const float* panel, const int64_t* b_off, float* c,
                   int64_t ldc, int64_t m, int64_t n, bool accumulate, const TileEpilogue* ep) {
  float32x4_t acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v) acc[r][v] = vdupq_n_f32(0.0f);
  const float32x2_t zero2 = vdup_n_f32(0.0f);
  for (int64_t p = 0; p < k; ++p) {
    const float* row = kOffsets ? panel + b_off[p] : panel + p * 16;
    const float32x4_t b[4] = {vld1q_f32(row), vld1q_f32(row + 4), vld1q_f32(row + 8), vld1q_f32(row + 12)};
    const float* ap = a + p * a_stride;
    float32x4_t a03;
    float32x2_t a45 = zero2;
    if constexpr (R == 1) a03 = vld1q_dup_f32(ap);
    else if constexpr (R == 2) a03 = vcombine_f32(vld1_f32(ap), zero2);
    else a03 = vld1q_f32(ap);
    if constexpr (R > 4) a45 = vld1_f32(ap + 4);
    step<R>(acc, b, a03, a45, std::make_index_sequence<R>{});
  }
  for (int r = 0; r < R && r < m; ++r) neon::store_row<4>(acc[r], c + r * ldc, n, accumulate, ep, r);
}

template <bool kOffsets>
void gemm_tile(int64_t k, const float* a, int64_t a_stride, const float* b, const int64_t* b_off, float* c,
               int64_t ldc, int64_t m, int64_t n, bool accumulate, const TileEpilogue* ep) {
  if (m <= 1) return gemm_rows_x16<1, kOffsets>(k, a, a_stride, b, b_off, c, ldc, m, n, accumulate, ep);
  if (m <= 2) return gemm_rows_x16<2, kOffsets>(k, a, a_stride, b, b_off, c, ldc, m, n, accumulate, ep);
  if (m <= 4) return gemm_rows_x16<4, kOffsets>(k, a, a_stride, b, b_off, c, ldc, m, n, accumulate, ep);
  gemm_rows_x16<6, kOffsets>(k, a, a_stride, b, b_off, c, ldc, m, n, accumulate, ep);
}

}  // namespace

void f32_gemm_6x16__neon(int64_t k, const float* a, int64_t a_stride, const float* panel, float* c, int64_t ldc,
                         int64_t m, int64_t n, bool accumulate, const TileEpilogue* ep) {
  gemm_tile<false>(k, a, a_stride, panel, nullptr, c, ldc, m, n, accumulate, ep);
}

void f32_gemm_6x16_offsets__neon(int64_t k, const float* a, int64_t a_stride, const float* b, const int64_t* b_off,
                                 float* c, int64_t ldc, int64_t m, int64_t n, bool accumulate, const TileEpilogue* ep) {
  gemm_tile<true>(k, a, a_stride, b, b_off, c, ldc, m, n, accumulate, ep);
}

}  // namespace tether::engine::cpu
