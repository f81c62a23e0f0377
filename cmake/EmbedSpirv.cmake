# Writes a C++ source holding one SPIR-V module as 32-bit words (run by cpp/CMakeLists.txt at
# build time): cmake -DSPV=x.spv -DNAME=x -DSOURCE=x.comp -DOUT=x.cc -P EmbedSpirv.cmake
file(READ "${SPV}" hex HEX)
string(LENGTH "${hex}" length)
math(EXPR words "${length} / 8")
# Bytes to little-endian words, 8 words a line.
string(REGEX REPLACE "([0-9a-f][0-9a-f])([0-9a-f][0-9a-f])([0-9a-f][0-9a-f])([0-9a-f][0-9a-f])" "0x\\4\\3\\2\\1u," body "${hex}")
string(REGEX REPLACE "((0x[0-9a-f]+u,)(0x[0-9a-f]+u,)(0x[0-9a-f]+u,)(0x[0-9a-f]+u,)(0x[0-9a-f]+u,)(0x[0-9a-f]+u,)(0x[0-9a-f]+u,)(0x[0-9a-f]+u,))" "\\1\n" body "${body}")
file(WRITE "${OUT}.tmp"
  "// Generated from shaders/${SOURCE} (${NAME}) by cmake/EmbedSpirv.cmake at build time; not committed.\n"
  "#include <cstddef>\n#include <cstdint>\n\n"
  "namespace tether::engine::vulkan::spirv {\n"
  "extern const uint32_t ${NAME}[] = {\n${body}};\n"
  "extern const size_t ${NAME}_words = ${words};\n"
  "}  // namespace tether::engine::vulkan::spirv\n")
file(RENAME "${OUT}.tmp" "${OUT}")
