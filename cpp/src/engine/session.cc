// The CPU device backend (the "cpu" device) and subgraphs compiled for control-flow kernels:
// both are the executor (engine/executor.h) with the CPU backend alone.
#include <thread>

#include "engine/backends.h"
#include "engine/cpu/gemm.h"
#include "engine/cpu/qgemm.h"
#include "engine/executor.h"
#include "engine/kernel.h"
#include "engine/session.h"
#include "tether/engine.h"
#include "util/cpu_features.h"
#include "util/thread_pool.h"

namespace tether::engine {

namespace {

class CpuSubgraph final : public Subgraph {
 public:
  CpuSubgraph(const ir::Model& model, std::shared_ptr<util::ThreadPool> pool)
      : session_(compile_on(model, CompileOptions{}, {&cpu_backend()}, std::move(pool))) {
    for (const TensorInfo& i : session_->inputs()) names_.push_back(i.name);
  }
  std::vector<ir::Tensor> run(const std::vector<ir::Tensor>& inputs) const override {
    std::vector<std::pair<std::string, ir::Tensor>> named;
    named.reserve(inputs.size());
    for (size_t k = 0; k < inputs.size() && k < names_.size(); ++k) named.emplace_back(names_[k], inputs[k]);
    return session_->run(named);
  }

 private:
  std::unique_ptr<Session> session_;
  std::vector<std::string> names_;
};

}  // namespace

std::unique_ptr<Subgraph> compile_subgraph(const ir::Graph& body, const std::vector<const ir::Value*>& captured,
                                           const ir::Model& model, std::shared_ptr<util::ThreadPool> pool,
                                           const std::vector<ir::ValueType>& input_types) {
  ir::Model alone;
  alone.opset_imports = model.opset_imports;
  ir::copy_subgraph(body, captured, alone.graph());
  const std::vector<ir::Value*> inputs = alone.graph().inputs();
  for (size_t k = 0; k < input_types.size() && k < inputs.size(); ++k)
    if (inputs[k]->type().dtype() == ir::DType::kUndefined) inputs[k]->set_type(input_types[k]);
  return std::make_unique<CpuSubgraph>(alone, std::move(pool));
}

namespace {

// The CPU engine as a device backend: one device, "cpu".
class CpuDeviceBackend final : public DeviceBackend {
 public:
  std::string_view name() const override { return "cpu"; }
  bool claims(std::string_view device) const override { return device == "cpu"; }
  std::string device_forms() const override { return "cpu"; }

  std::vector<DeviceInfo> devices() const override {
    const util::CpuFeatures& f = util::cpu_features();
    DeviceInfo cpu;
    cpu.device = "cpu";
    cpu.backend = "cpu";
    cpu.name = f.brand;
    cpu.type = "cpu";
    cpu.memory_bytes = physical_memory();
    cpu.properties = {{"cores", int64_t{util::ThreadPool::physical_cores()}},
                      {"threads", int64_t{static_cast<int64_t>(std::thread::hardware_concurrency())}},
                      {"isa", util::isa_name()},
                      {"avx2", f.avx2},
                      {"avx512", f.avx512},
                      {"avx512_vnni", f.avx512_vnni},
                      {"avx_vnni", f.avx_vnni},
                      {"amx_int8", f.amx_int8},
                      {"gemm_kernel", std::string(cpu::gemm_isa().name)},
                      {"int8_gemm_kernel", cpu::qgemm_isa_name(cpu::qgemm_isa())}};
    return {cpu};
  }

  std::vector<std::string> op_types() const override { return cpu_backend().op_types(); }

  std::unique_ptr<Session> compile(const ir::Model& model, const CompileOptions& options) const override {
    if (options.precision != "fp32")
      throw UnsupportedError("precision '" + options.precision + "' is for Vulkan devices; the CPU engine computes in "
                             "float32 (compile with precision='fp32', or quantize the model for int8)");
    return compile_on(model, options, {&cpu_backend()});
  }
};

}  // namespace

const DeviceBackend& cpu_device_backend() {
  static const CpuDeviceBackend backend;
  return backend;
}

}  // namespace tether::engine

