// tether._core range methods, quantization parameters and calibration files: conversions of
// Python values to tether::quant's types and back; the logic lives in cpp/src/quant.
#include "bindings.h"

namespace tether::py {

namespace {

quant::Grid grid_of(const std::string& dtype, bool symmetric, bool reduce_range) {
  const auto dt = ir::dtype_from_name(dtype);
  if (!dt) throw ArgumentError("unknown data type '" + dtype + "'; quantization grids are int8 or uint8");
  return {*dt, symmetric, reduce_range};
}

quant::Range range_of(const std::pair<float, float>& r) { return {r.first, r.second}; }

std::pair<float, float> pair_of(quant::Range r) { return {r.min, r.max}; }

}  // namespace

void register_quant_methods(pyb::module_& m) {
  using namespace pybind11::literals;
  m.def("quant_method_names", &quant::method_names);
  m.def(
      "quant_compute_range",
      [](const quant::TensorStats& stats, const std::string& method, double percentile, int entropy_levels,
         const std::string& dtype, bool symmetric, bool reduce_range) {
        const quant::Grid grid = grid_of(dtype, symmetric, reduce_range);
        const quant::MethodOptions options{method, percentile, entropy_levels};
        pyb::gil_scoped_release release;
        return pair_of(quant::compute_range(stats, options, grid));
      },
      "stats"_a, "method"_a, "percentile"_a = 99.999, "entropy_levels"_a = 128, "dtype"_a = "int8", "symmetric"_a = false,
      "reduce_range"_a = false);
  m.def(
      "quant_estimate_sqnr_db",
      [](const quant::TensorStats& stats, const std::pair<float, float>& range, const std::string& dtype, bool symmetric,
         bool reduce_range) {
        const quant::Grid grid = grid_of(dtype, symmetric, reduce_range);
        pyb::gil_scoped_release release;
        return quant::estimate_sqnr_db(stats, range_of(range), grid);
      },
      "stats"_a, "range"_a, "dtype"_a = "int8", "symmetric"_a = false, "reduce_range"_a = false);
  m.def(
      "quant_clipped_fraction",
      [](const quant::TensorStats& stats, const std::pair<float, float>& range) {
        return quant::clipped_fraction(stats, range_of(range));
      },
      "stats"_a, "range"_a);
  m.def(
      "quant_qparams_for_range",
      [](float rmin, float rmax, const std::string& dtype, bool symmetric, bool reduce_range) {
        const quant::QParams q = quant::qparams_for_range(rmin, rmax, grid_of(dtype, symmetric, reduce_range));
        return std::make_pair(q.scale[0], q.zero_point[0]);
      },
      "rmin"_a, "rmax"_a, "dtype"_a = "int8", "symmetric"_a = false, "reduce_range"_a = false);
  m.def(
      "quant_weight_qparams",
      [](const pyb::handle& array, int axis, const std::string& dtype, bool symmetric, bool reduce_range,
         const std::string& name) {
        std::vector<pyb::array> keep;
        ir::Tensor weight = borrow_numpy(array, "weight '" + name + "'", keep);
        weight.set_name(name);
        const quant::QParams q = quant::weight_qparams(weight, axis, grid_of(dtype, symmetric, reduce_range));
        pyb::array_t<float> scales(static_cast<pyb::ssize_t>(q.scale.size()));
        pyb::array_t<int64_t> zero_points(static_cast<pyb::ssize_t>(q.zero_point.size()));
        std::copy(q.scale.begin(), q.scale.end(), scales.mutable_data());
        std::copy(q.zero_point.begin(), q.zero_point.end(), zero_points.mutable_data());
        return std::make_pair(scales, zero_points);
      },
      "array"_a, "axis"_a, "dtype"_a = "int8", "symmetric"_a = true, "reduce_range"_a = false, "name"_a = "weight");
  m.def("quant_write_tensorrt_cache", &quant::write_tensorrt_cache, "scales"_a,
        "header"_a = "TRT-8601-EntropyCalibration2");
  m.def("quant_read_tensorrt_cache", &quant::read_tensorrt_cache, "text"_a);
  m.def(
      "quant_write_ncnn_table",
      [](std::map<std::string, std::vector<float>> weight_scales, std::map<std::string, float> input_scales) {
        return quant::write_ncnn_table({std::move(weight_scales), std::move(input_scales)});
      },
      "weight_scales"_a, "input_scales"_a);
  m.def(
      "quant_read_ncnn_table",
      [](const std::string& text) {
        quant::NcnnTable t = quant::read_ncnn_table(text);
        return std::make_pair(std::move(t.weight_scales), std::move(t.input_scales));
      },
      "text"_a);
}

}  // namespace tether::py
