// The registry of device backends, and the entry points of tether/engine.h that go through it.
#include "engine/backends.h"

#include <algorithm>

#include "engine/vulkan/vulkan.h"
#include "passes/passes.h"
#include "tether/error.h"

namespace tether::engine {

namespace {
std::vector<const DeviceBackend*>& registered() {
  // The registration: one line per backend. A build without Vulkan registers an entry that
  // has no devices and says why it cannot compile (engine/vulkan/absent.cc).
  static std::vector<const DeviceBackend*> list{&cpu_device_backend(), &vulkan::device_backend()};
  return list;
}
}  // namespace

const std::vector<const DeviceBackend*>& device_backends() { return registered(); }

void register_device_backend(const DeviceBackend& backend) {
  for (const DeviceBackend* b : registered())
    if (b->name() == backend.name())
      throw ArgumentError("a device backend named '" + std::string(backend.name()) + "' is registered already");
  registered().push_back(&backend);
}

const DeviceBackend& device_backend(const std::string& device) {
  std::string forms;
  for (const DeviceBackend* b : device_backends()) {
    if (b->claims(device)) return *b;
    forms += (forms.empty() ? "" : ", ") + b->device_forms();
  }
  throw ArgumentError("unknown device '" + device + "'; available: " + forms + " (see devices())");
}

std::vector<DeviceInfo> devices() {
  std::vector<DeviceInfo> out;
  for (const DeviceBackend* b : device_backends())
    for (DeviceInfo& d : b->devices()) out.push_back(std::move(d));
  return out;
}

DeviceInfo device_info(const std::string& device) {
  std::string names;
  for (const DeviceBackend* b : device_backends()) {
    const bool mine = b->claims(device);
    for (DeviceInfo& d : b->devices()) {
      if (mine && d.device == device) return std::move(d);
      names += (names.empty() ? "" : ", ") + d.device;
    }
  }
  throw ArgumentError("no device '" + device + "'; the devices are: " + names + " (see devices())");
}

std::vector<BackendDiagnostics> take_diagnostics() {
  std::vector<BackendDiagnostics> out;
  for (const DeviceBackend* b : device_backends()) out.push_back(b->take_diagnostics());
  return out;
}

std::unique_ptr<Session> compile(const ir::Model& model, const CompileOptions& options) {
  const DeviceBackend& backend = device_backend(options.device);
  if (options.threads < 0) throw ArgumentError("threads must be >= 0 (0: one per physical core)");
  if (options.max_memory < 0) throw ArgumentError("max_memory must be >= 0 bytes (0: the machine's physical memory)");
  if (options.precision != "fp32" && options.precision != "fp16")
    throw ArgumentError("precision '" + options.precision + "' is not known; it is 'fp32' or 'fp16'");
  return backend.compile(model, options);
}

std::vector<std::string> supported_ops(const std::string& device) {
  std::vector<std::string> ops = device_backend(device).op_types();
  ops.push_back(":Constant");  // every session turns Constant nodes into constants
  // Every session writes onnxruntime's QOperator contrib ops as standard ops between
  // DequantizeLinear and QuantizeLinear: a device takes one where it takes those.
  for (const passes::QOperatorExpansion& e : passes::qoperator_expansions()) {
    bool all = true;
    for (const std::string& use : e.uses) all = all && std::find(ops.begin(), ops.end(), ":" + use) != ops.end();
    if (all) ops.push_back("com.microsoft:" + e.op);
  }
  std::sort(ops.begin(), ops.end());
  return ops;
}

}  // namespace tether::engine
