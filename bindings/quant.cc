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
      .def("reset", &Calibrator::reset)
      .def(
          "merge", [](Calibrator& c, const pyb::bytes& state) { c.merge(std::string(state)); }, pyb::arg("state"));
}

ir::DType grid_dtype(const std::string& name, const char* what) {
  if (name == "int8") return ir::DType::kInt8;
  if (name == "uint8") return ir::DType::kUInt8;
  throw ArgumentError(std::string(what) + " must be 'int8' or 'uint8', got '" + name + "'");
}

pyb::dict grid_to_python(const quant::Grid& g) {
  pyb::dict d;
  d["dtype"] = std::string(ir::dtype_name(g.dtype));
  d["symmetric"] = g.symmetric;
  d["reduce_range"] = g.reduce_range;
  return d;
}

// Options travel as a dict: the profile's, then any key given overrides it.
quant::QuantizeOptions options_from_python(const pyb::dict& d) {
  quant::QuantizeOptions o = quant::profile_options(d.contains("profile") ? d["profile"].cast<std::string>() : "onnxruntime");
  auto grid = [&](const char* key, quant::Grid& g) {
    if (!d.contains(key)) return;
    const pyb::dict gd = d[key].cast<pyb::dict>();
    if (gd.contains("dtype")) g.dtype = grid_dtype(gd["dtype"].cast<std::string>(), key);
    if (gd.contains("symmetric")) g.symmetric = gd["symmetric"].cast<bool>();
    if (gd.contains("reduce_range")) g.reduce_range = gd["reduce_range"].cast<bool>();
  };
  grid("activations", o.activations);
  grid("weights", o.weights);
  if (d.contains("per_channel")) o.per_channel = d["per_channel"].cast<bool>();
  if (d.contains("quantize_bias")) o.quantize_bias = d["quantize_bias"].cast<bool>();
  if (d.contains("quantize_outputs")) o.quantize_outputs = d["quantize_outputs"].cast<bool>();
  if (d.contains("op_types") && !d["op_types"].is_none()) o.op_types = d["op_types"].cast<std::vector<std::string>>();
  if (d.contains("exclude_nodes")) o.exclude_nodes = d["exclude_nodes"].cast<std::vector<std::string>>();
  return o;
}

pyb::dict options_to_python(const quant::QuantizeOptions& o) {
  pyb::dict d;
  d["profile"] = o.profile;
  d["activations"] = grid_to_python(o.activations);
  d["weights"] = grid_to_python(o.weights);
  d["per_channel"] = o.per_channel;
  d["quantize_bias"] = o.quantize_bias;
  d["quantize_outputs"] = o.quantize_outputs;
  d["op_types"] = o.op_types;
  d["exclude_nodes"] = o.exclude_nodes;
  return d;
}

pyb::tuple qparams_to_python(const quant::QParams& q) {
  return pyb::make_tuple(q.scale, q.zero_point, q.axis, std::string(ir::dtype_name(q.dtype)));
}

void register_plan(pyb::module_& m) {
  using quant::Plan;
  using quant::PlannedNode;
  pyb::class_<PlannedNode>(m, "PlannedNode")
      .def_readonly("node", &PlannedNode::node)
      .def_readonly("op_type", &PlannedNode::op_type)
      .def_readonly("inputs", &PlannedNode::inputs)
      .def_readonly("outputs", &PlannedNode::outputs)
      .def_readonly("weight", &PlannedNode::weight)
      .def_readonly("weight_axis", &PlannedNode::weight_axis)
      .def_readonly("bias", &PlannedNode::bias);
  pyb::class_<Plan::Tensor>(m, "PlannedTensor")
      .def_readonly("name", &Plan::Tensor::name)
      .def_readonly("channel_axis", &Plan::Tensor::channel_axis)
      .def_readonly("group", &Plan::Tensor::group)
      .def_readonly("all_readers", &Plan::Tensor::all_readers)
      .def_readonly("same_values_as", &Plan::Tensor::same_values_as);
  pyb::class_<Plan>(m, "Plan")
      .def_readonly("tensors", &Plan::tensors)
      .def_readonly("nodes", &Plan::nodes)
      .def_readonly("notes", &Plan::notes)
      .def("observed", &Plan::observed);

  m.def("quant_profile_names", &quant::profile_names);
  m.def("quant_profile_options", [](const std::string& p) { return options_to_python(quant::profile_options(p)); },
        pyb::arg("profile"));
  m.def("quant_options", [](const pyb::dict& d) { return options_to_python(options_from_python(d)); }, pyb::arg("options"));
  m.def(
      "quant_prepare",
      [](const ir::Model& model) {
        pyb::gil_scoped_release release;
        return quant::prepare(model);
      },
      pyb::arg("model"));
  m.def(
      "quant_plan",
      [](const ir::Model& prepared, const pyb::dict& options) { return quant::plan(prepared, options_from_python(options)); },
      pyb::arg("prepared"), pyb::arg("options"));
  m.def("quant_restrict_plan", &quant::restrict_plan, pyb::arg("plan"), pyb::arg("nodes"));
  m.def(
      "quant_compute_ranges",
      [](const Plan& plan, const quant::StatsMap& stats, const std::string& method, double percentile, int entropy_levels,
         const pyb::dict& options) {
        quant::MethodOptions mo;
        mo.method = method;
        mo.percentile = percentile;
        mo.entropy_levels = entropy_levels;
        const quant::QuantizeOptions o = options_from_python(options);
        std::map<std::string, quant::TensorRange> ranges;
        {
          pyb::gil_scoped_release release;
          ranges = quant::compute_ranges(plan, stats, mo, o);
        }
        pyb::dict out;
        for (const auto& [name, r] : ranges) out[pyb::str(name)] = pyb::make_tuple(r.range.min, r.range.max, r.method);
        return out;
      },
      pyb::arg("plan"), pyb::arg("stats"), pyb::arg("method"), pyb::arg("percentile") = 99.999,
      pyb::arg("entropy_levels") = 128, pyb::arg("options") = pyb::dict());
  m.def(
      "quant_quantize_qdq",
      [](const ir::Model& prepared, const Plan& plan, const pyb::dict& ranges, const pyb::dict& options) {
        std::map<std::string, quant::TensorRange> rs;
        for (const auto& [key, value] : ranges) {
          const auto t = value.cast<pyb::tuple>();
          rs[key.cast<std::string>()] = {{t[0].cast<float>(), t[1].cast<float>()}, t.size() > 2 ? t[2].cast<std::string>() : ""};
        }
        const quant::QuantizeOptions o = options_from_python(options);
        quant::QuantizedModel q;
        {
          pyb::gil_scoped_release release;
          q = quant::quantize_qdq(prepared, plan, rs, o);
        }
        pyb::dict acts, weights;
        for (const auto& [name, p] : q.activations) acts[pyb::str(name)] = qparams_to_python(p);
        for (const auto& [name, p] : q.weights) weights[pyb::str(name)] = qparams_to_python(p);
        return pyb::make_tuple(std::move(q.model), acts, weights, q.notes);
      },
      pyb::arg("prepared"), pyb::arg("plan"), pyb::arg("ranges"), pyb::arg("options"));
  m.def(
      "quant_fold_dequantized_constants",
      [](const ir::Model& qdq) {
        pyb::gil_scoped_release release;
        return quant::fold_dequantized_constants(qdq);
      },
      pyb::arg("model"));
}

}  // namespace

void register_quant(pyb::module_& m) {
  register_stats(m);
  register_calibrator(m);
  register_plan(m);
}

}  // namespace tether::py
