// Shared pieces of the CPU backend: family registration, type dispatch, broadcasting.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "engine/kernel.h"
#include "ops/conv_geometry.h"
#include "util/multiversion.h"
#include "util/thread_pool.h"

namespace tether::engine::cpu {

using ir::DType;

// Families (one file each under cpp/src/engine/cpu/).
void register_elementwise(KernelRegistry& r);
void register_matmul(KernelRegistry& r);
void register_conv(KernelRegistry& r);
void register_pool(KernelRegistry& r);
void register_norm(KernelRegistry& r);
void register_reduce(KernelRegistry& r);
void register_shape(KernelRegistry& r);
void register_misc(KernelRegistry& r);
void register_scatter(KernelRegistry& r);
void register_resize(KernelRegistry& r);
void register_rnn(KernelRegistry& r);
void register_einsum(KernelRegistry& r);
void register_quantize(KernelRegistry& r);
void register_qlinear(KernelRegistry& r);
void register_dynamic(KernelRegistry& r);
void register_control(KernelRegistry& r);
void register_attention(KernelRegistry& r);
void register_pool_nhwc(KernelRegistry& r);
void register_ms_norm(KernelRegistry& r);
void register_ms_attention(KernelRegistry& r);

/// Float max pooling channels last (ai.tether MaxPool, channels_last = 1), and its support
/// check (pool_nhwc.cc; the 8-bit form lives in pool.cc).
std::unique_ptr<Kernel> make_nhwc_max_pool(const KernelInit& init);
std::string nhwc_max_pool_check(const KernelInit& init);

/// The activation a fused kernel applies to its output in place (ai.tether fused ops carry it
/// in the attributes `activation` and `activation_params`).
struct Epilogue {
  enum class Act { kNone, kRelu, kLeakyRelu, kClip, kSigmoid, kHardSigmoid, kHardSwish, kGelu, kGeluTanh, kSilu, kTanh };
  Act act = Act::kNone;
  float alpha = 0.0f, beta = 0.0f;  ///< LeakyRelu alpha; Clip min and max; HardSigmoid alpha and beta

  /// The epilogue a node asks for; throws ModelError naming the node for an unknown activation.
  static Epilogue from_node(const ir::Node& node);
  /// Applies the activation to n floats in place.
  void apply(float* data, int64_t n) const;
  /// Adds n floats of `sum` (none when nullptr) to `data`, then applies the activation: the
  /// epilogue of a convolution with a residual summand.
  void apply(float* data, const float* sum, int64_t n) const;
  /// The epilogue of a rows x cols tile of C (row stride ldc): adds row_bias[r], col_bias[q]
  /// and sum[r * ldc + q] (each when not nullptr; sum is laid out as C), then the activation.
  void apply_tile(float* c, int64_t ldc, int64_t rows, int64_t cols, const float* row_bias, const float* col_bias,
                  const float* sum) const;
  bool empty() const { return act == Act::kNone; }
  /// True when the activation is none or a clamp (Relu: [0, inf), Clip: [alpha, beta]), which
  /// a GEMM micro-kernel applies before its store; `clamp`, `lo` and `hi` then say which.
  bool as_clamp(bool& clamp, float& lo, float& hi) const {
    clamp = act == Act::kRelu || act == Act::kClip;
    lo = act == Act::kRelu ? 0.0f : alpha;
    hi = act == Act::kRelu ? __builtin_inff() : beta;
    return act == Act::kNone || clamp;
  }
};

/// The activations Epilogue knows, as ONNX op names ("Relu", "Clip", ..., "Gelu" with
/// approximate=tanh written "GeluTanh", "SiLU" for x * sigmoid(x)).
bool is_epilogue_activation(std::string_view name);

/// Support check for ops whose every present input is float32.
std::string float_only(const KernelInit& init);

/// Calls f(T{}) with the C++ type of `t`, for the numeric types kernels compute in
/// (float32/64, int8..int64, uint8..uint64, bool as uint8). Returns false for others.
template <typename F>
bool dispatch_numeric(DType t, F&& f) {
  switch (t) {
    case DType::kFloat32: f(float{}); return true;
    case DType::kFloat64: f(double{}); return true;
    case DType::kInt8: f(int8_t{}); return true;
    case DType::kInt16: f(int16_t{}); return true;
    case DType::kInt32: f(int32_t{}); return true;
    case DType::kInt64: f(int64_t{}); return true;
    case DType::kUInt8: f(uint8_t{}); return true;
    case DType::kUInt16: f(uint16_t{}); return true;
    case DType::kUInt32: f(uint32_t{}); return true;
    case DType::kUInt64: f(uint64_t{}); return true;
    case DType::kBool: f(uint8_t{}); return true;
    default: return false;
  }
}

/// Support check for ops that move elements without reading them: any type of whole bytes.
std::string fixed_size(const KernelInit& init);

/// Bytes per element of `t` (a type of whole bytes).
// A float or double `v` as integer type T: NaN as `nan`, values past T's range saturated to
// its ends (a plain cast of those is undefined behaviour).
template <typename T, typename F>
T saturate(F v, T nan = T{0}) {
  if (std::isnan(v)) return nan;
  if (v <= static_cast<F>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
  if (v >= static_cast<F>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
  return static_cast<T>(v);
}

inline size_t elem_bytes(DType t) { return static_cast<size_t>(ir::dtype_bits(t) / 8); }

/// dst[c * dst_ld + r] = src[r * src_ld + c] for r < rows, c < cols (leading dims in elements),
/// elements of `esize` bytes: 1, 2, 4 or 8.
void transpose_2d(const std::byte* src, int64_t src_ld, std::byte* dst, int64_t dst_ld, int64_t rows, int64_t cols,
                  size_t esize);

/// Copies element `from` of src to element `to` of dst, for any element size.
inline void copy_elem(std::byte* dst, int64_t to, const std::byte* src, int64_t from, size_t size) {
  switch (size) {
    case 1: dst[to] = src[from]; break;
    case 2: reinterpret_cast<uint16_t*>(dst)[to] = reinterpret_cast<const uint16_t*>(src)[from]; break;
    case 4: reinterpret_cast<uint32_t*>(dst)[to] = reinterpret_cast<const uint32_t*>(src)[from]; break;
    case 8: reinterpret_cast<uint64_t*>(dst)[to] = reinterpret_cast<const uint64_t*>(src)[from]; break;
    default: std::memcpy(dst + to * static_cast<int64_t>(size), src + from * static_cast<int64_t>(size), size);
  }
}

/// True for the dtypes dispatch_numeric handles.
bool is_numeric(DType t);

/// Row-major strides of `dims` in elements.
std::vector<int64_t> strides_of(const std::vector<int64_t>& dims);

/// Numpy broadcast of several shapes (already validated by shape inference; a mismatch here
/// is an internal error).
std::vector<int64_t> broadcast_dims(const std::vector<const std::vector<int64_t>*>& shapes);

/// Strides of `dims` seen from an output of rank `rank`: 0 where the input broadcasts.
std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& dims, const std::vector<int64_t>& out_dims);

/// Where element `index` (row-major over `dims`) of an output starts in an input with
/// `strides` (broadcast_strides: 0 along broadcast dims), in elements.
int64_t broadcast_offset(int64_t index, const std::vector<int64_t>& dims, const std::vector<int64_t>& strides);

/// Walks an output of `out_dims` in rows of its last dim. For row r, offsets[k] is where that
/// row starts in input k (in elements), with `inner_strides[k]` the step along the row.
class BroadcastRows {
 public:
  BroadcastRows(const std::vector<int64_t>& out_dims, const std::vector<const std::vector<int64_t>*>& inputs);
  int64_t rows() const { return rows_; }
  int64_t row_length() const { return row_; }
  int64_t inner_stride(size_t k) const { return inner_[k]; }
  /// Start offset of row r in input k.
  int64_t offset(size_t k, int64_t r) const;

 private:
  int64_t rows_ = 1;
  int64_t row_ = 1;
  std::vector<int64_t> outer_dims_;                 // output dims but the last
  std::vector<std::vector<int64_t>> outer_strides_; // per input
  std::vector<int64_t> inner_;
};

/// A convolution's attributes resolved against actual sizes (ops/conv_geometry.h).
using ops::ConvGeometry;
using ops::conv_geometry;

/// The view of a constant tensor (for checks shared between compile time and run time).
inline View view_of(const ir::Tensor& t) { return View{t.dtype(), t.dims(), const_cast<void*>(t.raw_data())}; }

/// "" when every element of a float32 or float16 scale is positive and finite, else which one
/// is not, as "<name>[i] is <value>; scales must be positive and finite".
std::string bad_scale(const View& s, const std::string& name);
/// Element i of a float32 or float16 scale, as float.
float scale_at(const View& s, int64_t i);

/// True when `v` is a present input (not omitted).
inline bool present(const std::vector<View>& v, size_t i) { return i < v.size() && v[i].data != nullptr; }

/// Reads a scalar-or-1-element integer view as int64.
int64_t scalar_int(const View& v);
/// The elements of an integer view (int32 or int64) as int64.
std::vector<int64_t> int_values(const View& v);

/// The smallest useful chunk of a loop whose items read `bytes` bytes each: handing a task to
/// another thread takes a few microseconds, as long as streaming some tens of kilobytes does,
/// so a loop over a small tensor (the rows of one decoding step) stays on the calling thread.
///
///   parallel(ctx, rows, grain_for_bytes(cols * sizeof(float)), row_loop);
constexpr int64_t grain_for_bytes(int64_t bytes) {
  return std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(bytes, 1));
}

/// Parallel loop over [0, n) on the context's pool; `grain` is the smallest useful chunk.
template <typename F>
void parallel(const RunContext& ctx, int64_t n, int64_t grain, F&& f) {
  if (ctx.pool == nullptr || n <= grain) {
    f(int64_t{0}, n);
    return;
  }
  ctx.pool->parallel_for(n, grain, f);
}

/// A kernel made from a function of (context, inputs, outputs), for stateless ops.
template <typename Fn>
class FnKernel final : public HostKernel {
 public:
  explicit FnKernel(Fn fn) : fn_(std::move(fn)) {}
  void run(const RunContext& ctx, const std::vector<View>& in, std::vector<View>& out) const override { fn_(ctx, in, out); }

 private:
  Fn fn_;
};

template <typename Fn>
std::unique_ptr<Kernel> make_kernel(Fn fn) {
  return std::make_unique<FnKernel<Fn>>(std::move(fn));
}

}  // namespace tether::engine::cpu
