// tether._core.optimize: the graph passes on a copy of a model.
#include "bindings.h"

namespace tether::py {

void register_passes(pyb::module_& m) {
  m.def(
      "optimize",
      [](const ir::Model& model) {
        pyb::gil_scoped_release release;
        ir::Model copy = model.clone();
        passes::OptimizeOptions options;
        options.evaluator = &engine::constant_evaluator();
        std::string report = passes::optimize(copy, options);
        return std::make_pair(std::move(copy), std::move(report));
      },
      pyb::arg("model"));
}

}  // namespace tether::py
