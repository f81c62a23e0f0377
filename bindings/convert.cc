// Conversions between tether IR objects and Python values.
#include "bindings.h"

namespace tether::py {

namespace {

const char* numpy_format(ir::DType t) {
  switch (t) {
    case ir::DType::kFloat32: return "float32";
    case ir::DType::kUInt8: return "uint8";
    case ir::DType::kInt8: return "int8";
    case ir::DType::kUInt16: return "uint16";
    case ir::DType::kInt16: return "int16";
    case ir::DType::kInt32: return "int32";
    case ir::DType::kInt64: return "int64";
    case ir::DType::kBool: return "bool";
    case ir::DType::kFloat16: return "float16";
    case ir::DType::kFloat64: return "float64";
    case ir::DType::kUInt32: return "uint32";
    case ir::DType::kUInt64: return "uint64";
    case ir::DType::kComplex64: return "complex64";
    case ir::DType::kComplex128: return "complex128";
    default: return nullptr;
  }
}

pyb::object text(const std::string& s) {
  PyObject* u = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), nullptr);
  if (u != nullptr) return pyb::reinterpret_steal<pyb::object>(u);
  PyErr_Clear();
  return pyb::bytes(s);
}

pyb::object dims_to_python(const ir::Shape& s) {
  if (!s.has_rank()) return pyb::none();
  pyb::tuple dims(s.rank());
  for (size_t i = 0; i < s.rank(); ++i) {
    const ir::Dim& d = s[i];
    if (d.is_known()) dims[i] = pyb::int_(d.value());
    else if (d.is_symbolic()) dims[i] = pyb::str(d.param());
    else dims[i] = pyb::none();
  }
  return dims;
}

const char* kind_name(ir::ValueType::Kind k) {
  switch (k) {
    case ir::ValueType::Kind::kUnknown: return "unknown";
    case ir::ValueType::Kind::kTensor: return "tensor";
    case ir::ValueType::Kind::kSparseTensor: return "sparse_tensor";
    case ir::ValueType::Kind::kSequence: return "sequence";
    case ir::ValueType::Kind::kMap: return "map";
    case ir::ValueType::Kind::kOptional: return "optional";
    case ir::ValueType::Kind::kOpaque: return "opaque";
  }
  return "unknown";
}

pyb::list node_list(const ir::Graph& g);

pyb::dict sparse_to_python(const ir::SparseTensor& s) {
  pyb::dict d;
  d["values"] = tensor_to_numpy(s.values);
  d["indices"] = tensor_to_numpy(s.indices);
  d["dims"] = pyb::cast(s.dims);
  return d;
}

}  // namespace

namespace {

ir::DType numpy_dtype(const pyb::dtype& dt, const std::string& what) {
  const char kind = dt.kind();
  const auto size = dt.itemsize();
  if (kind == 'f' && size == 4) return ir::DType::kFloat32;
  if (kind == 'f' && size == 8) return ir::DType::kFloat64;
  if (kind == 'f' && size == 2) return ir::DType::kFloat16;
  if (kind == 'V' && size == 2 && std::string(pyb::str(dt)) == "bfloat16") return ir::DType::kBFloat16;  // ml_dtypes
  if (kind == 'b' && size == 1) return ir::DType::kBool;
  if (kind == 'c' && size == 8) return ir::DType::kComplex64;
  if (kind == 'c' && size == 16) return ir::DType::kComplex128;
  if (kind == 'i' || kind == 'u') {
    const bool u = kind == 'u';
    switch (size) {
      case 1: return u ? ir::DType::kUInt8 : ir::DType::kInt8;
      case 2: return u ? ir::DType::kUInt16 : ir::DType::kInt16;
      case 4: return u ? ir::DType::kUInt32 : ir::DType::kInt32;
      case 8: return u ? ir::DType::kUInt64 : ir::DType::kInt64;
      default: break;
    }
  }
  throw ArgumentError(what + " has numpy dtype " + std::string(pyb::str(dt)) + ", which tether cannot take");
}

}  // namespace

ir::Tensor borrow_numpy(const pyb::handle& value, const std::string& what, std::vector<pyb::array>& keep) {
  pyb::array arr = pyb::array::ensure(value);
  if (!arr) throw ArgumentError(what + " is not an array");
  const ir::DType dt = numpy_dtype(arr.dtype(), what);
  // Kernels read values in the machine's byte order: a byte-swapped array ('>f4' on x86-64) is
  // converted here, where every numpy array enters, into a native C-contiguous copy.
  if (!arr.dtype().attr("isnative").cast<bool>())
    arr = arr.attr("astype")(arr.dtype().attr("newbyteorder")("="), pyb::arg("order") = "C");
  else if (!(arr.flags() & pyb::array::c_style))
    arr = pyb::module_::import("numpy").attr("ascontiguousarray")(arr);
  std::vector<int64_t> dims(arr.shape(), arr.shape() + arr.ndim());
  const auto nbytes = static_cast<int64_t>(arr.nbytes());
  ir::Tensor t = ir::Tensor::from_buffer(dt, dims, ir::Buffer::borrow(arr.data(), nbytes, nullptr));
  keep.push_back(std::move(arr));
  return t;
}

pyb::object tensor_to_numpy(const ir::Tensor& t, bool writeable) {
  std::vector<pyb::ssize_t> shape(t.dims().begin(), t.dims().end());
  if (t.dtype() == ir::DType::kString) {
    pyb::array out(pyb::dtype("O"), shape);
    auto* items = static_cast<PyObject**>(out.mutable_data());
    for (size_t i = 0; i < t.string_values().size(); ++i) items[i] = text(t.string_values()[i]).release().ptr();
    return out;
  }
  const char* fmt = numpy_format(t.dtype());
  pyb::dtype dt;
  if (t.dtype() == ir::DType::kBFloat16) {  // numpy's bfloat16 comes from ml_dtypes (an onnx dependency)
    try {
      dt = pyb::dtype::from_args(pyb::module_::import("ml_dtypes").attr("bfloat16"));
    } catch (const pyb::error_already_set&) {
      throw ArgumentError("tensor '" + t.name() + "' is bfloat16; numpy arrays of it need the ml_dtypes package (pip install ml_dtypes)");
    }
  } else if (fmt != nullptr)
    dt = pyb::dtype(fmt);
  else
    throw ArgumentError("tensor '" + t.name() + "' has dtype " + std::string(ir::dtype_name(t.dtype())) +
                        ", which numpy has no type for; read its raw bytes instead");
  auto* keep = new std::shared_ptr<ir::Buffer>(t.buffer());
  pyb::capsule owner(keep, [](void* p) { delete static_cast<std::shared_ptr<ir::Buffer>*>(p); });
  pyb::array out(dt, shape, t.raw_data(), owner);
  if (!writeable) out.attr("flags").attr("writeable") = false;
  return out;
}

pyb::tuple type_to_python(const ir::ValueType& t) {
  return pyb::make_tuple(kind_name(t.kind()), std::string(ir::dtype_name(t.dtype())), dims_to_python(t.shape()));
}

pyb::object attribute_to_python(const ir::Attribute& a) {
  using K = ir::AttrKind;
  if (!a.ref_attr_name().empty()) return pyb::dict(pyb::arg("ref_attr_name") = a.ref_attr_name());
  switch (a.kind()) {
    case K::kFloat: return pyb::float_(a.as_float());
    case K::kInt: return pyb::int_(a.as_int());
    case K::kString: return text(a.as_string());
    case K::kTensor: return tensor_to_numpy(a.as_tensor());
    case K::kGraph: return graph_to_python(*a.as_graph());
    case K::kSparseTensor: return sparse_to_python(a.as_sparse_tensor());
    case K::kTypeProto: return type_to_python(a.as_type());
    case K::kFloats: return pyb::cast(a.as_floats());
    case K::kInts: return pyb::cast(a.as_ints());
    case K::kStrings: {
      pyb::list out;
      for (const auto& s : a.as_strings()) out.append(text(s));
      return out;
    }
    case K::kTensors: {
      pyb::list out;
      for (const auto& t : a.as_tensors()) out.append(tensor_to_numpy(t));
      return out;
    }
    case K::kGraphs: {
      pyb::list out;
      for (const auto& g : a.as_graphs()) out.append(graph_to_python(*g));
      return out;
    }
    case K::kSparseTensors: {
      pyb::list out;
      for (const auto& s : a.as_sparse_tensors()) out.append(sparse_to_python(s));
      return out;
    }
    case K::kTypeProtos: {
      pyb::list out;
      for (const auto& t : a.as_types()) out.append(type_to_python(t));
      return out;
    }
    case K::kUndefined: break;
  }
  return pyb::none();
}

namespace {
pyb::list node_list(const ir::Graph& g) {
  pyb::list nodes;
  for (const ir::Node* n : g.nodes()) {
    pyb::list inputs, outputs;
    for (const ir::Value* v : n->inputs()) inputs.append(v ? v->name() : std::string());
    for (const ir::Value* v : n->outputs()) outputs.append(v ? v->name() : std::string());
    pyb::dict attrs;
    for (const ir::Attribute& a : n->attributes()) attrs[pyb::str(a.name())] = attribute_to_python(a);
    nodes.append(pyb::make_tuple(n->name(), n->op_type(), n->domain(), inputs, outputs, attrs));
  }
  return nodes;
}

}  // namespace

pyb::list values_to_python(const std::vector<ir::Value*>& values) {
  pyb::list out;
  for (const ir::Value* v : values) out.append(pyb::make_tuple(v->name(), type_to_python(v->type())));
  return out;
}

pyb::dict graph_to_python(const ir::Graph& g) {
  pyb::dict d;
  d["name"] = g.name();
  d["inputs"] = values_to_python(g.inputs());
  d["outputs"] = values_to_python(g.outputs());
  d["nodes"] = node_list(g);
  return d;
}

}  // namespace tether::py
