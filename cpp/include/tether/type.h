// tether/type.h: the type of a value in a graph (ONNX TypeProto).
//
//   using namespace tether::ir;
//   ValueType t = ValueType::tensor(DType::kFloat32, Shape({Dim::symbol("batch"), Dim(10)}));
//   t.to_string();                               // "float32[batch, 10]"
//   ValueType::sequence(t).to_string();          // "seq(float32[batch, 10])"
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "tether/dtype.h"
#include "tether/shape.h"

namespace tether::ir {

/// What a value holds: a tensor (dtype and shape), a sparse tensor, a sequence, a map, an
/// optional, an opaque type, or nothing known yet.
class ValueType {
 public:
  enum class Kind { kUnknown, kTensor, kSparseTensor, kSequence, kMap, kOptional, kOpaque };

  /// Unknown: nothing is known about the value yet.
  ValueType() = default;
  static ValueType tensor(DType dtype, Shape shape = Shape());
  static ValueType sparse_tensor(DType dtype, Shape shape = Shape());
  static ValueType sequence(ValueType element);
  static ValueType map(DType key, ValueType value);
  static ValueType optional(ValueType element);
  static ValueType opaque(std::string domain, std::string name);

  Kind kind() const { return kind_; }
  bool is_unknown() const { return kind_ == Kind::kUnknown; }
  bool is_tensor() const { return kind_ == Kind::kTensor; }
  /// Element dtype of a (sparse) tensor, or the key dtype of a map; kUndefined otherwise.
  DType dtype() const { return dtype_; }
  /// Shape of a (sparse) tensor; unknown rank otherwise.
  const Shape& shape() const { return shape_; }
  Shape& mutable_shape() { return shape_; }
  /// Element type of a sequence or optional, value type of a map. Precondition: one of those.
  const ValueType& element() const;
  /// Opaque type's domain and name.
  const std::string& opaque_domain() const { return opaque_domain_; }
  const std::string& opaque_name() const { return opaque_name_; }

  /// ONNX TypeProto.denotation ("TENSOR", "IMAGE", ...), kept for round trips.
  const std::string& denotation() const { return denotation_; }
  void set_denotation(std::string d) { denotation_ = std::move(d); }

  /// "float32[batch, 10]", "seq(...)", "map(int64, ...)", "optional(...)", "?".
  std::string to_string() const;

 private:
  Kind kind_ = Kind::kUnknown;
  DType dtype_ = DType::kUndefined;
  Shape shape_;
  std::shared_ptr<const ValueType> element_;
  std::string opaque_domain_;
  std::string opaque_name_;
  std::string denotation_;
};

}  // namespace tether::ir
