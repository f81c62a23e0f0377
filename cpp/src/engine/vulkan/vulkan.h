// What the rest of the engine sees of the Vulkan engine. Built without Vulkan (no headers or
// glslc at build time), absent.cc implements it: no devices, and compile says why.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tether/engine.h"

namespace tether::engine::vulkan {

/// True for the device names the Vulkan engine takes: "vulkan" and "vulkan:N".
inline bool is_vulkan_device(const std::string& device) { return device == "vulkan" || device.rfind("vulkan:", 0) == 0; }

/// Compiles `model` for options.device ("vulkan" or "vulkan:N"); see tether::engine::compile.
/// Throws UnsupportedError when there is no usable Vulkan device (saying how to get one), or
/// with options.strict when a node would run on the CPU.
std::unique_ptr<Session> compile(const ir::Model& model, const CompileOptions& options);

/// The Vulkan devices found (none without a loader or driver).
std::vector<DeviceInfo> devices();

/// The ops the Vulkan backend has kernels for, as "domain:op_type".
std::vector<std::string> op_types();

/// Whether Vulkan's validation layer is on (TETHER_VULKAN_VALIDATION=1 when the instance was
/// created, and the layer installed); opens the loader when nothing has yet.
bool validation_enabled();

/// What the validation layer reported since the last call (warnings and errors, one line each),
/// and clears the list.
std::vector<std::string> take_validation_messages();

}  // namespace tether::engine::vulkan
