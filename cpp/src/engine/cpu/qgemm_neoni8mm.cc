// qs8_gemm_4x16c4__neoni8mm: the dot-product kernel's 4x16c4 shape (qgemm_neondot.cc) with
// FEAT_I8MM's mixed-sign dot product, SUDOT by lane: signed B times unsigned A directly, so
// neither B's sign flip nor A's row sums are needed. Compiled with
// -march=armv8.2-a+dotprod+i8mm; called only when the CPU has i8mm.
#include <arm_neon.h>

#include <cstring>

#include "engine/cpu/qgemm_kernels.h"

namespace tether::engine::cpu {

namespace {

template <int L, int R>
inline void sudot_step(int32x4_t (&acc)[R][4], const int8_t* bp, const uint8x16_t (&av)[R]) {
  int8x16_t bv[4];
  for (int v = 0; v < 4; ++v) bv[v] = vld1q_s8(bp + 16 * v);
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v) acc[r][v] = vsudotq_laneq_s32(acc[r][v], bv[v], av[r], L);
}

template <int R>
void sudot_rows(int64_t groups, const uint8_t* a, int64_t lda, const int8_t* b, int32_t* out) {
  int32x4_t acc[R][4];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v) acc[r][v] = vdupq_n_s32(0);
  uint8x16_t av[R];
  int64_t g = 0;
  for (; g + 4 <= groups; g += 4) {
    for (int r = 0; r < R; ++r) av[r] = vld1q_u8(a + r * lda + g * 4);
    sudot_step<0>(acc, b + (g + 0) * 64, av);
    sudot_step<1>(acc, b + (g + 1) * 64, av);
    sudot_step<2>(acc, b + (g + 2) * 64, av);
    sudot_step<3>(acc, b + (g + 3) * 64, av);
  }
  for (; g < groups; ++g) {
    for (int r = 0; r < R; ++r) {
      uint32_t word;
      std::memcpy(&word, a + r * lda + g * 4, sizeof word);
      av[r] = vreinterpretq_u8_u32(vdupq_n_u32(word));
    }
    sudot_step<0>(acc, b + g * 64, av);
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < 4; ++v) vst1q_s32(out + r * 16 + 4 * v, acc[r][v]);
}

}  // namespace

void qs8_gemm_4x16c4__neoni8mm(int64_t groups, const void* a, int64_t lda, const void* b, int32_t* acc, int64_t rows) {
  const auto* pa = static_cast<const uint8_t*>(a);
  const auto* pb = static_cast<const int8_t*>(b);
  switch (rows) {
    case 1: return sudot_rows<1>(groups, pa, lda, pb, acc);
    case 2: return sudot_rows<2>(groups, pa, lda, pb, acc);
    case 3: return sudot_rows<3>(groups, pa, lda, pb, acc);
    default: return sudot_rows<4>(groups, pa, lda, pb, acc);
  }
}

}  // namespace tether::engine::cpu
