#include "ir/utf8_check.h"

#include "tether/error.h"
#include "util/utf8.h"

namespace tether::ir {

namespace {

namespace pb = onnx_pb;

class Checker {
 public:
  explicit Checker(const std::string& label) : label_(label) {}

  void model(const pb::ModelProto& m) {
    field(m.producer_name(), "model producer_name");
    field(m.producer_version(), "model producer_version");
    field(m.domain(), "model domain");
    field(m.doc_string(), "model doc_string");
    entries(m.metadata_props(), "model metadata");
    for (const auto& o : m.opset_import()) field(o.domain(), "opset_import domain");
    graph(m.graph(), "graph");
    for (const auto& f : m.functions()) function(f);
  }

 private:
  void field(const std::string& s, const std::string& what) const {
    if (!util::is_valid_utf8(s)) throw ModelError(label_ + ": " + what + " is not valid UTF-8");
  }

  template <typename Entries>
  void entries(const Entries& es, const std::string& what) const {
    for (const auto& e : es) {
      field(e.key(), what + " key");
      field(e.value(), what + " value for '" + e.key() + "'");
    }
  }

  void type(const pb::TypeProto& t, const std::string& what) const {
    field(t.denotation(), what + " denotation");
    const pb::TensorShapeProto* shape = nullptr;
    if (t.has_tensor_type() && t.tensor_type().has_shape()) shape = &t.tensor_type().shape();
    if (t.has_sparse_tensor_type() && t.sparse_tensor_type().has_shape()) shape = &t.sparse_tensor_type().shape();
    if (shape != nullptr)
      for (const auto& d : shape->dim()) {
        field(d.dim_param(), what + " dim_param");
        field(d.denotation(), what + " dim denotation");
      }
    if (t.has_sequence_type()) type(t.sequence_type().elem_type(), what);
    if (t.has_optional_type()) type(t.optional_type().elem_type(), what);
    if (t.has_map_type()) type(t.map_type().value_type(), what);
    if (t.has_opaque_type()) {
      field(t.opaque_type().domain(), what + " opaque domain");
      field(t.opaque_type().name(), what + " opaque name");
    }
  }

  void value_info(const pb::ValueInfoProto& v, const std::string& what) const {
    field(v.name(), what + " name");
    const std::string where = what + " '" + v.name() + "'";
    field(v.doc_string(), where + " doc_string");
    entries(v.metadata_props(), where + " metadata");
    type(v.type(), where + " type");
  }

  void tensor(const pb::TensorProto& t, const std::string& what) const {
    field(t.name(), what + " name");
    const std::string where = what + " '" + t.name() + "'";
    field(t.doc_string(), where + " doc_string");
    entries(t.metadata_props(), where + " metadata");
    entries(t.external_data(), where + " external_data");
  }

  void attribute(const pb::AttributeProto& a, const std::string& what) {
    field(a.name(), what + " attribute name");
    const std::string where = what + " attribute '" + a.name() + "'";
    field(a.doc_string(), where + " doc_string");
    field(a.ref_attr_name(), where + " ref_attr_name");
    if (a.has_t()) tensor(a.t(), where + " tensor");
    for (const auto& t : a.tensors()) tensor(t, where + " tensor");
    if (a.has_g()) graph(a.g(), where + " graph");
    for (const auto& g : a.graphs()) graph(g, where + " graph");
    if (a.has_tp()) type(a.tp(), where + " type");
    for (const auto& t : a.type_protos()) type(t, where + " type");
    if (a.has_sparse_tensor()) sparse(a.sparse_tensor(), where);
    for (const auto& s : a.sparse_tensors()) sparse(s, where);
  }

  void sparse(const pb::SparseTensorProto& s, const std::string& what) const {
    tensor(s.values(), what + " sparse values");
    tensor(s.indices(), what + " sparse indices");
  }

  void node(const pb::NodeProto& n, const std::string& what) {
    field(n.name(), what + " name");
    const std::string where = what + " '" + n.name() + "'";
    field(n.op_type(), where + " op_type");
    field(n.domain(), where + " domain");
    field(n.overload(), where + " overload");
    field(n.doc_string(), where + " doc_string");
    for (const auto& s : n.input()) field(s, where + " input name");
    for (const auto& s : n.output()) field(s, where + " output name");
    entries(n.metadata_props(), where + " metadata");
    for (const auto& a : n.attribute()) attribute(a, where);
  }

  void graph(const pb::GraphProto& g, const std::string& what) {
    if (++depth_ > kMaxDepth) throw ModelError(label_ + ": subgraphs nest deeper than " + std::to_string(kMaxDepth) + " levels");
    field(g.name(), what + " name");
    const std::string where = what + " '" + g.name() + "'";
    field(g.doc_string(), where + " doc_string");
    entries(g.metadata_props(), where + " metadata");
    for (const auto& v : g.input()) value_info(v, where + " input");
    for (const auto& v : g.output()) value_info(v, where + " output");
    for (const auto& v : g.value_info()) value_info(v, where + " value_info");
    for (const auto& t : g.initializer()) tensor(t, where + " initializer");
    for (const auto& s : g.sparse_initializer()) sparse(s, where + " sparse initializer");
    for (const auto& n : g.node()) node(n, where + " node");
    for (const auto& q : g.quantization_annotation()) {
      field(q.tensor_name(), where + " quantization annotation tensor_name");
      entries(q.quant_parameter_tensor_names(), where + " quantization annotation");
    }
    --depth_;
  }

  void function(const pb::FunctionProto& f) {
    const std::string where = "function '" + f.name() + "'";
    field(f.name(), "function name");
    field(f.domain(), where + " domain");
    field(f.overload(), where + " overload");
    field(f.doc_string(), where + " doc_string");
    for (const auto& s : f.input()) field(s, where + " input name");
    for (const auto& s : f.output()) field(s, where + " output name");
    for (const auto& s : f.attribute()) field(s, where + " attribute name");
    for (const auto& a : f.attribute_proto()) attribute(a, where);
    for (const auto& n : f.node()) node(n, where + " node");
    for (const auto& v : f.value_info()) value_info(v, where + " value_info");
    for (const auto& o : f.opset_import()) field(o.domain(), where + " opset_import domain");
    entries(f.metadata_props(), where + " metadata");
  }

  // Protobuf stops parsing at 100 nested messages, so this is never reached by parsed input;
  // it guards the recursion against models built some other way.
  static constexpr int kMaxDepth = 64;
  const std::string& label_;
  int depth_ = 0;
};

}  // namespace

void check_utf8(const onnx_pb::ModelProto& model, const std::string& label) { Checker(label).model(model); }

}  // namespace tether::ir
