// tether._core.Session: compile a model and run it on numpy arrays.
#include <optional>
#include <variant>

#include "bindings.h"

namespace tether::py {

namespace {

pyb::list arrays(const std::vector<ir::Tensor>& tensors) {
  pyb::list out;
  for (const ir::Tensor& t : tensors) out.append(tensor_to_numpy(t, true));
  return out;
}

pyb::list infos(const std::vector<engine::TensorInfo>& list) {
  pyb::list out;
  for (const auto& i : list) out.append(pyb::make_tuple(i.name, type_to_python(ir::ValueType::tensor(i.dtype, i.shape))));
  return out;
}

// The Python thread that receives signals, taken at import.
unsigned long g_main_thread = 0;

// On the main thread, a run stops at the next kernel after Ctrl-C (checked every 20 ms, with
// the GIL taken for the check): the KeyboardInterrupt is raised there and then, not after the
// run. Other threads never see signals; their runs are not polled.
std::optional<engine::InterruptScope> interruptible() {
  if (PyThread_get_thread_ident() != g_main_thread) return std::nullopt;
  return std::optional<engine::InterruptScope>(std::in_place, [] {
    pyb::gil_scoped_acquire gil;
    return PyErr_CheckSignals() != 0;
  });
}

}  // namespace

void register_session(pyb::module_& m) {
  g_main_thread = static_cast<unsigned long>(
      pyb::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long long>());
  using engine::Session;
  pyb::class_<Session>(m, "Session")
      .def("inputs", [](const Session& s) { return infos(s.inputs()); })
      .def("outputs", [](const Session& s) { return infos(s.outputs()); })
      .def_property_readonly("threads", &Session::threads)
      .def("report", &Session::report)
      .def("profile",
           [](const Session& s) {
             pyb::list out;
             for (const auto& p : s.profile()) {
               pyb::dict d;
               d["name"] = p.name;
               d["op_type"] = p.op_type;
               d["runs"] = p.runs;
               d["seconds"] = p.seconds;
               out.append(d);
             }
             return out;
           })
      .def("memory",
           [](const Session& s) {
             engine::MemoryStats st = s.memory();
             pyb::dict d;
             d["arena_bytes"] = st.arena_bytes;
             d["intermediate_bytes"] = st.intermediate_bytes;
             d["scratch_bytes"] = st.scratch_bytes;
             d["plans"] = st.plans;
             d["arenas"] = st.arenas;
             d["device_weight_bytes"] = st.device_weight_bytes;
             d["staging_bytes"] = st.staging_bytes;
             return d;
           })
      .def(
          "run",
          [](const Session& s, const pyb::dict& feeds) {
            Feeds f(feeds);
            std::vector<ir::Tensor> outputs;
            {
              pyb::gil_scoped_release release;
              const auto scope = interruptible();
              outputs = s.run(f.inputs);
            }
            return arrays(outputs);
          },
          pyb::arg("feeds"))
      .def(
          "run_capture",
          [](const Session& s, const pyb::dict& feeds, const std::vector<std::string>& names) {
            Feeds f(feeds);
            std::vector<ir::Tensor> outputs;
            std::vector<std::pair<std::string, ir::Tensor>> captured;
            {
              pyb::gil_scoped_release release;
              const auto scope = interruptible();
              outputs = s.run_capture(f.inputs, names, captured);
            }
            pyb::list values;
            for (const auto& [name, t] : captured) values.append(pyb::make_tuple(name, tensor_to_numpy(t, true)));
            return pyb::make_tuple(arrays(outputs), values);
          },
          pyb::arg("feeds"), pyb::arg("names") = std::vector<std::string>{})
      .def("steps",
           [](const Session& s) {
             pyb::list out;
             for (const engine::StepInfo& st : s.steps()) {
               pyb::dict d;
               d["name"] = st.name;
               d["op_type"] = st.op_type;
               d["fused_from"] = st.fused_from;
               d["inputs"] = st.inputs;
               d["outputs"] = st.outputs;
               d["backend"] = st.backend;
               out.append(d);
             }
             return out;
           });

  m.def("cpu_info", [] {
    const engine::DeviceInfo cpu = engine::device_info("cpu");
    pyb::dict d;
    d["brand"] = cpu.name;
    for (const char* key : {"isa", "avx2", "avx512", "avx512_vnni", "amx_int8", "avx_vnni", "gemm_kernel", "int8_gemm_kernel"})
      std::visit([&d, key](const auto& v) { d[key] = v; }, cpu.properties.at(key));
    d["physical_cores"] = std::get<int64_t>(cpu.properties.at("cores"));
    return d;
  });

  m.def("supported_ops", &engine::supported_ops, pyb::arg("device") = "cpu");

  m.def(
      "compile",
      [](const ir::Model& model, const std::string& device, int threads, bool optimize, bool profile,
         const std::vector<std::string>& keep, bool strict, int64_t max_memory, const std::string& precision) {
        engine::CompileOptions o;
        o.device = device;
        o.threads = threads;
        o.optimize = optimize;
        o.profile = profile;
        o.keep = keep;
        o.strict = strict;
        o.max_memory = max_memory;
        o.precision = precision;
        pyb::gil_scoped_release release;
        return engine::compile(model, o);
      },
      pyb::arg("model"), pyb::arg("device") = "cpu", pyb::arg("threads") = 0, pyb::arg("optimize") = true,
      pyb::arg("profile") = false, pyb::arg("keep") = std::vector<std::string>{}, pyb::arg("strict") = false,
      pyb::arg("max_memory") = 0, pyb::arg("precision") = "fp32");

  m.def("devices", [] {
    std::vector<engine::DeviceInfo> list;
    {
      pyb::gil_scoped_release release;  // the first call opens the Vulkan loader
      list = engine::devices();
    }
    pyb::list out;
    for (const engine::DeviceInfo& i : list) {
      pyb::dict d;
      d["device"] = i.device;
      d["backend"] = i.backend;
      d["index"] = i.index;
      d["name"] = i.name;
      d["type"] = i.type;
      d["memory_bytes"] = i.memory_bytes;
      for (const auto& [key, value] : i.properties)
        std::visit([&d, &k = key](const auto& v) { d[pyb::str(k)] = v; }, value);
      out.append(d);
    }
    return out;
  });

  // For tests: what each backend's diagnostics (Vulkan's validation layer with
  // TETHER_VULKAN_VALIDATION=1) reported since the last call, by backend.
  m.def("_diagnostics", [] {
    pyb::dict out;
    for (const engine::BackendDiagnostics& b : engine::take_diagnostics()) {
      pyb::dict d;
      d["enabled"] = b.enabled;
      d["messages"] = b.messages;
      out[pyb::str(b.backend)] = d;
    }
    return out;
  });
}

}  // namespace tether::py
