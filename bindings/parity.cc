// tether._core.compare: tensor comparison metrics for the parity toolkit.
#include "bindings.h"

namespace tether::py {

namespace {

pyb::dict metrics_dict(const parity::Metrics& mt) {
  pyb::dict d;
  d["shape"] = pyb::tuple(pyb::cast(mt.shape));
  d["elements"] = mt.elements;
  d["exact"] = mt.exact;
  d["max_abs_error"] = mt.max_abs_error;
  d["mean_abs_error"] = mt.mean_abs_error;
  d["max_rel_error"] = mt.max_rel_error;
  d["cosine"] = mt.cosine;
  d["snr_db"] = mt.snr_db;
  d["mismatches"] = mt.mismatches;
  d["nonfinite_mismatches"] = mt.nonfinite_mismatches;
  d["mismatch_fraction"] = mt.mismatch_fraction;
  d["worst_index"] = mt.worst_index;
  d["worst_reference"] = mt.worst_reference;
  d["worst_candidate"] = mt.worst_candidate;
  d["required_atol"] = mt.required_atol;
  d["required_rtol"] = mt.required_rtol;
  d["ok"] = mt.ok;
  d["problem"] = mt.problem;
  return d;
}

parity::Tolerance tolerance(double atol, double rtol, const std::string& rule) {
  return parity::Tolerance{atol, rtol, parity::rule_from_name(rule)};
}

}  // namespace

void register_parity(pyb::module_& m) {
  m.def(
      "compare",
      [](const pyb::handle& reference, const pyb::handle& candidate, double atol, double rtol, const std::string& rule) {
        const parity::Tolerance tol = tolerance(atol, rtol, rule);
        std::vector<pyb::array> keep;
        const ir::Tensor r = borrow_numpy(reference, "the reference", keep);
        const ir::Tensor c = borrow_numpy(candidate, "the candidate", keep);
        parity::Metrics mt;
        {
          pyb::gil_scoped_release release;
          mt = parity::compare(r, c, tol);
        }
        return metrics_dict(mt);
      },
      pyb::arg("reference"), pyb::arg("candidate"), pyb::arg("atol"), pyb::arg("rtol"), pyb::arg("rule") = "numpy");

  pyb::class_<parity::CompareState>(m, "CompareState")
      .def(pyb::init([](double atol, double rtol, const std::string& rule) {
             return parity::CompareState(tolerance(atol, rtol, rule));
           }),
           pyb::arg("atol"), pyb::arg("rtol"), pyb::arg("rule") = "numpy")
      .def(
          "add",
          [](parity::CompareState& s, const pyb::handle& reference, const pyb::handle& candidate, int64_t first_row) {
            std::vector<pyb::array> keep;
            const ir::Tensor r = borrow_numpy(reference, "the reference", keep);
            const ir::Tensor c = borrow_numpy(candidate, "the candidate", keep);
            pyb::gil_scoped_release release;
            s.add(r, c, first_row);
          },
          pyb::arg("reference"), pyb::arg("candidate"), pyb::arg("first_row"))
      .def(
          "add_unequal",
          [](parity::CompareState& s, const pyb::array_t<uint8_t, pyb::array::c_style | pyb::array::forcecast>& unequal,
             int64_t first_row) {
            std::vector<int64_t> dims(unequal.shape(), unequal.shape() + unequal.ndim());
            s.add_unequal(dims, unequal.data(), first_row);
          },
          pyb::arg("unequal"), pyb::arg("first_row"))
      .def("merge", &parity::CompareState::merge, pyb::arg("other"))
      .def("shift_rows", &parity::CompareState::shift_rows, pyb::arg("offset"))
      .def("metrics", [](const parity::CompareState& s) { return metrics_dict(s.metrics()); })
      .def_property_readonly("rows", &parity::CompareState::rows)
      .def_property_readonly("worst_location", &parity::CompareState::worst_location)
      .def("to_bytes", [](const parity::CompareState& s) { return pyb::bytes(s.to_bytes()); })
      .def_static("from_bytes", [](const pyb::bytes& b) {
        return parity::CompareState::from_bytes(std::string_view(b));
      });
}

}  // namespace tether::py
