// qs8_gemm_32x32__amx: a 32 x 32 tile of int32 sums on AMX. Eight 16-row x 64-byte tiles: four
// accumulators (C rows 0-15 / 16-31 by columns 0-15 / 16-31), two of A (16 rows x 64 depths,
// uint8) and two of B (16 steps of 4 depths x 16 columns, int8), and four tdpbusd per 64
// depths, each 16 x 16 x 64 products summed exactly into int32 like vpdpbusd. B's panels are
// the 12x32 AVX-512 kernel's (a step is 32 columns x 4 depths, 128 bytes), so a B tile is
// every other 64 bytes of a panel; the depth is padded to whole tiles (QGemmIsa::step_multiple).
// A tile with fewer than 32 rows runs on the AVX-512 kernel over the same panel, so that no
// load reads past A's last row. The caller loads the tile configuration first
// (qs8_gemm_32x32__amx_prepare). Compiled with AMX and AVX-512 flags; called only when the
// CPU has them and the OS let this process use the tile data (util::cpu_features).
#include "util/simd.h"

#include <algorithm>
#include <cstdint>

#include "engine/cpu/qgemm_kernels.h"

namespace tether::engine::cpu {

namespace {

// The LDTILECFG operand (palette 1): 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

constexpr int kNr = 32;
constexpr int64_t kStepsPerTile = 16;    // 64 depths
constexpr int64_t kPanelStep = 4 * kNr;  // bytes of one packed step

TileConfig make_config() {
  TileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.colsb[t] = 64;
    c.rows[t] = 16;
  }
  return c;
}

}  // namespace

// The tile configuration is per thread, and other code on the thread (another library's
// kernels) may have loaded its own: qgemm loads ours before each block of tiles it runs.
void qs8_gemm_32x32__amx_prepare() {
  static const TileConfig config = make_config();
  _tile_loadconfig(&config);
}

void qs8_gemm_32x32__amx(int64_t groups, const void* a, int64_t lda, const void* b, int32_t* acc, int64_t rows) {
  const auto* pa = static_cast<const uint8_t*>(a);
  if (rows < 32) {
    for (int64_t r = 0; r < rows; r += 12)
      qs8_gemm_12x32__avx512vnni(groups, pa + r * lda, lda, b, acc + r * kNr, std::min<int64_t>(12, rows - r));
    return;
  }
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const auto* pb = static_cast<const int8_t*>(b);
  for (int64_t g = 0; g < groups; g += kStepsPerTile) {
    // Each product issued as soon as its operands are loaded.
    _tile_loadd(6, pb + g * kPanelStep, kPanelStep);
    _tile_loadd(4, pa + g * 4, lda);
    _tile_dpbusd(0, 4, 6);
    _tile_loadd(7, pb + g * kPanelStep + 64, kPanelStep);
    _tile_dpbusd(1, 4, 7);
    _tile_loadd(5, pa + 16 * lda + g * 4, lda);
    _tile_dpbusd(2, 5, 6);
    _tile_dpbusd(3, 5, 7);
  }
  constexpr int64_t kLd = kNr * sizeof(int32_t);
  _tile_stored(0, acc, kLd);
  _tile_stored(1, acc + 16, kLd);
  _tile_stored(2, acc + 16 * kNr, kLd);
  _tile_stored(3, acc + 16 * kNr + 16, kLd);
}

}  // namespace tether::engine::cpu
