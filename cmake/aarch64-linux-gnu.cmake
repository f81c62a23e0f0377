# Cross-compiling for 64-bit ARM Linux with Debian's cross toolchain and multiarch libraries:
#   apt-get install g++-aarch64-linux-gnu qemu-user
#   dpkg --add-architecture arm64 && apt-get update && apt-get install libprotobuf-dev:arm64 libgtest-dev:arm64
#   cmake -S . -B build/arm64 -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DTETHER_DEPLOY=ON
# Libraries come from /usr/lib/aarch64-linux-gnu, host tools (protoc) from the build machine,
# and test programs run under qemu-aarch64 (ctest and GoogleTest's discovery alike).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# Multiarch: the arm64 libraries and the shared headers live under /usr itself.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu /usr)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
find_program(TETHER_QEMU_AARCH64 qemu-aarch64)
if(TETHER_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${TETHER_QEMU_AARCH64} -L /usr/aarch64-linux-gnu)
endif()
