// attention.comp with its reductions first within subgroups (rows.glsl's SUBGROUP_ROWS),
// chosen where compute shaders have subgroup arithmetic (Device::subgroup_arithmetic).
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#define SUBGROUP_ROWS 1
#include "storage.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"
#include "rows.glsl"
#include "attention.glsl"
