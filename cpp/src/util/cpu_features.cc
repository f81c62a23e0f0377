#include "util/cpu_features.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#elif defined(__aarch64__)
#include <sys/auxv.h>
#endif

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace tether::util {

namespace {

#if defined(__x86_64__)
uint64_t xgetbv0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, fma = (c >> 12) & 1;
  const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  const bool ymm_state = (xcr0 & 0x6) == 0x6;
  const bool zmm_state = (xcr0 & 0xE6) == 0xE6;
  __cpuid_count(7, 0, a, b, c, d);
  const bool avx2 = (b >> 5) & 1;
  const bool f512 = (b >> 16) & 1, dq = (b >> 17) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1;
  const bool vnni512 = (c >> 11) & 1, vbmi = (c >> 1) & 1;
  const bool amx_tile = (d >> 24) & 1, amx_int8 = (d >> 25) & 1;
  __cpuid_count(7, 1, a, b, c, d);
  const bool avx_vnni = (a >> 4) & 1;
  f.avx2 = avx && avx2 && fma && ymm_state;
  f.avx512 = f.avx2 && f512 && dq && bw && vl && zmm_state;
  f.avx512_vnni = f.avx512 && vnni512;
  f.avx512_vbmi = f.avx512 && vbmi;
  f.avx_vnni = f.avx2 && avx_vnni;
  // AMX: the OS saves tile state (XCR0 bits 17 and 18) and grants this process the tile data
  // (Linux asks for it once: arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA, feature 18).
  constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;
  f.amx_int8 = f.avx512_vnni && amx_tile && amx_int8 && (xcr0 & 0x60000) == 0x60000 &&
               syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;

  char brand[49] = {};
  unsigned regs[12];
  if (__get_cpuid(0x80000000, &a, &b, &c, &d) && a >= 0x80000004) {
    for (unsigned i = 0; i < 3; ++i) __get_cpuid(0x80000002 + i, &regs[4 * i], &regs[4 * i + 1], &regs[4 * i + 2], &regs[4 * i + 3]);
    std::memcpy(brand, regs, 48);
  }
  f.brand = brand;
  while (!f.brand.empty() && f.brand.back() == ' ') f.brand.pop_back();
  return f;
}
#elif defined(__aarch64__)
CpuFeatures detect() {
  // The kernel's capability bits (Linux arch/arm64 uapi hwcap.h), spelled out because older
  // C libraries' headers lack the newer ones.
  constexpr unsigned long kHwcapAsimd = 1ul << 1, kHwcapAsimdDp = 1ul << 20;
  constexpr unsigned long kHwcap2I8mm = 1ul << 13;
  const unsigned long hwcap = getauxval(AT_HWCAP), hwcap2 = getauxval(AT_HWCAP2);
  CpuFeatures f;
  f.neon = (hwcap & kHwcapAsimd) != 0;
  f.neon_dot = f.neon && (hwcap & kHwcapAsimdDp) != 0;
  f.neon_i8mm = f.neon_dot && (hwcap2 & kHwcap2I8mm) != 0;
  f.brand = "aarch64";
  return f;
}
#else
CpuFeatures detect() { return {}; }
#endif

CpuFeatures capped(CpuFeatures f) {
  if (const char* cap = std::getenv("TETHER_ISA")) {
    const std::string s = cap;
    if (s == "avx512" || s == "avx2" || s == "generic") f.amx_int8 = false;
    if (s == "avx2" || s == "generic") {
      // AVX2 alone: the VEX VNNI extension goes too, so that the plain AVX2 kernels run.
      f.avx512 = f.avx512_vnni = f.avx512_vbmi = f.avx_vnni = false;
    }
    if (s == "generic") f.avx2 = false;
    if (s == "neon_dot" || s == "neon" || s == "generic") f.neon_i8mm = false;
    if (s == "neon" || s == "generic") f.neon_dot = false;
    if (s == "generic") f.neon = false;
  }
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = capped(detect());
  return f;
}

std::string isa_name() {
  const CpuFeatures& f = cpu_features();
  if (f.avx512) return "avx512";
  if (f.avx2) return "avx2";
  if (f.neon_i8mm) return "neon_i8mm";
  if (f.neon_dot) return "neon_dot";
  return f.neon ? "neon" : "generic";
}

}  // namespace tether::util
