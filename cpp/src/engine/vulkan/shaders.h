// The compute shaders, compiled from shaders/*.comp by glslc at build time and embedded as
// SPIR-V words (generated sources in the build folder; see cpp/CMakeLists.txt).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tether::engine::vulkan {

struct Spirv {
  const char* name;  ///< the .comp file's stem: "gemm" for shaders/gemm.comp
  const uint32_t* words;
  size_t count;
};

/// The embedded shader `name`, or nullptr when there is none.
const Spirv* find_spirv(std::string_view name);

/// Every embedded shader: `*count` of them from the pointer returned.
const Spirv* all_spirv(size_t* count);

}  // namespace tether::engine::vulkan
