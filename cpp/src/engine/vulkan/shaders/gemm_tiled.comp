// C[b] = act(alpha * op(A)[b] @ op(B)[b] + beta * bias + sum[b]), as gemm.comp (same bindings
// and push constants, vulkan::GemmPush; binding 5 the partial sums of a product split along
// K), by the shared-memory tiles of gemm_tiled.glsl: the form for GPUs.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"
#include "activation.glsl"
#include "gemm_tiled_io.glsl"
#include "gemm_tiled.glsl"
