// MatMulInteger, QLinearMatMul, ai.tether MatMulIntegerToFloat and com.microsoft QGemm on the
// integer GEMM: constant B packed once (for the kernel the depth suits), batches folded into
// the rows of one product where B is shared.
#include <algorithm>

#include "engine/cpu/qlinear.h"

namespace tether::engine::cpu::qlinear {

namespace {

// ---- MatMulInteger and QLinearMatMul ------------------------------------------------------------

class IntegerMatMulKernel final : public HostKernel {
 public:
  explicit IntegerMatMulKernel(const KernelInit& init)
      : name_(init.node.describe()),
        s_(slots_of(init.node)),
        a_type_(init.input_dtype(static_cast<size_t>(s_.a))),
        b_type_(init.input_dtype(static_cast<size_t>(s_.b))),
        out_type_(init.output_dtype(0)),
        threads_(init.threads),
        to_float_(init.node.op_type() == "MatMulIntegerToFloat"),
        qgemm_(init.node.op_type() == "QGemm"),
        qgemm_float_(qgemm_ && init.node.input(7) == nullptr),
        trans_b_(init.node.op_type() == "QGemm" && init.node.attr_int("transB", 0) != 0),
        act_(to_float_ ? QActivation{} : QActivation::of(init.node)),
        float_act_(to_float_ ? Epilogue::from_node(init.node) : Epilogue{}) {
    bool all = false;
    std::vector<View> c = constant_views(init, all);
    const ir::Tensor* b = init.constant(static_cast<size_t>(s_.b));
    // B is [K, N], or [N, K] under QGemm's transB.
    const int64_t n = b != nullptr && b->rank() >= 2 ? b->dims()[trans_b_ ? 0 : b->rank() - 1] : kUnknown;
    // Checked now when constant: a bad scale or zero point is the model's fault, found before any run.
    if (all) params<ModelError>(c, s_.y_scale < 0 ? kUnknown : -1, n);
    if (b != nullptr && b->rank() == 2 && (init.node.input(static_cast<size_t>(s_.b_zp)) == nullptr ||
                                           init.constant(static_cast<size_t>(s_.b_zp)) != nullptr)) {
      const View* zp = has(c, s_.b_zp) ? &c[static_cast<size_t>(s_.b_zp)] : nullptr;
      const std::vector<int32_t> z = zero_points(zp);
      const int64_t k = b->dims()[trans_b_ ? 1 : 0];
      check_count<ModelError>(name_, (std::string(s_.b_name) + "_zero_point").c_str(), static_cast<int64_t>(z.size()), n,
                              "per column of b");
      packed_ = QPackedB::pack(b->raw_data(), b_type_ == DType::kInt8, k, n, trans_b_ ? 1 : n, trans_b_ ? k : 1, z.data(),
                               z.size() > 1, qgemm_isa_for(k, a_type_ == DType::kUInt8));
      has_packed_ = true;
    }
  }

  // The parameters; QGemm without y_scale has a float output scaled by a_scale * b_scale[j].
  template <typename Err>
  Params params(const std::vector<View>& in, int64_t rows, int64_t cols) const {
    if (!qgemm_float_) return read_params<Err>(name_, s_, in, rows, cols, "per column of b");
    Slots zps = s_;
    zps.y_scale = -1;
    Params p = read_params<Err>(name_, zps, in, rows, cols, "per column of b");
    const View& as = in[static_cast<size_t>(s_.a_scale)];
    const View& bs = in[static_cast<size_t>(s_.b_scale)];
    check_scale<Err>(name_, as, "a_scale");
    check_scale<Err>(name_, bs, "b_scale");
    if (as.numel() != 1) throw Err(name_ + ": a_scale has " + std::to_string(as.numel()) + " elements, expected 1");
    check_count<Err>(name_, "b_scale", bs.numel(), cols, "per column of b");
    p.scale.resize(static_cast<size_t>(bs.numel()));
    for (size_t j = 0; j < p.scale.size(); ++j) p.scale[j] = scale_at(as, 0) * scale_at(bs, static_cast<int64_t>(j));
    return p;
  }

  bool packs_input(size_t i) const override { return has_packed_ && static_cast<int>(i) == s_.b; }

  int64_t scratch_bytes(const std::vector<View>& in, const std::vector<View>&) const override {
    const View& a = in[static_cast<size_t>(s_.a)];
    const View& b = in[static_cast<size_t>(s_.b)];
    int64_t k = b.rank() == 1 ? b.dims[0] : b.dims[b.rank() - 2], n = b.rank() == 1 ? 1 : b.dims.back();
    if (trans_b_) std::swap(k, n);
    const int64_t rows = a.rank() >= 2 ? a.numel() / std::max<int64_t>(k, 1) : 1;
    return qgemm_scratch_bytes(rows, n, k, threads_) + (has_packed_ ? 0 : QPackedB::bytes_needed(k, n) + 64);
  }

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    const View& av = in[static_cast<size_t>(s_.a)];
    const View& bv = in[static_cast<size_t>(s_.b)];
    std::vector<int64_t> ad = av.dims, bd = has_packed_ ? std::vector<int64_t>{packed_.k(), packed_.n()} : bv.dims;
    if (trans_b_ && !has_packed_) std::swap(bd[0], bd[1]);
    if (ad.size() == 1) ad.insert(ad.begin(), 1);
    if (bd.size() == 1) bd.push_back(1);
    const int64_t m = ad[ad.size() - 2], k = ad.back(), n = bd.back();
    TETHER_CHECK(bd[bd.size() - 2] == k, "MatMulInteger inner dims differ");
    // A per-row zero point of a has one value per row of a (ONNX: "per-row quantization").
    const Params p = params<ArgumentError>(in, s_.y_scale < 0 ? m : -1, n);
    const std::vector<int64_t> a_batch(ad.begin(), ad.end() - 2), b_batch(bd.begin(), bd.end() - 2);
    const std::vector<int64_t> batch = broadcast_dims({&a_batch, &b_batch});
    int64_t batches = 1;
    for (int64_t d : batch) batches *= d;
    const std::vector<int64_t> sa = broadcast_strides(a_batch, batch), sb = broadcast_strides(b_batch, batch);
    auto offset = [&](int64_t idx, const std::vector<int64_t>& st) { return broadcast_offset(idx, batch, st); };
    const size_t esize = elem_bytes(out_type_);
    const View* bias = has(in, s_.bias) ? &in[static_cast<size_t>(s_.bias)] : nullptr;
    const bool scalar_c = qgemm_;  // QGemm's C: one int32 per column, or one value
    if (bias != nullptr && bias->numel() != n && !(scalar_c && bias->numel() == 1))
      throw ArgumentError(name_ + ": the bias has shape " + dims_text(bias->dims) + ", expected [" + std::to_string(n) +
                          "] (one int32 per column of b)" + (scalar_c ? " or one value" : ""));
    QGemmOutput o = output_of(p, out_type_, bias != nullptr ? bias->as<int32_t>() : nullptr, act_);
    if (bias != nullptr) o.bias_per_column = bias->numel() == n;
    if (to_float_) set_float_output(name_, in, n, "per column of b", float_act_, o);
    if (qgemm_float_) {
      o.kind = QGemmOutput::Kind::kFloat32;
      o.scale = p.scale.data();
      o.scale_per_column = p.scale.size() > 1;
    }
    o.row_stride = n;
    o.col_stride = 1;
    std::byte* scratch = ctx.scratch;
    std::byte* pack_space = scratch + (has_packed_ ? 0 : qgemm_scratch_bytes(batches * m, n, k, threads_));
    pack_space = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(pack_space) + 63) / 64 * 64);
    std::vector<int32_t> a_zp = p.a_zp;
    const bool shared_b = std::all_of(b_batch.begin(), b_batch.end(), [](int64_t d) { return d == 1; });
    const bool a_dense = std::all_of(sa.begin(), sa.end(), [](int64_t d) { return d != 0; }) || batch.empty();
    const int64_t group = shared_b && a_dense ? batches : 1;  // batches folded into the rows of one product
    if (a_zp.size() > 1 && group > 1) {
      a_zp.resize(static_cast<size_t>(group * m));
      for (int64_t i = m; i < group * m; ++i) a_zp[static_cast<size_t>(i)] = a_zp[static_cast<size_t>(i % m)];
    }
    for (int64_t bi = 0; bi < batches; bi += group) {
      QPackedB packed = packed_;
      if (!has_packed_) {
        const auto* b = static_cast<const std::byte*>(bv.data) + offset(bi, sb) * k * n;
        packed = QPackedB::pack_into(pack_space, b, b_type_ == DType::kInt8, k, n, trans_b_ ? 1 : n, trans_b_ ? k : 1,
                                     p.b_zp.data(), p.b_zp.size() > 1);
      }
      QGemmA a;
      a.data = static_cast<const std::byte*>(av.data) + offset(bi, sa) * m * k;
      a.lda = k;
      a.is_signed = a_type_ == DType::kInt8;
      a.zero_points = a_zp.data();
      a.per_row = a_zp.size() > 1;
      o.c = static_cast<std::byte*>(out[0].data) + static_cast<int64_t>(esize) * bi * m * n;
      qgemm(ctx, group * m, a, packed, o, scratch);
    }
  }

 private:
  std::string name_;
  Slots s_;
  DType a_type_, b_type_, out_type_;
  int threads_;
  bool to_float_;
  bool qgemm_;        // com.microsoft QGemm
  bool qgemm_float_;  // QGemm without y_scale: float output
  bool trans_b_;      // QGemm's transB: B is [N, K]
  QActivation act_;
  Epilogue float_act_;
  QPackedB packed_;
  bool has_packed_ = false;
};

}  // namespace

std::unique_ptr<Kernel> make_integer_matmul(const KernelInit& init) { return std::make_unique<IntegerMatMulKernel>(init); }

}  // namespace tether::engine::cpu::qlinear
