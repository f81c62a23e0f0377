// MatMul (numpy semantics, batched, broadcasting), Gemm, and the fused FusedMatMul and
// FusedGemm, float32, on the packed GEMM. Constant right-hand sides are packed once when the
// kernel is made; the packed copy is all the kernel keeps.
#include <algorithm>

#include "engine/cpu/cpu.h"
#include "engine/cpu/gemm.h"

namespace tether::engine::cpu {

namespace {

// MatMul and FusedMatMul (MatMul + optional bias over the last dim + activation).
class MatMulKernel final : public HostKernel {
 public:
  explicit MatMulKernel(const KernelInit& init) : epilogue_(Epilogue::from_node(init.node)), threads_(init.threads) {
    if (const ir::Tensor* b = init.constant(1); b != nullptr && b->rank() == 2) {
      packed_ = PackedMatrix::pack(b->data<float>(), b->dims()[0], b->dims()[1], b->dims()[1], 1, gemm_isa().nr);
      has_packed_ = true;
    }
  }

  bool packs_input(size_t i) const override { return i == 1 && has_packed_; }

  int64_t scratch_bytes(const std::vector<View>& in, const std::vector<View>&) const override {
    const View& b = in[1];
    const int64_t k = b.rank() == 1 ? b.dims[0] : b.dims[b.rank() - 2], n = b.rank() == 1 ? 1 : b.dims.back();
    // Rows of A: all of them when its batches fold into one GEMM (a bound for the other case).
    const int64_t rows = in[0].rank() >= 2 ? in[0].numel() / std::max<int64_t>(k, 1) : 1;
    // Or one single-threaded product per thread, when batches run in parallel.
    const int64_t m = in[0].rank() >= 2 ? in[0].dims[in[0].rank() - 2] : 1;
    return std::max(sgemm_scratch_floats(rows, n, k, threads_), threads_ * sgemm_scratch_floats(m, n, k, 1)) *
           static_cast<int64_t>(sizeof(float));
  }

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    std::vector<int64_t> ad = in[0].dims, bd = in[1].dims;
    if (ad.size() == 1) ad.insert(ad.begin(), 1);
    if (bd.size() == 1) bd.push_back(1);
    const int64_t m = ad[ad.size() - 2], k = ad.back(), n = bd.back();
    TETHER_CHECK(bd[bd.size() - 2] == k, "MatMul inner dims differ");
    const std::vector<int64_t> a_batch(ad.begin(), ad.end() - 2), b_batch(bd.begin(), bd.end() - 2);
    const std::vector<int64_t> batch = broadcast_dims({&a_batch, &b_batch});
    int64_t batches = 1;
    for (int64_t d : batch) batches *= d;
    TETHER_CHECK(out[0].numel() == batches * m * n, "MatMul: planned output size differs");
    const std::vector<int64_t> sa = broadcast_strides(a_batch, batch), sb = broadcast_strides(b_batch, batch);
    auto offset = [&](int64_t idx, const std::vector<int64_t>& st) { return broadcast_offset(idx, batch, st); };
    GemmEpilogue ep;
    ep.col_bias = present(in, 2) ? in[2].as<float>() : nullptr;
    ep.act = epilogue_;
    auto* scratch = reinterpret_cast<float*>(ctx.scratch);
    // One B for every batch: the batches of A are consecutive rows, so they form one GEMM with
    // batches * m rows (B is packed and streamed once instead of once per batch).
    const bool shared_b = std::all_of(b_batch.begin(), b_batch.end(), [](int64_t d) { return d == 1; });
    if (shared_b && batches > 1) {
      GemmB source;
      if (has_packed_) {
        source.packed = packed_.data();
      } else {
        const float* b = in[1].as<float>();
        source.pack = [b, n](const RunContext&, int64_t, int64_t k0, int64_t kc, int64_t n0, int64_t nc, float* dst) {
          PackedMatrix::pack_into(dst, b + k0 * n + n0, kc, nc, n, 1, gemm_isa().nr);
        };
      }
      GemmA lhs;
      lhs.data = in[0].as<float>();
      lhs.lda = k;
      sgemm(ctx, batches * m, n, k, lhs, source, out[0].as<float>(), n, ep, scratch);
      return;
    }
    // Enough batches to go round: each thread runs whole products on its own (attention's
    // per-head products are too small to split), else the products split over threads.
    const bool per_batch = ctx.pool != nullptr && batches >= ctx.pool->threads() && ctx.pool->threads() > 1;
    const int64_t slot = sgemm_scratch_floats(m, n, k, 1);
    auto product = [&](const RunContext& pctx, int64_t bi, float* buffer) {
      GemmB source;
      if (has_packed_) {
        source.packed = packed_.data();
      } else {
        const float* b = in[1].as<float>() + offset(bi, sb) * k * n;
        source.pack = [b, n](const RunContext&, int64_t, int64_t k0, int64_t kc, int64_t n0, int64_t nc, float* dst) {
          PackedMatrix::pack_into(dst, b + k0 * n + n0, kc, nc, n, 1, gemm_isa().nr);
        };
      }
      GemmA lhs;
      lhs.data = in[0].as<float>() + offset(bi, sa) * m * k;
      lhs.lda = k;
      sgemm(pctx, m, n, k, lhs, source, out[0].as<float>() + bi * m * n, n, ep, buffer);
    };
    if (!per_batch) {
      for (int64_t bi = 0; bi < batches; ++bi) product(ctx, bi, scratch);
      return;
    }
    ctx.pool->parallel_for_indexed(batches, 1, [&](int thread, int64_t b0, int64_t b1) {
      const RunContext serial;
      for (int64_t bi = b0; bi < b1; ++bi) product(serial, bi, scratch + thread * slot);
    });
  }

 private:
  Epilogue epilogue_;
  int threads_;
  PackedMatrix packed_;
  bool has_packed_ = false;
};

// Gemm and FusedGemm: Y = alpha * op(A) @ op(B) + beta * C, then an activation.
class GemmKernel final : public HostKernel {
 public:
  explicit GemmKernel(const KernelInit& init)
      : alpha_(init.node.attr_float("alpha", 1.0f)),
        beta_(init.node.attr_float("beta", 1.0f)),
        trans_a_(init.node.attr_int("transA", 0) != 0),
        trans_b_(init.node.attr_int("transB", 0) != 0),
        epilogue_(Epilogue::from_node(init.node)),
        threads_(init.threads) {
    if (const ir::Tensor* b = init.constant(1); b != nullptr && b->rank() == 2) {
      packed_ = pack_b(b->data<float>(), b->dims()[0], b->dims()[1]);
      has_packed_ = true;
    }
  }

  bool packs_input(size_t i) const override { return i == 1 && has_packed_; }

  int64_t scratch_bytes(const std::vector<View>& in, const std::vector<View>& out) const override {
    if (out[0].dims[1] == 0) return 0;
    int64_t floats = trans_a_ ? in[0].numel() : 0;
    floats += sgemm_scratch_floats(out[0].dims[0], out[0].dims[1], in[1].numel() / out[0].dims[1], threads_);
    return (floats + 16) * static_cast<int64_t>(sizeof(float));
  }

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    const View& a = in[0];
    const int64_t m = trans_a_ ? a.dims[1] : a.dims[0];
    const int64_t k = trans_a_ ? a.dims[0] : a.dims[1];
    const int64_t n = out[0].dims[1];
    TETHER_CHECK(out[0].dims[0] == m, "Gemm: planned output rows differ");
    auto* scratch = reinterpret_cast<float*>(ctx.scratch);
    const float* ap = a.as<float>();
    if (trans_a_) {  // A^T as row-major [m, k]
      float* t = scratch;
      for (int64_t p = 0; p < k; ++p)
        for (int64_t i = 0; i < m; ++i) t[i * k + p] = ap[p * m + i];
      ap = t;
      scratch += (m * k + 15) / 16 * 16;
    }
    GemmB source;
    if (has_packed_) {
      source.packed = packed_.data();
    } else {
      const float* b = in[1].as<float>();
      const int64_t rs = trans_b_ ? 1 : n, cs = trans_b_ ? k : 1;
      source.pack = [b, rs, cs](const RunContext&, int64_t, int64_t k0, int64_t kc, int64_t n0, int64_t nc, float* dst) {
        PackedMatrix::pack_into(dst, b + k0 * rs + n0 * cs, kc, nc, rs, cs, gemm_isa().nr);
      };
    }
    // A bias over columns (C of shape [n] or [1, n]) and an activation fit the tile epilogue;
    // other C shapes and alpha != 1 are applied after the product.
    const View* c = present(in, 2) && beta_ != 0.0f ? &in[2] : nullptr;
    const bool col_bias =
        c != nullptr && c->numel() == n && (c->rank() <= 1 || (c->rank() == 2 && c->dims[0] == 1)) && beta_ == 1.0f;
    const bool fused = alpha_ == 1.0f && (c == nullptr || col_bias);
    GemmEpilogue ep;
    if (fused) {
      ep.col_bias = col_bias ? c->as<float>() : nullptr;
      ep.act = epilogue_;
    }
    float* y = out[0].as<float>();
    GemmA lhs;
    lhs.data = ap;
    lhs.lda = k;
    sgemm(ctx, m, n, k, lhs, source, y, n, ep, scratch);
    if (fused) return;
    // C's strides along the output's rows and columns (0 where it is broadcast).
    const std::vector<int64_t> cs = broadcast_strides(c != nullptr ? c->dims : out[0].dims, out[0].dims);
    parallel(ctx, m, grain_for_bytes(n * 4), [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        float* row = y + i * n;
        for (int64_t j = 0; j < n; ++j) row[j] *= alpha_;
        if (c != nullptr) {
          const float* cr = c->as<float>() + i * cs[0];
          for (int64_t j = 0; j < n; ++j) row[j] += beta_ * cr[j * cs[1]];
        }
        epilogue_.apply(row, n);
      }
    });
  }

 private:
  PackedMatrix pack_b(const float* b, int64_t rows, int64_t cols) const {
    // op(B) is [k, n]: B itself, or B^T read through strides.
    return trans_b_ ? PackedMatrix::pack(b, cols, rows, 1, cols, gemm_isa().nr)
                    : PackedMatrix::pack(b, rows, cols, cols, 1, gemm_isa().nr);
  }

  float alpha_, beta_;
  bool trans_a_, trans_b_;
  Epilogue epilogue_;
  int threads_;
  PackedMatrix packed_;
  bool has_packed_ = false;
};

}  // namespace

void register_matmul(KernelRegistry& r) {
  auto matmul = [](const KernelInit& init) -> std::unique_ptr<Kernel> { return std::make_unique<MatMulKernel>(init); };
  auto gemm = [](const KernelInit& init) -> std::unique_ptr<Kernel> { return std::make_unique<GemmKernel>(init); };
  TETHER_ADD(r, "MatMul", matmul, float_only);
  TETHER_ADD(r, "Gemm", gemm, float_only);
  TETHER_ADD_IN(r, "ai.tether", "FusedMatMul", matmul, float_only);
  TETHER_ADD_IN(r, "ai.tether", "FusedGemm", gemm, float_only);
}

}  // namespace tether::engine::cpu
