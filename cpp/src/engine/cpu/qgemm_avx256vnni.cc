// qs8_gemm_6x16__avx256vnni: the YMM vpdpbusd kernel (qgemm_vnni_ymm.inc) in its EVEX
// encoding (AVX512-VNNI with VL). Compiled with AVX-512 (F, BW, DQ, VL, VNNI) flags; called
// only when the CPU has them. It stands in for the AVX-VNNI build in tests on AVX-512 machines.
#include "util/simd.h"

#include <cstring>

#include "engine/cpu/qgemm_kernels.h"

#define QGEMM_DPBUSD _mm256_dpbusd_epi32

namespace tether::engine::cpu {

#include "engine/cpu/qgemm_vnni_ymm.inc"

void qs8_gemm_6x16__avx256vnni(int64_t groups, const void* a, int64_t lda, const void* b, int32_t* acc,
                               int64_t rows) {
  gemm_6x16(groups, a, lda, b, acc, rows);
}

}  // namespace tether::engine::cpu
