// TETHER_MULTIVERSION: one loop-heavy function compiled per x86-64 level.
#pragma once

/// Marks a loop-heavy function to be compiled once per x86-64 level (AVX-512, AVX2, baseline)
/// with the best copy chosen when the library loads. The copies agree up to rounding: the
/// AVX2 and AVX-512 ones may fuse a multiply and an add into one FMA. (Hand-written kernels
/// such as the GEMM micro-kernels are chosen by util::cpu_features instead, which TETHER_ISA
/// can cap.)
#if defined(__clang__) || !defined(__x86_64__)
// clang (the fuzzing builds, tests/fuzz) cannot clone templates, and GCC 12 clones for x86
// only: one baseline copy there (on AArch64 that baseline has NEON).
#define TETHER_MULTIVERSION
#else
#define TETHER_MULTIVERSION __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
