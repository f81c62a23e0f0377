// The Vulkan engine's entry points in a build without Vulkan (cpp/CMakeLists.txt compiles this
// file instead of the others of this folder when the Vulkan headers or glslc are missing).
#include "engine/vulkan/vulkan.h"
#include "tether/error.h"

namespace tether::engine::vulkan {

std::unique_ptr<Session> compile(const ir::Model&, const CompileOptions& options) {
  throw UnsupportedError("device '" + options.device +
                         "': this build of tether has no Vulkan engine (the Vulkan headers or glslc were missing when "
                         "it was built); install libvulkan-dev, glslc and mesa-vulkan-drivers and build it again, or "
                         "compile with device='cpu'");
}

std::vector<DeviceInfo> devices() { return {}; }

std::vector<std::string> op_types() { return {}; }

bool validation_enabled() { return false; }

std::vector<std::string> take_validation_messages() { return {}; }

}  // namespace tether::engine::vulkan
