// The cores that the attention kernels share (attention.cc: ONNX Attention and RotaryEmbedding;
// ms_attention.cc: com.microsoft GroupQueryAttention and RotaryEmbedding). Internal to the
// CPU backend.
#pragma once

#include <cstdint>

namespace tether::engine::cpu {

/// One block of query rows of one head with the keys and values it reads. Row r of each
/// starts at data + r * stride (floats); the rows of one operand need not be contiguous.
struct AttentionBlock {
  const float* q = nullptr;  ///< rows x d
  int64_t q_stride = 0;
  const float* k = nullptr;  ///< key j at k + j * k_stride, d floats
  int64_t k_stride = 0;
  const float* v = nullptr;  ///< value j at v + j * v_stride, dv floats
  int64_t v_stride = 0;
  float* y = nullptr;        ///< rows x dv, written
  int64_t y_stride = 0;
  int64_t rows = 0, d = 0, dv = 0;
};

/// scores[r * ld + j] = q_r . k_(k0 + j) for r < rows and j < keys (keys >= 1), on the calling
/// thread; gemm_scratch holds attention_gemm_scratch_floats(rows, keys, d, dv) floats.
void attention_scores(const AttentionBlock& a, int64_t k0, int64_t keys, float* scores, int64_t ld, float* gemm_scratch);

/// y_r = sum_j p[r * ld + j] * v_(k0 + j) for r < rows and j < keys (keys >= 1), on the calling
/// thread, overwriting y.
void attention_mix(const AttentionBlock& a, const float* p, int64_t ld, int64_t k0, int64_t keys, float* gemm_scratch);

/// The scratch floats the two products of a block of `rows` rows against `keys` keys need.
int64_t attention_gemm_scratch_floats(int64_t rows, int64_t keys, int64_t d, int64_t dv);

/// In place over n scores: x = softcap * tanh(x * scale / softcap) (x * scale when softcap is
/// 0), then the softmax. n >= 1.
void softmax_scaled(float* x, int64_t n, float scale, float softcap);

/// Rotates the first `rot` values of one head (size values; rot even, rot <= size) by the
/// angles whose cosines and sines are cos[0, rot / 2) and sin[0, rot / 2): pairs (x1, x2) are
/// the two halves of the rotated part, or neighbours when `interleaved`, and become
/// (x1 cos - x2 sin, x1 sin + x2 cos). The rest of the head is copied. x and y may be equal.
void rotate_head(const float* x, float* y, const float* cos, const float* sin, int64_t rot, int64_t size,
                 bool interleaved);

}  // namespace tether::engine::cpu
