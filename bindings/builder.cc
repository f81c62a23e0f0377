// tether._core.GraphBuilder: Python values to shapes, tensors and attributes; the checks
// live in tether::GraphBuilder.
#include "bindings.h"

#include "tether/builder.h"

namespace tether::py {

namespace {

ir::DType dtype_of(const std::string& name) {
  auto dt = ir::dtype_from_name(name);
  if (!dt || *dt == ir::DType::kUndefined) throw ArgumentError("unknown data type '" + name + "'");
  return *dt;
}

ir::Shape shape_of(const pyb::sequence& dims, const std::string& what) {
  std::vector<ir::Dim> out;
  for (const pyb::handle& d : dims) {
    if (d.is_none()) out.emplace_back();
    else if (pyb::isinstance<pyb::str>(d)) out.push_back(ir::Dim::symbol(d.cast<std::string>()));
    else if (pyb::isinstance<pyb::int_>(d) && !pyb::isinstance<pyb::bool_>(d)) {
      const auto v = d.cast<int64_t>();
      if (v < 0) throw ArgumentError(what + ": dim " + std::to_string(v) + " is negative; use a name for a dynamic dim");
      out.emplace_back(v);
    } else {
      throw ArgumentError(what + ": a dim must be an int, a str (symbolic) or None, got " +
                          std::string(pyb::str(d.get_type().attr("__name__"))));
    }
  }
  return ir::Shape(std::move(out));
}

ir::Tensor copy_numpy(const pyb::handle& array, const std::string& what) {
  std::vector<pyb::array> keep;
  ir::Tensor borrowed = borrow_numpy(array, what, keep);
  return ir::Tensor::copy_of(borrowed.dtype(), borrowed.dims(), borrowed.raw_data(), borrowed.nbytes());
}

bool is_int(const pyb::handle& v) {
  return pyb::isinstance<pyb::int_>(v) || pyb::isinstance(v, pyb::module_::import("numpy").attr("integer"));
}
bool is_float(const pyb::handle& v) {
  return pyb::isinstance<pyb::float_>(v) || pyb::isinstance(v, pyb::module_::import("numpy").attr("floating"));
}

ir::Attribute list_attribute(const std::string& name, const pyb::sequence& items, const std::string& what) {
  bool all_int = true, all_number = true, all_str = true, all_array = true;
  for (const pyb::handle& v : items) {
    all_int = all_int && is_int(v);
    all_number = all_number && (is_int(v) || is_float(v));
    all_str = all_str && (pyb::isinstance<pyb::str>(v) || pyb::isinstance<pyb::bytes>(v));
    all_array = all_array && pyb::isinstance<pyb::array>(v);
  }
  if (all_int) return ir::Attribute::ints(name, items.cast<std::vector<int64_t>>());
  if (all_number) return ir::Attribute::floats(name, items.cast<std::vector<float>>());
  if (all_str) return ir::Attribute::strings(name, items.cast<std::vector<std::string>>());
  if (all_array) {
    std::vector<ir::Tensor> tensors;
    for (const pyb::handle& v : items) tensors.push_back(copy_numpy(v, what));
    return ir::Attribute::tensors(name, std::move(tensors));
  }
  throw ArgumentError(what + ": a list attribute must hold only ints, only floats, only strings or only arrays");
}

ir::Attribute attribute_of(const std::string& name, const pyb::handle& v, const std::string& where) {
  const std::string what = where + ": attribute '" + name + "'";
  if (is_int(v)) return ir::Attribute::i(name, v.cast<int64_t>());  // bool included: ONNX has no bool attribute
  if (is_float(v)) return ir::Attribute::f(name, v.cast<float>());
  if (pyb::isinstance<pyb::str>(v) || pyb::isinstance<pyb::bytes>(v)) return ir::Attribute::s(name, v.cast<std::string>());
  if (pyb::isinstance<pyb::array>(v)) return ir::Attribute::tensor(name, copy_numpy(v, what));
  if (pyb::isinstance<pyb::list>(v) || pyb::isinstance<pyb::tuple>(v))
    return list_attribute(name, v.cast<pyb::sequence>(), what);
  throw ArgumentError(what + " has Python type " + std::string(pyb::str(v.get_type().attr("__name__"))) +
                      "; attributes are int, float, str, a list of one of those, or a numpy array");
}

}  // namespace

void register_builder(pyb::module_& m) {
  using ops::GraphBuilder;
  pyb::class_<GraphBuilder>(m, "GraphBuilder")
      .def(pyb::init<std::string, const std::map<std::string, int64_t>&>(), pyb::arg("name") = "main",
           pyb::arg("opsets") = std::map<std::string, int64_t>{})
      .def(
          "input",
          [](GraphBuilder& self, const std::string& name, const std::string& dtype, const pyb::sequence& shape) {
            return self.input(name, dtype_of(dtype), shape_of(shape, "input '" + name + "'"));
          },
          pyb::arg("name"), pyb::arg("dtype"), pyb::arg("shape"))
      .def(
          "initializer",
          [](GraphBuilder& self, const std::string& name, const pyb::handle& array) {
            return self.initializer(name, copy_numpy(array, "initializer '" + name + "'"));
          },
          pyb::arg("name"), pyb::arg("array"))
      .def(
          "node",
          [](GraphBuilder& self, const std::string& op_type, const std::vector<std::string>& inputs,
             const pyb::dict& attributes, const std::string& name, const std::string& domain, size_t num_outputs,
             const std::vector<std::string>& outputs) {
            const std::string where = op_type + (name.empty() ? "" : " '" + name + "'");
            std::vector<ir::Attribute> attrs;
            for (const auto& [k, v] : attributes) attrs.push_back(attribute_of(k.cast<std::string>(), v, where));
            ops::NodeOptions o;
            o.name = name;
            o.domain = domain;
            o.num_outputs = num_outputs;
            o.outputs = outputs;
            return self.node(op_type, inputs, std::move(attrs), std::move(o));
          },
          pyb::arg("op_type"), pyb::arg("inputs"), pyb::arg("attributes"), pyb::arg("name") = "",
          pyb::arg("domain") = "", pyb::arg("num_outputs") = 1, pyb::arg("outputs") = std::vector<std::string>{})
      .def("output", &GraphBuilder::output, pyb::arg("name"))
      .def(
          "type", [](const GraphBuilder& self, const std::string& name) { return type_to_python(self.type(name)); },
          pyb::arg("name"))
      .def("build", &GraphBuilder::build);
}

}  // namespace tether::py
