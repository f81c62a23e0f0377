// QLinearMatMul, MatMulInteger, QLinearConv and ConvInteger on integer dot products (qgemm.glsl).
#version 450
#extension GL_GOOGLE_include_directive : require
#define TETHER_INT_DOT 1
#include "qgemm.glsl"
