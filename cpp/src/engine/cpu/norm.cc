// Normalisation and softmax: BatchNormalization, LayerNormalization, InstanceNormalization,
// GroupNormalization, Softmax, LogSoftmax. Statistics accumulate in double.
#include <cmath>

#include "engine/cpu/cpu.h"

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
    parallel(ctx, n * c, 1, [&](int64_t p0, int64_t p1) {
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
  parallel(ctx, rows, 1, [&](int64_t r0, int64_t r1) {
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
    normalize_rows(
        ctx, x.as<float>(), out[0].as<float>(), rows, size, eps,
        [&](int64_t, int64_t i, float v) {
          const float s = scale.as<float>()[i % ns];
          return bias ? v * s + bias->as<float>()[i % nb] : v * s;
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
    const float *scale = in[1].as<float>(), *bias = in[2].as<float>();
    normalize_rows(ctx, x.as<float>(), out[0].as<float>(), x.dims[0] * groups, per_group * spatial, eps,
                   [&](int64_t r, int64_t i, float v) {
                     const int64_t g = r % groups;
                     const int64_t k = per_channel ? g * per_group + i / spatial : g;
                     return v * scale[k] + bias[k];
                   });
  });
}

// Softmax over `axis` (opset >= 13), or over the flattened dims from `axis` on (older opsets).
std::unique_ptr<Kernel> softmax(const KernelInit& init, bool log) {
  const bool coerce = init.opset < 13;
  const int64_t axis = init.node.attr_int("axis", coerce ? 1 : -1);
  return make_kernel([axis, coerce, log](const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) {
    const View& x = in[0];
    const size_t a = norm_axis(axis, x.rank());
    int64_t outer = 1, len = 1, inner = 1;
    for (size_t d = 0; d < x.rank(); ++d) {
      if (d < a) outer *= x.dims[d];
      else if (d == a || coerce) len *= x.dims[d];
      else inner *= x.dims[d];
    }
    parallel(ctx, outer * inner, 1, [&](int64_t t0, int64_t t1) {
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

}  // namespace

void register_norm(KernelRegistry& r) {
  r.add("BatchNormalization", batch_norm, batch_norm_check);
  r.add("LayerNormalization", layer_norm, float_only);
  r.add("InstanceNormalization", instance_norm, float_only);
  r.add("GroupNormalization", group_norm, float_only);
  r.add("Softmax", [](const KernelInit& i) { return softmax(i, false); }, float_only);
  r.add("LogSoftmax", [](const KernelInit& i) { return softmax(i, true); }, float_only);
}

}  // namespace tether::engine::cpu
