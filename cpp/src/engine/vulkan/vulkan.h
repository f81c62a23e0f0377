// What the rest of the engine sees of the Vulkan engine: its entry in the backend registry
// (engine/backends.cc). Built without Vulkan (no headers or glslc at build time), absent.cc
// implements it: no devices, and compile says why.
#pragma once

#include "engine/backends.h"

namespace tether::engine::vulkan {

/// The Vulkan backend's registry entry: devices "vulkan" (the first discrete GPU, else
/// integrated, virtual, then any) and "vulkan:N"; diagnostics from the validation layer.
const DeviceBackend& device_backend();

}  // namespace tether::engine::vulkan
