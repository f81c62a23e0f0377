// Concat and Split: copies `count` words per outer block from one tensor to another, each
// seen as [outer, block] with the copied run at an offset. Words, not floats: any 4-byte type
// moves bit for bit.
#version 450
#extension GL_GOOGLE_include_directive : require
#include "storage.glsl"
layout(local_size_x_id = 0) in;
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Src { word_t src[]; };
layout(std430, binding = 1) writeonly buffer Dst { word_t dst[]; };
layout(push_constant, std430) uniform Push {
  uint n;  // outer * count
  uint count;
  uint src_block, src_offset;
  uint dst_block, dst_offset;
} p;

void main() {
  uint i = flat_id();
  if (i >= p.n) return;
  uint o = i / p.count, j = i % p.count;
  dst[o * p.dst_block + p.dst_offset + j] = src[o * p.src_block + p.src_offset + j];
}
