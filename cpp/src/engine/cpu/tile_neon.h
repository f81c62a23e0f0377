// The store of a finished float tile row for the NEON kernels (gemm_neon.cc, conv_nhwc_neon.cc):
// accumulate, TileEpilogue, then the store, as vectors for a whole row and element by element
// for a partial one, in the order tile_epilogue adds.
#pragma once

#include <arm_neon.h>

#include "engine/cpu/gemm.h"

namespace tether::engine::cpu::neon {

/// Stores row r of a tile, V vectors of 4 floats, to y[0:n) (n <= 4 * V): y = epilogue(acc
/// (+ y when accumulate)). NaN passes the clamp (FMAX/FMIN return it).
template <int V>
inline void store_row(float32x4_t (&acc)[V], float* y, int64_t n, bool accumulate, const TileEpilogue* ep,
                      int64_t r) {
  if (n < 4 * V) {
    float lanes[4 * V];
    for (int v = 0; v < V; ++v) vst1q_f32(lanes + 4 * v, acc[v]);
    for (int64_t j = 0; j < n; ++j) y[j] = tile_epilogue(accumulate ? y[j] + lanes[j] : lanes[j], ep, r, j);
    return;
  }
  if (accumulate)
    for (int v = 0; v < V; ++v) acc[v] = vaddq_f32(acc[v], vld1q_f32(y + 4 * v));
  if (ep != nullptr) {
    if (ep->row_bias != nullptr) {
      const float32x4_t b = vdupq_n_f32(ep->row_bias[r]);
      for (int v = 0; v < V; ++v) acc[v] = vaddq_f32(acc[v], b);
    }
    if (ep->col_bias != nullptr)
      for (int v = 0; v < V; ++v) acc[v] = vaddq_f32(acc[v], vld1q_f32(ep->col_bias + 4 * v));
    if (ep->sum != nullptr)
      for (int v = 0; v < V; ++v) acc[v] = vaddq_f32(acc[v], vld1q_f32(ep->sum + r * ep->sum_ld + 4 * v));
    if (ep->clamp) {
      const float32x4_t lo = vdupq_n_f32(ep->lo), hi = vdupq_n_f32(ep->hi);
      for (int v = 0; v < V; ++v) acc[v] = vminq_f32(vmaxq_f32(acc[v], lo), hi);
    }
  }
  for (int v = 0; v < V; ++v) vst1q_f32(y + 4 * v, acc[v]);
}

}  // namespace tether::engine::cpu::neon
