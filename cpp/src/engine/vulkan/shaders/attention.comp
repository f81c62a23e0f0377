// Attention with a workgroup per query row: attention.glsl, its reductions through shared
// memory (rows.glsl).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"
#include "rows.glsl"
#include "attention.glsl"
