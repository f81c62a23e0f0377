#include "bindings.h"

PYBIND11_MODULE(_core, m) {
  m.doc() = "tether's compiled core. Use the `tether` package, which wraps it.";
  tether::py::register_errors(m);
  tether::py::register_model(m);
  tether::py::register_session(m);
  tether::py::register_passes(m);
  tether::py::register_parity(m);
  tether::py::register_builder(m);
  tether::py::register_quant(m);
  tether::py::register_quant_methods(m);
}
