// Conv (any spatial rank, groups, dilations, pads, auto_pad) and ConvTranspose, float32.
#include <algorithm>

#include "engine/cpu/cpu.h"

namespace tether::engine::cpu {

namespace {

struct ConvGeometry {
  std::vector<int64_t> kernel, strides, dilations, pad_begin;
  int64_t group = 1;
};

std::vector<int64_t> ints_or(const ir::Node& n, const char* name, size_t count, int64_t fill) {
  std::vector<int64_t> v = n.attr_ints(name);
  if (v.empty()) v.assign(count, fill);
  return v;
}

// Attributes resolved against actual sizes: auto_pad needs the input and output dims.
ConvGeometry geometry(const ir::Node& n, const std::vector<int64_t>& x, const std::vector<int64_t>& w,
                      const std::vector<int64_t>& y, bool transpose) {
  const size_t k = x.size() - 2;
  ConvGeometry g;
  g.kernel = n.attr_ints("kernel_shape");
  if (g.kernel.empty()) g.kernel.assign(w.begin() + 2, w.end());
  g.strides = ints_or(n, "strides", k, 1);
  g.dilations = ints_or(n, "dilations", k, 1);
  g.group = n.attr_int("group", 1);
  const std::vector<int64_t> pads = ints_or(n, "pads", 2 * k, 0);
  const std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
  g.pad_begin.assign(k, 0);
  for (size_t i = 0; i < k; ++i) {
    const int64_t ek = (g.kernel[i] - 1) * g.dilations[i] + 1;
    if (!transpose) {
      if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
        const int64_t total = std::max<int64_t>(0, (y[i + 2] - 1) * g.strides[i] + ek - x[i + 2]);
        g.pad_begin[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      } else if (auto_pad != "VALID") {
        g.pad_begin[i] = pads[i];
      }
    } else {
      // Total padding follows from the output size inference chose (output_shape, output_padding).
      const std::vector<int64_t> out_pad = ints_or(n, "output_padding", k, 0);
      const int64_t total = g.strides[i] * (x[i + 2] - 1) + out_pad[i] + ek - y[i + 2];
      if (n.attr("output_shape") != nullptr || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER")
        g.pad_begin[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      else if (auto_pad != "VALID")
        g.pad_begin[i] = pads[i];
    }
  }
  return g;
}

// Row-major GEMM rows: C[i, :] = A[i, :] @ B, A [M, K], B [K, N].
void gemm_rows(int64_t i0, int64_t i1, int64_t n, int64_t k, const float* a, const float* b, float* c) {
  for (int64_t i = i0; i < i1; ++i) {
    float* crow = c + i * n;
    std::fill(crow, crow + n, 0.0f);
    for (int64_t p = 0; p < k; ++p) {
      const float av = a[i * k + p];
      const float* brow = b + p * n;
      for (int64_t j = 0; j < n; ++j) crow[j] += av * brow[j];
    }
  }
}

class ConvKernel final : public Kernel {
 public:
  explicit ConvKernel(const KernelInit& init) : node_(init.node), epilogue_(Epilogue::from_node(init.node)) {}

  int64_t scratch_bytes(const std::vector<View>& in, const std::vector<View>& out) const override {
    const ConvGeometry g = geometry(node_, in[0].dims, in[1].dims, out[0].dims, false);
    return columns(in[0], g, out[0]) * static_cast<int64_t>(sizeof(float));
  }

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    const View& x = in[0];
    const View& w = in[1];
    View& y = out[0];
    const ConvGeometry g = geometry(node_, x.dims, w.dims, y.dims, false);
    const size_t k = x.rank() - 2;
    const int64_t batch = x.dims[0], cin = x.dims[1], cout = y.dims[1];
    const int64_t cin_g = cin / g.group, cout_g = cout / g.group;
    int64_t in_size = 1, out_size = 1, ksize = 1;
    for (size_t i = 0; i < k; ++i) {
      in_size *= x.dims[i + 2];
      out_size *= y.dims[i + 2];
      ksize *= g.kernel[i];
    }
    auto* col = reinterpret_cast<float*>(ctx.scratch);
    const int64_t rows = cin_g * ksize;  // rows of the column matrix
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t gi = 0; gi < g.group; ++gi) {
        const float* xg = x.as<float>() + (b * cin + gi * cin_g) * in_size;
        // im2col: col[(c, kpos), opos] = x[c, opos * stride - pad + kpos * dilation] (0 outside).
        parallel(ctx, rows, 1, [&](int64_t r0, int64_t r1) {
          std::vector<int64_t> kpos(k), opos(k);
          for (int64_t r = r0; r < r1; ++r) {
            const int64_t c = r / ksize;
            int64_t kr = r % ksize;
            for (size_t d = k; d-- > 0;) {
              kpos[d] = kr % g.kernel[d];
              kr /= g.kernel[d];
            }
            float* crow = col + r * out_size;
            for (int64_t o = 0; o < out_size; ++o) {
              int64_t orem = o, idx = 0;
              bool inside = true;
              for (size_t d = k; d-- > 0;) {
                opos[d] = orem % y.dims[d + 2];
                orem /= y.dims[d + 2];
              }
              for (size_t d = 0; d < k && inside; ++d) {
                const int64_t p = opos[d] * g.strides[d] - g.pad_begin[d] + kpos[d] * g.dilations[d];
                inside = p >= 0 && p < x.dims[d + 2];
                idx = idx * x.dims[d + 2] + p;
              }
              crow[o] = inside ? xg[c * in_size + idx] : 0.0f;
            }
          }
        });
        const float* wg = w.as<float>() + gi * cout_g * rows;
        float* yg = y.as<float>() + (b * cout + gi * cout_g) * out_size;
        parallel(ctx, cout_g, 1, [&](int64_t o0, int64_t o1) { gemm_rows(o0, o1, out_size, rows, wg, col, yg); });
      }
    }
    const float* bias = present(in, 2) ? in[2].as<float>() : nullptr;
    if (bias != nullptr || !epilogue_.empty()) {
      parallel(ctx, batch * cout, 1, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          float* row = y.as<float>() + r * out_size;
          if (bias != nullptr) {
            const float bv = bias[r % cout];
            for (int64_t o = 0; o < out_size; ++o) row[o] += bv;
          }
          epilogue_.apply(row, out_size);
        }
      });
    }
  }

 private:
  static int64_t columns(const View& x, const ConvGeometry& g, const View& y) {
    int64_t ksize = 1, out_size = 1;
    for (size_t i = 0; i + 2 < x.rank(); ++i) {
      ksize *= g.kernel[i];
      out_size *= y.dims[i + 2];
    }
    return x.dims[1] / g.group * ksize * out_size;
  }

  const ir::Node& node_;
  Epilogue epilogue_;
};

class ConvTransposeKernel final : public Kernel {
 public:
  explicit ConvTransposeKernel(const KernelInit& init) : node_(init.node) {}

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    const View& x = in[0];
    const View& w = in[1];  // [cin, cout / group, kernel...]
    View& y = out[0];
    const ConvGeometry g = geometry(node_, x.dims, w.dims, y.dims, true);
    const size_t k = x.rank() - 2;
    const int64_t batch = x.dims[0], cin = x.dims[1], cout = y.dims[1];
    const int64_t cin_g = cin / g.group, cout_g = cout / g.group;
    int64_t in_size = 1, out_size = 1, ksize = 1;
    for (size_t i = 0; i < k; ++i) {
      in_size *= x.dims[i + 2];
      out_size *= y.dims[i + 2];
      ksize *= g.kernel[i];
    }
    // Each task owns one (batch, output channel) plane and gathers into it: no write races.
    parallel(ctx, batch * cout, 1, [&](int64_t t0, int64_t t1) {
      std::vector<int64_t> ipos(k), kpos(k);
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t b = t / cout, oc = t % cout, gi = oc / cout_g, ocl = oc % cout_g;
        float* yp = y.as<float>() + t * out_size;
        const float bias = present(in, 2) ? in[2].as<float>()[oc] : 0.0f;
        std::fill(yp, yp + out_size, bias);
        for (int64_t icl = 0; icl < cin_g; ++icl) {
          const int64_t ic = gi * cin_g + icl;
          const float* xp = x.as<float>() + (b * cin + ic) * in_size;
          const float* wp = w.as<float>() + (ic * cout_g + ocl) * ksize;
          for (int64_t i = 0; i < in_size; ++i) {
            int64_t rem = i;
            for (size_t d = k; d-- > 0;) {
              ipos[d] = rem % x.dims[d + 2];
              rem /= x.dims[d + 2];
            }
            const float xv = xp[i];
            for (int64_t kk = 0; kk < ksize; ++kk) {
              int64_t kr = kk, idx = 0;
              bool inside = true;
              for (size_t d = k; d-- > 0;) {
                kpos[d] = kr % g.kernel[d];
                kr /= g.kernel[d];
              }
              for (size_t d = 0; d < k && inside; ++d) {
                const int64_t o = ipos[d] * g.strides[d] - g.pad_begin[d] + kpos[d] * g.dilations[d];
                inside = o >= 0 && o < y.dims[d + 2];
                idx = idx * y.dims[d + 2] + o;
              }
              if (inside) yp[idx] += xv * wp[kk];
            }
          }
        }
      }
    });
  }

 private:
  const ir::Node& node_;
};

}  // namespace

void register_conv(KernelRegistry& r) {
  r.add("Conv", [](const KernelInit& init) -> std::unique_ptr<Kernel> { return std::make_unique<ConvKernel>(init); },
        float_only);
  r.add("FusedConv", [](const KernelInit& init) -> std::unique_ptr<Kernel> { return std::make_unique<ConvKernel>(init); },
        float_only, "ai.tether");
  r.add("ConvTranspose",
        [](const KernelInit& init) -> std::unique_ptr<Kernel> { return std::make_unique<ConvTransposeKernel>(init); },
        float_only);
}

}  // namespace tether::engine::cpu
