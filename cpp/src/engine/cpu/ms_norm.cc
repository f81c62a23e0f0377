// The fused normalisations onnxruntime's transformer tools write, float32:
// com.microsoft SkipLayerNormalization and SkipSimplifiedLayerNormalization (a residual sum
// then LayerNorm or RMSNorm over the last dim) and SimplifiedLayerNormalization (RMSNorm over
// the dims from `axis`, registered in the default domain as onnxruntime does). Rows run on
// the row cores of norm.cc.
#include <algorithm>

#include "engine/cpu/cpu.h"
#include "engine/cpu/norm.h"

namespace tether::engine::cpu {

namespace {

// sum = x + skip (+ bias), n values; one copy per x86-64 level.
TETHER_MULTIVERSION void add_row(const float* __restrict x, const float* __restrict skip, const float* __restrict bias,
                                 float* __restrict sum, int64_t n) {
  if (bias != nullptr) {
    for (int64_t i = 0; i < n; ++i) sum[i] = x[i] + skip[i] + bias[i];
  } else {
    for (int64_t i = 0; i < n; ++i) sum[i] = x[i] + skip[i];
  }
}

float* optional_out(std::vector<View>& out, size_t i) {
  return out.size() > i && out[i].data != nullptr ? out[i].as<float>() : nullptr;
}

// Inputs: input, skip, gamma, then beta and bias (LayerNorm) or bias (RMSNorm). Outputs:
// output, mean, inv_std_var, input_skip_bias_sum. Shape inference checked the sizes; skip is
// the input's shape, or the input's trailing [sequence, hidden] repeated over the batch.
class SkipNormKernel final : public HostKernel {
 public:
  SkipNormKernel(const KernelInit& init, bool rms)
      : rms_(rms), eps_(init.node.attr_float("epsilon", 1e-12f)), threads_(init.threads) {}

  // A row of the residual sum per thread when input_skip_bias_sum is not an output.
  int64_t scratch_bytes(const std::vector<View>& in, const std::vector<View>&) const override {
    return threads_ * (hidden(in[0]) + 16) * static_cast<int64_t>(sizeof(float));
  }

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    const View& x = in[0];
    const int64_t n = hidden(x);
    const int64_t rows = n == 0 ? 0 : x.numel() / n;
    const int64_t skip_rows = n == 0 ? 0 : in[1].numel() / n;
    TETHER_CHECK(skip_rows > 0 && rows % skip_rows == 0, "SkipLayerNormalization: skip's size was not validated");
    const float* gamma = in[2].as<float>();
    const size_t bias_at = rms_ ? 3 : 4;
    const float* beta = !rms_ && present(in, 3) ? in[3].as<float>() : nullptr;
    const float* bias = present(in, bias_at) ? in[bias_at].as<float>() : nullptr;
    float* mean = optional_out(out, 1);
    float* inv = optional_out(out, 2);
    float* sums = optional_out(out, 3);
    auto* scratch = reinterpret_cast<float*>(ctx.scratch);
    const int64_t slot = n + 16;
    auto work = [&](int thread, int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        float* sum = sums != nullptr ? sums + r * n : scratch + thread * slot;
        add_row(x.as<float>() + r * n, in[1].as<float>() + (r % skip_rows) * n, bias, sum, n);
        float* y = out[0].as<float>() + r * n;
        double m = 0, v = 0;
        if (rms_) {
          v = rms_norm_row(sum, y, n, eps_, gamma);
        } else {
          layer_norm_row(sum, y, n, eps_, gamma, beta, m, v);
        }
        // RMSNorm has no mean: its mean output is zero, as onnxruntime writes it.
        if (mean != nullptr) mean[r] = static_cast<float>(m);
        if (inv != nullptr) inv[r] = static_cast<float>(v);
      }
    };
    if (ctx.pool == nullptr || rows <= 1) {
      work(0, 0, rows);
    } else {
      ctx.pool->parallel_for_indexed(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, n)), work);
    }
  }

 private:
  static int64_t hidden(const View& x) { return x.rank() == 0 ? 0 : x.dims.back(); }

  bool rms_;
  double eps_;
  int threads_;
};

// SimplifiedLayerNormalization: Y = X / sqrt(mean(X^2) + eps) * scale over the dims from
// `axis`; the scale broadcasts to them (expanded to a whole row once per run when it is
// smaller). Outputs Y and inv_std_var.
class SimplifiedNormKernel final : public HostKernel {
 public:
  explicit SimplifiedNormKernel(const KernelInit& init)
      : axis_(init.node.attr_int("axis", -1)), eps_(init.node.attr_float("epsilon", 1e-5f)) {}

  int64_t scratch_bytes(const std::vector<View>& in, const std::vector<View>&) const override {
    return (row_size(in[0]) + 16) * static_cast<int64_t>(sizeof(float));
  }

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    const View& x = in[0];
    const int64_t n = row_size(x);
    const int64_t rows = n == 0 ? 0 : x.numel() / n;
    const float* scale = in[1].as<float>();
    if (in[1].numel() != n) {  // broadcast the scale over the normalised dims once
      const std::vector<int64_t> dims(x.dims.begin() + static_cast<std::ptrdiff_t>(first_axis(x)), x.dims.end());
      const std::vector<int64_t> st = broadcast_strides(in[1].dims, dims);
      auto* full = reinterpret_cast<float*>(ctx.scratch);
      for (int64_t i = 0; i < n; ++i) full[i] = scale[broadcast_offset(i, dims, st)];
      scale = full;
    }
    float* inv = optional_out(out, 1);
    parallel(ctx, rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, n)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const double v = rms_norm_row(x.as<float>() + r * n, out[0].as<float>() + r * n, n, eps_, scale);
        if (inv != nullptr) inv[r] = static_cast<float>(v);
      }
    });
  }

 private:
  size_t first_axis(const View& x) const {
    const auto rank = static_cast<int64_t>(x.rank());
    return static_cast<size_t>(axis_ < 0 ? axis_ + rank : axis_);
  }
  int64_t row_size(const View& x) const {
    int64_t n = 1;
    for (size_t d = first_axis(x); d < x.rank(); ++d) n *= x.dims[d];
    return n;
  }

  int64_t axis_;
  double eps_;
};

std::string skip_norm_check(const KernelInit& init) {
  if (std::string why = float_only(init); !why.empty()) return why;
  for (size_t i = 1; i < 3 && i < init.output_types.size(); ++i)
    if (init.node.output(i) != nullptr && init.output_dtype(i) != DType::kFloat32)
      return "output " + std::to_string(i) + " is " + std::string(ir::dtype_name(init.output_dtype(i))) +
             "; the statistics are float32";
  return "";
}

}  // namespace

void register_ms_norm(KernelRegistry& r) {
  TETHER_ADD_IN(r, "com.microsoft", "SkipLayerNormalization",
        [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<SkipNormKernel>(i, false); },
        skip_norm_check);
  TETHER_ADD_IN(r, "com.microsoft", "SkipSimplifiedLayerNormalization",
        [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<SkipNormKernel>(i, true); },
        skip_norm_check);
  TETHER_ADD(r, "SimplifiedLayerNormalization",
        [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<SimplifiedNormKernel>(i); },
        float_only);
}

}  // namespace tether::engine::cpu
