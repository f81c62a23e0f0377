// The x86 intrinsics, for the per-ISA kernel files. GCC 12's AVX-512 headers initialise their
// "undefined" vectors from themselves (`__m512i __Y = __Y;`), which -Wmaybe-uninitialized
// reports once per inlined intrinsic (hundreds per kernel file, none in tether's code): the
// warning is off for the header's lines only.
//
//   #include "util/simd.h"
//   __m256 v = _mm256_loadu_ps(p);
#pragma once

#if defined(__x86_64__)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <immintrin.h>
#endif
#endif  // __x86_64__: elsewhere the x86 code paths are compiled out
