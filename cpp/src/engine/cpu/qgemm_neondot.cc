// qs8_gemm_4x16c4__neondot: uint8 A x int8 B on AArch64's dot products (FEAT_DotProd), the
// 4x16c4 shape of XNNPACK's and KleidiAI's dot-product kernels: 4 rows x 16 columns in 16
// accumulators, B packed in steps of 4 depths (group 4, qgemm_kernels.h), 16 bytes of each A
// row loaded per 4 steps and multiplied by element (UDOT by lane). UDOT multiplies unsigned by
// unsigned, so B is taken as b + 128 (its sign bit flipped) and 128 x the row's sum of A,
// itself a UDOT against ones, is subtracted at the end: exact in wrap-around int32 like the
// other kernels. Compiled with -march=armv8.2-a+dotprod; called only when the CPU has it.
#include <arm_neon.h>

#include <cstring>

#include "engine/cpu/qgemm_kernels.h"

namespace tether::engine::cpu {

namespace {

// One depth step (64 bytes of B) against lane L of each row's 16 loaded bytes.
template <int L, int R>
inline void dot_step(uint32x4_t (&acc)[R][4], const int8_t* bp, const uint8x16_t (&av)[R]) {
  const uint8x16_t flip = vdupq_n_u8(0x80);
  uint8x16_t bv[4];
  for (int v = 0; v < 4; ++v) bv[v] = veorq_u8(vld1q_u8(reinterpret_cast<const uint8_t*>(bp) + 16 * v), flip);
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v) acc[r][v] = vdotq_laneq_u32(acc[r][v], bv[v], av[r], L);
}

template <int R>
void dot_rows(int64_t groups, const uint8_t* a, int64_t lda, const int8_t* b, int32_t* out) {
  uint32x4_t acc[R][4], row_sum[R];
  for (int r = 0; r < R; ++r) {
    row_sum[r] = vdupq_n_u32(0);
    for (int v = 0; v < 4; ++v) acc[r][v] = vdupq_n_u32(0);
  }
  const uint8x16_t ones = vdupq_n_u8(1);
  uint8x16_t av[R];
  int64_t g = 0;
  for (; g + 4 <= groups; g += 4) {
    for (int r = 0; r < R; ++r) {
      av[r] = vld1q_u8(a + r * lda + g * 4);
      row_sum[r] = vdotq_u32(row_sum[r], av[r], ones);
    }
    dot_step<0>(acc, b + (g + 0) * 64, av);
    dot_step<1>(acc, b + (g + 1) * 64, av);
    dot_step<2>(acc, b + (g + 2) * 64, av);
    dot_step<3>(acc, b + (g + 3) * 64, av);
  }
  // The last steps one at a time: 4 bytes of each row, read no further than the padded depth.
  for (; g < groups; ++g) {
    for (int r = 0; r < R; ++r) {
      uint32_t word;
      std::memcpy(&word, a + r * lda + g * 4, sizeof word);
      av[r] = vreinterpretq_u8_u32(vsetq_lane_u32(word, vdupq_n_u32(0), 0));
      row_sum[r] = vdotq_u32(row_sum[r], av[r], ones);
    }
    dot_step<0>(acc, b + g * 64, av);
  }
  for (int r = 0; r < R; ++r) {
    const uint32x4_t shift = vdupq_n_u32(128u * vaddvq_u32(row_sum[r]));
    for (int v = 0; v < 4; ++v) vst1q_s32(out + r * 16 + 4 * v, vreinterpretq_s32_u32(vsubq_u32(acc[r][v], shift)));
  }
}

}  // namespace

void qs8_gemm_4x16c4__neondot(int64_t groups, const void* a, int64_t lda, const void* b, int32_t* acc, int64_t rows) {
  const auto* pa = static_cast<const uint8_t*>(a);
  const auto* pb = static_cast<const int8_t*>(b);
  switch (rows) {
    case 1: return dot_rows<1>(groups, pa, lda, pb, acc);
    case 2: return dot_rows<2>(groups, pa, lda, pb, acc);
    case 3: return dot_rows<3>(groups, pa, lda, pb, acc);
    default: return dot_rows<4>(groups, pa, lda, pb, acc);
  }
}

}  // namespace tether::engine::cpu
