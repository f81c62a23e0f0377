// Float pooling channels last (ai.tether MaxPool, AveragePool, GlobalAveragePool and
// GlobalMaxPool with channels_last = 1; passes/channels_last_float.cc puts them there): X
// [N, H, W, C], every output pixel computed over its window's pixels a run of C channels at a
// time. The results are those of the ONNX ops on the channels-first view: max pooling's NaN
// never replaces the running maximum (as pool.cc), average pooling counts as pool.cc does,
// global max lets NaN through and global average sums in double.
#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/cpu/cpu.h"

namespace tether::engine::cpu {

namespace {

enum class Kind { kMax, kAverage, kGlobalMax, kGlobalAverage };

TETHER_MULTIVERSION void max_into(float* __restrict y, const float* __restrict x, int64_t n) {
  for (int64_t c = 0; c < n; ++c) y[c] = x[c] > y[c] ? x[c] : y[c];
}

TETHER_MULTIVERSION void add_into(float* __restrict y, const float* __restrict x, int64_t n) {
  for (int64_t c = 0; c < n; ++c) y[c] += x[c];
}

TETHER_MULTIVERSION void scale(float* __restrict y, float s, int64_t n) {
  for (int64_t c = 0; c < n; ++c) y[c] *= s;
}

TETHER_MULTIVERSION void add_into_double(double* __restrict y, const float* __restrict x, int64_t n) {
  for (int64_t c = 0; c < n; ++c) y[c] += static_cast<double>(x[c]);
}

class NhwcPool final : public HostKernel {
 public:
  NhwcPool(const KernelInit& init, Kind kind) : node_(init.node), kind_(kind), threads_(init.threads) {}

  int64_t scratch_bytes(const std::vector<View>& in, const std::vector<View>&) const override {
    return kind_ == Kind::kGlobalAverage ? threads_ * in[0].dims[3] * 8 : 0;
  }

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    if (kind_ == Kind::kGlobalMax || kind_ == Kind::kGlobalAverage) global(ctx, in[0], out[0]);
    else windowed(ctx, in[0], out[0]);
  }

 private:
  void windowed(const RunContext& ctx, const View& x, View& y) const {
    const int64_t n = x.dims[0], ih = x.dims[1], iw = x.dims[2], c = x.dims[3], oh = y.dims[1], ow = y.dims[2];
    const std::vector<int64_t> xd = {n, c, ih, iw}, yd = {n, c, oh, ow};
    const ConvGeometry g = conv_geometry(node_, xd, xd, yd, false);
    const bool is_max = kind_ == Kind::kMax;
    const bool include_pad = node_.attr_int("count_include_pad", 0) != 0;
    // The end padding (count_include_pad counts it, not what ceil_mode reaches past it).
    int64_t pe[2] = {0, 0};
    const std::string auto_pad = node_.attr_string("auto_pad", "NOTSET");
    const std::vector<int64_t> pads = node_.attr_ints("pads", std::vector<int64_t>(4, 0));
    for (int d = 0; d < 2; ++d) {
      if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
        const int64_t ek = (g.kernel[d] - 1) * g.dilations[d] + 1;
        pe[d] = std::max<int64_t>(0, (yd[d + 2] - 1) * g.strides[d] + ek - xd[d + 2]) - g.pad_begin[d];
      } else if (auto_pad != "VALID") {
        pe[d] = pads[d + 2];
      }
    }
    const int64_t pe_h = pe[0], pe_w = pe[1];
    parallel(ctx, n * oh, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t img = r / oh, oy = r % oh;
        const float* xi = x.as<float>() + img * ih * iw * c;
        const int64_t h0 = oy * g.strides[0] - g.pad_begin[0];
        for (int64_t ox = 0; ox < ow; ++ox) {
          float* yp = y.as<float>() + (r * ow + ox) * c;
          std::fill(yp, yp + c, is_max ? -INFINITY : 0.0f);
          const int64_t w0 = ox * g.strides[1] - g.pad_begin[1];
          int64_t rows = 0, cols = 0;
          for (int64_t i = 0; i < g.kernel[0]; ++i) {
            const int64_t iy = h0 + i * g.dilations[0];
            if (iy < 0 || iy >= ih) continue;
            ++rows;
            cols = 0;
            for (int64_t j = 0; j < g.kernel[1]; ++j) {
              const int64_t ix = w0 + j * g.dilations[1];
              if (ix < 0 || ix >= iw) continue;
              ++cols;
              const float* xp = xi + (iy * iw + ix) * c;
              if (is_max) max_into(yp, xp, c);
              else add_into(yp, xp, c);
            }
          }
          if (is_max) continue;
          if (include_pad) {
            const int64_t h1 = h0 + g.kernel[0], w1 = w0 + g.kernel[1];
            rows = std::min(h1, ih + pe_h) - std::max(h0, -g.pad_begin[0]);
            cols = std::min(w1, iw + pe_w) - std::max(w0, -g.pad_begin[1]);
          }
          const int64_t count = rows * cols;
          if (count > 0) scale(yp, 1.0f / static_cast<float>(count), c);
          else std::fill(yp, yp + c, 0.0f);
        }
      }
    });
  }

  void global(const RunContext& ctx, const View& x, View& y) const {
    const int64_t n = x.dims[0], pixels = x.dims[1] * x.dims[2], c = x.dims[3];
    const bool is_max = kind_ == Kind::kGlobalMax;
    auto* sums = reinterpret_cast<double*>(ctx.scratch);
    auto task = [&](int thread, int64_t i0, int64_t i1) {
      for (int64_t img = i0; img < i1; ++img) {
        const float* xi = x.as<float>() + img * pixels * c;
        float* yi = y.as<float>() + img * c;
        if (is_max) {
          std::fill(yi, yi + c, -INFINITY);
          for (int64_t p = 0; p < pixels; ++p)
            for (int64_t k = 0; k < c; ++k) {
              const float v = xi[p * c + k];
              yi[k] = std::isnan(v) || v > yi[k] ? v : yi[k];
            }
          continue;
        }
        double* s = sums + thread * c;
        std::fill(s, s + c, 0.0);
        for (int64_t p = 0; p < pixels; ++p) add_into_double(s, xi + p * c, c);
        for (int64_t k = 0; k < c; ++k) yi[k] = static_cast<float>(s[k] / static_cast<double>(pixels));
      }
    };
    if (ctx.pool == nullptr || n == 1) task(0, 0, n);
    else ctx.pool->parallel_for_indexed(n, 1, task);
  }

  const ir::Node& node_;
  Kind kind_;
  int threads_;
};

std::string nhwc_pool_check(const KernelInit& init) {
  if (std::string why = float_only(init); !why.empty()) return why;
  const ir::Shape& x = init.input_types[0].shape();
  if (init.node.attr_int("channels_last", 0) == 0 || !x.has_rank() || x.rank() != 4)
    return "ai.tether " + init.node.op_type() + " takes channels_last = 1 and a 4-D X [N, H, W, C]";
  if (init.node.outputs().size() > 1 && init.node.output(1) != nullptr)
    return "the indices output of a channels-last MaxPool is not supported";
  return "";
}

}  // namespace

std::unique_ptr<Kernel> make_nhwc_max_pool(const KernelInit& init) {
  return std::make_unique<NhwcPool>(init, Kind::kMax);
}

std::string nhwc_max_pool_check(const KernelInit& init) { return nhwc_pool_check(init); }

void register_pool_nhwc(KernelRegistry& r) {
  TETHER_ADD_IN(r, "ai.tether", "AveragePool",
        [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<NhwcPool>(i, Kind::kAverage); },
        nhwc_pool_check);
  TETHER_ADD_IN(r, "ai.tether", "GlobalAveragePool",
        [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<NhwcPool>(i, Kind::kGlobalAverage); },
        nhwc_pool_check);
  TETHER_ADD_IN(r, "ai.tether", "GlobalMaxPool",
        [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<NhwcPool>(i, Kind::kGlobalMax); },
        nhwc_pool_check);
}

}  // namespace tether::engine::cpu
