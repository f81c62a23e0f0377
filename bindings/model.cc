// tether._core.Model: loading, saving and reading a model.
#include "bindings.h"

namespace tether::py {

namespace {

ir::ExternalData external_mode(const std::string& mode) {
  if (mode == "auto") return ir::ExternalData::kAuto;
  if (mode == "never") return ir::ExternalData::kNever;
  if (mode == "always") return ir::ExternalData::kAlways;
  throw ArgumentError("external_data must be 'auto', 'never' or 'always', got '" + mode + "'");
}

const ir::Value& initializer_value(const ir::Model& m, const std::string& name) {
  const ir::Value* v = m.graph().find(name);
  if (v == nullptr || !v->has_initializer()) throw ArgumentError("the main graph has no initializer '" + name + "'");
  return *v;
}

}  // namespace

void register_model(pyb::module_& m) {
  using ir::Model;
  pyb::class_<Model>(m, "Model")
      .def_static(
          "load",
          [](const std::string& path) {
            pyb::gil_scoped_release release;
            return ir::load_model(path);
          },
          pyb::arg("path"))
      .def_static(
          "load_bytes",
          [](const pyb::bytes& data, const std::string& base_dir) {
            char* p = nullptr;
            Py_ssize_t n = 0;
            PyBytes_AsStringAndSize(data.ptr(), &p, &n);
            ir::LoadOptions o;
            o.base_dir = base_dir;
            pyb::gil_scoped_release release;  // `data` stays referenced by the caller's frame
            return ir::load_model_from_bytes(p, static_cast<size_t>(n), o);
          },
          pyb::arg("data"), pyb::arg("base_dir") = "")
      .def(
          "save",
          [](const Model& self, const std::string& path, const std::string& external_data, const std::string& location,
             int64_t size_threshold, int64_t alignment) {
            ir::SaveOptions o;
            o.external_data = external_mode(external_data);
            o.location = location;
            o.size_threshold = size_threshold;
            o.alignment = alignment;
            pyb::gil_scoped_release release;
            ir::SaveResult r = ir::save_model(self, path, o);
            return std::make_pair(r.files, r.external_bytes);
          },
          pyb::arg("path"), pyb::arg("external_data") = "auto", pyb::arg("location") = "",
          pyb::arg("size_threshold") = 1024, pyb::arg("alignment") = 4096)
      .def("clone", &Model::clone)
      .def("to_bytes",
           [](const Model& self) {
             std::string s;
             {
               pyb::gil_scoped_release release;
               s = ir::serialize_model(self);
             }
             return pyb::bytes(s);
           })
      .def("inputs", [](const Model& self) { return values_to_python(self.graph().inputs()); })
      .def("outputs", [](const Model& self) { return values_to_python(self.graph().outputs()); })
      .def("graph", [](const Model& self) { return graph_to_python(self.graph()); })
      .def("value_types",
           [](const Model& self) {
             pyb::dict out;
             for (const ir::Value* v : self.graph().values()) out[pyb::str(v->name())] = type_to_python(v->type());
             return out;
           })
      .def("opset",
           [](const Model& self) {
             pyb::dict out;
             for (const auto& o : self.opset_imports) out[pyb::str(o.domain.empty() ? "ai.onnx" : o.domain)] = o.version;
             return out;
           })
      .def("metadata",
           [](const Model& self) {
             pyb::dict out;
             for (const auto& [k, v] : self.metadata) out[pyb::str(k)] = v;
             return out;
           })
      .def_readonly("ir_version", &Model::ir_version)
      .def_readonly("producer_name", &Model::producer_name)
      .def_readonly("producer_version", &Model::producer_version)
      .def_readonly("doc_string", &Model::doc_string)
      .def_readonly("source_path", &Model::source_path)
      .def("initializer_names",
           [](const Model& self) {
             std::vector<std::string> names;
             for (const ir::Value* v : self.graph().initializers()) names.push_back(v->name());
             return names;
           })
      .def(
          "initializer",
          [](const Model& self, const std::string& name) { return tensor_to_numpy(initializer_value(self, name).initializer()); },
          pyb::arg("name"))
      .def(
          "initializer_raw",
          [](const Model& self, const std::string& name) {
            const ir::Tensor& t = initializer_value(self, name).initializer();
            if (t.dtype() == ir::DType::kString) throw ArgumentError("initializer '" + name + "' holds strings, not raw bytes");
            return pyb::make_tuple(std::string(ir::dtype_name(t.dtype())), t.dims(),
                                   pyb::bytes(static_cast<const char*>(t.raw_data()), static_cast<size_t>(t.nbytes())));
          },
          pyb::arg("name"))
      .def("summary",
           [](const Model& self) {
             ir::ModelSummary s = ir::summarize(self);
             pyb::dict d;
             d["op_counts"] = s.op_counts;
             d["num_nodes"] = s.num_nodes;
             d["num_initializers"] = s.num_initializers;
             d["num_parameters"] = s.num_parameters;
             d["weight_bytes"] = s.weight_bytes;
             d["num_subgraphs"] = s.num_subgraphs;
             return d;
           })
      .def("infer_shapes", [](Model& self, bool overwrite) {
        ops::InferenceOptions o;
        o.overwrite = overwrite;
        ops::InferenceReport r;
        {
          pyb::gil_scoped_release release;
          r = ops::infer_shapes(self, o);
        }
        pyb::dict d;
        d["nodes_inferred"] = r.nodes_inferred;
        d["nodes_skipped"] = r.nodes_skipped;
        d["ops_without_inference"] = r.ops_without_inference;
        return d;
      }, pyb::arg("overwrite") = false);
}

}  // namespace tether::py
