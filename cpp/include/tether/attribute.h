// tether/attribute.h: node attributes, every ONNX attribute kind included.
//
//   using namespace tether::ir;
//   Attribute a = Attribute::ints("kernel_shape", {3, 3});
//   a.kind() == AttrKind::kInts;      // true
//   a.as_ints()[1];                   // 3
//   Attribute::graph("then_branch", std::make_shared<Graph>("then"));
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tether/tensor.h"
#include "tether/type.h"

namespace tether::ir {

class Graph;

/// The kind of an attribute; numbered as ONNX AttributeProto.AttributeType.
enum class AttrKind : int32_t {
  kUndefined = 0,
  kFloat = 1,
  kInt = 2,
  kString = 3,
  kTensor = 4,
  kGraph = 5,
  kFloats = 6,
  kInts = 7,
  kStrings = 8,
  kTensors = 9,
  kGraphs = 10,
  kSparseTensor = 11,
  kSparseTensors = 12,
  kTypeProto = 13,
  kTypeProtos = 14,
};

/// "float", "ints", "graph", ...
std::string_view attr_kind_name(AttrKind kind);

/// A named attribute value. Graph-valued attributes share their Graph through shared_ptr:
/// copying an Attribute does not copy the subgraph.
class Attribute {
 public:
  using GraphPtr = std::shared_ptr<Graph>;
  using Storage = std::variant<std::monostate, float, int64_t, std::string, Tensor, GraphPtr,
                               SparseTensor, ValueType, std::vector<float>, std::vector<int64_t>,
                               std::vector<std::string>, std::vector<Tensor>,
                               std::vector<GraphPtr>, std::vector<SparseTensor>,
                               std::vector<ValueType>>;

  Attribute() = default;
  static Attribute f(std::string name, float v);
  static Attribute i(std::string name, int64_t v);
  static Attribute s(std::string name, std::string v);
  static Attribute tensor(std::string name, Tensor v);
  /// Throws ArgumentError when `v` is null.
  static Attribute graph(std::string name, GraphPtr v);
  static Attribute sparse_tensor(std::string name, SparseTensor v);
  static Attribute type(std::string name, ValueType v);
  static Attribute floats(std::string name, std::vector<float> v);
  static Attribute ints(std::string name, std::vector<int64_t> v);
  static Attribute strings(std::string name, std::vector<std::string> v);
  static Attribute tensors(std::string name, std::vector<Tensor> v);
  /// Throws ArgumentError when an entry is null.
  static Attribute graphs(std::string name, std::vector<GraphPtr> v);
  static Attribute sparse_tensors(std::string name, std::vector<SparseTensor> v);
  static Attribute types(std::string name, std::vector<ValueType> v);
  /// A reference to an attribute of the enclosing function (ONNX ref_attr_name).
  static Attribute reference(std::string name, AttrKind kind, std::string ref_attr_name);

  const std::string& name() const { return name_; }
  AttrKind kind() const { return kind_; }
  /// Non-empty when this attribute refers to an attribute of the enclosing function.
  const std::string& ref_attr_name() const { return ref_attr_name_; }
  const std::string& doc_string() const { return doc_string_; }
  void set_doc_string(std::string doc) { doc_string_ = std::move(doc); }

  /// Typed access. Each throws ModelError naming the attribute when the kind differs.
  float as_float() const;
  int64_t as_int() const;
  const std::string& as_string() const;
  const Tensor& as_tensor() const;
  const GraphPtr& as_graph() const;
  const SparseTensor& as_sparse_tensor() const;
  const ValueType& as_type() const;
  const std::vector<float>& as_floats() const;
  const std::vector<int64_t>& as_ints() const;
  const std::vector<std::string>& as_strings() const;
  const std::vector<Tensor>& as_tensors() const;
  const std::vector<GraphPtr>& as_graphs() const;
  const std::vector<SparseTensor>& as_sparse_tensors() const;
  const std::vector<ValueType>& as_types() const;

  const Storage& storage() const { return value_; }

 private:
  template <typename T>
  const T& get(AttrKind expected) const;

  std::string name_;
  AttrKind kind_ = AttrKind::kUndefined;
  Storage value_;
  std::string ref_attr_name_;
  std::string doc_string_;
};

}  // namespace tether::ir
