// Conv as an implicit GEMM, for GPUs: per image and group, Y[m][n] = act(sum over k of
// W[m][k] X'[k][n] + bias[m] + sum[m][n]), where m is an output channel of the group, n an
// output pixel (oh OW + ow), k an input channel of the group and a kernel tap (c KH KW +
// kh KW + kw), and X'[k][n] the input pixel that tap reads for that output (0 in the
// padding): the im2col matrix, read in place, never written. Tiled as gemm_tiled.glsl.
// Batch element z is image z / G, group z % G. Push constants: conv2d.comp's (vulkan::ConvPush),
// with n the batch count (images times groups). Binding 5: partial sums when split along K.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"
#include "activation.glsl"
#include "conv_gemm_io.glsl"
#include "gemm_tiled.glsl"
