// gemm_tiled.comp's GEMM on tensor cores: the same bindings, push constants and split along K,
// computed by gemm_coop.glsl's cooperative matrices. Chosen for precision "fp16" on devices with
// VK_NV_cooperative_matrix's float16 16 x 16 x 16 shape and 32-invocation subgroups
// (Device::cooperative_matrix).
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "storage.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"
#include "activation.glsl"
#include "gemm_tiled_io.glsl"
#include "gemm_coop.glsl"
