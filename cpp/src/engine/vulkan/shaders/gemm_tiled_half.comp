// gemm_tiled.comp with float16 products (gemm_tiled.glsl's HALF_PRODUCTS): the same bindings,
// push constants, tiles and split along K. Chosen for precision "fp16" with
// TETHER_VULKAN_FP16_ARITHMETIC=1 on devices with float16 arithmetic
// (Device::float16_arithmetic) and no tensor cores; its float16-storage build is the one used.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#define HALF_PRODUCTS 1
#include "storage.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"
#include "activation.glsl"
#include "gemm_tiled_io.glsl"
#include "gemm_tiled.glsl"
