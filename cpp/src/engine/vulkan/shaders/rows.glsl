// Included by the shaders that give each row a workgroup (softmax_rows.comp,
// layernorm_rows.comp, attention.comp and their _subgroup forms): the invocations of a workgroup
// (a power of two) stride over the row, and reduce their partial results through shared memory
// in log2(size) steps; with SUBGROUP_ROWS, within each subgroup by the device's
// subgroup operations, then the subgroups' results in order through shared memory (one barrier
// in place of log2(size)). Workgroups are numbered over a 2-D grid, so rows past 65535 still
// dispatch.
shared float red[gl_WorkGroupSize.x];

uint row_id() { return gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x; }

// The sum (or, with `take_max`, the largest) of every invocation's v; every invocation must
// call it, and every one gets the result.
float reduce_rows(float v, bool take_max) {
#ifdef SUBGROUP_ROWS
  const float part = take_max ? subgroupMax(v) : subgroupAdd(v);
  if (subgroupElect()) red[gl_SubgroupID] = part;
  barrier();
  float r = red[0];
  for (uint g = 1; g < gl_NumSubgroups; ++g) r = take_max ? max(r, red[g]) : r + red[g];
  barrier();
  return r;
#else
  const uint t = gl_LocalInvocationID.x;
  red[t] = v;
  barrier();
  for (uint s = gl_WorkGroupSize.x / 2; s > 0; s >>= 1) {
    if (t < s) red[t] = take_max ? max(red[t], red[t + s]) : red[t] + red[t + s];
    barrier();
  }
  const float r = red[0];
  barrier();
  return r;
#endif
}
