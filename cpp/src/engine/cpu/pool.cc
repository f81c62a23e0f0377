// Pooling: MaxPool (with indices), AveragePool, LpPool, GlobalAveragePool, GlobalMaxPool.
#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/cpu/cpu.h"

namespace tether::engine::cpu {

namespace {

enum class PoolKind { kMax, kAverage, kLp };

// One plane of a 2-D max or average pool without dilation: each window is a clamped
// rectangle, so no per-tap bounds checks. `padded_*` bound the window for
// count_include_pad (the input plus explicit padding).
TETHER_MULTIVERSION
void pool2d_plane(bool is_max, bool include_pad, const float* x, int64_t ih, int64_t iw, float* y, int64_t oh,
                  int64_t ow, int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t pe_h,
                  int64_t pe_w) {
  for (int64_t r = 0; r < oh; ++r) {
    const int64_t h0 = r * sh - ph, h1 = h0 + kh;
    const int64_t a0 = std::max<int64_t>(h0, 0), a1 = std::min(h1, ih);
    const int64_t count_h = include_pad ? std::min(h1, ih + pe_h) - std::max(h0, -ph) : a1 - a0;
    for (int64_t c = 0; c < ow; ++c) {
      const int64_t w0 = c * sw - pw, w1 = w0 + kw;
      const int64_t b0 = std::max<int64_t>(w0, 0), b1 = std::min(w1, iw);
      float acc = is_max ? -INFINITY : 0.0f;
      for (int64_t i = a0; i < a1; ++i) {
        const float* row = x + i * iw;
        if (is_max) {
          for (int64_t j = b0; j < b1; ++j) acc = row[j] > acc ? row[j] : acc;
        } else {
          for (int64_t j = b0; j < b1; ++j) acc += row[j];
        }
      }
      if (is_max) {
        y[r * ow + c] = acc;
      } else {
        const int64_t count_w = include_pad ? std::min(w1, iw + pe_w) - std::max(w0, -pw) : b1 - b0;
        const int64_t count = count_h * count_w;
        y[r * ow + c] = count > 0 ? acc / static_cast<float>(count) : 0.0f;
      }
    }
  }
}

// Max pooling's comparison: NaN never replaces the running maximum (onnxruntime's rule).
[[gnu::always_inline]] inline float max_keep(float acc, float v) { return v > acc ? v : acc; }

// y[c] = max over taps j < kw of t[c * S + j], for output columns whose window lies inside t.
template <int64_t S>
[[gnu::always_inline]] inline void window_max(float* __restrict y, const float* __restrict t, int64_t n, int64_t kw,
                                              int64_t stride) {
  const int64_t s = S > 0 ? S : stride;
  for (int64_t c = 0; c < n; ++c) y[c] = -INFINITY;
  for (int64_t j = 0; j < kw; ++j)
    for (int64_t c = 0; c < n; ++c) y[c] = max_keep(y[c], t[c * s + j]);
}

// Widest input row the separable max pool keeps on the stack.
constexpr int64_t kMaxPoolRow = 2048;

// One plane of a 2-D max pool without dilation, separably: each output row first takes the
// maximum down its window's input rows (one vector pass per row), then across each window's
// columns. The result is the window's maximum as before (NaN never wins; -inf for a window
// that is all NaN). Needs iw <= kMaxPoolRow.
TETHER_MULTIVERSION
void max_pool2d_plane(const float* x, int64_t ih, int64_t iw, float* y, int64_t oh, int64_t ow, int64_t kh, int64_t kw,
                      int64_t sh, int64_t sw, int64_t ph, int64_t pw) {
  float col[kMaxPoolRow];
  // Output columns whose window lies wholly inside the row: [c_lo, c_hi).
  const int64_t c_lo = std::min(ow, (pw + sw - 1) / sw);
  const int64_t c_hi = std::max(c_lo, std::min(ow, iw - kw + pw >= 0 ? (iw - kw + pw) / sw + 1 : 0));
  for (int64_t r = 0; r < oh; ++r) {
    const int64_t a0 = std::max<int64_t>(r * sh - ph, 0), a1 = std::min(r * sh - ph + kh, ih);
    for (int64_t j = 0; j < iw; ++j) col[j] = -INFINITY;
    for (int64_t i = a0; i < a1; ++i) {
      const float* __restrict row = x + i * iw;
      for (int64_t j = 0; j < iw; ++j) col[j] = max_keep(col[j], row[j]);
    }
    float* yr = y + r * ow;
    auto edge = [&](int64_t c) {
      const int64_t w0 = c * sw - pw;
      float acc = -INFINITY;
      for (int64_t j = std::max<int64_t>(w0, 0); j < std::min(w0 + kw, iw); ++j) acc = max_keep(acc, col[j]);
      yr[c] = acc;
    };
    for (int64_t c = 0; c < c_lo; ++c) edge(c);
    const float* t = col + c_lo * sw - pw;
    if (sw == 1) window_max<1>(yr + c_lo, t, c_hi - c_lo, kw, sw);
    else if (sw == 2) window_max<2>(yr + c_lo, t, c_hi - c_lo, kw, sw);
    else window_max<0>(yr + c_lo, t, c_hi - c_lo, kw, sw);
    for (int64_t c = c_hi; c < ow; ++c) edge(c);
  }
}

class PoolKernel final : public HostKernel {
 public:
  PoolKernel(const KernelInit& init, PoolKind kind) : kind_(kind), node_(init.node) {}

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    const View& x = in[0];
    View& y = out[0];
    const size_t k = x.rank() - 2;
    const std::vector<int64_t> kernel = node_.attr_ints("kernel_shape");
    auto ints_or = [&](const char* name, size_t n, int64_t fill) {
      std::vector<int64_t> v = node_.attr_ints(name);
      if (v.empty()) v.assign(n, fill);
      return v;
    };
    const std::vector<int64_t> strides = ints_or("strides", k, 1), dil = ints_or("dilations", k, 1);
    const std::vector<int64_t> pads = ints_or("pads", 2 * k, 0);
    const std::string auto_pad = node_.attr_string("auto_pad", "NOTSET");
    const bool include_pad = node_.attr_int("count_include_pad", 0) != 0;
    const double p_norm = static_cast<double>(node_.attr_int("p", 2));
    std::vector<int64_t> pb(k, 0), pe(k, 0);
    for (size_t d = 0; d < k; ++d) {
      const int64_t ek = (kernel[d] - 1) * dil[d] + 1;
      if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
        const int64_t total = std::max<int64_t>(0, (y.dims[d + 2] - 1) * strides[d] + ek - x.dims[d + 2]);
        pb[d] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
        pe[d] = total - pb[d];
      } else if (auto_pad != "VALID") {
        pb[d] = pads[d];
        pe[d] = pads[d + k];
      }
    }
    int64_t in_size = 1, out_size = 1, ksize = 1;
    for (size_t d = 0; d < k; ++d) {
      in_size *= x.dims[d + 2];
      out_size *= y.dims[d + 2];
      ksize *= kernel[d];
    }
    const int64_t planes = x.dims[0] * x.dims[1];
    int64_t* indices = out.size() > 1 && out[1].data != nullptr ? out[1].as<int64_t>() : nullptr;
    const bool fast = k == 2 && dil[0] == 1 && dil[1] == 1 && indices == nullptr && kind_ != PoolKind::kLp;
    if (fast && kind_ == PoolKind::kMax && x.dims[3] <= kMaxPoolRow) {
      parallel(ctx, planes, 1, [&](int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p)
          max_pool2d_plane(x.as<float>() + p * in_size, x.dims[2], x.dims[3], y.as<float>() + p * out_size, y.dims[2],
                           y.dims[3], kernel[0], kernel[1], strides[0], strides[1], pb[0], pb[1]);
      });
      return;
    }
    if (fast) {
      parallel(ctx, planes, 1, [&](int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p)
          pool2d_plane(kind_ == PoolKind::kMax, include_pad, x.as<float>() + p * in_size, x.dims[2], x.dims[3],
                       y.as<float>() + p * out_size, y.dims[2], y.dims[3], kernel[0], kernel[1], strides[0], strides[1],
                       pb[0], pb[1], pe[0], pe[1]);
      });
      return;
    }
    parallel(ctx, planes, 1, [&](int64_t p0, int64_t p1) {
      std::vector<int64_t> opos(k), kpos(k);
      for (int64_t plane = p0; plane < p1; ++plane) {
        const float* xp = x.as<float>() + plane * in_size;
        float* yp = y.as<float>() + plane * out_size;
        for (int64_t o = 0; o < out_size; ++o) {
          int64_t rem = o;
          for (size_t d = k; d-- > 0;) {
            opos[d] = rem % y.dims[d + 2];
            rem /= y.dims[d + 2];
          }
          double acc = kind_ == PoolKind::kMax ? -std::numeric_limits<double>::infinity() : 0.0;
          int64_t best = -1, valid = 0, padded = 0;
          for (int64_t kk = 0; kk < ksize; ++kk) {
            int64_t kr = kk;
            for (size_t d = k; d-- > 0;) {
              kpos[d] = kr % kernel[d];
              kr /= kernel[d];
            }
            int64_t idx = 0;
            bool inside = true, in_padded = true;
            for (size_t d = 0; d < k; ++d) {
              const int64_t p = opos[d] * strides[d] - pb[d] + kpos[d] * dil[d];
              inside = inside && p >= 0 && p < x.dims[d + 2];
              in_padded = in_padded && p >= -pb[d] && p < x.dims[d + 2] + pe[d];
              idx = idx * x.dims[d + 2] + p;
            }
            if (in_padded) ++padded;
            if (!inside) continue;
            ++valid;
            const float v = xp[idx];
            if (kind_ == PoolKind::kMax) {
              if (best < 0 || v > acc) {  // like onnxruntime: a NaN wins only as the first element
                acc = v;
                best = idx;
              }
            } else if (kind_ == PoolKind::kAverage) {
              acc += v;
            } else {
              acc += std::pow(std::fabs(static_cast<double>(v)), p_norm);
            }
          }
          if (kind_ == PoolKind::kMax) {
            yp[o] = static_cast<float>(acc);
            if (indices != nullptr) indices[plane * out_size + o] = plane * in_size + best;
          } else if (kind_ == PoolKind::kAverage) {
            const int64_t count = include_pad ? padded : valid;
            yp[o] = count > 0 ? static_cast<float>(acc / static_cast<double>(count)) : 0.0f;
          } else {
            yp[o] = static_cast<float>(std::pow(acc, 1.0 / p_norm));
          }
        }
      }
    });
  }

 private:
  PoolKind kind_;
  const ir::Node& node_;
};

std::unique_ptr<Kernel> global_kernel(bool is_max) {
  return make_kernel([is_max](const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) {
    const View& x = in[0];
    int64_t size = 1;
    for (size_t d = 2; d < x.rank(); ++d) size *= x.dims[d];
    const int64_t planes = x.dims[0] * x.dims[1];
    parallel(ctx, planes, 1, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const float* xp = x.as<float>() + p * size;
        if (is_max) {
          float m = -std::numeric_limits<float>::infinity();
          for (int64_t i = 0; i < size; ++i) m = std::isnan(xp[i]) || xp[i] > m ? xp[i] : m;
          out[0].as<float>()[p] = m;
        } else {
          double s = 0;
          for (int64_t i = 0; i < size; ++i) s += xp[i];
          out[0].as<float>()[p] = static_cast<float>(s / static_cast<double>(size));
        }
      }
    });
  });
}

// MaxPool on int8 / uint8 (the int8 path of quantized models: the maximum of quantized values
// is the quantized maximum, since dequantization is increasing). Any spatial rank, pads,
// strides, dilations; a window position outside x takes no part.
template <typename T>
void int_max_pool(const RunContext& ctx, const View& x, View& y, const ConvGeometry& g) {
  const size_t sp = x.rank() - 2;
  int64_t in_size = 1, out_size = 1, ksize = 1;
  for (size_t d = 0; d < sp; ++d) {
    in_size *= x.dims[d + 2];
    out_size *= y.dims[d + 2];
    ksize *= g.kernel[d];
  }
  const int64_t planes = x.dims[0] * x.dims[1];
  if (sp == 2 && g.dilations[0] == 1 && g.dilations[1] == 1) {
    // Each window is a clamped rectangle: no per-tap bounds checks.
    const int64_t ih = x.dims[2], iw = x.dims[3], oh = y.dims[2], ow = y.dims[3];
    parallel(ctx, planes, 1, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const T* xp = x.as<T>() + p * in_size;
        T* yp = y.as<T>() + p * out_size;
        for (int64_t r = 0; r < oh; ++r) {
          const int64_t h0 = std::max<int64_t>(r * g.strides[0] - g.pad_begin[0], 0);
          const int64_t h1 = std::min(r * g.strides[0] - g.pad_begin[0] + g.kernel[0], ih);
          for (int64_t c = 0; c < ow; ++c) {
            const int64_t w0 = std::max<int64_t>(c * g.strides[1] - g.pad_begin[1], 0);
            const int64_t w1 = std::min(c * g.strides[1] - g.pad_begin[1] + g.kernel[1], iw);
            T m = std::numeric_limits<T>::lowest();
            for (int64_t i = h0; i < h1; ++i)
              for (int64_t j = w0; j < w1; ++j) m = std::max(m, xp[i * iw + j]);
            yp[r * ow + c] = m;
          }
        }
      }
    });
    return;
  }
  parallel(ctx, planes, 1, [&](int64_t p0, int64_t p1) {
    std::vector<int64_t> start(sp);
    for (int64_t p = p0; p < p1; ++p) {
      const T* xp = x.as<T>() + p * in_size;
      T* yp = y.as<T>() + p * out_size;
      for (int64_t o = 0; o < out_size; ++o) {
        int64_t rest = o;
        for (size_t d = sp; d-- > 0;) {
          start[d] = (rest % y.dims[d + 2]) * g.strides[d] - g.pad_begin[d];
          rest /= y.dims[d + 2];
        }
        T m = std::numeric_limits<T>::lowest();
        for (int64_t kp = 0; kp < ksize; ++kp) {
          int64_t krest = kp, at = 0, stride = 1;
          bool inside = true;
          for (size_t d = sp; d-- > 0;) {
            const int64_t c = start[d] + (krest % g.kernel[d]) * g.dilations[d];
            krest /= g.kernel[d];
            inside = inside && c >= 0 && c < x.dims[d + 2];
            at += c * stride;
            stride *= x.dims[d + 2];
          }
          if (inside) m = std::max(m, xp[at]);
        }
        yp[o] = m;
      }
    }
  });
}

// y[c] = max(y[c], x[c]) for c < n.
template <typename T>
TETHER_MULTIVERSION void max_into(T* __restrict y, const T* __restrict x, int64_t n) {
  for (int64_t c = 0; c < n; ++c) y[c] = x[c] > y[c] ? x[c] : y[c];
}

// The same on channels-last 2-D tensors (ai.tether MaxPool, channels_last = 1): x [N, H, W, C],
// y [N, OH, OW, C]; each output pixel the maximum of its window's pixels, run over channels.
template <typename T>
void int_max_pool_nhwc(const RunContext& ctx, const View& x, View& y, const ConvGeometry& g) {
  const int64_t ih = x.dims[1], iw = x.dims[2], c = x.dims[3], oh = y.dims[1], ow = y.dims[2];
  parallel(ctx, x.dims[0] * oh, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t img = r / oh, oy = r % oh;
      const T* xi = x.as<T>() + img * ih * iw * c;
      for (int64_t ox = 0; ox < ow; ++ox) {
        T* yp = y.as<T>() + (r * ow + ox) * c;
        std::fill(yp, yp + c, std::numeric_limits<T>::lowest());
        for (int64_t i = 0; i < g.kernel[0]; ++i) {
          const int64_t iy = oy * g.strides[0] - g.pad_begin[0] + i * g.dilations[0];
          if (iy < 0 || iy >= ih) continue;
          for (int64_t j = 0; j < g.kernel[1]; ++j) {
            const int64_t ix = ox * g.strides[1] - g.pad_begin[1] + j * g.dilations[1];
            if (ix >= 0 && ix < iw) max_into(yp, xi + (iy * iw + ix) * c, c);
          }
        }
      }
    }
  });
}

class IntMaxPoolKernel final : public HostKernel {
 public:
  explicit IntMaxPoolKernel(const KernelInit& init)
      : node_(init.node), nhwc_(init.node.domain() == "ai.tether" && init.node.attr_int("channels_last", 0) != 0) {}
  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    if (nhwc_) {
      const std::vector<int64_t> xd = {in[0].dims[0], in[0].dims[3], in[0].dims[1], in[0].dims[2]};
      const std::vector<int64_t> yd = {out[0].dims[0], out[0].dims[3], out[0].dims[1], out[0].dims[2]};
      const ConvGeometry g = conv_geometry(node_, xd, xd, yd, false);
      if (in[0].dtype == DType::kInt8) int_max_pool_nhwc<int8_t>(ctx, in[0], out[0], g);
      else int_max_pool_nhwc<uint8_t>(ctx, in[0], out[0], g);
      return;
    }
    const ConvGeometry g = conv_geometry(node_, in[0].dims, in[0].dims, out[0].dims, false);
    if (in[0].dtype == DType::kInt8) int_max_pool<int8_t>(ctx, in[0], out[0], g);
    else int_max_pool<uint8_t>(ctx, in[0], out[0], g);
  }

 private:
  const ir::Node& node_;
  bool nhwc_;
};

bool int8_max_pool(const KernelInit& init) {
  const DType t = init.input_dtype(0);
  return t == DType::kInt8 || t == DType::kUInt8;
}

std::string maxpool_check(const KernelInit& init) {
  if (init.node.attr_int("storage_order", 0) != 0) return "storage_order 1 (column-major indices) is not supported";
  if (int8_max_pool(init)) {
    if (init.node.outputs().size() > 1 && init.node.output(1) != nullptr)
      return "the indices output of an 8-bit MaxPool is not supported";
    return "";
  }
  return float_only(init);
}

}  // namespace

void register_pool(KernelRegistry& r) {
  TETHER_ADD(r, "MaxPool",
        [](const KernelInit& i) -> std::unique_ptr<Kernel> {
          if (int8_max_pool(i)) return std::make_unique<IntMaxPoolKernel>(i);
          return std::make_unique<PoolKernel>(i, PoolKind::kMax);
        },
        maxpool_check);
  // Channels last, 2-D: 8-bit (passes/channels_last.cc writes it between integer
  // convolutions) or float (pool_nhwc.cc; passes/channels_last_float.cc).
  TETHER_ADD_IN(r, "ai.tether", "MaxPool",
        [](const KernelInit& i) -> std::unique_ptr<Kernel> {
          if (!int8_max_pool(i)) return make_nhwc_max_pool(i);
          return std::make_unique<IntMaxPoolKernel>(i);
        },
        [](const KernelInit& i) -> std::string {
          if (!int8_max_pool(i)) return nhwc_max_pool_check(i);
          const ir::Shape& x = i.input_types[0].shape();
          if (i.node.attr_int("channels_last", 0) == 0 || !x.has_rank() || x.rank() != 4)
            return "ai.tether MaxPool takes channels_last = 1 and a 4-D X [N, H, W, C]";
          return maxpool_check(i);
        });
  TETHER_ADD(r, "AveragePool",
        [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<PoolKernel>(i, PoolKind::kAverage); },
        float_only);
  TETHER_ADD(r, "LpPool",
        [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<PoolKernel>(i, PoolKind::kLp); },
        float_only);
  TETHER_ADD(r, "GlobalAveragePool", [](const KernelInit&) { return global_kernel(false); }, float_only);
  TETHER_ADD(r, "GlobalMaxPool", [](const KernelInit&) { return global_kernel(true); }, float_only);
}

}  // namespace tether::engine::cpu
