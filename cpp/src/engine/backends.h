// The device backends: what compile(), devices(), supported_ops() and take_diagnostics() reach
// through one registry, so that none of them names a backend. A backend registers itself in
// backends.cc (the one place that lists them); everything else of it stays in its folder.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tether/engine.h"

namespace tether::engine {

/// A backend as the entry points see it: the device names it takes, its devices, its ops and
/// how it compiles a model for one of them.
///
///   const DeviceBackend& b = device_backend("vulkan:0");   // ArgumentError for an unknown name
///   std::unique_ptr<Session> s = b.compile(model, options);
class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  /// "cpu", "vulkan": DeviceInfo::backend and StepInfo::backend.
  virtual std::string_view name() const = 0;
  /// True for the device names this backend takes ("cpu"; "vulkan" and "vulkan:N").
  virtual bool claims(std::string_view device) const = 0;
  /// The forms of those names, for messages: "cpu"; "vulkan, vulkan:N".
  virtual std::string device_forms() const = 0;
  /// Its devices (none when its driver is missing; never throws for that).
  virtual std::vector<DeviceInfo> devices() const = 0;
  /// The ops it has kernels for, as "domain:op_type", sorted.
  virtual std::vector<std::string> op_types() const = 0;
  /// Compiles for options.device, which claims() took; options are checked already
  /// (threads, max_memory, the precision's spelling). See tether::engine::compile.
  virtual std::unique_ptr<Session> compile(const ir::Model& model, const CompileOptions& options) const = 0;
  /// What its driver's diagnostics reported since the last call; backends without any keep
  /// the default (disabled, nothing).
  virtual BackendDiagnostics take_diagnostics() const {
    BackendDiagnostics d;
    d.backend = std::string(name());
    return d;
  }
};

/// Every registered backend, the CPU first (devices() lists theirs in this order).
const std::vector<const DeviceBackend*>& device_backends();

/// Adds `backend` after the built-in ones, for the rest of the process: compile(), devices() and
/// supported_ops() reach it like any other. A backend compiles through the executor
/// (engine/executor.h: compile_on) with its own backend order, so a new device is a Backend and
/// this call, not a new session. Call it before sessions are compiled on other threads.
/// Throws ArgumentError when a registered backend has the same name.
///
///   register_device_backend(my_device_backend());   // then compile(model, {.device = "mine"})
void register_device_backend(const DeviceBackend& backend);

/// The backend that claims `device`; ArgumentError naming it and every form known otherwise.
const DeviceBackend& device_backend(const std::string& device);

/// The CPU engine's entry (engine/session.cc).
const DeviceBackend& cpu_device_backend();

}  // namespace tether::engine
