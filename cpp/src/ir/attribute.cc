#include "tether/attribute.h"

#include "tether/error.h"

namespace tether::ir {

std::string_view attr_kind_name(AttrKind kind) {
  switch (kind) {
    case AttrKind::kUndefined: return "undefined";
    case AttrKind::kFloat: return "float";
    case AttrKind::kInt: return "int";
    case AttrKind::kString: return "string";
    case AttrKind::kTensor: return "tensor";
    case AttrKind::kGraph: return "graph";
    case AttrKind::kFloats: return "floats";
    case AttrKind::kInts: return "ints";
    case AttrKind::kStrings: return "strings";
    case AttrKind::kTensors: return "tensors";
    case AttrKind::kGraphs: return "graphs";
    case AttrKind::kSparseTensor: return "sparse_tensor";
    case AttrKind::kSparseTensors: return "sparse_tensors";
    case AttrKind::kTypeProto: return "type_proto";
    case AttrKind::kTypeProtos: return "type_protos";
  }
  return "unknown";
}

#define TETHER_ATTR_FACTORY(fn, Kind, T)                   \
  Attribute Attribute::fn(std::string name, T v) {          \
    Attribute a;                                            \
    a.name_ = std::move(name);                              \
    a.kind_ = AttrKind::Kind;                               \
    a.value_ = std::move(v);                                \
    return a;                                               \
  }

TETHER_ATTR_FACTORY(f, kFloat, float)
TETHER_ATTR_FACTORY(i, kInt, int64_t)
TETHER_ATTR_FACTORY(s, kString, std::string)
TETHER_ATTR_FACTORY(tensor, kTensor, Tensor)
TETHER_ATTR_FACTORY(sparse_tensor, kSparseTensor, SparseTensor)
TETHER_ATTR_FACTORY(type, kTypeProto, ValueType)
TETHER_ATTR_FACTORY(floats, kFloats, std::vector<float>)
TETHER_ATTR_FACTORY(ints, kInts, std::vector<int64_t>)
TETHER_ATTR_FACTORY(strings, kStrings, std::vector<std::string>)
TETHER_ATTR_FACTORY(tensors, kTensors, std::vector<Tensor>)
TETHER_ATTR_FACTORY(sparse_tensors, kSparseTensors, std::vector<SparseTensor>)
TETHER_ATTR_FACTORY(types, kTypeProtos, std::vector<ValueType>)
#undef TETHER_ATTR_FACTORY

// A graph attribute always holds a graph: every reader of one (writer, inference, summary)
// may rely on it.
Attribute Attribute::graph(std::string name, GraphPtr v) {
  if (v == nullptr) throw ArgumentError("graph attribute '" + name + "' needs a graph, got null");
  Attribute a;
  a.name_ = std::move(name);
  a.kind_ = AttrKind::kGraph;
  a.value_ = std::move(v);
  return a;
}

Attribute Attribute::graphs(std::string name, std::vector<GraphPtr> v) {
  for (const auto& g : v)
    if (g == nullptr) throw ArgumentError("graphs attribute '" + name + "' needs graphs, got a null entry");
  Attribute a;
  a.name_ = std::move(name);
  a.kind_ = AttrKind::kGraphs;
  a.value_ = std::move(v);
  return a;
}

Attribute Attribute::reference(std::string name, AttrKind kind, std::string ref_attr_name) {
  Attribute a;
  a.name_ = std::move(name);
  a.kind_ = kind;
  a.ref_attr_name_ = std::move(ref_attr_name);
  return a;
}

template <typename T>
const T& Attribute::get(AttrKind expected) const {
  const T* p = std::get_if<T>(&value_);
  if (kind_ != expected || p == nullptr) {
    std::string why = ref_attr_name_.empty() ? "" : " (a reference to function attribute '" + ref_attr_name_ + "')";
    throw ModelError("attribute '" + name_ + "' is " + std::string(attr_kind_name(kind_)) + why + ", expected " +
                     std::string(attr_kind_name(expected)));
  }
  return *p;
}

float Attribute::as_float() const { return get<float>(AttrKind::kFloat); }
int64_t Attribute::as_int() const { return get<int64_t>(AttrKind::kInt); }
const std::string& Attribute::as_string() const { return get<std::string>(AttrKind::kString); }
const Tensor& Attribute::as_tensor() const { return get<Tensor>(AttrKind::kTensor); }
const Attribute::GraphPtr& Attribute::as_graph() const { return get<GraphPtr>(AttrKind::kGraph); }
const SparseTensor& Attribute::as_sparse_tensor() const { return get<SparseTensor>(AttrKind::kSparseTensor); }
const ValueType& Attribute::as_type() const { return get<ValueType>(AttrKind::kTypeProto); }
const std::vector<float>& Attribute::as_floats() const { return get<std::vector<float>>(AttrKind::kFloats); }
const std::vector<int64_t>& Attribute::as_ints() const { return get<std::vector<int64_t>>(AttrKind::kInts); }
const std::vector<std::string>& Attribute::as_strings() const {
  return get<std::vector<std::string>>(AttrKind::kStrings);
}
const std::vector<Tensor>& Attribute::as_tensors() const { return get<std::vector<Tensor>>(AttrKind::kTensors); }
const std::vector<Attribute::GraphPtr>& Attribute::as_graphs() const {
  return get<std::vector<GraphPtr>>(AttrKind::kGraphs);
}
const std::vector<SparseTensor>& Attribute::as_sparse_tensors() const {
  return get<std::vector<SparseTensor>>(AttrKind::kSparseTensors);
}
const std::vector<ValueType>& Attribute::as_types() const {
  return get<std::vector<ValueType>>(AttrKind::kTypeProtos);
}

}  // namespace tether::ir
