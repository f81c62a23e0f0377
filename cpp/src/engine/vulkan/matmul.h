// The GEMMs (shaders/gemm*.comp) as matmul.cc and conv.cc record them, and the choice between
// kernels for GPUs and kernels for devices whose invocations are CPU vector lanes.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/vulkan/kernel.h"

namespace tether::engine::vulkan {

/// shaders/gemm.comp's push constants.
struct GemmPush {
  uint32_t M, N, K;
  uint32_t bdims[4];
  uint32_t a_bs[4], b_bs[4];
  uint32_t a_rs, a_cs;
  uint32_t b_rs, b_cs;
  uint32_t bias_rs, bias_cs;
  float alpha, beta;
};

/// The pipelines of a shader built on gemm_tiled.glsl (gemm_tiled.comp, conv_gemm.comp), one
/// per tile size (128, 64 and 32 square; nullptr where the device runs fewer invocations per
/// workgroup), and gemm_reduce.comp's, which finishes a product split along K; `spec` is
/// their constants 1-5 (the activation's three, then whether a bias and a summand are added).
/// Under precision fp16 on a device with tensor cores (Device::cooperative_matrix), the
/// shader's `_coop` build on gemm_coop.glsl instead, with its own tiles; with
/// TETHER_VULKAN_FP16_ARITHMETIC=1 on a device with float16 arithmetic and no tensor cores
/// (Device::float16_arithmetic), its `_half` build, whose multiply-adds run in float16
/// (gemm_tiled.glsl's HALF_PRODUCTS).
struct TiledPipelines {
  /// A tile: its rows and columns of C, and the invocations of its workgroup.
  struct Shape {
    uint32_t bm = 0, bn = 0, invocations = 0;
  };
  std::array<const Pipeline*, 3> tiles{};
  std::array<Shape, 3> shapes{};
  const Pipeline* reduce = nullptr;
};
TiledPipelines tiled_pipelines(Gpu& gpu, const std::string& shader, uint32_t push_bytes, const std::vector<uint32_t>& spec);

/// How gemm_reduce.comp finds the bias of a split product: bias[((z % groups) M + m) bias_rs +
/// n bias_cs] for batch element z, row m and column n; alpha scales the product, beta the bias.
struct TiledEpilogue {
  uint32_t groups = 1, bias_rs = 0, bias_cs = 0;
  float alpha = 1.0f, beta = 1.0f;
};

/// Records a tiled shader over an M x N (x K) product per batch element: the largest tile that
/// still gives the device enough workgroups to fill it; where even the smallest gives too few
/// and K is long, split along K into partial sums (in Recorder::scratch) that a second dispatch
/// adds up and finishes. `bindings` are the shader's first five (A, B, bias, summand, C).
/// False, recording nothing, when no tile fits the device's workgroup-count limits.
bool record_tiled(Recorder& rec, const TiledPipelines& p, const std::vector<Range>& bindings, const void* push,
                  size_t push_bytes, int64_t m, int64_t n, int64_t k, int64_t batches, const TiledEpilogue& epilogue);

/// The GEMM's pipelines with this activation, and a bias and a summand or not: one output
/// per invocation, and 4 x 4 outputs per invocation for products large enough to fill its
/// larger tiles; for GPUs (gpu_kernels), the shared-memory tiles of gemm_tiled.comp; else
/// the vec4 form (shaders/gemm_vec4.comp) for products whose rows are whole vec4s.
struct GemmPipeline {
  const Pipeline* one = nullptr;
  const Pipeline* blocked = nullptr;
  const Pipeline* vec4 = nullptr;     ///< nullptr on other devices
  const Pipeline* vec4_nt = nullptr;  ///< the vec4 form for a transposed B (gemm_vec4_nt.comp)
  TiledPipelines tiled{};             ///< gemm_tiled.comp, where gpu_kernels(); else nullptr
};
GemmPipeline gemm_pipeline(Gpu& gpu, const Activation& act, bool bias, bool sum);

/// Records C[b] = act(alpha * A[b] @ B[b] + beta * bias + sum[b]) over batch dims `batch`
/// (A's and B's strides along them in a_bs and b_bs; C is contiguous); `push` carries the
/// rest. Throws UnsupportedError naming `node` past the device's limits.
void record_gemm(Recorder& rec, const ir::Node& node, const GemmPipeline& p, GemmPush push, const std::vector<int64_t>& batch,
                 const std::vector<int64_t>& a_bs, const std::vector<int64_t>& b_bs, const Range& a, const Range& b,
                 const Range& bias, const Range& sum, const Range& c);

}  // namespace tether::engine::vulkan
