// com.microsoft MatMulNBits, float32 A, 4- and 8-bit weights: Y = A @ dequantize(B)^T + bias.
//
// The kernel keeps B packed as the model stores it (4 or 8 bits a weight) and turns each
// block's scale and zero point into {scale, scale * zero_point} once. A few rows (decoding one
// token at a time) run as matrix-vector products over the packed codes, memory-bound on B;
// more rows run the float GEMM, whose B blocks are dequantized as it packs them.
#include "engine/cpu/matmul_nbits.h"

#include <algorithm>

#include "engine/cpu/gemm.h"
#include "util/cpu_features.h"

namespace tether::engine::cpu {

namespace {

// Up to this many rows, one pass over B per row beats dequantizing B for the GEMM.
constexpr int64_t kGemvMaxRows = 4;

// A code of column `col`, position `k` in its block `blob` (bytes of one block of one column).
inline int code_at(const uint8_t* block, int bits, int64_t k) {
  if (bits == 8) return block[k];
  const uint8_t byte = block[k / 2];
  return (k & 1) != 0 ? byte >> 4 : byte & 0x0F;
}

template <int kBits>
void gemv_generic(const NBitsGemv& p, int64_t n0, int64_t n1) {
  const int64_t blob = p.block_size * kBits / 8, col_bytes = p.k_blocks * blob;
  for (int64_t r = 0; r < p.m; ++r) {
    const float* a = p.a + r * p.a_stride;
    const float* sums = p.a_sums + r * p.k_blocks;
    for (int64_t j = n0; j < n1; ++j) {
      float acc = 0.0f, corr = 0.0f;
      for (int64_t blk = 0; blk < p.k_blocks; ++blk) {
        const float* ab = a + blk * p.block_size;
        const uint8_t* bb = p.b + j * col_bytes + blk * blob;
        float dot = 0.0f;
        if constexpr (kBits == 4) {
          // Group g of 16 values: A holds the 8 even positions, then the 8 odd ones.
          for (int64_t g = 0; g < p.block_size; g += 16)
            for (int64_t i = 0; i < 8; ++i) {
              const uint8_t byte = bb[g / 2 + i];
              dot += static_cast<float>(byte & 0x0F) * ab[g + i] + static_cast<float>(byte >> 4) * ab[g + 8 + i];
            }
        } else {
          for (int64_t i = 0; i < p.block_size; ++i) dot += static_cast<float>(bb[i]) * ab[i];
        }
        const float* prm = p.params + (j * p.k_blocks + blk) * 2;
        acc += dot * prm[0];
        corr += prm[1] * sums[blk];
      }
      p.y[r * p.n + j] = acc - corr + (p.bias != nullptr ? p.bias[j] : 0.0f);
    }
  }
}

class MatMulNBitsKernel final : public HostKernel {
 public:
  explicit MatMulNBitsKernel(const KernelInit& init)
      : name_(init.node.describe()),
        k_(init.node.attr_int("K", 0)),
        n_(init.node.attr_int("N", 0)),
        bits_(static_cast<int>(init.node.attr_int("bits", 4))),
        bs_(init.node.attr_int("block_size", 0)),
        threads_(init.threads) {
    kb_ = (k_ + bs_ - 1) / bs_;
    blob_ = bs_ * bits_ / 8;
    const ir::Tensor* b = init.constant(1);
    empty_ = b->num_elements() == 0;
    if (empty_) return;
    TETHER_CHECK(b->num_elements() == n_ * kb_ * blob_, "MatMulNBits: B's size was not validated");
    const auto* bytes = static_cast<const uint8_t*>(b->raw_data());
    b_.assign(bytes, bytes + b->num_elements());
    read_params(*init.constant(2), init.constant(3));
#if defined(__x86_64__)
    const bool avx2 = util::cpu_features().avx2;
    gemv_ = bits_ == 4 ? (avx2 ? f32_qb4w_gemv__avx2 : f32_qb4w_gemv__generic)
                       : (avx2 ? f32_qb8w_gemv__avx2 : f32_qb8w_gemv__generic);
    dequant_ = bits_ == 4 ? (avx2 ? f32_qb4w_dequant__avx2 : f32_qb4w_dequant__generic)
                          : (avx2 ? f32_qb8w_dequant__avx2 : f32_qb8w_dequant__generic);
#else  // the AVX2 file is x86's alone
    gemv_ = bits_ == 4 ? f32_qb4w_gemv__generic : f32_qb8w_gemv__generic;
    dequant_ = bits_ == 4 ? f32_qb4w_dequant__generic : f32_qb8w_dequant__generic;
#endif
  }

  bool packs_input(size_t i) const override { return i >= 1 && i <= 3; }

  int64_t scratch_bytes(const std::vector<View>& in, const std::vector<View>&) const override {
    const int64_t m = rows_of(in[0]);
    if (empty_ || m == 0) return 0;
    const int64_t floats = m <= kGemvMaxRows ? m * (kb_ * bs_ + kb_) : sgemm_scratch_floats(m, n_, k_, threads_);
    return floats * static_cast<int64_t>(sizeof(float));
  }

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    const View& a = in[0];
    if (a.rank() == 0 || a.dims.back() != k_)
      throw ShapeError(name_ + ": A has " + (a.rank() == 0 ? std::string("no dims") : "last dim " + std::to_string(a.dims.back())) +
                       "; it must be K = " + std::to_string(k_));
    const float* bias = present(in, 5) ? in[5].as<float>() : nullptr;
    if (bias != nullptr && in[5].numel() != n_)
      throw ShapeError(name_ + ": bias has " + std::to_string(in[5].numel()) + " values; it must have N = " +
                       std::to_string(n_));
    const int64_t m = rows_of(a);
    float* y = out[0].as<float>();
    TETHER_CHECK(out[0].numel() == m * n_, "MatMulNBits: planned output size differs");
    if (m == 0) return;
    if (empty_) {  // an omitted projection: the bias, or zeros
      for (int64_t r = 0; r < m; ++r)
        for (int64_t j = 0; j < n_; ++j) y[r * n_ + j] = bias != nullptr ? bias[j] : 0.0f;
      return;
    }
    if (m <= kGemvMaxRows)
      run_gemv(ctx, a.as<float>(), m, bias, y);
    else
      run_gemm(ctx, a.as<float>(), m, bias, y);
  }

 private:
  int64_t rows_of(const View& a) const { return a.rank() == 0 || k_ == 0 ? 0 : a.numel() / k_; }

  // {scale, scale * zero_point} per column and block, from float32 scales and uint8 (packed) or
  // float32 zero points, or the default 2^(bits - 1).
  void read_params(const ir::Tensor& scales, const ir::Tensor* zp) {
    const float* s = scales.data<float>();
    const int64_t zp_cols = (kb_ * bits_ + 7) / 8;
    params_.resize(static_cast<size_t>(n_ * kb_ * 2));
    for (int64_t j = 0; j < n_; ++j)
      for (int64_t blk = 0; blk < kb_; ++blk) {
        float z = static_cast<float>(1 << (bits_ - 1));
        if (zp != nullptr && zp->dtype() == DType::kUInt8)
          z = static_cast<float>(code_at(zp->data<uint8_t>() + j * zp_cols, bits_, blk));
        else if (zp != nullptr)
          z = zp->data<float>()[j * kb_ + blk];
        const float scale = s[j * kb_ + blk];
        params_[static_cast<size_t>((j * kb_ + blk) * 2)] = scale;
        params_[static_cast<size_t>((j * kb_ + blk) * 2 + 1)] = scale * z;
      }
  }

  void run_gemv(const RunContext& ctx, const float* a, int64_t m, const float* bias, float* y) const {
    auto* prepared = reinterpret_cast<float*>(ctx.scratch);
    const int64_t stride = kb_ * bs_;
    float* sums = prepared + m * stride;
    for (int64_t r = 0; r < m; ++r)
      prepare_nbits_row(a + r * k_, k_, bs_, bits_, prepared + r * stride, sums + r * kb_);
    NBitsGemv p;
    p.a = prepared;
    p.a_sums = sums;
    p.a_stride = stride;
    p.m = m;
    p.b = b_.data();
    p.params = params_.data();
    p.k_blocks = kb_;
    p.block_size = bs_;
    p.n = n_;
    p.bias = bias;
    p.y = y;
    // Whole groups of 4 columns per task (the AVX2 kernel's width), at least ~64 KiB of B each.
    const int64_t groups = (n_ + 3) / 4;
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, 4 * kb_ * blob_));
    parallel(ctx, groups, grain, [&](int64_t g0, int64_t g1) { gemv_(p, g0 * 4, std::min(n_, g1 * 4)); });
  }

  void run_gemm(const RunContext& ctx, const float* a, int64_t m, const float* bias, float* y) const {
    GemmB source;
    source.pack = [this](const RunContext&, int64_t, int64_t k0, int64_t kc, int64_t n0, int64_t nc, float* dst) {
      dequantize_panels(k0, kc, n0, nc, dst);
    };
    GemmA lhs;
    lhs.data = a;
    lhs.lda = k_;
    GemmEpilogue ep;
    ep.col_bias = bias;
    sgemm(ctx, m, n_, k_, lhs, source, y, n_, ep, reinterpret_cast<float*>(ctx.scratch));
  }

  // Rows [k0, k0 + kc) and columns [n0, n0 + nc) of the dequantized B^T, in sgemm's panels of
  // nr columns (zeros past column n0 + nc). Each column's codes are decoded along K (where
  // they are contiguous) into a small tile, then the tile is written row by row.
  void dequantize_panels(int64_t k0, int64_t kc, int64_t n0, int64_t nc, float* dst) const {
    if (bits_ == 4)
      dequantize_panels_of<4>(k0, kc, n0, nc, dst);
    else
      dequantize_panels_of<8>(k0, kc, n0, nc, dst);
  }

  template <int kBits>
  void dequantize_panels_of(int64_t k0, int64_t kc, int64_t n0, int64_t nc, float* dst) const {
    constexpr int64_t kChunk = 64;
    constexpr int kMaxNr = 32;
    const int nr = gemm_isa().nr;
    TETHER_CHECK(nr <= kMaxNr && nr % 8 == 0, "MatMulNBits: unexpected GEMM panel width");
    const uint8_t* blocks[kMaxNr];
    float scale[kMaxNr], shift[kMaxNr];
    for (int64_t j0 = 0; j0 < nc; j0 += nr) {
      float* panel = dst + (j0 / nr) * kc * nr;
      const int cols = static_cast<int>(std::min<int64_t>(nr, nc - j0));
      for (int64_t p0 = 0; p0 < kc;) {
        // A chunk of K inside one quantization block (K blocks start at multiples of 256, and
        // blocks at multiples of 16: `from` stays a multiple of 8).
        const int64_t k = k0 + p0, blk = k / bs_;
        const int64_t len = std::min({kChunk, kc - p0, (blk + 1) * bs_ - k});
        for (int c = 0; c < cols; ++c) {
          const int64_t col = n0 + j0 + c;
          blocks[c] = b_.data() + (col * kb_ + blk) * blob_;
          scale[c] = params_[static_cast<size_t>((col * kb_ + blk) * 2)];
          shift[c] = params_[static_cast<size_t>((col * kb_ + blk) * 2 + 1)];
        }
        dequant_(blocks, scale, shift, cols, k - blk * bs_, len, panel + p0 * nr, nr);
        p0 += len;
      }
    }
  }

  std::string name_;
  int64_t k_, n_;
  int bits_;
  int64_t bs_, kb_ = 0, blob_ = 0;
  int threads_;
  bool empty_ = false;
  std::vector<uint8_t> b_;
  std::vector<float> params_;
  NBitsGemvFn gemv_ = nullptr;
  NBitsDequantFn dequant_ = nullptr;
};

std::string nbits_check(const KernelInit& init) {
  const ir::Node& n = init.node;
  if (init.input_dtype(0) != DType::kFloat32)
    return "A (input 0) is " + std::string(ir::dtype_name(init.input_dtype(0))) +
           "; the cpu engine runs MatMulNBits on float32 A";
  if (const int64_t bits = n.attr_int("bits", 4); bits != 4 && bits != 8)
    return "bits = " + std::to_string(bits) + " is not supported (the cpu engine runs 4- and 8-bit weights)";
  if (const int64_t w = n.attr_int("weight_prepacked", 0); w != 0)
    return "weight_prepacked = " + std::to_string(w) + " (a device's own layout of B) is not supported";
  if (n.inputs().size() > 4 && n.input(4) != nullptr)
    return "g_idx (input 4) is not supported (a deprecated reordering of K; reorder the weights offline)";
  static const char* const kNames[] = {"A", "B", "scales", "zero_points"};
  for (size_t i = 1; i <= 3; ++i)
    if (i < n.inputs().size() && n.input(i) != nullptr && init.constant(i) == nullptr)
      return std::string(kNames[i]) + " (input " + std::to_string(i) + ") is not a constant; the cpu engine runs " +
             "MatMulNBits with B, scales and zero_points as initializers";
  if (n.inputs().size() > 5 && n.input(5) != nullptr && init.input_dtype(5) != DType::kFloat32)
    return "bias (input 5) is " + std::string(ir::dtype_name(init.input_dtype(5))) + "; it must be float32";
  return "";
}

std::unique_ptr<Kernel> make_nbits(const KernelInit& init) { return std::make_unique<MatMulNBitsKernel>(init); }

}  // namespace

void f32_qb4w_gemv__generic(const NBitsGemv& p, int64_t n0, int64_t n1) { gemv_generic<4>(p, n0, n1); }
void f32_qb8w_gemv__generic(const NBitsGemv& p, int64_t n0, int64_t n1) { gemv_generic<8>(p, n0, n1); }

template <int kBits>
void dequant_generic(const uint8_t* const* blocks, const float* scale, const float* shift, int cols, int64_t from,
                     int64_t len, float* panel, int nr) {
  for (int64_t i = 0; i < len; ++i) {
    float* row = panel + i * nr;
    for (int c = 0; c < cols; ++c)
      row[c] = static_cast<float>(code_at(blocks[c], kBits, from + i)) * scale[c] - shift[c];
    for (int c = cols; c < nr; ++c) row[c] = 0.0f;
  }
}

void f32_qb4w_dequant__generic(const uint8_t* const* blocks, const float* scale, const float* shift, int cols,
                               int64_t from, int64_t len, float* panel, int nr) {
  dequant_generic<4>(blocks, scale, shift, cols, from, len, panel, nr);
}
void f32_qb8w_dequant__generic(const uint8_t* const* blocks, const float* scale, const float* shift, int cols,
                               int64_t from, int64_t len, float* panel, int nr) {
  dequant_generic<8>(blocks, scale, shift, cols, from, len, panel, nr);
}

void prepare_nbits_row(const float* a, int64_t k, int64_t block_size, int bits, float* dst, float* sums) {
  const int64_t k_blocks = (k + block_size - 1) / block_size, padded = k_blocks * block_size;
  auto at = [&](int64_t i) { return i < k ? a[i] : 0.0f; };
  for (int64_t g = 0; g < padded; g += 16)
    for (int64_t i = 0; i < 16; ++i) {
      // 4 bits: a byte's low nibble is the even position, its high nibble the odd one.
      const int64_t from = bits == 4 ? g + (i < 8 ? 2 * i : 2 * (i - 8) + 1) : g + i;
      dst[g + i] = at(from);
    }
  for (int64_t blk = 0; blk < k_blocks; ++blk) {
    double s = 0.0;
    for (int64_t i = blk * block_size; i < std::min(k, (blk + 1) * block_size); ++i) s += a[i];
    sums[blk] = static_cast<float>(s);
  }
}

void register_matmul_nbits(KernelRegistry& r) {
  TETHER_ADD_IN(r, "com.microsoft", "MatMulNBits", make_nbits, nbits_check);
}

}  // namespace tether::engine::cpu
