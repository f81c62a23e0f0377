// The Vulkan engine's registry entry in a build without Vulkan (cpp/CMakeLists.txt compiles
// this file instead of the others of this folder when the Vulkan headers or glslc are missing).
#include "engine/vulkan/vulkan.h"
#include "tether/error.h"

namespace tether::engine::vulkan {

namespace {

class AbsentBackend final : public NamedBackend {
 public:
  std::vector<DeviceInfo> devices() const override { return {}; }
  std::vector<std::string> op_types() const override { return {}; }
  std::unique_ptr<Session> compile(const ir::Model&, const CompileOptions& options) const override {
    throw UnsupportedError("device '" + options.device +
                           "': this build of tether has no Vulkan engine (the Vulkan headers or glslc were missing when "
                           "it was built); install libvulkan-dev, glslc and mesa-vulkan-drivers and build it again, or "
                           "compile with device='cpu'");
  }
};

}  // namespace

const DeviceBackend& device_backend() {
  static const AbsentBackend backend;
  return backend;
}

}  // namespace tether::engine::vulkan
