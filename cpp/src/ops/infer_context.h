// What an op's shape-inference rule sees and sets: InferContext, and the rule registry.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tether/error.h"
#include "tether/graph.h"

namespace tether::ops {

using ir::DType;
using ir::Dim;
using ir::Shape;
using ir::ValueType;

/// One entry of an integer tensor known during inference: a Dim (a size: known, symbolic or
/// unknown), or a negative number (Reshape's -1, Slice's negative ends).
struct SymInt {
  Dim dim;
  int64_t negative = 0;  ///< non-zero: the entry is this negative number

  static SymInt of(int64_t v) { return v >= 0 ? SymInt{Dim(v), 0} : SymInt{Dim(), v}; }
  static SymInt of(Dim d) { return SymInt{std::move(d), 0}; }
  /// The entry as a number, when it is one.
  std::optional<int64_t> known() const {
    if (negative < 0) return negative;
    if (dim.is_known()) return dim.value();
    return std::nullopt;
  }
};

class TypeOverlay;

/// Facts known by value during one inference run: constant tensors (initializers, Constant
/// outputs) and the contents of small integer tensors that hold shapes, symbolic entries
/// included ("shape values").
struct InferState {
  std::unordered_map<const ir::Value*, const ir::Tensor*> constants;
  std::unordered_map<const ir::Value*, std::vector<SymInt>> shape_values;
  std::vector<std::shared_ptr<ir::Tensor>> owned;  // constants made during inference (shared with a memo)
  // Node outputs whose values or sizes a run has found (InferenceOptions::output_values/dims).
  std::unordered_map<const ir::Value*, const ir::Tensor*> pinned_values;
  std::unordered_map<const ir::Value*, const std::vector<int64_t>*> pinned_dims;
  int64_t opset = 0;                               // default-domain opset of the model
  // Where types are read and written: the values themselves, or this overlay (type_overlay.h).
  TypeOverlay* overlay = nullptr;

  /// The type of `v` in this inference run.
  const ValueType& type_of(const ir::Value& v) const;
  /// Sets the type of `v` for this run (on the value, or in the overlay).
  void set_type(ir::Value& v, ValueType type);
};

/// The view of one node that an inference rule works through.
class InferContext {
 public:
  InferContext(const ir::Node& node, InferState& state);

  const ir::Node& node() const { return node_; }
  int64_t opset() const { return state_.opset; }

  size_t num_inputs() const { return node_.inputs().size(); }
  /// True when input i is present (not omitted).
  bool has_input(size_t i) const { return node_.input(i) != nullptr; }
  /// Input i's type; unknown when the input is omitted or not typed yet.
  const ValueType& input_type(size_t i) const;
  /// The type of any value in this run (a subgraph's outputs, for control flow's rules).
  const ValueType& type_of(const ir::Value& v) const { return state_.type_of(v); }
  /// Input i's element type; kUndefined when unknown.
  DType input_dtype(size_t i) const { return input_type(i).dtype(); }
  /// Input i's shape; unknown rank when unknown.
  const Shape& input_shape(size_t i) const { return input_type(i).shape(); }
  /// Input i's rank, or nullopt.
  std::optional<size_t> input_rank(size_t i) const;
  /// Input i's constant value, or nullptr.
  const ir::Tensor* input_constant(size_t i) const;
  /// The entries of a constant integer input (int32 or int64, any rank), or of a tracked
  /// shape value whose entries are all known; nullopt otherwise.
  std::optional<std::vector<int64_t>> input_ints(size_t i) const;
  /// The entries of a 0-D or 1-D integer input: from a constant, or tracked through shape
  /// computations (symbolic entries included); nullopt when neither is known.
  std::optional<std::vector<SymInt>> input_values(size_t i) const;

  size_t num_outputs() const { return node_.outputs().size(); }
  bool has_output(size_t i) const { return node_.output(i) != nullptr; }
  /// Sets output i's inferred type (ignored when the output is omitted).
  void set_output(size_t i, ValueType type);
  void set_output(size_t i, DType dtype, Shape shape) { set_output(i, ValueType::tensor(dtype, std::move(shape))); }
  /// Records what a 0-D or 1-D integer output holds, for rules downstream.
  void set_output_values(size_t i, std::vector<SymInt> values);
  /// Records a constant output computed during inference (Constant and friends).
  void set_output_constant(size_t i, ir::Tensor tensor);

  /// Inferred output types, index-aligned with the node's outputs (unknown where unset).
  const std::vector<ValueType>& outputs() const { return outputs_; }

  // Attribute helpers.
  int64_t attr_int(std::string_view name, int64_t fallback) const { return node_.attr_int(name, fallback); }
  float attr_float(std::string_view name, float fallback) const { return node_.attr_float(name, fallback); }
  std::string attr_string(std::string_view name, std::string fallback) const {
    return node_.attr_string(name, std::move(fallback));
  }
  std::vector<int64_t> attr_ints(std::string_view name, std::vector<int64_t> fallback = {}) const {
    return node_.attr_ints(name, std::move(fallback));
  }
  bool has_attr(std::string_view name) const { return node_.attr(name) != nullptr; }

  /// Throws ShapeError naming the node: "<op 'name'>: <why>".
  [[noreturn]] void fail(const std::string& why) const;
  /// fail()s when optional input `i` is present with a known shape of other than one element
  /// (a scalar operand: Clip's bounds, Pad's constant_value). Kernels read its first element,
  /// which an empty tensor does not have.
  void require_one_value(size_t i, std::string_view what) const {
    if (i >= num_inputs() || !has_input(i)) return;
    const Shape& s = input_shape(i);
    const auto sizes = s.has_rank() ? s.static_sizes() : std::nullopt;
    if (!sizes) return;
    // One element exactly when every dim is 1 (a scalar has none).
    const bool one = std::all_of(sizes->begin(), sizes->end(), [](int64_t d) { return d == 1; });
    if (!one) fail(std::string(what) + " must hold one value (a scalar), got shape " + s.to_string());
  }
  /// Normalises an axis in [-rank, rank) to [0, rank); fail()s when out of range.
  size_t axis(int64_t axis, size_t rank, std::string_view what = "axis") const;
  /// Each of `axes` through axis(), in order; fail()s naming the axis when one repeats.
  std::vector<size_t> distinct_axes(const std::vector<int64_t>& axes, size_t rank, std::string_view what = "axes") const;
  /// A known dim of size `size`; fail()s naming `what` when the size is negative.
  Dim dim(int64_t size, std::string_view what) const;
  /// a + b and a * b; fail() naming `what` when the result overflows int64. Attribute values
  /// and declared dims are the model's to choose, so rules do their arithmetic through these.
  int64_t add(int64_t a, int64_t b, std::string_view what) const;
  int64_t mul(int64_t a, int64_t b, std::string_view what) const;
  /// The data type an integer attribute names (`fallback` when absent or 0, ONNX's
  /// "undefined"); fail()s when the number is no data type tether knows.
  DType attr_dtype(std::string_view name, DType fallback) const;

 private:
  const ir::Node& node_;
  InferState& state_;
  std::vector<ValueType> outputs_;
};

/// A shape-inference rule.
using InferFn = void (*)(InferContext&);

/// Rules by (domain, op type). Families add theirs in register_*().
class Registry {
 public:
  void add(std::string_view op_type, InferFn fn, std::string_view domain = "");
  /// The rule for (domain, op_type), or nullptr. "ai.onnx" and "" are the same domain.
  InferFn find(std::string_view domain, std::string_view op_type) const;
  /// Every registered op, as "Op" or "domain:Op", sorted.
  std::vector<std::string> ops() const;

 private:
  std::unordered_map<std::string, InferFn> rules_;
};

/// The registry with every family's rules.
const Registry& registry();

// Families (one file each under cpp/src/ops/).
void register_elementwise(Registry& r);
void register_conv(Registry& r);
void register_pool(Registry& r);
void register_norm(Registry& r);
void register_resize(Registry& r);
void register_rnn(Registry& r);
void register_attention(Registry& r);
void register_quantize(Registry& r);
void register_matmul(Registry& r);
void register_shape(Registry& r);
void register_reduce(Registry& r);
void register_misc(Registry& r);
void register_fused(Registry& r);
void register_matmul_nbits(Registry& r);
void register_ms_transformer(Registry& r);
void register_vision(Registry& r);
void register_signal(Registry& r);

// ---- helpers shared by rules ---------------------------------------------------------------

/// Output 0 has input 0's type.
inline void same_as_input(InferContext& ctx) { ctx.set_output(0, ctx.input_type(0)); }

/// a / b rounded up, for a >= 0 and b >= 1 ((a + b - 1) / b would overflow for large a).
inline int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

/// Numpy-style broadcast of shapes; fail()s through ctx when dims cannot match. Unknown rank
/// in any input gives unknown rank.
Shape broadcast_shapes(const InferContext& ctx, const std::vector<Shape>& shapes);
/// Checks that `from` broadcasts to `to` in one direction (numpy rules, `to` unchanged): no
/// more dims than `to`, each known dim equal to `to`'s or 1. fail()s naming `what` and both shapes.
void check_unidirectional(const InferContext& ctx, const Shape& from, const Shape& to, const std::string& what);
/// Checks that the listed inputs (those present and typed) share one element type, as ONNX
/// type constraints like Add's `T` require; fail()s naming both inputs and their types.
void check_same_dtype(const InferContext& ctx, const std::vector<size_t>& inputs);
/// check_same_dtype over every input.
void check_same_dtype(const InferContext& ctx);
/// Dim i of s; unknown when s has unknown rank or fewer than i + 1 dims.
inline Dim dim_at(const Shape& s, size_t i) { return s.has_rank() && i < s.rank() ? s[i] : Dim(); }
/// A float as error messages show it: "1e+30", "-0.25", "nan" (std::to_string prints 1e-30
/// as "0.000000").
std::string float_text(double v);
/// Product of dims (symbolic products included); unknown when any is unknown.
Dim product(const std::vector<Dim>& dims, size_t begin = 0, size_t end = SIZE_MAX);

/// The largest rank a rule infers from a length alone (a 1-D shape input of known size but
/// unknown contents). Real ranks are small; the bound keeps a declared length of, say, 10^15
/// from becoming a vector of 10^15 unknown dims.
inline constexpr int64_t kMaxRankFromLength = 1 << 16;

/// A shape of `length` unknown dims, at least `min_rank` of them, when `length` is known and
/// at most kMaxRankFromLength; otherwise a shape of unknown rank.
Shape shape_of_rank(const Dim& length, size_t min_rank = 0);

}  // namespace tether::ops
