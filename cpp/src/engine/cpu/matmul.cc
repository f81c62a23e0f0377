// MatMul (numpy semantics, batched, broadcasting) and Gemm, float32.
#include "engine/cpu/cpu.h"

namespace tether::engine::cpu {

namespace {

// C[m, :] = alpha * A[m, :] @ B (B row-major [K, N]) for m in [m0, m1); A element (m, k) is at
// a[m * a_row + k * a_col]. Accumulates in float along k, row by row (the inner loop over n
// vectorises).
void gemm_rows(int64_t m0, int64_t m1, int64_t n, int64_t k, const float* a, int64_t a_row, int64_t a_col,
               const float* b, float alpha, float* c, int64_t ldc) {
  for (int64_t i = m0; i < m1; ++i) {
    float* crow = c + i * ldc;
    for (int64_t j = 0; j < n; ++j) crow[j] = 0.0f;
    for (int64_t p = 0; p < k; ++p) {
      const float av = alpha * a[i * a_row + p * a_col];
      const float* brow = b + p * n;
      for (int64_t j = 0; j < n; ++j) crow[j] += av * brow[j];
    }
  }
}

// MatMul, and FusedMatMul: MatMul + optional bias over the last dim + activation.
class MatMulKernel final : public Kernel {
 public:
  explicit MatMulKernel(const KernelInit& init) : epilogue_(Epilogue::from_node(init.node)) {}

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    std::vector<int64_t> ad = in[0].dims, bd = in[1].dims;
    const bool a_vec = ad.size() == 1, b_vec = bd.size() == 1;
    if (a_vec) ad.insert(ad.begin(), 1);
    if (b_vec) bd.push_back(1);
    const int64_t m = ad[ad.size() - 2], k = ad.back(), n = bd.back();
    TETHER_CHECK(bd[bd.size() - 2] == k, "MatMul inner dims differ");
    const std::vector<int64_t> a_batch(ad.begin(), ad.end() - 2), b_batch(bd.begin(), bd.end() - 2);
    const std::vector<int64_t> batch = broadcast_dims({&a_batch, &b_batch});
    int64_t batches = 1;
    for (int64_t d : batch) batches *= d;
    TETHER_CHECK(out[0].numel() == batches * m * n, "MatMul: planned output size differs");
    const std::vector<int64_t> sa = broadcast_strides(a_batch, batch), sb = broadcast_strides(b_batch, batch);
    const float* a = in[0].as<float>();
    const float* b = in[1].as<float>();
    float* c = out[0].as<float>();
    auto batch_offset = [&](int64_t idx, const std::vector<int64_t>& st) {
      int64_t off = 0;
      for (size_t d = batch.size(); d-- > 0;) {
        off += (idx % batch[d]) * st[d];
        idx /= batch[d];
      }
      return off;
    };
    parallel(ctx, batches * m, std::max<int64_t>(1, 4096 / std::max<int64_t>(n * k, 1)), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1;) {
        const int64_t bi = r / m, i0 = r % m;
        const int64_t i1 = std::min(m, i0 + (r1 - r));
        const float* ab = a + batch_offset(bi, sa) * m * k;
        const float* bb = b + batch_offset(bi, sb) * k * n;
        gemm_rows(i0, i1, n, k, ab, k, 1, bb, 1.0f, c + bi * m * n, n);
        finish_rows(c + bi * m * n, i0, i1, n, present(in, 2) ? in[2].as<float>() : nullptr);
        r += i1 - i0;
      }
    });
  }

 private:
  void finish_rows(float* c, int64_t i0, int64_t i1, int64_t n, const float* bias) const {
    if (bias == nullptr && epilogue_.empty()) return;
    for (int64_t i = i0; i < i1; ++i) {
      float* row = c + i * n;
      if (bias != nullptr)
        for (int64_t j = 0; j < n; ++j) row[j] += bias[j];
      epilogue_.apply(row, n);
    }
  }

  Epilogue epilogue_;
};

// B of Gemm as row-major [K, N]: transposed once at compile time when it is a constant.
class GemmKernel final : public Kernel {
 public:
  explicit GemmKernel(const KernelInit& init)
      : alpha_(init.node.attr_float("alpha", 1.0f)),
        beta_(init.node.attr_float("beta", 1.0f)),
        trans_a_(init.node.attr_int("transA", 0) != 0),
        trans_b_(init.node.attr_int("transB", 0) != 0),
        epilogue_(Epilogue::from_node(init.node)) {
    if (const ir::Tensor* b = init.constant(1); b != nullptr && b->rank() == 2) {
      packed_b_ = pack_b(b->data<float>(), b->dims()[0], b->dims()[1]);
      has_packed_ = true;
    }
  }

  int64_t scratch_bytes(const std::vector<View>& in, const std::vector<View>&) const override {
    return has_packed_ || !trans_b_ ? 0 : in[1].numel() * static_cast<int64_t>(sizeof(float));
  }

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    const View& a = in[0];
    const int64_t m = trans_a_ ? a.dims[1] : a.dims[0];
    const int64_t k = trans_a_ ? a.dims[0] : a.dims[1];
    const int64_t n = out[0].dims[1];
    const float* b = in[1].as<float>();
    if (has_packed_) {
      b = packed_b_.data();
    } else if (trans_b_) {
      auto* t = reinterpret_cast<float*>(ctx.scratch);
      for (int64_t p = 0; p < k; ++p)
        for (int64_t j = 0; j < n; ++j) t[p * n + j] = b[j * k + p];
      b = t;
    }
    TETHER_CHECK(out[0].dims[0] == m, "Gemm: planned output rows differ");
    float* c = out[0].as<float>();
    parallel(ctx, m, std::max<int64_t>(1, 4096 / std::max<int64_t>(n * k, 1)), [&](int64_t i0, int64_t i1) {
      gemm_rows(i0, i1, n, k, a.as<float>(), trans_a_ ? 1 : k, trans_a_ ? m : 1, b, alpha_, c, n);
      if (present(in, 2) && beta_ != 0.0f) {
        BroadcastRows rows(out[0].dims, {&in[2].dims});
        for (int64_t i = i0; i < i1; ++i) {
          const float* crow = in[2].as<float>() + rows.offset(0, i);
          for (int64_t j = 0; j < n; ++j) c[i * n + j] += beta_ * crow[j * rows.inner_stride(0)];
        }
      }
      for (int64_t i = i0; i < i1; ++i) epilogue_.apply(c + i * n, n);
    });
  }

 private:
  std::vector<float> pack_b(const float* b, int64_t rows, int64_t cols) const {
    if (!trans_b_) return std::vector<float>(b, b + rows * cols);
    std::vector<float> t(static_cast<size_t>(rows * cols));
    for (int64_t j = 0; j < rows; ++j)
      for (int64_t p = 0; p < cols; ++p) t[static_cast<size_t>(p * rows + j)] = b[j * cols + p];
    return t;
  }

  float alpha_, beta_;
  bool trans_a_, trans_b_;
  std::vector<float> packed_b_;
  bool has_packed_ = false;
  Epilogue epilogue_;
};

}  // namespace

void register_matmul(KernelRegistry& r) {
  auto matmul = [](const KernelInit& init) -> std::unique_ptr<Kernel> { return std::make_unique<MatMulKernel>(init); };
  auto gemm = [](const KernelInit& init) -> std::unique_ptr<Kernel> { return std::make_unique<GemmKernel>(init); };
  r.add("MatMul", matmul, float_only);
  r.add("Gemm", gemm, float_only);
  r.add("FusedMatMul", matmul, float_only, "ai.tether");
  r.add("FusedGemm", gemm, float_only, "ai.tether");
}

}  // namespace tether::engine::cpu
