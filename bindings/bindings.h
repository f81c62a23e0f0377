// Shared declarations of the pybind11 module tether._core.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "tether/tether.h"

namespace tether::py {

namespace pyb = pybind11;

void register_errors(pyb::module_& m);
void register_model(pyb::module_& m);
void register_session(pyb::module_& m);
void register_passes(pyb::module_& m);
void register_parity(pyb::module_& m);
void register_builder(pyb::module_& m);
void register_quant(pyb::module_& m);
void register_quant_methods(pyb::module_& m);

/// A numpy array over the tensor's buffer (no copy), kept alive by the buffer; read-only
/// unless `writeable` (for buffers the caller now owns alone). String tensors become object
/// arrays. Throws ArgumentError for types numpy lacks.
pyb::object tensor_to_numpy(const ir::Tensor& t, bool writeable = false);
/// A tensor borrowing the bytes of `value` (a numpy array, made C-contiguous first when it is
/// not, and converted to native byte order when it is byte-swapped, e.g. '>f4'), which is
/// appended to `keep`: the tensor is valid while `keep` holds it. `what` names the value in
/// errors ("input 'x'"). Throws ArgumentError for a non-array or a dtype tether lacks
/// (structured and object arrays included).
ir::Tensor borrow_numpy(const pyb::handle& value, const std::string& what, std::vector<pyb::array>& keep);
/// Named numpy inputs borrowed as tensors; the arrays stay referenced here, so the GIL may be
/// released while the tensors are read.
struct Feeds {
  std::vector<pyb::array> keep;
  std::vector<std::pair<std::string, ir::Tensor>> inputs;
  explicit Feeds(const pyb::dict& feeds) {
    for (const auto& [key, value] : feeds) {
      const std::string name = pyb::cast<std::string>(key);
      inputs.emplace_back(name, borrow_numpy(value, "input '" + name + "'", keep));
    }
  }
};

/// A Python value for an attribute: numbers, str (bytes when not UTF-8), lists, numpy arrays
/// for tensors, and dicts for graphs.
pyb::object attribute_to_python(const ir::Attribute& a);
/// (kind, dtype name, shape) of a value type; shape is a tuple of int / str / None, or None.
pyb::tuple type_to_python(const ir::ValueType& t);
/// [(name, type_to_python(type)), ...] for `values`.
pyb::list values_to_python(const std::vector<ir::Value*>& values);
/// A graph as a dict of its name, inputs, outputs and nodes (attributes converted).
pyb::dict graph_to_python(const ir::Graph& g);

}  // namespace tether::py
