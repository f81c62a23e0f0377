// tether._core.Session: compile a model and run it on numpy arrays.
#include "bindings.h"
#include "engine/cpu/gemm.h"
#include "util/cpu_features.h"
#include "util/thread_pool.h"

namespace tether::py {

namespace {

ir::DType numpy_dtype(const pyb::dtype& dt, const std::string& name) {
  const char kind = dt.kind();
  const auto size = dt.itemsize();
  if (kind == 'f' && size == 4) return ir::DType::kFloat32;
  if (kind == 'f' && size == 8) return ir::DType::kFloat64;
  if (kind == 'f' && size == 2) return ir::DType::kFloat16;
  if (kind == 'V' && size == 2 && std::string(pyb::str(dt)) == "bfloat16") return ir::DType::kBFloat16;  // ml_dtypes
  if (kind == 'b' && size == 1) return ir::DType::kBool;
  if (kind == 'c' && size == 8) return ir::DType::kComplex64;
  if (kind == 'c' && size == 16) return ir::DType::kComplex128;
  if (kind == 'i' || kind == 'u') {
    const bool u = kind == 'u';
    switch (size) {
      case 1: return u ? ir::DType::kUInt8 : ir::DType::kInt8;
      case 2: return u ? ir::DType::kUInt16 : ir::DType::kInt16;
      case 4: return u ? ir::DType::kUInt32 : ir::DType::kInt32;
      case 8: return u ? ir::DType::kUInt64 : ir::DType::kInt64;
      default: break;
    }
  }
  throw ArgumentError("input '" + name + "' has numpy dtype " + std::string(pyb::str(dt)) + ", which tether cannot take");
}

pyb::list infos(const std::vector<engine::TensorInfo>& list) {
  pyb::list out;
  for (const auto& i : list) out.append(pyb::make_tuple(i.name, type_to_python(ir::ValueType::tensor(i.dtype, i.shape))));
  return out;
}

}  // namespace

void register_session(pyb::module_& m) {
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
             return d;
           })
      .def(
          "run",
          [](const Session& s, const pyb::dict& feeds) {
            // The arrays stay referenced here while the GIL is released, so borrowing is safe.
            std::vector<pyb::array> keep;
            std::vector<std::pair<std::string, ir::Tensor>> inputs;
            pyb::module_ numpy = pyb::module_::import("numpy");
            for (const auto& [key, value] : feeds) {
              const std::string name = pyb::cast<std::string>(key);
              pyb::array arr = pyb::array::ensure(value);
              if (!arr) throw ArgumentError("input '" + name + "' is not an array");
              if (!(arr.flags() & pyb::array::c_style)) arr = numpy.attr("ascontiguousarray")(arr);
              const ir::DType dt = numpy_dtype(arr.dtype(), name);
              std::vector<int64_t> dims(arr.shape(), arr.shape() + arr.ndim());
              const auto nbytes = static_cast<int64_t>(arr.nbytes());
              inputs.emplace_back(name, ir::Tensor::from_buffer(dt, dims, ir::Buffer::borrow(arr.data(), nbytes, nullptr)));
              keep.push_back(std::move(arr));
            }
            std::vector<ir::Tensor> outputs;
            {
              pyb::gil_scoped_release release;
              outputs = s.run(inputs);
            }
            inputs.clear();
            pyb::list out;
            for (const ir::Tensor& t : outputs) out.append(tensor_to_numpy(t, true));
            return out;
          },
          pyb::arg("feeds"));

  m.def("cpu_info", [] {
    const util::CpuFeatures& f = util::cpu_features();
    pyb::dict d;
    d["brand"] = f.brand;
    d["isa"] = util::isa_name();
    d["avx2"] = f.avx2;
    d["avx512"] = f.avx512;
    d["avx512_vnni"] = f.avx512_vnni;
    d["avx_vnni"] = f.avx_vnni;
    d["gemm_kernel"] = engine::cpu::gemm_isa().name;
    d["physical_cores"] = util::ThreadPool::physical_cores();
    return d;
  });

  m.def("supported_ops", &engine::supported_ops, pyb::arg("device") = "cpu");

  m.def(
      "compile",
      [](const ir::Model& model, const std::string& device, int threads, bool optimize, bool profile) {
        engine::CompileOptions o;
        o.device = device;
        o.threads = threads;
        o.optimize = optimize;
        o.profile = profile;
        pyb::gil_scoped_release release;
        return engine::compile(model, o);
      },
      pyb::arg("model"), pyb::arg("device") = "cpu", pyb::arg("threads") = 0, pyb::arg("optimize") = true,
      pyb::arg("profile") = false);
}

}  // namespace tether::py
