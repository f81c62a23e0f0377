// tether._core quantization: TensorStats, Calibrator, planning and the QDQ rewrite.
#include "bindings.h"

namespace tether::py {

namespace {

// A float32 array's data and dims, made C-contiguous (a copy only when it is not already).
struct FloatArray {
  pyb::array_t<float, pyb::array::c_style | pyb::array::forcecast> array;
  std::vector<int64_t> dims;
  explicit FloatArray(const pyb::handle& value, const std::string& what) {
    if (!pyb::isinstance<pyb::array>(value)) throw ArgumentError(what + " must be a numpy array");
    array = pyb::array_t<float, pyb::array::c_style | pyb::array::forcecast>::ensure(value);
    if (!array) throw ArgumentError(what + " cannot be read as float32");
    for (pyb::ssize_t d = 0; d < array.ndim(); ++d) dims.push_back(array.shape(d));
  }
};

void register_stats(pyb::module_& m) {
  using quant::TensorStats;
  pyb::class_<TensorStats>(m, "TensorStats")
      .def(pyb::init<int, int>(), pyb::arg("bins") = 2048, pyb::arg("channel_axis") = -1)
      .def(
          "observe",
          [](TensorStats& s, const pyb::handle& values) {
            FloatArray a(values, "values");
            pyb::gil_scoped_release release;
            s.observe(a.array.data(), a.dims);
          },
          pyb::arg("values"))
      .def("merge", &TensorStats::merge, pyb::arg("other"))
      .def_readwrite("bins", &TensorStats::bins)
      .def_readwrite("count", &TensorStats::count)
      .def_readwrite("zeros", &TensorStats::zeros)
      .def_readwrite("nonfinite", &TensorStats::nonfinite)
      .def_readwrite("min", &TensorStats::min)
      .def_readwrite("max", &TensorStats::max)
      .def_property(
          "exponent", [](const TensorStats& s) -> pyb::object {
            if (s.exponent == TensorStats::kNoExponent) return pyb::none();
            return pyb::int_(s.exponent);
          },
          [](TensorStats& s, const pyb::object& e) { s.exponent = e.is_none() ? TensorStats::kNoExponent : e.cast<int>(); })
      .def_readwrite("positive", &TensorStats::positive)
      .def_readwrite("negative", &TensorStats::negative)
      .def_readwrite("channel_absmax", &TensorStats::channel_absmax)
      .def_readwrite("channel_axis", &TensorStats::channel_axis)
      .def_property_readonly("bin_width", &TensorStats::bin_width)
      .def_property_readonly("absmax", &TensorStats::absmax);
}

void register_calibrator(pyb::module_& m) {
  using quant::Calibrator;
  pyb::class_<Calibrator>(m, "Calibrator")
      .def(pyb::init([](const ir::Model& model, const std::vector<std::pair<std::string, int>>& tensors, int bins,
                        int threads, bool skip_nonfinite) {
             quant::CalibratorOptions o;
             o.bins = bins;
             o.threads = threads;
             o.skip_nonfinite = skip_nonfinite;
             pyb::gil_scoped_release release;
             return std::make_unique<Calibrator>(model, tensors, o);
           }),
           pyb::arg("model"), pyb::arg("tensors"), pyb::arg("bins") = 2048, pyb::arg("threads") = 0,
           pyb::arg("skip_nonfinite") = false)
      .def(
          "observe",
          [](Calibrator& c, const pyb::dict& feeds) {
            Feeds f(feeds);
            pyb::gil_scoped_release release;
            c.observe(f.inputs);
          },
          pyb::arg("feeds"))
      .def("stats", [](const Calibrator& c) { return c.stats(); })
      .def_property_readonly("samples", &Calibrator::samples)
      .def_property_readonly("batches", &Calibrator::batches)
      .def_property_readonly("skipped", &Calibrator::skipped)
      .def("state", [](const Calibrator& c) { return pyb::bytes(c.state()); })
      .def(
          "merge", [](Calibrator& c, const pyb::bytes& state) { c.merge(std::string(state)); }, pyb::arg("state"));
}

}  // namespace

void register_quant(pyb::module_& m) {
  register_stats(m);
  register_calibrator(m);
}

}  // namespace tether::py
