// qs8_gemm_6x16__avxvnni: the YMM vpdpbusd kernel (qgemm_vnni_ymm.inc) in its VEX encoding.
// Compiled with -mavx2 -mavxvnni; chosen only on a CPU with AVX-VNNI and without AVX512-VNNI
// (Alder Lake and later client cores). Not exercised on a machine without AVX-VNNI: there its
// source is tested through the EVEX build of the same file, qs8_gemm_6x16__avx256vnni.
#include "util/simd.h"

#include <cstring>

#include "engine/cpu/qgemm_kernels.h"

#define QGEMM_DPBUSD _mm256_dpbusd_avx_epi32

namespace tether::engine::cpu {

#include "engine/cpu/qgemm_vnni_ymm.inc"

void qs8_gemm_6x16__avxvnni(int64_t groups, const void* a, int64_t lda, const void* b, int32_t* acc,
                               int64_t rows) {
  gemm_6x16(groups, a, lda, b, acc, rows);
}

}  // namespace tether::engine::cpu
