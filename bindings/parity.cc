// tether._core.compare: tensor comparison metrics for the parity toolkit.
#include "bindings.h"

namespace tether::py {

void register_parity(pyb::module_& m) {
  m.def(
      "compare",
      [](const pyb::handle& reference, const pyb::handle& candidate, double atol, double rtol, const std::string& rule) {
        parity::Tolerance tol{atol, rtol, parity::rule_from_name(rule)};
        std::vector<pyb::array> keep;
        const ir::Tensor r = borrow_numpy(reference, "the reference", keep);
        const ir::Tensor c = borrow_numpy(candidate, "the candidate", keep);
        parity::Metrics mt;
        {
          pyb::gil_scoped_release release;
          mt = parity::compare(r, c, tol);
        }
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
      },
      pyb::arg("reference"), pyb::arg("candidate"), pyb::arg("atol"), pyb::arg("rtol"), pyb::arg("rule") = "numpy");
}

}  // namespace tether::py
