// What the rest of the engine sees of the Vulkan engine: its entry in the backend registry
// (engine/backends.cc). Built without Vulkan (no headers or glslc at build time), absent.cc
// implements it: no devices, and compile says why.
#pragma once

#include "engine/backends.h"

namespace tether::engine::vulkan {

/// The names and device forms of the Vulkan entry, with Vulkan built in or not.
class NamedBackend : public DeviceBackend {
 public:
  std::string_view name() const override { return "vulkan"; }
  bool claims(std::string_view device) const override { return device == "vulkan" || device.rfind("vulkan:", 0) == 0; }
  std::string device_forms() const override { return "vulkan, vulkan:N"; }
};

/// The Vulkan backend's registry entry: devices "vulkan" (the first discrete GPU, else
/// integrated, virtual, then any) and "vulkan:N"; diagnostics from the validation layer.
const DeviceBackend& device_backend();

}  // namespace tether::engine::vulkan
