// devices(): the CPU and the Vulkan devices.
#include "engine/vulkan/vulkan.h"
#include "tether/engine.h"
#include "util/cpu_features.h"

namespace tether::engine {

std::vector<DeviceInfo> devices() {
  DeviceInfo cpu;
  cpu.device = "cpu";
  cpu.backend = "cpu";
  cpu.name = util::cpu_features().brand;
  cpu.type = "cpu";
  std::vector<DeviceInfo> out{cpu};
  for (DeviceInfo& d : vulkan::devices()) out.push_back(std::move(d));
  return out;
}

}  // namespace tether::engine
