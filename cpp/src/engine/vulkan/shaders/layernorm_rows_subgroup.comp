// layernorm_rows.comp with each reduction first within subgroups (subgroupAdd, subgroupMax), then over
// the workgroup's subgroups (rows.glsl's SUBGROUP_ROWS): chosen on GPUs whose compute shaders
// have subgroup arithmetic (Device::subgroup_arithmetic).
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#define SUBGROUP_ROWS 1
#include "storage.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"
#include "rows.glsl"
#include "layernorm_rows.glsl"
