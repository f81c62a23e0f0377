// Included by every shader. Invocations are numbered over a 2-D grid of 1-D workgroups
// (Recorder::grid), so that element counts past 65535 workgroups still dispatch.
uint flat_id() {
  return gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
}

#define kInf uintBitsToFloat(0x7f800000u)
#define kNaN uintBitsToFloat(0x7fc00000u)

// tanh from exp(-2|x|), which never overflows (the built-in may give NaN for large |x|).
float tanh_(float x) {
  float e = exp(-2.0 * abs(x));
  float t = (1.0 - e) / (1.0 + e);
  return x < 0.0 ? -t : t;
}
