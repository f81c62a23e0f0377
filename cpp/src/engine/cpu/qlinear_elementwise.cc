// The integer element-wise ops: QLinearAdd (ai.tether from the QDQ pass, com.microsoft from
// onnxruntime's QOperator format, broadcasting), ai.tether QLinearLookup and com.microsoft
// QLinearGlobalAveragePool.
#include <array>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "engine/cpu/qlinear.h"
#include "util/cpu_features.h"
#include "util/multiversion.h"

namespace tether::engine::cpu::qlinear {

namespace {

// ---- QLinearAdd (ai.tether) ---------------------------------------------------------------------

// y = Q(DQ(a) + DQ(b)) [with Relu], computed as the unfused nodes compute it: each operand
// dequantized by a float32 product, a float32 sum, then QuantizeLinear's float32 division and
// round-half-to-even, so the result equals the DequantizeLinear -> Add -> QuantizeLinear it
// replaces bit for bit, in one pass over memory instead of four.
// No multiply-add contraction: the FMA of the AVX2 / AVX-512 copies would round the sum once
// where the unfused nodes round each product.
// QLinearMul (ai.tether) likewise: the two dequantized operands' float32 product. kLa and kLb
// step through a and b: 1, or 0 for an operand broadcast along the run (compile-time, so that
// the loop vectorizes).
template <bool kMul, int kLa, int kLb, typename A, typename B, typename Y>
TETHER_MULTIVERSION __attribute__((optimize("fp-contract=off"))) void add_run(const A* a, const B* b, Y* y, int64_t n, float sa, int32_t za,
                                 float sb, int32_t zb, float sy, int32_t zy, float lo, float hi) {
  for (int64_t i = 0; i < n; ++i) {
    const float va = static_cast<float>(static_cast<int32_t>(a[i * kLa]) - za) * sa;
    const float vb = static_cast<float>(static_cast<int32_t>(b[i * kLb]) - zb) * sb;
    const float v = kMul ? va * vb : va + vb;
    y[i] = static_cast<Y>(requantized(v / sy, lo, hi, zy));
  }
}

class QLinearAddKernel final : public HostKernel {
 public:
  explicit QLinearAddKernel(const KernelInit& init)
      : name_(init.node.describe()), mul_(init.node.op_type() == "QLinearMul"), act_(QActivation::of(init.node)),
        types_{init.input_dtype(0), init.input_dtype(3), init.output_dtype(0)} {
    for (size_t i : {1u, 4u, 6u})
      if (const ir::Tensor* t = init.constant(i)) check_scale<ModelError>(name_, view_of(*t), i == 1 ? "a_scale" : i == 4 ? "b_scale" : "y_scale");
  }

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    for (size_t i : {1u, 2u, 4u, 5u, 6u, 7u})
      if (present(in, i) && in[i].numel() != 1)
        throw ArgumentError(name_ + ": input " + std::to_string(i) + " has " + std::to_string(in[i].numel()) +
                            " elements, expected 1 (QLinearAdd's parameters are per tensor)");
    check_scale<ArgumentError>(name_, in[1], "a_scale");
    check_scale<ArgumentError>(name_, in[4], "b_scale");
    check_scale<ArgumentError>(name_, in[6], "y_scale");

    const float sa = scale_at(in[1], 0), sb = scale_at(in[4], 0), sy = scale_at(in[6], 0);
    // com.microsoft QLinearAdd may omit its zero points (C's is its eighth input, A's and B's in between).
    auto zp = [&](size_t i) { return zero_points(present(in, i) ? &in[i] : nullptr)[0]; };
    const int32_t za = zp(2), zb = zp(5), zy = zp(7);
    const bool i8 = types_[2] == DType::kInt8;
    float lo = static_cast<float>((i8 ? -128 : 0) - zy), hi = static_cast<float>((i8 ? 127 : 255) - zy);
    if (act_.kind == QActivation::Kind::kRelu) lo = std::max(lo, 0.0f);  // Q(Relu(v)) = max(Q(v), zy)
    const int64_t n = out[0].numel();
    auto go = [&](auto a0, auto b0, auto y0) {
      using A = decltype(a0);
      using B = decltype(b0);
      using Y = decltype(y0);
      const A* a = in[0].as<A>();
      const B* b = in[3].as<B>();
      Y* y = out[0].as<Y>();
      auto steps = [&](auto op, const A* as, const B* bs, Y* ys, int64_t count, int64_t la, int64_t lb) {
        constexpr bool kMul = decltype(op)::value;
        if (la == 1 && lb == 1) add_run<kMul, 1, 1, A, B, Y>(as, bs, ys, count, sa, za, sb, zb, sy, zy, lo, hi);
        else if (la == 1) add_run<kMul, 1, 0, A, B, Y>(as, bs, ys, count, sa, za, sb, zb, sy, zy, lo, hi);
        else if (lb == 1) add_run<kMul, 0, 1, A, B, Y>(as, bs, ys, count, sa, za, sb, zb, sy, zy, lo, hi);
        else add_run<kMul, 0, 0, A, B, Y>(as, bs, ys, count, sa, za, sb, zb, sy, zy, lo, hi);
      };
      auto run_span = [&](const A* as, const B* bs, Y* ys, int64_t count, int64_t la, int64_t lb) {
        if (mul_) steps(std::true_type{}, as, bs, ys, count, la, lb);
        else steps(std::false_type{}, as, bs, ys, count, la, lb);
      };
      if (in[0].numel() == n && in[3].numel() == n) {
        parallel(ctx, n, 1 << 14, [&](int64_t i0, int64_t i1) { run_span(a + i0, b + i0, y + i0, i1 - i0, 1, 1); });
        return;
      }
      // Broadcast (com.microsoft QLinearAdd, ai.tether QLinearMul), a row of the output's last
      // dim at a time, each operand stepping by one along it or broadcast (0).
      const BroadcastRows walk(out[0].dims, {&in[0].dims, &in[3].dims});
      const int64_t last = walk.row_length(), la = walk.inner_stride(0), lb = walk.inner_stride(1);
      parallel(ctx, walk.rows(), std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(last, 1)), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) run_span(a + walk.offset(0, r), b + walk.offset(1, r), y + r * last, last, la, lb);
      });
    };
    auto with_y = [&](auto a0, auto b0) {
      if (i8) go(a0, b0, int8_t{});
      else go(a0, b0, uint8_t{});
    };
    auto with_b = [&](auto a0) {
      if (types_[1] == DType::kInt8) with_y(a0, int8_t{});
      else with_y(a0, uint8_t{});
    };
    if (types_[0] == DType::kInt8) with_b(int8_t{});
    else with_b(uint8_t{});
  }

 private:
  std::string name_;
  bool mul_;
  QActivation act_;
  std::array<DType, 3> types_;
};

std::string qlinear_add_check(const KernelInit& init) {
  for (size_t i : {0u, 3u})
    if (!is_8bit(init.input_dtype(i)) || (init.node.input(i + 2) != nullptr && init.input_dtype(i + 2) != init.input_dtype(i)))
      return "input " + std::to_string(i) + " is " + type_text(init.input_dtype(i)) + " with a zero point of " +
             type_text(init.input_dtype(i + 2)) + "; " + init.node.op_type() + " runs int8 and uint8 with zero points of their type";
  for (size_t i : {1u, 4u, 6u})
    if (init.input_dtype(i) != DType::kFloat32 && init.input_dtype(i) != DType::kFloat16)
      return "input " + std::to_string(i) + " (a scale) is " + type_text(init.input_dtype(i)) + "; expected float32";
  if (!is_8bit(init.output_dtype(0))) return "y is " + type_text(init.output_dtype(0)) + "; expected int8 or uint8";
  if (QActivation::of(init.node).kind == QActivation::Kind::kClip) return init.node.op_type() + " applies Relu only";
  return "";
}

// ---- QLinearGlobalAveragePool (com.microsoft) ----------------------------------------------------

// The mean of each channel's positions, requantized: s = sum(x) - count * x_zp (exact int64),
// y = round_half_even(clamp(float(s) * (x_scale / (y_scale * count)), lo - y_zp, hi - y_zp)) + y_zp.
class QLinearGlobalAveragePoolKernel final : public HostKernel {
 public:
  explicit QLinearGlobalAveragePoolKernel(const KernelInit& init)
      : name_(init.node.describe()), last_(init.node.attr_int("channels_last", 0) != 0),
        types_{init.input_dtype(0), init.output_dtype(0)} {}

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    for (size_t i : {1u, 2u, 3u, 4u})
      if (present(in, i) && in[i].numel() != 1)
        throw ArgumentError(name_ + ": input " + std::to_string(i) + " has " + std::to_string(in[i].numel()) +
                            " elements, expected 1 (the parameters are per tensor)");
    check_scale<ArgumentError>(name_, in[1], "x_scale");
    check_scale<ArgumentError>(name_, in[3], "y_scale");
    const View& x = in[0];
    const int64_t n = x.dims[0], c = last_ ? x.dims.back() : x.dims[1];
    const int64_t count = n * c == 0 ? 0 : x.numel() / (n * c);
    const int32_t xz = zero_points(present(in, 2) ? &in[2] : nullptr)[0];
    const int32_t yz = zero_points(present(in, 4) ? &in[4] : nullptr)[0];
    const float scale = scale_at(in[1], 0) / (scale_at(in[3], 0) * static_cast<float>(count));
    const bool y8 = types_[1] == DType::kInt8;
    const float lo = static_cast<float>((y8 ? -128 : 0) - yz), hi = static_cast<float>((y8 ? 127 : 255) - yz);
    auto value = [&](int64_t img, int64_t ch, int64_t i) -> int64_t {
      const int64_t at = last_ ? (img * count + i) * c + ch : (img * c + ch) * count + i;
      return types_[0] == DType::kInt8 ? x.as<int8_t>()[at] : x.as<uint8_t>()[at];
    };
    parallel(ctx, n * c, 1, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t img = p / c, ch = p % c;
        int64_t sum = 0;
        for (int64_t i = 0; i < count; ++i) sum += value(img, ch, i);
        const int32_t q = requantized(static_cast<float>(sum - count * xz) * scale, lo, hi, yz);
        if (y8) out[0].as<int8_t>()[p] = static_cast<int8_t>(q);
        else out[0].as<uint8_t>()[p] = static_cast<uint8_t>(q);
      }
    });
  }

 private:
  std::string name_;
  bool last_;
  std::array<DType, 2> types_;
};

std::string qlinear_gap_check(const KernelInit& init) {
  if (!is_8bit(init.input_dtype(0)) || init.output_dtype(0) != init.input_dtype(0))
    return "X is " + type_text(init.input_dtype(0)) + " and Y " + type_text(init.output_dtype(0)) +
           "; QLinearGlobalAveragePool runs int8 and uint8, Y of X's type";
  for (size_t i : {1u, 3u})
    if (init.input_dtype(i) != DType::kFloat32 && init.input_dtype(i) != DType::kFloat16)
      return "input " + std::to_string(i) + " (a scale) is " + type_text(init.input_dtype(i)) + "; expected float32";
  return "";
}

// ---- QLinearLookup (ai.tether) ------------------------------------------------------------------

// y[i] = table[x[i]], 8 bytes a word.
void lookup_words(const uint8_t* x, const std::array<uint8_t, 256>& table, uint8_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = 0, r = 0;
    std::memcpy(&v, x + i, 8);
    for (int b = 0; b < 64; b += 8) r |= static_cast<uint64_t>(table[(v >> b) & 0xff]) << b;
    std::memcpy(y + i, &r, 8);
  }
  for (; i < n; ++i) y[i] = table[x[i]];
}

#if defined(__x86_64__)
// 64 bytes at once: two two-register byte permutes (vpermi2b) look up the low and the high half
// of the table by a byte's low 7 bits, its top bit picks between them.
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) void lookup_vbmi(const uint8_t* x,
                                                                        const std::array<uint8_t, 256>& table,
                                                                        uint8_t* y, int64_t n) {
  const __m512i t0 = _mm512_loadu_si512(table.data()), t1 = _mm512_loadu_si512(table.data() + 64);
  const __m512i t2 = _mm512_loadu_si512(table.data() + 128), t3 = _mm512_loadu_si512(table.data() + 192);
  for (int64_t i = 0; i < n; i += 64) {
    const __mmask64 live = n - i >= 64 ? ~__mmask64{0} : (__mmask64{1} << (n - i)) - 1;
    const __m512i v = _mm512_maskz_loadu_epi8(live, x + i);
    const __m512i lo = _mm512_permutex2var_epi8(t0, v, t1), hi = _mm512_permutex2var_epi8(t2, v, t3);
    _mm512_mask_storeu_epi8(y + i, live, _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), lo, hi));
  }
}
#endif

// Y[i] = table[X[i]'s byte]: passes/qdq_lookup.cc computed the table with this engine's kernels
// of the DequantizeLinear -> op -> QuantizeLinear chain it replaces. Any layout.
class QLinearLookupKernel final : public HostKernel {
 public:
  explicit QLinearLookupKernel(const KernelInit& init) : name_(init.node.describe()) {
#if defined(__x86_64__)
    if (util::cpu_features().avx512_vbmi) lookup_ = lookup_vbmi;
#endif
  }

  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override {
    if (in[1].numel() != 256)
      throw ArgumentError(name_ + ": the table has " + std::to_string(in[1].numel()) + " elements, expected 256");
    const auto* x = static_cast<const uint8_t*>(in[0].data);
    auto* y = static_cast<uint8_t*>(out[0].data);
    std::array<uint8_t, 256> table{};  // a copy no store to y can alias
    std::memcpy(table.data(), in[1].data, table.size());
    parallel(ctx, out[0].numel(), 1 << 15, [&](int64_t i0, int64_t i1) { lookup_(x + i0, table, y + i0, i1 - i0); });
  }

 private:
  std::string name_;
  void (*lookup_)(const uint8_t*, const std::array<uint8_t, 256>&, uint8_t*, int64_t) = lookup_words;
};

std::string qlinear_lookup_check(const KernelInit& init) {
  if (!is_8bit(init.input_dtype(0)) || !is_8bit(init.input_dtype(1)) || init.output_dtype(0) != init.input_dtype(1))
    return "X is " + type_text(init.input_dtype(0)) + " and the table " + type_text(init.input_dtype(1)) +
           "; QLinearLookup maps int8 or uint8 to the table's int8 or uint8";
  return "";
}

}  // namespace

void register_qlinear_elementwise(KernelRegistry& r) {
  auto add = [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<QLinearAddKernel>(i); };
  TETHER_ADD_IN(r, "ai.tether", "QLinearAdd", add, qlinear_add_check);
  TETHER_ADD_IN(r, "ai.tether", "QLinearMul", add, qlinear_add_check);
  // onnxruntime's QOperator format: broadcasting and optional zero points; the float
  // arithmetic of DequantizeLinear -> Add -> QuantizeLinear.
  TETHER_ADD_IN(r, "com.microsoft", "QLinearAdd", add, qlinear_add_check);
  TETHER_ADD_IN(r, "ai.tether", "QLinearLookup",
        [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<QLinearLookupKernel>(i); },
        qlinear_lookup_check);
  TETHER_ADD_IN(r, "com.microsoft", "QLinearGlobalAveragePool",
        [](const KernelInit& i) -> std::unique_ptr<Kernel> { return std::make_unique<QLinearGlobalAveragePoolKernel>(i); },
        qlinear_gap_check);
}

}  // namespace tether::engine::cpu::qlinear
