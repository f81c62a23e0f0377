// Writing ONNX models: tether IR -> protobuf skeleton, with weights spliced in from their
// buffers or written to an external data file, never copied into protobuf strings first.
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "ir/external_data.h"
#include "ir/wire.h"
#include "tether/error.h"
#include "tether/onnx.h"
#include "tether_onnx.pb.h"
#include "util/atomic_file.h"

namespace tether::ir {

namespace {

namespace pb = onnx_pb;

template <typename Entries>
void put_metadata(const Metadata& md, Entries* out) {
  for (const auto& [k, v] : md) {
    auto* e = out->Add();
    e->set_key(k);
    e->set_value(v);
  }
}

void put_opsets(const std::vector<OpsetImport>& opsets,
                google::protobuf::RepeatedPtrField<pb::OperatorSetIdProto>* out) {
  for (const OpsetImport& o : opsets) {
    auto* p = out->Add();
    p->set_domain(o.domain);
    p->set_version(o.version);
  }
}

// One tensor bound for the external data file.
struct ExternalTensor {
  const Tensor* tensor;
  int64_t offset;
};

class Writer {
 public:
  Writer(bool external, const SaveOptions& options, std::string location)
      : external_(external), options_(options), location_(std::move(location)) {}

  void model(const Model& m, pb::ModelProto* p);

  const std::vector<wire::Chunk>& splice() const { return splice_; }
  const std::vector<ExternalTensor>& external_tensors() const { return external_tensors_; }
  int64_t external_end() const { return external_end_; }

 private:
  void tensor_header(const Tensor& t, const std::string& name, pb::TensorProto* p) const;
  void tensor(const Tensor& t, const std::string& name, pb::TensorProto* p);
  void initializer(const Tensor& t, const std::string& name, pb::TensorProto* p, bool top);
  void sparse(const SparseTensor& s, pb::SparseTensorProto* p);
  void shape(const Shape& s, pb::TensorShapeProto* p) const;
  void type(const ValueType& t, pb::TypeProto* p) const;
  void value_info(const Value& v, pb::ValueInfoProto* p) const;
  void attribute(const Attribute& a, pb::AttributeProto* p);
  void node(const Node& n, pb::NodeProto* p);
  void graph(const Graph& g, pb::GraphProto* p, bool top);
  void function(const Function& f, pb::FunctionProto* p);

  bool external_;
  const SaveOptions& options_;
  std::string location_;
  std::vector<wire::Chunk> splice_;
  std::vector<ExternalTensor> external_tensors_;
  int64_t external_end_ = 0;
};

void Writer::tensor_header(const Tensor& t, const std::string& name, pb::TensorProto* p) const {
  for (int64_t d : t.dims()) p->add_dims(d);
  p->set_data_type(static_cast<int32_t>(t.dtype()));
  if (!name.empty()) p->set_name(name);
  if (!t.doc_string().empty()) p->set_doc_string(t.doc_string());
  put_metadata(t.metadata(), p->mutable_metadata_props());
}

// A tensor with its data inside the message.
void Writer::tensor(const Tensor& t, const std::string& name, pb::TensorProto* p) {
  tensor_header(t, name, p);
  if (t.dtype() == DType::kString) {
    for (const auto& s : t.string_values()) p->add_string_data(s);
  } else if (t.nbytes() > 0) {
    p->set_raw_data(t.raw_data(), static_cast<size_t>(t.nbytes()));
  }
}

// An initializer: to the external file when it is large enough, else spliced in (main graph)
// or copied into the message (subgraphs).
void Writer::initializer(const Tensor& t, const std::string& name, pb::TensorProto* p, bool top) {
  const bool raw = t.dtype() != DType::kString;
  if (external_ && raw && t.nbytes() >= options_.size_threshold && t.nbytes() > 0) {
    tensor_header(t, name, p);
    const int64_t align = options_.alignment;
    const int64_t offset = (external_end_ + align - 1) / align * align;
    external_tensors_.push_back({&t, offset});
    external_end_ = offset + t.nbytes();
    p->set_data_location(pb::TensorProto::EXTERNAL);
    put_metadata({{"location", location_}, {"offset", std::to_string(offset)}, {"length", std::to_string(t.nbytes())}},
                 p->mutable_external_data());
    if (top) splice_.push_back({nullptr, 0});
  } else if (top && raw) {
    tensor_header(t, name, p);
    splice_.push_back({t.nbytes() > 0 ? t.raw_data() : nullptr, t.nbytes()});
  } else {
    tensor(t, name, p);
    if (top) splice_.push_back({nullptr, 0});
  }
}

void Writer::sparse(const SparseTensor& s, pb::SparseTensorProto* p) {
  tensor(s.values, s.values.name(), p->mutable_values());
  tensor(s.indices, s.indices.name(), p->mutable_indices());
  for (int64_t d : s.dims) p->add_dims(d);
}

void Writer::shape(const Shape& s, pb::TensorShapeProto* p) const {
  for (const Dim& d : s.dims()) {
    auto* dp = p->add_dim();
    if (d.is_known()) dp->set_dim_value(d.value());
    else if (d.is_symbolic()) dp->set_dim_param(d.param());
    if (!d.denotation().empty()) dp->set_denotation(d.denotation());
  }
}

void Writer::type(const ValueType& t, pb::TypeProto* p) const {
  switch (t.kind()) {
    case ValueType::Kind::kUnknown: break;
    case ValueType::Kind::kTensor: {
      auto* tt = p->mutable_tensor_type();
      tt->set_elem_type(static_cast<int32_t>(t.dtype()));
      if (t.shape().has_rank()) shape(t.shape(), tt->mutable_shape());
      break;
    }
    case ValueType::Kind::kSparseTensor: {
      auto* st = p->mutable_sparse_tensor_type();
      st->set_elem_type(static_cast<int32_t>(t.dtype()));
      if (t.shape().has_rank()) shape(t.shape(), st->mutable_shape());
      break;
    }
    case ValueType::Kind::kSequence: type(t.element(), p->mutable_sequence_type()->mutable_elem_type()); break;
    case ValueType::Kind::kOptional: type(t.element(), p->mutable_optional_type()->mutable_elem_type()); break;
    case ValueType::Kind::kMap:
      p->mutable_map_type()->set_key_type(static_cast<int32_t>(t.dtype()));
      type(t.element(), p->mutable_map_type()->mutable_value_type());
      break;
    case ValueType::Kind::kOpaque:
      p->mutable_opaque_type()->set_domain(t.opaque_domain());
      p->mutable_opaque_type()->set_name(t.opaque_name());
      break;
  }
  if (!t.denotation().empty()) p->set_denotation(t.denotation());
}

void Writer::value_info(const Value& v, pb::ValueInfoProto* p) const {
  p->set_name(v.name());
  if (!v.type().is_unknown()) type(v.type(), p->mutable_type());
  if (!v.doc_string().empty()) p->set_doc_string(v.doc_string());
  put_metadata(v.metadata(), p->mutable_metadata_props());
}

void Writer::attribute(const Attribute& a, pb::AttributeProto* p) {
  p->set_name(a.name());
  p->set_type(static_cast<pb::AttributeProto::AttributeType>(a.kind()));
  if (!a.doc_string().empty()) p->set_doc_string(a.doc_string());
  if (!a.ref_attr_name().empty()) {
    p->set_ref_attr_name(a.ref_attr_name());
    return;
  }
  switch (a.kind()) {
    case AttrKind::kFloat: p->set_f(a.as_float()); break;
    case AttrKind::kInt: p->set_i(a.as_int()); break;
    case AttrKind::kString: p->set_s(a.as_string()); break;
    case AttrKind::kTensor: tensor(a.as_tensor(), a.as_tensor().name(), p->mutable_t()); break;
    case AttrKind::kGraph: graph(*a.as_graph(), p->mutable_g(), false); break;
    case AttrKind::kSparseTensor: sparse(a.as_sparse_tensor(), p->mutable_sparse_tensor()); break;
    case AttrKind::kTypeProto: type(a.as_type(), p->mutable_tp()); break;
    case AttrKind::kFloats: for (float f : a.as_floats()) p->add_floats(f); break;
    case AttrKind::kInts: for (int64_t i : a.as_ints()) p->add_ints(i); break;
    case AttrKind::kStrings: for (const auto& s : a.as_strings()) p->add_strings(s); break;
    case AttrKind::kTensors: for (const auto& t : a.as_tensors()) tensor(t, t.name(), p->add_tensors()); break;
    case AttrKind::kGraphs: for (const auto& g : a.as_graphs()) graph(*g, p->add_graphs(), false); break;
    case AttrKind::kSparseTensors: for (const auto& s : a.as_sparse_tensors()) sparse(s, p->add_sparse_tensors()); break;
    case AttrKind::kTypeProtos: for (const auto& t : a.as_types()) type(t, p->add_type_protos()); break;
    case AttrKind::kUndefined: throw ArgumentError("attribute '" + a.name() + "' has no kind and cannot be saved");
  }
}

void Writer::node(const Node& n, pb::NodeProto* p) {
  for (const Value* v : n.inputs()) p->add_input(v ? v->name() : std::string());
  for (const Value* v : n.outputs()) p->add_output(v ? v->name() : std::string());
  if (!n.name().empty()) p->set_name(n.name());
  p->set_op_type(n.op_type());
  if (!n.domain().empty()) p->set_domain(n.domain());
  if (!n.overload().empty()) p->set_overload(n.overload());
  for (const Attribute& a : n.attributes()) attribute(a, p->add_attribute());
  if (!n.doc_string().empty()) p->set_doc_string(n.doc_string());
  put_metadata(n.metadata(), p->mutable_metadata_props());
  for (const auto& dc : n.device_configurations()) p->add_device_configurations(dc);
}

void Writer::graph(const Graph& g, pb::GraphProto* p, bool top) {
  p->set_name(g.name());
  if (!g.doc_string().empty()) p->set_doc_string(g.doc_string());
  put_metadata(g.metadata(), p->mutable_metadata_props());
  for (const Value* v : g.inputs()) value_info(*v, p->add_input());
  for (const Value* v : g.initializers()) initializer(v->initializer(), v->name(), p->add_initializer(), top);
  for (const Value* v : g.sparse_initializers()) sparse(v->sparse_initializer(), p->add_sparse_initializer());
  for (const Node* n : g.topological_order()) node(*n, p->add_node());
  for (const Value* v : g.outputs()) value_info(*v, p->add_output());
  for (const Value* v : g.values()) {
    if (v->is_input() || v->is_output()) continue;
    if (v->is_declared() || (v->producer() != nullptr && !v->type().is_unknown())) value_info(*v, p->add_value_info());
  }
  for (const TensorAnnotation& a : g.quantization_annotations()) {
    auto* qa = p->add_quantization_annotation();
    qa->set_tensor_name(a.tensor_name);
    put_metadata(a.quant_parameter_tensor_names, qa->mutable_quant_parameter_tensor_names());
  }
}

void Writer::function(const Function& f, pb::FunctionProto* p) {
  p->set_name(f.name);
  p->set_domain(f.domain);
  if (!f.overload.empty()) p->set_overload(f.overload);
  for (const Value* v : f.body->inputs()) p->add_input(v->name());
  for (const Value* v : f.body->outputs()) p->add_output(v->name());
  for (const auto& a : f.attribute_names) p->add_attribute(a);
  for (const Attribute& a : f.attribute_defaults) attribute(a, p->add_attribute_proto());
  for (const Node* n : f.body->topological_order()) node(*n, p->add_node());
  if (!f.doc_string.empty()) p->set_doc_string(f.doc_string);
  put_opsets(f.opset_imports, p->mutable_opset_import());
  for (const Value* v : f.body->values())
    if (v->is_declared() && !v->is_input() && !v->is_output()) value_info(*v, p->add_value_info());
  put_metadata(f.metadata, p->mutable_metadata_props());
}

void Writer::model(const Model& m, pb::ModelProto* p) {
  p->set_ir_version(m.ir_version);
  if (!m.producer_name.empty()) p->set_producer_name(m.producer_name);
  if (!m.producer_version.empty()) p->set_producer_version(m.producer_version);
  if (!m.domain.empty()) p->set_domain(m.domain);
  if (m.model_version != 0) p->set_model_version(m.model_version);
  if (!m.doc_string.empty()) p->set_doc_string(m.doc_string);
  graph(m.graph(), p->mutable_graph(), true);
  put_opsets(m.opset_imports, p->mutable_opset_import());
  put_metadata(m.metadata, p->mutable_metadata_props());
  for (const auto& t : m.training_info) p->add_training_info(t);
  for (const Function& f : m.functions) function(f, p->add_functions());
  for (const auto& c : m.device_configurations) p->add_configuration(c);
}

// The model encoded with its weights: the skeleton, the splicer over it, and the writer that
// knows which tensors go to the external file.
struct Encoded {
  std::string skeleton;
  std::unique_ptr<Writer> writer;
  std::unique_ptr<wire::ModelSplicer> splicer;
};

Encoded encode(const Model& m, bool external, const SaveOptions& options, const std::string& location) {
  Encoded e;
  e.writer = std::make_unique<Writer>(external, options, location);
  pb::ModelProto proto;
  e.writer->model(m, &proto);
  if (proto.ByteSizeLong() > static_cast<size_t>(kMaxProtobufBytes))
    throw ArgumentError("the model's graph structure and small tensors take " + std::to_string(proto.ByteSizeLong()) +
                        " bytes, over the 2 GiB a single ONNX message can hold");
  e.skeleton = proto.SerializeAsString();
  e.splicer = std::make_unique<wire::ModelSplicer>(e.skeleton, e.writer->splice());
  return e;
}

std::string gib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f GiB", static_cast<double>(bytes) / (1 << 30));
  return text;
}

}  // namespace

SaveResult save_model(const Model& model, const std::string& path, const SaveOptions& options) {
  namespace fs = std::filesystem;
  if (options.size_threshold < 0) throw ArgumentError("size_threshold must be >= 0");
  if (options.alignment < 1) throw ArgumentError("alignment must be >= 1");
  const fs::path model_path(path);
  if (model_path.filename().empty()) throw ArgumentError("'" + path + "' names a folder, not a model file");
  const std::string location = options.location.empty() ? model_path.filename().string() + ".data" : options.location;
  try {
    external::check_save_location(path, location, "'" + path + "'");
  } catch (const ExternalDataError& e) {
    // Here the location is an option of this call, not something read from a model.
    throw ArgumentError(e.what());
  }

  Encoded enc = encode(model, options.external_data == ExternalData::kAlways, options, location);
  if (enc.splicer->size() > kMaxProtobufBytes) {
    if (options.external_data == ExternalData::kNever)
      throw ArgumentError("'" + path + "': the model with its weights inside takes " + gib(enc.splicer->size()) +
                          ", over the 2 GiB an ONNX file can hold; save it with external data");
    enc = encode(model, true, options, location);
  }

  SaveResult result;
  result.files.push_back(path);
  std::unique_ptr<util::AtomicFile> data_file;
  if (!enc.writer->external_tensors().empty()) {
    const fs::path data_path = model_path.parent_path() / location;
    std::error_code ec;
    if (data_path.has_parent_path()) fs::create_directories(data_path.parent_path(), ec);
    data_file = std::make_unique<util::AtomicFile>(data_path.string());
    for (const ExternalTensor& et : enc.writer->external_tensors()) {
      data_file->pad(et.offset - data_file->position());
      data_file->write(et.tensor->raw_data(), et.tensor->nbytes());
      result.external_bytes += et.tensor->nbytes();
    }
    data_file->finish();
    result.files.push_back(data_path.string());
  }
  util::AtomicFile model_file(path);
  enc.splicer->write([&](const void* p, int64_t n) { model_file.write(p, n); });
  model_file.finish();
  if (data_file) data_file->commit();
  model_file.commit();
  return result;
}

std::string serialize_model(const Model& model) {
  SaveOptions options;
  Encoded enc = encode(model, false, options, "");
  if (enc.splicer->size() > kMaxProtobufBytes)
    throw ArgumentError("the model with its weights inside takes " + gib(enc.splicer->size()) +
                        ", over the 2 GiB an ONNX message can hold; save it to a file with external data");
  std::string out;
  out.reserve(static_cast<size_t>(enc.splicer->size()));
  enc.splicer->write([&](const void* p, int64_t n) { out.append(static_cast<const char*>(p), static_cast<size_t>(n)); });
  return out;
}

}  // namespace tether::ir
