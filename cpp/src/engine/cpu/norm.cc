// Normalisation and softmax: BatchNormalization, LayerNormalization, InstanceNormalization,
// GroupNormalization, LRN, MeanVarianceNormalization, Softmax, LogSoftmax. Statistics
// accumulate in double.
#include <algorithm>
#include <cmath>

#include "util/simd.h"

#include "engine/cpu/cpu.h"
#include "engine/cpu/elementwise.h"
#include "engine/cpu/norm.h"
#include "util/cpu_features.h"
#include "util/fastmath.h"

namespace tether::engine::cpu {

namespace {

size_t norm_axis(int64_t axis, size_t rank) { return static_cast<size_t>(axis < 0 ? axis + static_cast<int64_t>(rank) : axis); }

std::unique_ptr<Kernel> batch_norm(const KernelInit& init) {
  const double eps = init.node.attr_float("epsilon", 1e-5f);
  return make_kernel([eps](const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) {
    const View& x = in[0];
    const int64_t n = x.dims[0], c = x.rank() > 1 ? x.dims[1] : 1;
    const int64_t size = n * c == 0 ? 0 : x.numel() / (n * c);
    const float *scale = in[1].as<float>(), *bias = in[2].as<float>(), *mean = in[3].as<float>(), *var = in[4].as<float>();
    parallel(ctx, n * c, grain_for_bytes(size * 4), [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t ch = p % c;
        const double a = scale[ch] / std::sqrt(static_cast<double>(var[ch]) + eps);
        const double b = bias[ch] - mean[ch] * a;
        const float* xp = x.as<float>() + p * size;
        float* yp = out[0].as<float>() + p * size;
        for (int64_t i = 0; i < size; ++i) yp[i] = static_cast<float>(xp[i] * a + b);
      }
    });
  });
}

std::string batch_norm_check(const KernelInit& init) {
  if (init.node.attr_int("training_mode", 0) != 0) return "training_mode=1 is not supported (inference only)";
  for (size_t i = 1; i < init.node.outputs().size(); ++i)
    if (init.node.output(i) != nullptr) return "the running statistics outputs (training) are not supported";
  return float_only(init);
}

// Normalises `groups` rows of `size` elements: y = (x - mean) / sqrt(var + eps), then the
// per-element affine given by `affine(row, i, value)`.
template <typename Affine>
void normalize_rows(const RunContext& ctx, const float* x, float* y, int64_t rows, int64_t size, double eps,
                    Affine affine, float* mean_out = nullptr, float* inv_std_out = nullptr) {
  parallel(ctx, rows, grain_for_bytes(size * 4), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * size;
      double sum = 0;
      for (int64_t i = 0; i < size; ++i) sum += xr[i];
      const double mean = size > 0 ? sum / static_cast<double>(size) : 0.0;
      double sq = 0;
      for (int64_t i = 0; i < size; ++i) sq += (xr[i] - mean) * (xr[i] - mean);
      const double inv = 1.0 / std::sqrt((size > 0 ? sq / static_cast<double>(size) : 0.0) + eps);
      float* yr = y + r * size;
      for (int64_t i = 0; i < size; ++i) yr[i] = affine(r, i, static_cast<float>((xr[i] - mean) * inv));
      if (mean_out != nullptr) mean_out[r] = static_cast<float>(mean);
      if (inv_std_out != nullptr) inv_std_out[r] = static_cast<float>(inv);
    }
  });
}

}  // namespace

// The statistics accumulate in double over eight lanes: the loops vectorize, one running sum
// would not.
TETHER_MULTIVERSION void layer_norm_row(const float* __restrict x, float* __restrict y, int64_t n, double eps,
                                        const float* __restrict scale, const float* __restrict bias, double& mean_out,
                                        double& inv_out) {
  constexpr int kLanes = 8;
  double s[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) s[j] += x[i + j];
  double sum = 0;
  for (; i < n; ++i) sum += x[i];
  for (double v : s) sum += v;
  const double mean = n > 0 ? sum / static_cast<double>(n) : 0.0;
  double q[kLanes] = {};
  for (i = 0; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) q[j] += (x[i + j] - mean) * (x[i + j] - mean);
  double sq = 0;
  for (; i < n; ++i) sq += (x[i] - mean) * (x[i] - mean);
  for (double v : q) sq += v;
  const double inv = 1.0 / std::sqrt((n > 0 ? sq / static_cast<double>(n) : 0.0) + eps);
  if (bias != nullptr) {
    for (i = 0; i < n; ++i) y[i] = static_cast<float>((x[i] - mean) * inv) * scale[i] + bias[i];
  } else {
    for (i = 0; i < n; ++i) y[i] = static_cast<float>((x[i] - mean) * inv) * scale[i];
  }
  mean_out = mean;
  inv_out = inv;
}

TETHER_MULTIVERSION double rms_norm_row(const float* __restrict x, float* __restrict y, int64_t n, double eps,
                                        const float* __restrict scale) {
  constexpr int kLanes = 8;
  double q[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) q[j] += static_cast<double>(x[i + j]) * x[i + j];
  double sq = 0;
  for (; i < n; ++i) sq += static_cast<double>(x[i]) * x[i];
  for (double v : q) sq += v;
  const double inv = 1.0 / std::sqrt((n > 0 ? sq / static_cast<double>(n) : 0.0) + eps);
  for (i = 0; i < n; ++i) y[i] = static_cast<float>(x[i] * inv) * scale[i];
  return inv;
}

namespace {

std::unique_ptr<Kernel> layer_norm(const KernelInit& init) {
  const int64_t axis = init.node.attr_int("axis", -1);
  const double eps = init.node.attr_float("epsilon", 1e-5f);
  return make_kernel([axis, eps](const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) {
    const View& x = in[0];
    const size_t a = norm_axis(axis, x.rank());
    int64_t size = 1;
    for (size_t d = a; d < x.rank(); ++d) size *= x.dims[d];
    const int64_t rows = size == 0 ? 0 : x.numel() / size;
    // Scale and bias broadcast over the normalised dims (their shape is a suffix of them).
    const View& scale = in[1];
    const View* bias = present(in, 2) ? &in[2] : nullptr;
    const int64_t ns = scale.numel(), nb = bias ? bias->numel() : 1;
    float* mean = out.size() > 1 && out[1].data ? out[1].as<float>() : nullptr;
    float* inv = out.size() > 2 && out[2].data ? out[2].as<float>() : nullptr;
    if (ns == size && (bias == nullptr || nb == size)) {
      parallel(ctx, rows, grain_for_bytes(size * 4), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          double m = 0, v = 0;
          layer_norm_row(x.as<float>() + r * size, out[0].as<float>() + r * size, size, eps, scale.as<float>(),
                         bias != nullptr ? bias->as<float>() : nullptr, m, v);
          if (mean != nullptr) mean[r] = static_cast<float>(m);
          if (inv != nullptr) inv[r] = static_cast<float>(v);
        }
      });
      return;
    }
    // Other shapes broadcast over the normalised dims ([4, 1] over [4, 5] too): each element
    // of a row reads its scale and bias through broadcast strides, worked out once.
    const std::vector<int64_t> norm_dims(x.dims.begin() + static_cast<std::ptrdiff_t>(a), x.dims.end());
    auto offsets = [&](const View& p) {
      const std::vector<int64_t> st = broadcast_strides(p.dims, norm_dims);
      std::vector<int64_t> at(static_cast<size_t>(size));
      for (int64_t i = 0; i < size; ++i) at[static_cast<size_t>(i)] = broadcast_offset(i, norm_dims, st);
      return at;
    };
    const std::vector<int64_t> s_at = offsets(scale);
    const std::vector<int64_t> b_at = bias ? offsets(*bias) : std::vector<int64_t>{};
    normalize_rows(
        ctx, x.as<float>(), out[0].as<float>(), rows, size, eps,
        [&](int64_t, int64_t i, float v) {
          const float s = scale.as<float>()[s_at[static_cast<size_t>(i)]];
          return bias ? v * s + bias->as<float>()[b_at[static_cast<size_t>(i)]] : v * s;
        },
        mean, inv);
  });
}

std::unique_ptr<Kernel> instance_norm(const KernelInit& init) {
  const double eps = init.node.attr_float("epsilon", 1e-5f);
  return make_kernel([eps](const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) {
    const View& x = in[0];
    const int64_t c = x.dims[1];
    const int64_t size = x.numel() == 0 ? 0 : x.numel() / (x.dims[0] * c);
    const float *scale = in[1].as<float>(), *bias = in[2].as<float>();
    normalize_rows(ctx, x.as<float>(), out[0].as<float>(), x.dims[0] * c, size, eps,
                   [&](int64_t r, int64_t, float v) { return v * scale[r % c] + bias[r % c]; });
  });
}

std::unique_ptr<Kernel> group_norm(const KernelInit& init) {
  const double eps = init.node.attr_float("epsilon", 1e-5f);
  const int64_t groups = init.node.attr_int("num_groups", 1);
  return make_kernel([eps, groups](const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) {
    const View& x = in[0];
    const int64_t c = x.dims[1];
    const int64_t spatial = x.numel() == 0 ? 0 : x.numel() / (x.dims[0] * c);
    const int64_t per_group = c / groups;
    // Opset 18 gives scale and bias per group, opset 21 per channel.
    const bool per_channel = in[1].numel() == c;
    TETHER_CHECK(in[2].numel() == in[1].numel() && (per_channel || in[1].numel() == groups),
                 "GroupNormalization: scale and bias differ in length");
    const float *scale = in[1].as<float>(), *bias = in[2].as<float>();
    normalize_rows(ctx, x.as<float>(), out[0].as<float>(), x.dims[0] * groups, per_group * spatial, eps,
                   [&](int64_t r, int64_t i, float v) {
                     const int64_t g = r % groups;
                     const int64_t k = per_channel ? g * per_group + i / spatial : g;
                     return v * scale[k] + bias[k];
                   });
  });
}

// The largest of n floats (NaN ignored: a NaN still makes the row NaN through its exponential).
// Compilers do not vectorise a float max reduction on their own (they keep the order of the
// comparisons), so the vector forms are written out.
#if defined(__x86_64__)
__attribute__((target("avx512f"))) float row_max_avx512(const float* x, int64_t n) {
  __m512 m = _mm512_set1_ps(-INFINITY);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) m = _mm512_max_ps(m, _mm512_loadu_ps(x + j));
  if (j < n) m = _mm512_mask_max_ps(m, static_cast<__mmask16>((1u << (n - j)) - 1), m, _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << (n - j)) - 1), x + j));
  return _mm512_reduce_max_ps(m);
}

__attribute__((target("avx2"))) float row_max_avx2(const float* x, int64_t n) {
  __m256 m = _mm256_set1_ps(-INFINITY);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + j));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, m);
  float r = -INFINITY;
  for (float v : lanes) r = v > r ? v : r;
  for (; j < n; ++j) r = x[j] > r ? x[j] : r;
  return r;
}
#endif  // __x86_64__

float row_max(const float* x, int64_t n) {
#if defined(__x86_64__)
  static const int isa = util::cpu_features().avx512 ? 2 : util::cpu_features().avx2 ? 1 : 0;
  if (isa == 2) return row_max_avx512(x, n);
  if (isa == 1) return row_max_avx2(x, n);
#endif
  float r = -INFINITY;
  for (int64_t j = 0; j < n; ++j) r = x[j] > r ? x[j] : r;
  return r;
}

// e^(x[j] - m) for a row, in the portable loop (16 lanes on AVX-512 CPUs, multiversioned), or
// through `vexp` (elementwise.h's AVX2 kernel, on AVX2 CPUs without AVX-512).
TETHER_MULTIVERSION
void exp_shifted(const float* __restrict x, float* __restrict y, int64_t len, float m, VectorUnaryFn vexp) {
  if (vexp == nullptr) {
    for (int64_t j = 0; j < len; ++j) y[j] = util::fast_exp(x[j] - m);
    return;
  }
  for (int64_t j = 0; j < len; ++j) y[j] = x[j] - m;
  vexp(y, y, len);
}

// The sum of a row's exponentials, then the row scaled by it (or LogSoftmax's x - m - log sum).
// The sum runs over 16 lanes: a single running reduction keeps compilers from vectorising (it
// would fix the order of the float adds).
TETHER_MULTIVERSION
void normalise_row(const float* __restrict x, float* __restrict y, int64_t len, float m, bool log) {
  constexpr int kLanes = 16;
  float lane[kLanes];
  for (float& v : lane) v = 0.0f;
  int64_t j = 0;
  for (j = 0; j + kLanes <= len; j += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] += y[j + l];
  float sum = 0.0f;
  for (; j < len; ++j) sum += y[j];
  for (float v : lane) sum += v;
  if (log) {
    const float log_sum = std::log(sum);
    for (int64_t k = 0; k < len; ++k) y[k] = x[k] - m - log_sum;
  } else {
    const float inv = 1.0f / sum;
    for (int64_t k = 0; k < len; ++k) y[k] *= inv;
  }
}

// Softmax (or LogSoftmax) of one contiguous row: max, exponentials, sum, scale.
void softmax_row(const float* x, float* y, int64_t len, bool log, VectorUnaryFn vexp) {
  const float m = row_max(x, len);
  exp_shifted(x, y, len, m, vexp);
  normalise_row(x, y, len, m, log);
}

// The AVX2 exponential where elementwise.h has it and AVX-512 does not take over, else nullptr.
VectorUnaryFn vector_exp() {
#if defined(__x86_64__)
  const util::CpuFeatures& f = util::cpu_features();
  if (f.avx2 && !f.avx512) return f32_vexp__avx2;
#endif
  return nullptr;
}

// Softmax over `axis` (opset >= 13), or over the flattened dims from `axis` on (older opsets).
std::unique_ptr<Kernel> softmax(const KernelInit& init, bool log) {
  const bool coerce = init.opset < 13;
  const int64_t axis = init.node.attr_int("axis", coerce ? 1 : -1);
  return make_kernel([axis, coerce, log, vexp = vector_exp()](const RunContext& ctx, const std::vector<View>& in,
                                                               std::vector<View>& out) {
    const View& x = in[0];
    const size_t a = norm_axis(axis, x.rank());
    int64_t outer = 1, len = 1, inner = 1;
    for (size_t d = 0; d < x.rank(); ++d) {
      if (d < a) outer *= x.dims[d];
      else if (d == a || coerce) len *= x.dims[d];
      else inner *= x.dims[d];
    }
    if (inner == 1) {  // rows are contiguous: the common case, vectorised
      parallel(ctx, outer, grain_for_bytes(len * 4), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) softmax_row(x.as<float>() + r * len, out[0].as<float>() + r * len, len, log, vexp);
      });
      return;
    }
    parallel(ctx, outer * inner, grain_for_bytes(len * 4), [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t o = t / inner, i = t % inner;
        const float* xp = x.as<float>() + o * len * inner + i;
        float* yp = out[0].as<float>() + o * len * inner + i;
        float m = -INFINITY;
        for (int64_t j = 0; j < len; ++j) m = std::fmax(m, xp[j * inner]);
        double sum = 0;
        for (int64_t j = 0; j < len; ++j) sum += std::exp(static_cast<double>(xp[j * inner]) - m);
        const double log_sum = std::log(sum);
        for (int64_t j = 0; j < len; ++j) {
          const double z = static_cast<double>(xp[j * inner]) - m;
          yp[j * inner] = static_cast<float>(log ? z - log_sum : std::exp(z) / sum);
        }
      }
    });
  });
}

// LRN: each element divided by (bias + alpha / size * the sum of squares over `size`
// neighbouring channels) ^ beta; the window is clipped at the channel edges.
std::unique_ptr<Kernel> lrn(const KernelInit& init) {
  const double alpha = init.node.attr_float("alpha", 1e-4f), beta = init.node.attr_float("beta", 0.75f);
  const double bias = init.node.attr_float("bias", 1.0f);
  const int64_t size = init.node.attr_int("size", 1);
  return make_kernel([=](const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) {
    const View& x = in[0];
    const int64_t n = x.dims[0], c = x.dims[1];
    const int64_t spatial = n * c == 0 ? 0 : x.numel() / (n * c);
    const int64_t before = (size - 1) / 2, after = size - 1 - before;
    const float* xp = x.as<float>();
    float* yp = out[0].as<float>();
    parallel(ctx, n * c, 1, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t b = p / c, ch = p % c;
        const int64_t lo = std::max<int64_t>(0, ch - before), hi = std::min<int64_t>(c - 1, ch + after);
        for (int64_t i = 0; i < spatial; ++i) {
          double sq = 0;
          for (int64_t k = lo; k <= hi; ++k) {
            const double v = xp[(b * c + k) * spatial + i];
            sq += v * v;
          }
          const int64_t at = p * spatial + i;
          yp[at] = static_cast<float>(xp[at] / std::pow(bias + alpha / static_cast<double>(size) * sq, beta));
        }
      }
    });
  });
}

std::string lrn_check(const KernelInit& init) {
  if (init.node.attr_int("size", 0) < 1) return "attribute size must be >= 1";
  return float_only(init);
}

// MeanVarianceNormalization: (x - mean) / (std + 1e-9) over `axes` (the ONNX function's
// definition). Opsets before 9 name the axes by across_channels and may skip the division.
std::unique_ptr<Kernel> mean_variance_norm(const KernelInit& init) {
  std::vector<int64_t> axes = init.node.attr_ints("axes", {0, 2, 3});
  bool divide = true;
  if (init.opset < 9) {
    axes = init.node.attr_int("across_channels", 0) != 0 ? std::vector<int64_t>{1, 2, 3} : std::vector<int64_t>{2, 3};
    divide = init.node.attr_int("normalize_variance", 1) != 0;
  }
  return make_kernel([axes, divide](const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) {
    const View& x = in[0];
    std::vector<bool> reduced(x.rank(), false);
    for (int64_t a : axes) reduced[norm_axis(a, x.rank())] = true;
    // Each element's group: its index with the reduced dims dropped.
    std::vector<int64_t> group_stride(x.rank(), 0);
    int64_t groups = 1;
    for (size_t d = x.rank(); d-- > 0;)
      if (!reduced[d]) {
        group_stride[d] = groups;
        groups *= x.dims[d];
      }
    const int64_t per_group = groups == 0 ? 0 : x.numel() / groups;
    auto group_of = [&](int64_t i) {
      int64_t g = 0;
      for (size_t d = x.rank(); d-- > 0;) {
        g += (i % x.dims[d]) * group_stride[d];
        i /= x.dims[d];
      }
      return g;
    };
    const float* xp = x.as<float>();
    float* yp = out[0].as<float>();
    std::vector<double> mean(static_cast<size_t>(groups), 0.0), sq(static_cast<size_t>(groups), 0.0);
    for (int64_t i = 0; i < x.numel(); ++i) mean[static_cast<size_t>(group_of(i))] += xp[i];
    for (double& m : mean) m /= static_cast<double>(per_group);
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double dv = xp[i] - mean[static_cast<size_t>(group_of(i))];
      sq[static_cast<size_t>(group_of(i))] += dv * dv;
    }
    parallel(ctx, x.numel(), 1 << 12, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const auto g = static_cast<size_t>(group_of(i));
        const double centred = xp[i] - mean[g];
        yp[i] = static_cast<float>(divide ? centred / (std::sqrt(sq[g] / static_cast<double>(per_group)) + 1e-9) : centred);
      }
    });
  });
}

}  // namespace

void register_norm(KernelRegistry& r) {
  TETHER_ADD(r, "BatchNormalization", batch_norm, batch_norm_check);
  TETHER_ADD(r, "LayerNormalization", layer_norm, float_only);
  TETHER_ADD(r, "InstanceNormalization", instance_norm, float_only);
  TETHER_ADD(r, "GroupNormalization", group_norm, float_only);
  TETHER_ADD(r, "LRN", lrn, lrn_check);
  TETHER_ADD(r, "MeanVarianceNormalization", mean_variance_norm, float_only);
  TETHER_ADD(r, "Softmax", [](const KernelInit& i) { return softmax(i, false); }, float_only);
  TETHER_ADD(r, "LogSoftmax", [](const KernelInit& i) { return softmax(i, true); }, float_only);
}

}  // namespace tether::engine::cpu
