// The tiled GEMM (shaders/gemm.comp) as matmul.cc and conv.cc record it.
#pragma once

#include <cstdint>
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

/// The GEMM's pipelines with this activation, and a bias and a summand or not: one output
/// per invocation, and 4 x 4 outputs per invocation for products large enough to fill its
/// larger tiles; on a device that runs invocations as CPU vector lanes (lavapipe), also the
/// vec4 form (shaders/gemm_vec4.comp) for products whose rows are whole vec4s.
struct GemmPipeline {
  const Pipeline* one = nullptr;
  const Pipeline* blocked = nullptr;
  const Pipeline* vec4 = nullptr;     ///< nullptr on other devices
  const Pipeline* vec4_nt = nullptr;  ///< the vec4 form for a transposed B (gemm_vec4_nt.comp)
};
GemmPipeline gemm_pipeline(Gpu& gpu, const Activation& act, bool bias, bool sum);

/// Records C[b] = act(alpha * A[b] @ B[b] + beta * bias + sum[b]) over batch dims `batch`
/// (A's and B's strides along them in a_bs and b_bs; C is contiguous); `push` carries the
/// rest. Throws UnsupportedError naming `node` past the device's limits.
void record_gemm(Recorder& rec, const ir::Node& node, const GemmPipeline& p, GemmPush push, const std::vector<int64_t>& batch,
                 const std::vector<int64_t>& a_bs, const std::vector<int64_t>& b_bs, const Range& a, const Range& b,
                 const Range& bias, const Range& sum, const Range& c);

}  // namespace tether::engine::vulkan
