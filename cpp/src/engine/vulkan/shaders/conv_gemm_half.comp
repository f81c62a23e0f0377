// conv_gemm.comp with float16 products (gemm_tiled.glsl's HALF_PRODUCTS), chosen as
// gemm_tiled_half.comp is: the implicit-GEMM convolution under precision "fp16" with
// TETHER_VULKAN_FP16_ARITHMETIC=1 on devices with float16 arithmetic and no tensor cores.
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#define HALF_PRODUCTS 1
#include "storage.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"
#include "activation.glsl"
#include "conv_gemm_io.glsl"
#include "gemm_tiled.glsl"
