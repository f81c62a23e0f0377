// Reading ONNX models: protobuf (without the weights) -> tether IR, weights mapped or copied once.
#include <algorithm>
#include <cstring>
#include <filesystem>

#include "ir/external_data.h"
#include "ir/tensor_codec.h"
#include "ir/utf8_check.h"
#include "ir/wire.h"
#include "tether/error.h"
#include "tether/onnx.h"
#include "tether_onnx.pb.h"
#include "util/file_map.h"

namespace tether::ir {

namespace {

namespace pb = onnx_pb;

template <typename Entries>
Metadata metadata_of(const Entries& entries) {
  Metadata out;
  out.reserve(entries.size());
  for (const auto& e : entries) out.emplace_back(e.key(), e.value());
  return out;
}

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

// ONNX's layout of a sparse tensor: values [NNZ]; indices int64, [NNZ] (linear positions) or
// [NNZ, rank] (coordinates), each inside the dense dims. Whatever densifies the tensor later
// writes at those positions, so they are checked here, once.
void check_sparse_layout(const SparseTensor& s, int64_t dense_count, const std::string& where) {
  const std::vector<int64_t>& vd = s.values.dims();
  const std::vector<int64_t>& id = s.indices.dims();
  if (vd.size() != 1) throw ModelError(where + ": sparse values must be 1-D [NNZ], found dims " + dims_text(vd));
  const int64_t nnz = vd[0];
  if (s.indices.dtype() != DType::kInt64)
    throw ModelError(where + ": sparse indices must be int64, found " + std::string(dtype_name(s.indices.dtype())));
  const auto rank = static_cast<int64_t>(s.dims.size());
  const bool linear = id.size() == 1 && id[0] == nnz;
  const bool coords = id.size() == 2 && id[0] == nnz && id[1] == rank;
  if (!linear && !coords)
    throw ModelError(where + ": sparse indices must have dims [" + std::to_string(nnz) + "] or [" + std::to_string(nnz) +
                     ", " + std::to_string(rank) + "] for " + std::to_string(nnz) + " values of dense dims " +
                     dims_text(s.dims) + ", found " + dims_text(id));
  const int64_t* idx = s.indices.data<int64_t>();
  for (int64_t k = 0; k < s.indices.num_elements(); ++k) {
    const int64_t bound = linear ? dense_count : s.dims[static_cast<size_t>(k % rank)];
    if (idx[k] < 0 || idx[k] >= bound)
      throw ModelError(where + ": sparse index " + std::to_string(idx[k]) + " (entry " + std::to_string(k) +
                       " of indices) is outside the dense dims " + dims_text(s.dims));
  }
}

// A declared type (graph input, output or value_info) that contradicts the data of the
// initializer it describes: later stages read the type and the data as if they agreed.
void check_initializer_type(const Value& v, DType dtype, const std::vector<int64_t>& dims, const std::string& where) {
  const ValueType& t = v.type();
  if (t.is_unknown()) return;
  const std::string holds = std::string(dtype_name(dtype)) + dims_text(dims);
  if (t.kind() != ValueType::Kind::kTensor && t.kind() != ValueType::Kind::kSparseTensor)
    throw ShapeError(where + ": initializer '" + v.name() + "' holds " + holds + ", but is declared " + t.to_string());
  bool same = t.dtype() == DType::kUndefined || t.dtype() == dtype;
  if (t.shape().has_rank()) {
    same = same && t.shape().rank() == dims.size();
    for (size_t i = 0; same && i < dims.size(); ++i)
      if (t.shape()[i].is_known() && t.shape()[i].value() != dims[i]) same = false;
  }
  if (!same)
    throw ShapeError(where + ": initializer '" + v.name() + "' holds " + holds + ", but is declared " + t.to_string());
}

class Reader {
 public:
  // `owner` keeps [src, src + size) alive; when null, weights are copied out of it.
  // `mapped`: `owner` is a file mapping.
  Reader(std::string label, std::string base_dir, bool has_base_dir, const std::byte* src, int64_t size,
         std::shared_ptr<const void> owner, bool mapped = false)
      : label_(std::move(label)), base_dir_(std::move(base_dir)), has_base_dir_(has_base_dir), src_(src),
        size_(size), owner_(std::move(owner)), mapped_(mapped) {}

  Model read();

 private:
  std::shared_ptr<Buffer> bytes_from(const std::byte* p, int64_t n, const std::shared_ptr<const void>& owner,
                                     bool mapped) const;
  std::shared_ptr<Buffer> external_bytes(const pb::TensorProto& p, const std::string& where, DType dtype,
                                         const std::vector<int64_t>& dims, int64_t nbytes);
  Tensor tensor(const pb::TensorProto& p, const std::string& where, const wire::RawSpan* span = nullptr);
  SparseTensor sparse(const pb::SparseTensorProto& p, const std::string& where);
  DType dtype(int32_t code, const std::string& where, bool allow_undefined) const;
  Shape shape(const pb::TensorShapeProto& s, const std::string& where) const;
  ValueType type(const pb::TypeProto& t, const std::string& where) const;
  Attribute attribute(const pb::AttributeProto& a, Graph* scope, const std::string& where);
  void nodes(const google::protobuf::RepeatedPtrField<pb::NodeProto>& protos, Graph& g, const std::string& where);
  void graph(const pb::GraphProto& p, Graph& g, const std::string& where, const std::vector<wire::RawSpan>* spans);
  Function function(const pb::FunctionProto& p);

  std::string label_;
  std::string base_dir_;
  bool has_base_dir_;
  const std::byte* src_;
  int64_t size_;
  std::shared_ptr<const void> owner_;
  bool mapped_ = false;
  external::MapCache maps_;
};

// Borrow bytes that are aligned and kept alive by an owner; copy the rest once.
// (`mapped`: the owner is a file mapping, whose pages can be dropped and read again.)
std::shared_ptr<Buffer> Reader::bytes_from(const std::byte* p, int64_t n, const std::shared_ptr<const void>& owner,
                                           bool mapped) const {
  if (owner != nullptr && reinterpret_cast<uintptr_t>(p) % kBufferAlignment == 0)
    return mapped ? Buffer::map_view(p, n, owner) : Buffer::borrow(p, n, owner);
  auto b = Buffer::allocate(n);
  if (!mapped) {
    if (n > 0) std::memcpy(b->mutable_data(), p, static_cast<size_t>(n));
    return b;
  }
  // The copy is what stays: the file's pages leave memory as soon as they are copied, a few
  // MB at a time, so a large tensor never counts twice.
  constexpr int64_t kChunk = 4 << 20;
  for (int64_t at = 0; at < n; at += kChunk) {
    const int64_t len = std::min(kChunk, n - at);
    std::memcpy(b->mutable_data() + at, p + at, static_cast<size_t>(len));
    util::drop_mapped_pages(p + at, len);
  }
  return b;
}

DType Reader::dtype(int32_t code, const std::string& where, bool allow_undefined) const {
  if (!dtype_is_known(code) || (code == 0 && !allow_undefined))
    throw ModelError(where + ": unknown data type " + std::to_string(code) + " (tether knows 1 to " +
                     std::to_string(kMaxDType) + ")");
  return static_cast<DType>(code);
}

Shape Reader::shape(const pb::TensorShapeProto& s, const std::string& where) const {
  std::vector<Dim> dims;
  dims.reserve(s.dim_size());
  for (int i = 0; i < s.dim_size(); ++i) {
    const auto& d = s.dim(i);
    Dim dim;
    if (d.has_dim_value()) {
      if (d.dim_value() < 0)
        throw ModelError(where + ": dim " + std::to_string(i) + " is " + std::to_string(d.dim_value()) +
                         "; dims must be >= 0");
      dim = Dim(d.dim_value());
    } else if (d.has_dim_param()) {
      dim = Dim::symbol(d.dim_param());
    }
    dim.set_denotation(d.denotation());
    dims.push_back(std::move(dim));
  }
  return Shape(std::move(dims));
}

ValueType Reader::type(const pb::TypeProto& t, const std::string& where) const {
  ValueType out;
  switch (t.value_case()) {
    case pb::TypeProto::kTensorType: {
      const auto& tt = t.tensor_type();
      out = ValueType::tensor(dtype(tt.elem_type(), where, true), tt.has_shape() ? shape(tt.shape(), where) : Shape());
      break;
    }
    case pb::TypeProto::kSparseTensorType: {
      const auto& st = t.sparse_tensor_type();
      out = ValueType::sparse_tensor(dtype(st.elem_type(), where, true),
                                     st.has_shape() ? shape(st.shape(), where) : Shape());
      break;
    }
    case pb::TypeProto::kSequenceType:
      out = ValueType::sequence(type(t.sequence_type().elem_type(), where + " (sequence element)"));
      break;
    case pb::TypeProto::kMapType:
      out = ValueType::map(dtype(t.map_type().key_type(), where + " (map key)", true),
                           type(t.map_type().value_type(), where + " (map value)"));
      break;
    case pb::TypeProto::kOptionalType:
      out = ValueType::optional(type(t.optional_type().elem_type(), where + " (optional element)"));
      break;
    case pb::TypeProto::kOpaqueType:
      out = ValueType::opaque(t.opaque_type().domain(), t.opaque_type().name());
      break;
    case pb::TypeProto::VALUE_NOT_SET:
      break;
  }
  out.set_denotation(t.denotation());
  return out;
}

std::shared_ptr<Buffer> Reader::external_bytes(const pb::TensorProto& p, const std::string& where, DType dt,
                                               const std::vector<int64_t>& dims, int64_t nbytes) {
  const external::Reference ref = external::parse(metadata_of(p.external_data()), where);
  if (!has_base_dir_)
    throw ExternalDataError(where + ": the model was loaded from bytes and its data lies in external file '" +
                            ref.location + "'; pass base_dir to say which folder holds it");
  const std::string path = external::resolve(base_dir_, ref.location, where);
  auto map = maps_.get(path, where);
  const std::string needs = std::string(dtype_name(dt)) + dims_text(dims) + " needs " + std::to_string(nbytes) + " bytes";
  if (ref.length >= 0 && ref.length != nbytes)
    throw ExternalDataError(where + ": external data length is " + std::to_string(ref.length) + " bytes, but " + needs);
  if (ref.offset > map->size() || nbytes > map->size() - ref.offset)
    throw ExternalDataError(where + ": external data at offset " + std::to_string(ref.offset) + " (" + needs +
                            ") runs past the end of '" + ref.location + "', which holds " +
                            std::to_string(map->size()) + " bytes");
  return bytes_from(map->data() + ref.offset, nbytes, map, true);
}

Tensor Reader::tensor(const pb::TensorProto& p, const std::string& where, const wire::RawSpan* span) {
  const DType dt = dtype(p.data_type(), where, false);
  std::vector<int64_t> dims(p.dims().begin(), p.dims().end());
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i] < 0)
      throw ModelError(where + ": dim " + std::to_string(i) + " is " + std::to_string(dims[i]) + "; dims must be >= 0");
  const auto count = checked_num_elements(dims);
  const auto nbytes = count ? storage_bytes(dt, *count) : std::nullopt;
  if (!count || !nbytes) throw ModelError(where + ": dims " + dims_text(dims) + " overflow a 64-bit size");
  if (p.has_segment()) throw ModelError(where + ": segmented tensors (TensorProto.segment) are not supported");

  Tensor t;
  const std::string needs = std::string(dtype_name(dt)) + dims_text(dims) + " needs " + std::to_string(*nbytes) + " bytes";
  if (p.data_location() == pb::TensorProto::EXTERNAL) {
    if (dt == DType::kString) throw ModelError(where + ": string tensors cannot be stored as external data");
    t = Tensor::from_buffer(dt, dims, external_bytes(p, where, dt, dims, *nbytes));
  } else if (dt == DType::kString) {
    if (p.string_data_size() != *count)
      throw ModelError(where + ": string tensor of dims " + dims_text(dims) + " needs " + std::to_string(*count) +
                       " strings, found " + std::to_string(p.string_data_size()));
    t = Tensor::strings(dims, std::vector<std::string>(p.string_data().begin(), p.string_data().end()));
  } else if (span != nullptr && span->offset >= 0) {
    if (span->size != *nbytes)
      throw ModelError(where + ": raw_data holds " + std::to_string(span->size) + " bytes, but " + needs);
    t = Tensor::from_buffer(dt, dims, bytes_from(src_ + span->offset, span->size, owner_, mapped_));
  } else if (p.has_raw_data()) {
    if (static_cast<int64_t>(p.raw_data().size()) != *nbytes)
      throw ModelError(where + ": raw_data holds " + std::to_string(p.raw_data().size()) + " bytes, but " + needs);
    t = Tensor::copy_of(dt, dims, p.raw_data().data(), *nbytes);
  } else if (codec::has_typed_fields(p) || *count > 0) {
    t = Tensor::from_buffer(dt, dims, codec::decode_typed_fields(p, dt, *count, where));
  } else {
    t = Tensor::zeros(dt, dims);  // no elements, so no data to hold
  }
  t.set_name(p.name());
  t.set_doc_string(p.doc_string());
  t.metadata() = metadata_of(p.metadata_props());
  return t;
}

SparseTensor Reader::sparse(const pb::SparseTensorProto& p, const std::string& where) {
  SparseTensor s;
  s.values = tensor(p.values(), where + " (values)");
  s.indices = tensor(p.indices(), where + " (indices)");
  s.dims.assign(p.dims().begin(), p.dims().end());
  const auto dense = checked_num_elements(s.dims);
  if (!dense) throw ModelError(where + ": sparse tensor dims " + dims_text(s.dims) + " are negative or overflow");
  check_sparse_layout(s, *dense, where);
  return s;
}

AttrKind guess_kind(const pb::AttributeProto& a) {
  if (a.has_f()) return AttrKind::kFloat;
  if (a.has_i()) return AttrKind::kInt;
  if (a.has_s()) return AttrKind::kString;
  if (a.has_t()) return AttrKind::kTensor;
  if (a.has_g()) return AttrKind::kGraph;
  if (a.has_sparse_tensor()) return AttrKind::kSparseTensor;
  if (a.has_tp()) return AttrKind::kTypeProto;
  if (a.floats_size()) return AttrKind::kFloats;
  if (a.ints_size()) return AttrKind::kInts;
  if (a.strings_size()) return AttrKind::kStrings;
  if (a.tensors_size()) return AttrKind::kTensors;
  if (a.graphs_size()) return AttrKind::kGraphs;
  if (a.sparse_tensors_size()) return AttrKind::kSparseTensors;
  if (a.type_protos_size()) return AttrKind::kTypeProtos;
  return AttrKind::kUndefined;
}

Attribute Reader::attribute(const pb::AttributeProto& a, Graph* scope, const std::string& node_where) {
  const std::string where = node_where + " attribute '" + a.name() + "'";
  if (a.name().empty()) throw ModelError(node_where + ": an attribute has no name");
  const AttrKind kind = a.has_type() ? static_cast<AttrKind>(a.type()) : guess_kind(a);
  if (!a.ref_attr_name().empty()) {
    Attribute ref = Attribute::reference(a.name(), kind, a.ref_attr_name());
    ref.set_doc_string(a.doc_string());
    return ref;
  }
  auto subgraph = [&](const pb::GraphProto& gp) {
    auto g = std::make_shared<Graph>(gp.name());
    g->set_parent(scope);
    graph(gp, *g, where + " graph '" + gp.name() + "'", nullptr);
    return g;
  };
  Attribute out;
  switch (kind) {
    case AttrKind::kFloat: out = Attribute::f(a.name(), a.f()); break;
    case AttrKind::kInt: out = Attribute::i(a.name(), a.i()); break;
    case AttrKind::kString: out = Attribute::s(a.name(), a.s()); break;
    case AttrKind::kTensor: out = Attribute::tensor(a.name(), tensor(a.t(), where)); break;
    case AttrKind::kGraph: out = Attribute::graph(a.name(), subgraph(a.g())); break;
    case AttrKind::kSparseTensor: out = Attribute::sparse_tensor(a.name(), sparse(a.sparse_tensor(), where)); break;
    case AttrKind::kTypeProto: out = Attribute::type(a.name(), type(a.tp(), where)); break;
    case AttrKind::kFloats: out = Attribute::floats(a.name(), {a.floats().begin(), a.floats().end()}); break;
    case AttrKind::kInts: out = Attribute::ints(a.name(), {a.ints().begin(), a.ints().end()}); break;
    case AttrKind::kStrings: out = Attribute::strings(a.name(), {a.strings().begin(), a.strings().end()}); break;
    case AttrKind::kTensors: {
      std::vector<Tensor> ts;
      for (const auto& t : a.tensors()) ts.push_back(tensor(t, where));
      out = Attribute::tensors(a.name(), std::move(ts));
      break;
    }
    case AttrKind::kGraphs: {
      std::vector<Attribute::GraphPtr> gs;
      for (const auto& g : a.graphs()) gs.push_back(subgraph(g));
      out = Attribute::graphs(a.name(), std::move(gs));
      break;
    }
    case AttrKind::kSparseTensors: {
      std::vector<SparseTensor> ss;
      for (const auto& s : a.sparse_tensors()) ss.push_back(sparse(s, where));
      out = Attribute::sparse_tensors(a.name(), std::move(ss));
      break;
    }
    case AttrKind::kTypeProtos: {
      std::vector<ValueType> ts;
      for (const auto& t : a.type_protos()) ts.push_back(type(t, where));
      out = Attribute::types(a.name(), std::move(ts));
      break;
    }
    default:
      throw ModelError(where + ": unknown or missing attribute type " + std::to_string(static_cast<int>(kind)));
  }
  out.set_doc_string(a.doc_string());
  return out;
}

// How messages name node k of the graph being read, as Node::describe() does. describe()
// finds an unnamed node's index by searching its graph, which made reading n unnamed nodes
// take n^2 steps (minutes for a million); here the index is known.
std::string node_label(const Node& n, int k) {
  if (!n.name().empty()) return n.describe();
  return (n.domain().empty() ? n.op_type() : n.domain() + ":" + n.op_type()) + " #" + std::to_string(k);
}

// Two passes, so that nodes may appear in any order and subgraphs see every outer value:
// first every node and its outputs, then inputs and attributes.
void Reader::nodes(const google::protobuf::RepeatedPtrField<pb::NodeProto>& protos, Graph& g,
                   const std::string& where) {
  std::vector<Node*> created;
  created.reserve(protos.size());
  for (int k = 0; k < protos.size(); ++k) {
    const pb::NodeProto& np = protos.Get(k);
    if (np.op_type().empty())
      throw ModelError(where + ": node #" + std::to_string(k) + " '" + np.name() + "' has no op_type");
    std::vector<std::string> outs(np.output().begin(), np.output().end());
    created.push_back(g.add_node(np.op_type(), {}, outs, np.name(), np.domain()));
  }
  for (int k = 0; k < protos.size(); ++k) {
    const pb::NodeProto& np = protos.Get(k);
    Node* n = created[static_cast<size_t>(k)];
    const std::string node_where = where + ": " + node_label(*n, k);
    for (int i = 0; i < np.input_size(); ++i) {
      const std::string& name = np.input(i);
      Value* v = name.empty() ? nullptr : g.resolve(name);
      if (!name.empty() && (v == nullptr || !v->is_defined()))
        throw GraphError(node_where + " input " + std::to_string(i) + " '" + name +
                         "' names no value: no graph input, initializer or node output has that name");
      n->add_input(v);
    }
    for (const auto& ap : np.attribute()) {
      if (n->attr(ap.name()) != nullptr)
        throw ModelError(node_where + ": attribute '" + ap.name() + "' appears twice");
      n->set_attr(attribute(ap, &g, node_where));
    }
    n->set_overload(np.overload());
    n->set_doc_string(np.doc_string());
    n->metadata() = metadata_of(np.metadata_props());
    n->device_configurations().assign(np.device_configurations().begin(), np.device_configurations().end());
  }
}

void Reader::graph(const pb::GraphProto& p, Graph& g, const std::string& where,
                   const std::vector<wire::RawSpan>* spans) {
  g.set_name(p.name());
  g.set_doc_string(p.doc_string());
  g.metadata() = metadata_of(p.metadata_props());
  auto describe_value = [](Value* v, const pb::ValueInfoProto& vi) {
    v->set_doc_string(vi.doc_string());
    v->metadata() = metadata_of(vi.metadata_props());
  };
  for (const auto& vi : p.input()) {
    if (vi.name().empty()) throw GraphError(where + ": a graph input has no name");
    describe_value(g.add_input(vi.name(), type(vi.type(), where + " input '" + vi.name() + "'")), vi);
  }
  for (int i = 0; i < p.initializer_size(); ++i) {
    const auto& tp = p.initializer(i);
    const std::string tw = where + " initializer '" + tp.name() + "'";
    if (tp.name().empty()) throw GraphError(where + ": initializer #" + std::to_string(i) + " has no name");
    const wire::RawSpan* span = spans != nullptr && i < static_cast<int>(spans->size()) ? &(*spans)[i] : nullptr;
    g.add_initializer(tensor(tp, tw, span), tp.name());
  }
  for (const auto& sp : p.sparse_initializer()) {
    const std::string& name = sp.values().name();
    if (name.empty()) throw GraphError(where + ": a sparse initializer has no name (values.name)");
    g.add_sparse_initializer(sparse(sp, where + " sparse initializer '" + name + "'"), name);
  }
  nodes(p.node(), g, where);
  for (const auto& vi : p.output()) {
    Value* v = g.resolve(vi.name());
    if (v == nullptr || !v->is_defined())
      throw GraphError(where + ": output '" + vi.name() +
                       "' names no value: no graph input, initializer or node output has that name");
    ValueType t = type(vi.type(), where + " output '" + vi.name() + "'");
    if (v->graph() == &g && !t.is_unknown()) v->set_type(std::move(t));
    if (v->graph() == &g) describe_value(v, vi);
    g.add_output(v);
  }
  for (const auto& vi : p.value_info()) {
    // value_info about an enclosing graph's value says nothing this graph needs to keep.
    if (g.find(vi.name()) == nullptr && g.resolve(vi.name()) != nullptr) continue;
    if (vi.name().empty()) throw GraphError(where + ": a value_info entry has no name");
    describe_value(g.declare(vi.name(), type(vi.type(), where + " value '" + vi.name() + "'")), vi);
  }
  for (const Value* v : g.initializers())
    check_initializer_type(*v, v->initializer().dtype(), v->initializer().dims(), where);
  for (const Value* v : g.sparse_initializers())
    check_initializer_type(*v, v->sparse_initializer().values.dtype(), v->sparse_initializer().dims, where);
  for (const auto& qa : p.quantization_annotation())
    g.quantization_annotations().push_back({qa.tensor_name(), metadata_of(qa.quant_parameter_tensor_names())});
}

// Operator sets are numbered from 1; a version below that selects no op of any domain.
std::vector<OpsetImport> opsets_of(const google::protobuf::RepeatedPtrField<pb::OperatorSetIdProto>& ps,
                                   const std::string& where) {
  std::vector<OpsetImport> out;
  for (const auto& o : ps) {
    if (o.version() < 1)
      throw ModelError(where + ": opset_import of domain '" + o.domain() + "' has version " + std::to_string(o.version()) +
                       "; opset versions start at 1");
    out.push_back({o.domain(), o.version()});
  }
  return out;
}

Function Reader::function(const pb::FunctionProto& p) {
  Function f;
  const std::string where = label_ + ": function '" + p.domain() + ":" + p.name() + "'";
  f.name = p.name();
  f.domain = p.domain();
  f.overload = p.overload();
  f.attribute_names.assign(p.attribute().begin(), p.attribute().end());
  for (const auto& a : p.attribute_proto()) f.attribute_defaults.push_back(attribute(a, f.body.get(), where));
  f.opset_imports = opsets_of(p.opset_import(), where);
  f.doc_string = p.doc_string();
  f.metadata = metadata_of(p.metadata_props());
  Graph& body = *f.body;
  body.set_name(p.name());
  for (const std::string& in : p.input()) body.add_input(in, ValueType());
  nodes(p.node(), body, where);
  for (const std::string& out : p.output()) {
    Value* v = body.find(out);
    if (v == nullptr || !v->is_defined())
      throw GraphError(where + ": output '" + out + "' names no value in the function body");
    body.add_output(v);
  }
  for (const auto& vi : p.value_info())
    if (!vi.name().empty()) body.declare(vi.name(), type(vi.type(), where + " value '" + vi.name() + "'"));
  return f;
}

Model Reader::read() {
  wire::SplitModel split = wire::split_initializer_data(src_, size_, label_);
  pb::ModelProto mp;
  if (!mp.ParseFromString(split.skeleton))
    throw ParseError(label_ + ": not a valid ONNX model: the protobuf message is malformed");
  if (!mp.has_graph()) throw ParseError(label_ + ": not an ONNX model: it has no graph");
  if (mp.ir_version() <= 0) throw ParseError(label_ + ": not an ONNX model: ir_version is missing or not positive");
  check_utf8(mp, label_);

  Model m;
  m.ir_version = mp.ir_version();
  m.producer_name = mp.producer_name();
  m.producer_version = mp.producer_version();
  m.domain = mp.domain();
  m.model_version = mp.model_version();
  m.doc_string = mp.doc_string();
  m.metadata = metadata_of(mp.metadata_props());
  m.opset_imports = opsets_of(mp.opset_import(), label_);
  m.training_info.assign(mp.training_info().begin(), mp.training_info().end());
  m.device_configurations.assign(mp.configuration().begin(), mp.configuration().end());
  graph(mp.graph(), m.graph(), label_ + ": graph '" + mp.graph().name() + "'", &split.initializer);
  for (const auto& fp : mp.functions()) m.functions.push_back(function(fp));
  m.graph().validate();
  for (const Function& f : m.functions) f.body->validate();
  return m;
}

}  // namespace

Model load_model(const std::string& path, const LoadOptions& options) {
  auto map = util::FileMap::open(path);
  std::string base = options.base_dir;
  if (base.empty()) base = std::filesystem::path(path).parent_path().string();
  if (base.empty()) base = ".";
  Reader reader("'" + path + "'", base, true, map->data(), map->size(), map, true);
  Model m = reader.read();
  m.source_path = path;
  return m;
}

Model load_model_from_bytes(const void* data, size_t size, const LoadOptions& options) {
  Reader reader("<model bytes>", options.base_dir, !options.base_dir.empty(), static_cast<const std::byte*>(data),
                static_cast<int64_t>(size), nullptr);
  return reader.read();
}

}  // namespace tether::ir
