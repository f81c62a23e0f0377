// Integer GEMM for quantized models: int32 sums of (A - a_zero) x (B - b_zero) with A the
// activations (uint8 or int8) and B the weights (int8 or uint8, packed once), then an epilogue
// that stores the sums as int32, requantizes them to int8 / uint8, or dequantizes them to float.
//
// Every input pair is computed as uint8 x int8, the pair the VNNI instruction (vpdpbusd)
// multiplies: an int8 A is stored as a + 128 with its zero point moved by 128, a uint8 B as
// b - 128 likewise. The sums are exact in int32 (no saturating step on any ISA) for k below
// 2^31 / (255 * 255); the zero points are applied after the products, from the row sums of A
// and the column sums of B:
//   sum_p (a - za)(b - zb) = sum_p a b - za sum_p b - zb sum_p a + k za zb.
//
// Kernel names follow XNNPACK's grammar: qs8_gemm_<MR>x<NR>__<isa>.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/cpu/cpu.h"

namespace tether::engine::cpu {

struct QGemmIsa;

/// The integer GEMM micro-kernel for this machine (AMX, avx512 VNNI, AVX-VNNI, AVX2, generic;
/// see util::cpu_features, which TETHER_ISA caps).
const QGemmIsa& qgemm_isa();
/// The kernel for a product of depth k: qgemm_isa(), except that AMX (which pads the depth to
/// whole tiles of 64 and so copies A) gives way to the next kernel when k < 64 and A could be
/// read in place (uint8 rows of a depth the next kernel reads unpadded).
const QGemmIsa& qgemm_isa_for(int64_t k, bool a_in_place);
/// Every integer GEMM kernel this machine can run, the chosen one first (for tests).
std::vector<const QGemmIsa*> qgemm_isas();
/// The kernel's name, "qs8_gemm_<MR>x<NR>__<isa>".
std::string qgemm_isa_name(const QGemmIsa& isa);

/// B [k, n] (the weights) packed for one ISA's micro-kernel, with its zero points and column
/// sums, 64-byte aligned. Packed once when a kernel is made (or per run into scratch for a
/// B that is not constant).
class QPackedB {
 public:
  QPackedB() = default;
  /// Packs B where element (p, j) is src[p * row_stride + j * col_stride], int8 when
  /// `is_signed` else uint8. `zero_points` holds n values (`per_column`) or one.
  static QPackedB pack(const void* src, bool is_signed, int64_t k, int64_t n, int64_t row_stride, int64_t col_stride,
                       const int32_t* zero_points, bool per_column, const QGemmIsa& isa = qgemm_isa());
  /// As pack, into caller memory of bytes_needed(k, n, isa) bytes, 64-byte aligned: the result
  /// points into it.
  static QPackedB pack_into(void* storage, const void* src, bool is_signed, int64_t k, int64_t n, int64_t row_stride,
                            int64_t col_stride, const int32_t* zero_points, bool per_column,
                            const QGemmIsa& isa = qgemm_isa());
  static int64_t bytes_needed(int64_t k, int64_t n, const QGemmIsa& isa = qgemm_isa());

  int64_t k() const { return k_; }
  int64_t n() const { return n_; }
  const QGemmIsa* isa() const { return isa_; }
  /// The packed panels (layout private to the ISA's kernel).
  const void* data() const { return data_; }
  /// n zero points of B as stored (shifted by -128 for a uint8 B).
  const int32_t* zero_points() const { return zero_points_; }
  /// n sums over p of B(p, j) as stored.
  const int32_t* column_sums() const { return column_sums_; }
  /// True when all n zero points are equal (a per-tensor zero point, or equal per column ones).
  bool uniform_zero_point() const { return uniform_zero_point_; }

 private:
  std::shared_ptr<std::byte> storage_;
  void* data_ = nullptr;
  int32_t* zero_points_ = nullptr;
  int32_t* column_sums_ = nullptr;
  int64_t k_ = 0, n_ = 0;
  bool uniform_zero_point_ = true;
  const QGemmIsa* isa_ = nullptr;
};

/// A [m, k] (the activations). Either row-major (element (i, p) at data[i * lda + p]), or
/// produced on demand by `rows`: rows(ctx, i0, count, dst) writes rows [i0, i0 + count) of A,
/// row r of them at dst + r * k, as the int8 / uint8 values of A (an im2col gather).
struct QGemmA {
  const void* data = nullptr;
  int64_t lda = 0;
  std::function<void(const RunContext& ctx, int64_t i0, int64_t count, void* dst)> rows;
  bool is_signed = false;           ///< int8 when true, else uint8
  const int32_t* zero_points = nullptr;  ///< m values when per_row, else one
  bool per_row = false;
};

/// What happens to the int32 sum s of element (i, j) of C:
/// - kInt32: s + bias[j] stored (s alone when bias is nullptr);
/// - kInt8 / kUInt8: v = float(s + bias[j]) * scale[j], clamped to [lo - zero_point,
///   hi - zero_point], rounded half to even, plus zero_point (the requantization of
///   QLinearConv and QLinearMatMul, as onnxruntime computes it);
/// - kFloat32: float(s + bias[j]) * scale[j] + float_bias[j], then `act` (a dequantized output).
/// bias (int32), scale and float_bias each hold n values, or one when the matching
/// `*_per_column` is false; bias and float_bias may be nullptr. Element (i, j) is stored at
/// c + (i * row_stride + j * col_stride) elements of its type. The sums and bias add with
/// int32 wrap-around; scales are finite, and lo - zero_point and hi - zero_point lie within
/// +-2^22 (TETHER_CHECK).
struct QGemmOutput {
  enum class Kind { kInt32, kInt8, kUInt8, kFloat32 };
  Kind kind = Kind::kInt32;
  void* c = nullptr;
  int64_t row_stride = 0, col_stride = 1;
  const int32_t* bias = nullptr;
  bool bias_per_column = true;
  const float* scale = nullptr;
  bool scale_per_column = false;
  const float* float_bias = nullptr;
  bool float_bias_per_column = true;
  int32_t zero_point = 0;
  int32_t lo = 0, hi = 0;  ///< the output type's range, or narrower (a fused Relu or Clip)
  Epilogue act;            ///< kFloat32 only
};

/// Bytes of scratch qgemm needs on `threads` threads for an m x n x k product (with any of
/// qgemm_isas()' kernels).
int64_t qgemm_scratch_bytes(int64_t m, int64_t n, int64_t k, int threads);

/// C = (A - a_zero) @ (B - b_zero) as int32 sums, then `out`'s epilogue. Runs in parallel on
/// the context's pool; `scratch` holds qgemm_scratch_bytes(m, n, k, threads) bytes, 64-byte
/// aligned, for at least the pool's threads. A's `rows` function is called from the task's
/// thread with a context without a pool (it must not start parallel work).
void qgemm(const RunContext& ctx, int64_t m, const QGemmA& a, const QPackedB& b, const QGemmOutput& out,
           std::byte* scratch);

}  // namespace tether::engine::cpu
