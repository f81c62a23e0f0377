// Softmax and LogSoftmax with a workgroup per row, the form for GPUs: softmax_rows.glsl, its partial results
// reduced through shared memory (rows.glsl).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"
#include "rows.glsl"
#include "softmax_rows.glsl"
