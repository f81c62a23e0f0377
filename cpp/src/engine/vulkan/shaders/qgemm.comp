// QLinearMatMul, MatMulInteger, QLinearConv and ConvInteger on plain int32 multiply-adds (qgemm.glsl).
#version 450
#extension GL_GOOGLE_include_directive : require
#include "qgemm.glsl"
