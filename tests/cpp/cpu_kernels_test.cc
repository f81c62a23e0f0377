// The float micro-kernels this machine runs (engine/cpu/gemm.h, conv_nhwc.h: AVX-512, AVX2,
// NEON or the portable ones, as util::cpu_features and TETHER_ISA choose) against plain
// float64 loops written here, one tile at a time: awkward rows, columns, depths and channel
// counts, every part of the tile epilogue, accumulation, the offsets form of the GEMM, and
// that nothing outside the tile is written. The AArch64 build runs this under qemu-aarch64
// once per ISA cap (make test-arm64).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/cpu/conv_nhwc.h"
#include "engine/cpu/gemm.h"
#include "engine/cpu/qgemm.h"
#include "util/cpu_features.h"

namespace {

using tether::engine::cpu::gemm_isa;
using tether::engine::cpu::GemmIsa;
using tether::engine::cpu::nhwc_conv_isa;
using tether::engine::cpu::NhwcConvIsa;
using tether::engine::cpu::TileEpilogue;

constexpr float kSentinel = -12345.0f;

// Run-time detection, where the CPU is known from outside: make test-arm64 runs this under
// qemu's CPU models and says which instruction set each one has (TETHER_EXPECT_ISA).
TEST(CpuKernels, DetectedIsaIsTheOneTheCpuHas) {
  const char* expected = std::getenv("TETHER_EXPECT_ISA");
  if (expected == nullptr) GTEST_SKIP() << "TETHER_EXPECT_ISA not set";
  EXPECT_EQ(tether::util::isa_name(), expected);
  const std::string isa = expected;
  const std::string int8 = tether::engine::cpu::qgemm_isa_name(tether::engine::cpu::qgemm_isa());
  if (isa == "neon_i8mm") {
    EXPECT_EQ(int8, "qs8_gemm_4x16__neoni8mm");
  }
  if (isa == "neon_dot") {
    EXPECT_EQ(int8, "qs8_gemm_4x16__neondot");
  }
  if (isa == "neon" || isa == "generic") {
    EXPECT_EQ(int8, "qs8_gemm_4x16__generic");
  }
  if (isa.rfind("neon", 0) == 0) {
    EXPECT_STREQ(gemm_isa().name, "f32_gemm_6x16__neon");
  }
}

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// The epilogue of one element in float64, as TileEpilogue documents it.
double epilogue_ref(double v, const TileEpilogue* ep, int64_t r, int64_t q) {
  if (ep == nullptr) return v;
  if (ep->row_bias != nullptr) v += ep->row_bias[r];
  if (ep->col_bias != nullptr) v += ep->col_bias[q];
  if (ep->sum != nullptr) v += ep->sum[r * ep->sum_ld + q];
  if (ep->clamp) v = std::min<double>(std::max<double>(v, ep->lo), ep->hi);
  return v;
}

// A tile's epilogue parts, switched on by the bits of `mask`: row bias, column bias, summand,
// clamp to [-0.5, 0.75].
struct EpilogueParts {
  std::vector<float> row_bias, col_bias, sum;
  TileEpilogue ep;
  EpilogueParts(int mask, int64_t rows, int64_t cols, int64_t ld)
      : row_bias(random_floats(rows, 7)), col_bias(random_floats(cols, 8)), sum(random_floats(rows * ld, 9)) {
    if (mask & 1) ep.row_bias = row_bias.data();
    if (mask & 2) ep.col_bias = col_bias.data();
    if (mask & 4) {
      ep.sum = sum.data();
      ep.sum_ld = ld;
    }
    if (mask & 8) {
      ep.clamp = true;
      ep.lo = -0.5f;
      ep.hi = 0.75f;
    }
  }
};

// Every element of the tile within float rounding of `want`, and the rest of C untouched.
void expect_tile(const std::vector<float>& c, const std::vector<double>& want, int64_t ld, int64_t rows, int64_t m,
                 int64_t n, int64_t depth, const std::string& what) {
  const double tol = 1e-6 * (depth + 4);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t q = 0; q < ld; ++q) {
      const float got = c[r * ld + q];
      if (r < m && q < n) {
        ASSERT_NEAR(got, want[r * ld + q], tol) << what << " at (" << r << ", " << q << ")";
      } else {
        ASSERT_EQ(got, kSentinel) << what << ": wrote outside the tile at (" << r << ", " << q << ")";
      }
    }
}

TEST(CpuKernels, GemmMicroKernelMatchesFloat64LoopsOnAwkwardTiles) {
  const GemmIsa& isa = gemm_isa();
  const int mr = isa.mr, nr = isa.nr;
  for (int64_t k : {1, 3, 13, 127}) {
    // A packed as the kernel reads it: k steps of MR floats (rows past m zero); B one panel.
    const std::vector<float> a = random_floats(k * mr, 1), b = random_floats(k * nr, 2);
    for (int64_t m = 1; m <= mr; ++m)
      for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{nr - 1}, int64_t{nr}})
        for (int mask = 0; mask < 16; mask += (mask == 0 ? 1 : 3)) {
          for (bool accumulate : {false, true}) {
            const int64_t ld = nr + 3, rows = mr + 1;
            std::vector<float> c(rows * ld, kSentinel);
            const std::vector<float> prior = random_floats(rows * ld, 3);
            for (int64_t r = 0; r < m; ++r)
              for (int64_t q = 0; q < n; ++q) c[r * ld + q] = prior[r * ld + q];
            EpilogueParts parts(mask, mr, nr, ld);
            std::vector<double> want(rows * ld, 0.0);
            for (int64_t r = 0; r < m; ++r)
              for (int64_t q = 0; q < n; ++q) {
                double s = 0.0;
                for (int64_t p = 0; p < k; ++p) s += double{a[p * mr + r]} * b[p * nr + q];
                if (accumulate) s += prior[r * ld + q];
                want[r * ld + q] = epilogue_ref(s, mask ? &parts.ep : nullptr, r, q);
              }
            isa.kernel(k, a.data(), mr, b.data(), c.data(), ld, m, n, accumulate, mask ? &parts.ep : nullptr);
            expect_tile(c, want, ld, rows, m, n, k,
                        std::string(isa.name) + " k=" + std::to_string(k) + " m=" + std::to_string(m) +
                            " n=" + std::to_string(n) + " epilogue=" + std::to_string(mask) +
                            (accumulate ? " accumulate" : ""));
          }
        }
  }
}

TEST(CpuKernels, GemmOffsetsKernelReadsBRowsInPlace) {
  const GemmIsa& isa = gemm_isa();
  const int mr = isa.mr, nr = isa.nr;
  const int64_t k = 29, stride = nr + 5;
  const std::vector<float> a = random_floats(k * mr, 4), b = random_floats(k * stride + nr, 5);
  std::vector<int64_t> offsets(k);
  for (int64_t p = 0; p < k; ++p) offsets[p] = (p * 7 % k) * stride;  // rows out of order
  for (int64_t m : {int64_t{1}, int64_t{mr}}) {
    const int64_t n = nr - 2, ld = nr;
    std::vector<float> c(mr * ld, kSentinel);
    std::vector<double> want(mr * ld, 0.0);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t q = 0; q < n; ++q)
        for (int64_t p = 0; p < k; ++p) want[r * ld + q] += double{a[p * mr + r]} * b[offsets[p] + q];
    isa.offsets_kernel(k, a.data(), mr, b.data(), offsets.data(), c.data(), ld, m, n, false, nullptr);
    expect_tile(c, want, ld, mr, m, n, k, std::string(isa.name) + " offsets m=" + std::to_string(m));
  }
}

TEST(CpuKernels, GemmClampLetsNanThrough) {
  const GemmIsa& isa = gemm_isa();
  const int mr = isa.mr, nr = isa.nr;
  std::vector<float> a(mr, 1.0f), b(nr, 1.0f);
  b[1] = std::numeric_limits<float>::quiet_NaN();
  EpilogueParts parts(8, mr, nr, nr);
  std::vector<float> c(mr * nr, 0.0f);
  isa.kernel(1, a.data(), mr, b.data(), c.data(), nr, mr, nr, false, &parts.ep);
  for (int r = 0; r < mr; ++r) {
    EXPECT_TRUE(std::isnan(c[r * nr + 1])) << isa.name << " row " << r;
    EXPECT_EQ(c[r * nr + 0], 0.75f) << isa.name << " row " << r;  // 1 clamped to hi
  }
}

// x: `pixels` pixels of `c` channels, one every `stride` floats; w: taps x cpad.
TEST(CpuKernels, DepthwiseKernelMatchesFloat64LoopsOnAwkwardChannelCounts) {
  const NhwcConvIsa& isa = nhwc_conv_isa();
  const int64_t taps = 5;
  for (int64_t c : {1, 3, 4, 7, 8, 13, 19, 40}) {
    const int64_t cpad = (c + isa.dw_nr - 1) / isa.dw_nr * isa.dw_nr, xs = c + 2;
    std::vector<int64_t> x_off(taps), w_off(taps);
    for (int64_t t = 0; t < taps; ++t) {
      x_off[t] = (t * 3 % taps) * xs;  // a tap reads the pixel t * 3 % taps further on
      w_off[t] = t * cpad;
    }
    std::vector<float> w = random_floats(taps * cpad, 6);
    for (int64_t t = 0; t < taps; ++t)
      for (int64_t j = c; j < cpad; ++j) w[t * cpad + j] = 0.0f;
    // The input ends where the last pixel's channels end: reading past it would be caught by
    // the sanitizers (make test-sanitize) and would fault near a page's end.
    const std::vector<float> x = random_floats((isa.dw_mr + taps - 1) * xs - 2, 7);
    for (int64_t rows = 1; rows <= isa.dw_mr; ++rows)
      for (int mask : {0, 2, 6, 14}) {
        const int64_t ld = c + 1;
        EpilogueParts parts(mask, rows, c, ld);
        std::vector<float> y(isa.dw_mr * ld, kSentinel);
        std::vector<double> want(isa.dw_mr * ld, 0.0);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < c; ++j) {
            double s = 0.0;
            for (int64_t t = 0; t < taps; ++t) s += double{x[r * xs + x_off[t] + j]} * w[w_off[t] + j];
            want[r * ld + j] = epilogue_ref(s, mask ? &parts.ep : nullptr, r, j);
          }
        isa.depthwise(rows, x.data(), xs, x_off.data(), w_off.data(), taps, c, w.data(), y.data(), ld,
                      mask ? &parts.ep : nullptr);
        expect_tile(y, want, ld, isa.dw_mr, rows, c, taps,
                    std::string(isa.name) + " depthwise c=" + std::to_string(c) + " rows=" + std::to_string(rows) +
                        " epilogue=" + std::to_string(mask));
      }
  }
}

TEST(CpuKernels, ConvTileAndRowMatchFloat64Loops) {
  const NhwcConvIsa& isa = nhwc_conv_isa();
  const int64_t taps = 3, cin = 11, nr = isa.nr, xs = 2 * cin;
  const std::vector<int64_t> x_off = {0, cin, 3 * xs}, w_off = {0, cin * nr, 2 * cin * nr};
  const std::vector<float> x = random_floats((isa.mr + 3) * xs + cin, 10), w = random_floats(taps * cin * nr, 11);
  for (int64_t rows = 1; rows <= isa.mr; ++rows)
    for (int64_t n : {int64_t{5}, nr}) {
      const int64_t ld = nr + 1;
      EpilogueParts parts(10, rows, nr, ld);  // column bias and clamp
      std::vector<float> y(isa.mr * ld, kSentinel);
      std::vector<double> want(isa.mr * ld, 0.0);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < n; ++j) {
          double s = 0.0;
          for (int64_t t = 0; t < taps; ++t)
            for (int64_t i = 0; i < cin; ++i) s += double{x[r * xs + x_off[t] + i]} * w[w_off[t] + i * nr + j];
          want[r * ld + j] = epilogue_ref(s, &parts.ep, r, j);
        }
      isa.conv(rows, x.data(), xs, x_off.data(), w_off.data(), taps, cin, w.data(), y.data(), ld, n, false, &parts.ep);
      expect_tile(y, want, ld, isa.mr, rows, n, taps * cin,
                  std::string(isa.name) + " rows=" + std::to_string(rows) + " n=" + std::to_string(n));
    }
  // One pixel across 1 to 4 panels of one tap (the GEMV form sgemm uses for a single row).
  for (int64_t panels = 1; panels <= 4; ++panels) {
    const int64_t stride = cin * nr, n = panels * nr - 3;
    const std::vector<float> wp = random_floats(panels * stride, 12);
    std::vector<float> y(panels * nr, kSentinel);
    std::vector<double> want(panels * nr, 0.0);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < cin; ++i) want[j] += double{x[i]} * wp[(j / nr) * stride + i * nr + j % nr];
    isa.conv_row(x.data(), cin, wp.data(), stride, panels, y.data(), n, false, nullptr);
    expect_tile(y, want, panels * nr, 1, 1, n, cin, std::string(isa.name) + " row panels=" + std::to_string(panels));
  }
}

}  // namespace
