// Activations applied in place by fused kernels.
#include <cmath>

#if defined(__x86_64__)
#include "engine/cpu/avx512_math.h"
#endif
#include "engine/cpu/cpu.h"
#include "engine/cpu/elementwise.h"
#include "util/cpu_features.h"
#include "util/fastmath.h"

namespace tether::engine::cpu {

namespace {

struct Named {
  std::string_view name;
  Epilogue::Act act;
};

constexpr Named kActivations[] = {
    {"Relu", Epilogue::Act::kRelu},       {"LeakyRelu", Epilogue::Act::kLeakyRelu}, {"Clip", Epilogue::Act::kClip},
    {"Sigmoid", Epilogue::Act::kSigmoid}, {"HardSigmoid", Epilogue::Act::kHardSigmoid},
    {"HardSwish", Epilogue::Act::kHardSwish}, {"Gelu", Epilogue::Act::kGelu},  {"GeluTanh", Epilogue::Act::kGeluTanh},
    {"SiLU", Epilogue::Act::kSilu},       {"Tanh", Epilogue::Act::kTanh},
};

// NaN propagates: each branch that compares returns the input when it is NaN.
// min(max(v, lo), hi), as Clip defines it (hi wins when lo > hi); NaN passes through.
inline float clamp(float v, float lo, float hi) {
  const float t = v < lo ? lo : v;
  return t > hi ? hi : t;
}

}  // namespace

bool is_epilogue_activation(std::string_view name) {
  for (const Named& n : kActivations)
    if (n.name == name) return true;
  return false;
}

Epilogue Epilogue::from_node(const ir::Node& node) {
  Epilogue e;
  const std::string name = node.attr_string("activation", "");
  if (name.empty()) return e;
  bool found = false;
  for (const Named& n : kActivations)
    if (n.name == name) {
      e.act = n.act;
      found = true;
    }
  if (!found) throw ModelError(node.describe() + ": unknown fused activation '" + name + "'");
  const std::vector<float> p = node.attr("activation_params") ? node.attr("activation_params")->as_floats() : std::vector<float>{};
  switch (e.act) {
    case Act::kLeakyRelu: e.alpha = p.size() > 0 ? p[0] : 0.01f; break;
    case Act::kClip:
      e.alpha = p.size() > 0 ? p[0] : -INFINITY;
      e.beta = p.size() > 1 ? p[1] : INFINITY;
      break;
    case Act::kHardSigmoid:
      e.alpha = p.size() > 0 ? p[0] : 0.2f;
      e.beta = p.size() > 1 ? p[1] : 0.5f;
      break;
    default: break;
  }
  return e;
}

namespace {

// Inlined into each multiversioned caller, so that a whole GEMM tile costs one dispatch.
[[gnu::always_inline]] inline void activation_row(Epilogue::Act act, float alpha, float beta, float* __restrict y,
                                                  int64_t n) {
  using Act = Epilogue::Act;
  switch (act) {
    case Act::kNone: return;
    case Act::kRelu: for (int64_t i = 0; i < n; ++i) y[i] = y[i] < 0 ? 0.0f : y[i]; return;
    case Act::kLeakyRelu: for (int64_t i = 0; i < n; ++i) y[i] = y[i] < 0 ? alpha * y[i] : y[i]; return;
    case Act::kClip: for (int64_t i = 0; i < n; ++i) y[i] = clamp(y[i], alpha, beta); return;
    case Act::kSigmoid: for (int64_t i = 0; i < n; ++i) y[i] = util::fast_sigmoid(y[i]); return;
    case Act::kHardSigmoid: for (int64_t i = 0; i < n; ++i) y[i] = clamp(alpha * y[i] + beta, 0.0f, 1.0f); return;
    case Act::kHardSwish: for (int64_t i = 0; i < n; ++i) y[i] *= clamp(y[i] / 6.0f + 0.5f, 0.0f, 1.0f); return;
    case Act::kGelu:
      for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * y[i] * (1.0f + util::fast_erf(y[i] * 0.70710678118654752f));
      return;
    case Act::kGeluTanh:
      for (int64_t i = 0; i < n; ++i) {
        const float x = y[i];
        y[i] = 0.5f * x * (1.0f + util::fast_tanh(0.79788456080286536f * (x + 0.044715f * x * x * x)));
      }
      return;
    case Act::kSilu: for (int64_t i = 0; i < n; ++i) y[i] = y[i] * util::fast_sigmoid(y[i]); return;
    case Act::kTanh: for (int64_t i = 0; i < n; ++i) y[i] = util::fast_tanh(y[i]); return;
  }
}

// Sigmoid (or x * sigmoid(x), SiLU) of n floats on AVX-512: the exponential by vscalefps and
// 1 / (1 + e) by vrcp14ps and a Newton step instead of a division (within 2 ulp of
// util::fast_sigmoid's quotient; below x = -87, where that quotient underflows, a value under
// 2e-38). NaN stays NaN.
#if defined(__x86_64__)
__attribute__((target("avx512f"))) void sigmoid_row_avx512(float* y, int64_t n, bool times_x) {
  const __m512 one = _mm512_set1_ps(1.0f), two = _mm512_set1_ps(2.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    const __m512 x = _mm512_maskz_loadu_ps(m, y + i);
    // e^-x at most e^87, so that 1 + e^-x stays below 2^126 and its reciprocal normal (below
    // x = -87 sigmoid is under 2e-38 either way).
    const __m512 neg = _mm512_min_ps(_mm512_sub_ps(_mm512_setzero_ps(), x), _mm512_set1_ps(87.0f));
    const __m512 d = _mm512_add_ps(one, exp16(neg));
    __m512 r = _mm512_rcp14_ps(d);
    r = _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, two));
    __m512 v = times_x ? _mm512_mul_ps(x, r) : r;
    v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
    _mm512_mask_storeu_ps(y + i, m, v);
  }
}

// Whether sigmoid and SiLU go through sigmoid_row_avx512.
bool sigmoid_avx512(Epilogue::Act act) {
  static const bool avx512 = util::cpu_features().avx512;
  return avx512 && (act == Epilogue::Act::kSilu || act == Epilogue::Act::kSigmoid);
}

// The AVX2 kernel (elementwise.h) for the transcendental activations on AVX2 CPUs without
// AVX-512, or nullptr where activation_row (or the AVX-512 sigmoid) computes `act`.
VectorUnaryFn activation_avx2(Epilogue::Act act) {
  using Act = Epilogue::Act;
  VectorUnaryFn fn = nullptr;
  switch (act) {  // first: most tiles have no such activation, and ask for every tile
    case Act::kSigmoid: fn = f32_vsigmoid__avx2; break;
    case Act::kSilu: fn = f32_vsilu__avx2; break;
    case Act::kGelu: fn = f32_vgelu__avx2; break;
    case Act::kGeluTanh: fn = f32_vgelu_tanh__avx2; break;
    case Act::kTanh: fn = f32_vtanh__avx2; break;
    default: return nullptr;
  }
  static const bool avx2_only = util::cpu_features().avx2 && !util::cpu_features().avx512;
  return avx2_only ? fn : nullptr;
}
#else
// Elsewhere the portable loop (activation_row) computes every activation.
bool sigmoid_avx512(Epilogue::Act) { return false; }
void sigmoid_row_avx512(float*, int64_t, bool) {}
VectorUnaryFn activation_avx2(Epilogue::Act) { return nullptr; }
#endif

TETHER_MULTIVERSION
void apply_activation(Epilogue::Act act, float alpha, float beta, float* __restrict y, int64_t n) {
  if (sigmoid_avx512(act)) return sigmoid_row_avx512(y, n, act == Epilogue::Act::kSilu);
  if (const VectorUnaryFn vec = activation_avx2(act)) return vec(y, y, n);
  activation_row(act, alpha, beta, y, n);
}

TETHER_MULTIVERSION
void add_in_place(float* __restrict y, const float* __restrict sum, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += sum[i];
}

TETHER_MULTIVERSION
void apply_tile(Epilogue::Act act, float alpha, float beta, float* c, int64_t ldc, int64_t rows, int64_t cols,
                const float* row_bias, const float* col_bias, const float* sum) {
  for (int64_t r = 0; r < rows; ++r) {
    float* __restrict row = c + r * ldc;
    if (row_bias != nullptr) {
      const float bv = row_bias[r];
      for (int64_t q = 0; q < cols; ++q) row[q] += bv;
    }
    if (col_bias != nullptr)
      for (int64_t q = 0; q < cols; ++q) row[q] += col_bias[q];
    if (sum != nullptr) {
      const float* __restrict s = sum + r * ldc;
      for (int64_t q = 0; q < cols; ++q) row[q] += s[q];
    }
    if (sigmoid_avx512(act)) sigmoid_row_avx512(row, cols, act == Epilogue::Act::kSilu);
    else activation_row(act, alpha, beta, row, cols);
  }
}

}  // namespace

void Epilogue::apply(float* y, int64_t n) const {
  if (act != Act::kNone) apply_activation(act, alpha, beta, y, n);
}

void Epilogue::apply_tile(float* c, int64_t ldc, int64_t rows, int64_t cols, const float* row_bias,
                          const float* col_bias, const float* sum) const {
  if (row_bias == nullptr && col_bias == nullptr && sum == nullptr && act == Act::kNone) return;
  // The AVX2 kernel after the sums, row by row: a call through it inside the multiversioned
  // loop cost GRU's and LSTM's small tiles a third of their time.
  if (const VectorUnaryFn vec = activation_avx2(act)) {
    if (row_bias != nullptr || col_bias != nullptr || sum != nullptr)
      tether::engine::cpu::apply_tile(Act::kNone, 0.0f, 0.0f, c, ldc, rows, cols, row_bias, col_bias, sum);
    for (int64_t r = 0; r < rows; ++r) vec(c + r * ldc, c + r * ldc, cols);
    return;
  }
  tether::engine::cpu::apply_tile(act, alpha, beta, c, ldc, rows, cols, row_bias, col_bias, sum);
}

void Epilogue::apply(float* y, const float* sum, int64_t n) const {
  if (sum != nullptr) add_in_place(y, sum, n);
  apply(y, n);
}

}  // namespace tether::engine::cpu
