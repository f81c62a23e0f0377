# System libraries come from Debian packages. A missing one stops the configure step with
# the package to install, rather than failing later in the compiler.

function(tether_require found what package)
  if(NOT ${found})
    message(FATAL_ERROR
      "tether needs ${what}, which was not found.\n"
      "Install the Debian package: apt-get install ${package}\n"
      "(`make test` and `make demo` install it when run as root.)")
  endif()
endfunction()

find_package(Protobuf QUIET)
find_program(TETHER_PROTOC protoc)
tether_require(Protobuf_FOUND "the Protocol Buffers C++ library" "libprotobuf-dev")
tether_require(TETHER_PROTOC "the Protocol Buffers compiler (protoc)" "protobuf-compiler")

find_package(Eigen3 3.3 QUIET NO_MODULE)
tether_require(Eigen3_FOUND "Eigen 3" "libeigen3-dev")

if(TETHER_BUILD_TESTS)
  find_package(GTest QUIET)
  tether_require(GTest_FOUND "GoogleTest" "libgtest-dev")
endif()

find_package(Threads REQUIRED)

# Vulkan is optional: without it the library builds, says so, and offers the CPU engine only.
# Only the headers are used (the loader is opened at run time, never linked) and glslc, which
# compiles the shaders into SPIR-V that the library embeds.
option(TETHER_VULKAN "Build the Vulkan engine when Vulkan's headers and glslc are found" ON)
find_package(Vulkan QUIET)
find_program(TETHER_GLSLC glslc)
if(TETHER_VULKAN AND Vulkan_FOUND AND TETHER_GLSLC)
  set(TETHER_HAVE_VULKAN ON)
  set(TETHER_VULKAN_INCLUDE ${Vulkan_INCLUDE_DIRS})
  message(STATUS "tether: Vulkan ${Vulkan_VERSION} and glslc found; the Vulkan engine can be built")
else()
  set(TETHER_HAVE_VULKAN OFF)
  if(TETHER_VULKAN)
    message(WARNING
      "tether: Vulkan headers or glslc not found; building without the Vulkan engine. "
      "Install libvulkan-dev, glslc and mesa-vulkan-drivers to enable it.")
  endif()
endif()
