// What this CPU can run, detected once at run time: on x86-64 from CPUID and the OS's XSAVE
// state, on AArch64 from the kernel's hardware capability bits (getauxval).
#pragma once

#include <string>

namespace tether::util {

struct CpuFeatures {
  bool avx2 = false;      ///< AVX2 and FMA3, with the OS saving YMM state
  bool avx512 = false;    ///< AVX-512 F, BW, DQ and VL, with the OS saving ZMM state
  bool avx512_vnni = false;
  bool avx512_vbmi = false;  ///< byte permutes across a register (vpermi2b)
  bool avx_vnni = false;
  bool amx_int8 = false;  ///< AMX tiles and their int8 products, with the OS's leave to use them
  bool neon = false;      ///< AArch64 Advanced SIMD (every AArch64 CPU has it)
  bool neon_dot = false;  ///< AArch64 SDOT/UDOT (FEAT_DotProd)
  bool neon_i8mm = false; ///< AArch64 SMMLA/USMMLA/SUDOT (FEAT_I8MM)
  std::string brand;      ///< the CPU's model string
};

/// The features of this machine. Setting the environment variable TETHER_ISA to "avx512",
/// "avx2" or "generic" caps what tether uses (for tests and comparisons); it never enables
/// more. Under "avx512" AMX goes; under "avx2" only AVX2 and FMA remain (no AVX-512, no
/// AVX-VNNI, no AMX). On AArch64 the caps are "neon_dot" (no i8mm), "neon" (no dot products)
/// and "generic" (the portable kernels alone).
const CpuFeatures& cpu_features();

/// "avx512", "avx2", "neon_i8mm", "neon_dot", "neon" or "generic": the widest instruction set
/// tether's kernels use here.
std::string isa_name();

}  // namespace tether::util
