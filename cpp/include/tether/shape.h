// tether/shape.h: tensor shapes whose dims may be known, symbolic or unknown.
//
// A symbolic dim is a monomial: an integer coefficient times a product of named symbols.
// Exporters write dynamic dims that way ("batch", "7*batch"), and Reshape or Flatten of a
// symbolic shape produces such products, so keeping them exact lets shape inference carry a
// dynamic batch through a whole network.
//
//   using tether::ir::Dim;
//   Dim b = Dim::symbol("batch");
//   (b * Dim(7)).to_string();              // "7*batch"
//   (b * Dim(64)).divide(b)->value();      // 64
//   tether::ir::Shape s({b, Dim(3), Dim(224), Dim(224)});
//   s.to_string();                         // "[batch, 3, 224, 224]"
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tether::ir {

/// One dimension of a shape: known (a size >= 0), symbolic (a monomial), or unknown.
class Dim {
 public:
  /// An unknown dim.
  Dim() = default;
  /// A known dim. Precondition: value >= 0 (checked: ArgumentError).
  Dim(int64_t value);  // NOLINT(google-explicit-constructor): sizes read naturally as Dims

  /// A symbolic dim from its text. Products of integers and identifiers ("batch", "7*batch",
  /// "batch*seq") become monomials; any other text ("s0 + 1") becomes one opaque symbol.
  /// The text is kept verbatim for writing back. Empty text gives an unknown dim.
  static Dim symbol(std::string_view text);

  bool is_known() const { return kind_ == Kind::kKnown; }
  bool is_symbolic() const { return kind_ == Kind::kSymbolic; }
  bool is_unknown() const { return kind_ == Kind::kUnknown; }

  /// The size of a known dim. Precondition: is_known() (else InternalError).
  int64_t value() const;
  /// The text of a symbolic dim as read or as built ("7*batch"); "" for other kinds.
  const std::string& param() const { return param_; }
  /// Coefficient and sorted (symbol, power) factors of a symbolic dim.
  int64_t coefficient() const { return coeff_; }
  const std::vector<std::pair<std::string, int>>& factors() const { return factors_; }

  /// Product of two dims: exact for known and symbolic dims; unknown if either is unknown,
  /// the coefficient overflows, or the product would have more than 64 symbolic factors.
  Dim operator*(const Dim& other) const;
  /// Exact quotient (this / other), or nullopt when it is not a monomial with an integer
  /// coefficient (or either side is unknown, or other is zero).
  std::optional<Dim> divide(const Dim& other) const;

  /// True when both dims are known and equal, or both symbolic with the same monomial.
  /// Two unknown dims are never equal: nothing says they are the same size.
  bool same_as(const Dim& other) const;
  bool operator==(const Dim& other) const { return same_as(other); }

  /// "3", "batch", "7*batch" or "?".
  std::string to_string() const;

  /// ONNX's optional denotation of the dim ("DATA_BATCH", ...), kept for round trips.
  const std::string& denotation() const { return denotation_; }
  void set_denotation(std::string d) { denotation_ = std::move(d); }

 private:
  enum class Kind { kUnknown, kKnown, kSymbolic };
  static Dim from_monomial(int64_t coeff, std::vector<std::pair<std::string, int>> factors);

  Kind kind_ = Kind::kUnknown;
  int64_t coeff_ = 1;                                  // known value, or monomial coefficient
  std::vector<std::pair<std::string, int>> factors_;   // sorted by name; empty when known
  std::string param_;
  std::string denotation_;
};

/// The shape of a tensor: an unknown rank, or a list of Dims (empty for a scalar).
class Shape {
 public:
  /// A shape of unknown rank.
  Shape() = default;
  /// A shape of known rank.
  explicit Shape(std::vector<Dim> dims) : dims_(std::move(dims)), has_rank_(true) {}
  /// A fully known shape. Precondition: every size >= 0 (checked: ArgumentError).
  static Shape of(const std::vector<int64_t>& sizes);

  bool has_rank() const { return has_rank_; }
  /// Rank. Precondition: has_rank() (else InternalError).
  size_t rank() const;
  const std::vector<Dim>& dims() const { return dims_; }
  std::vector<Dim>& mutable_dims() { return dims_; }
  const Dim& operator[](size_t i) const { return dims_.at(i); }

  /// True when the rank and every dim are known.
  bool is_static() const;
  /// The sizes when is_static(), else nullopt.
  std::optional<std::vector<int64_t>> static_sizes() const;

  /// "[batch, 3, 224, 224]", "[]" for a scalar, "[...]" for unknown rank.
  std::string to_string() const;

 private:
  std::vector<Dim> dims_;
  bool has_rank_ = false;
};

}  // namespace tether::ir
