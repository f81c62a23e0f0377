#include "tether/type.h"

#include "tether/error.h"

namespace tether::ir {

ValueType ValueType::tensor(DType dtype, Shape shape) {
  ValueType t;
  t.kind_ = Kind::kTensor;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  return t;
}

ValueType ValueType::sparse_tensor(DType dtype, Shape shape) {
  ValueType t = tensor(dtype, std::move(shape));
  t.kind_ = Kind::kSparseTensor;
  return t;
}

ValueType ValueType::sequence(ValueType element) {
  ValueType t;
  t.kind_ = Kind::kSequence;
  t.element_ = std::make_shared<const ValueType>(std::move(element));
  return t;
}

ValueType ValueType::map(DType key, ValueType value) {
  ValueType t;
  t.kind_ = Kind::kMap;
  t.dtype_ = key;
  t.element_ = std::make_shared<const ValueType>(std::move(value));
  return t;
}

ValueType ValueType::optional(ValueType element) {
  ValueType t;
  t.kind_ = Kind::kOptional;
  t.element_ = std::make_shared<const ValueType>(std::move(element));
  return t;
}

ValueType ValueType::opaque(std::string domain, std::string name) {
  ValueType t;
  t.kind_ = Kind::kOpaque;
  t.opaque_domain_ = std::move(domain);
  t.opaque_name_ = std::move(name);
  return t;
}

const ValueType& ValueType::element() const {
  TETHER_CHECK(element_ != nullptr, "element() of a type without one: " + to_string());
  return *element_;
}

std::string ValueType::to_string() const {
  switch (kind_) {
    case Kind::kUnknown: return "?";
    case Kind::kTensor: return std::string(dtype_name(dtype_)) + shape_.to_string();
    case Kind::kSparseTensor: return "sparse(" + std::string(dtype_name(dtype_)) + shape_.to_string() + ")";
    case Kind::kSequence: return "seq(" + element_->to_string() + ")";
    case Kind::kMap: return "map(" + std::string(dtype_name(dtype_)) + ", " + element_->to_string() + ")";
    case Kind::kOptional: return "optional(" + element_->to_string() + ")";
    case Kind::kOpaque: return "opaque(" + opaque_domain_ + "." + opaque_name_ + ")";
  }
  return "?";
}

}  // namespace tether::ir
