// The body of the GEMMs for GPUs (gemm_tiled.comp, conv_gemm.comp): C = act(A @ B + ...) with
// A of M x K and B of K x N, where the including shader says how A and B are read and C
// written. A workgroup of NT = (BM / TM) (BN / TN) invocations computes a BM x BN tile of C.
// Per step of BK along K it stages a BM x BK slab of A and a BK x BN slab of B in shared
// memory as vec4s, and each invocation keeps TM x TN outputs in registers: per k it reads
// TM / 4 + TN / 4 vec4s from shared memory for TM TN multiply-adds. An invocation's rows are
// TM consecutive ones; its columns are TN / 4 vec4s BN / TN apart, so that neighbouring
// invocations read neighbouring vec4s of the B slab (no bank conflicts) and write
// neighbouring vec4s of C. While a step computes,
// the next step's slabs are already being read from memory into registers, so the loads'
// latency hides behind arithmetic; one barrier before and one after the shared slabs change.
//
// Split along K: when the dispatch's depth is S times the batch count, workgroup z S + s sums
// the s-th of S runs of K (whole steps) for batch element z and writes the raw sums to
// `partial` (binding 5, float32, [batch][S][M][N]); gemm_reduce.comp then adds the S partial
// sums in order and applies the epilogue. A product with few tiles (batch-1 inference's thin
// layers) then still gives the device enough workgroups, each a shorter run of K.
//
// Float16 products (HALF_PRODUCTS, defined by gemm_tiled_half.comp and conv_gemm_half.comp, for
// precision "fp16" with TETHER_VULKAN_FP16_ARITHMETIC=1 on devices with float16 arithmetic and
// no tensor cores): the slabs are staged as float16 (exact: the operands are float16 in
// memory), and each step's BK multiply-adds run in float16 (fma, two per instruction where the
// device packs them) into float16 sums that are then added to the float32 totals, so rounding
// error grows with BK, not with K. A step whose float16
// sum is not finite (a product or sum past 65504, which float32 would hold) is summed again in
// float32 from the same slabs: a result is never lost to float16's range.
//
// The including shader defines, before this file:
//   uint dim_m(), dim_n(), dim_k();
//   uint batch_count();                      // batch elements in the dispatch's depth
//   void tile_setup(uint z);                 // for batch element z
//   float load_a(uint m, uint k);            // in range (m < M, k < K)
//   float load_b(uint k, uint n);            // in range
//   bool a_k_contiguous(), b_n_contiguous(); // which way each operand's elements run in memory
//   void store_c(uint m, uint n, float v);   // v = (A @ B)[m][n]; the epilogue
layout(constant_id = 6) const uint BM = 64;  // tile rows
layout(constant_id = 7) const uint BN = 64;  // tile columns
layout(constant_id = 8) const uint BK = 16;  // step along K
layout(constant_id = 9) const uint TM = 4;   // rows per invocation: 4 or 8
layout(constant_id = 10) const uint TN = 4;  // columns per invocation: 4 or 8
const uint kMaxT = 8;
const uint kMaxLoads = 4;  // vec4s of A (and of B) an invocation reads per step: BM BK / (4 NT)

// Rows of the slabs padded by one vec4, so that invocations storing neighbouring k (a
// k-contiguous operand) hit different banks.
const uint SA = BM / 4 + 1, SB = BN / 4 + 1;
#ifdef HALF_PRODUCTS
#define slab_t f16vec4
#else
#define slab_t vec4
#endif
shared slab_t As[BK * SA];  // As[k SA + m / 4] holds A[m .. m + 3][k]
shared slab_t Bs[BK * SB];  // Bs[k SB + n / 4] holds B[k][n .. n + 3]

layout(std430, binding = 5) writeonly buffer Partial { float partial[]; };

uint k_end;  // where this workgroup's run of K ends

float a_at(uint m, uint k) { return m < dim_m() && k < k_end ? load_a(m, k) : 0.0; }
float b_at(uint k, uint n) { return k < k_end && n < dim_n() ? load_b(k, n) : 0.0; }

// Which vec4 of a slab the invocation's l-th load is: the slab's k and vec4 index along M (or
// N). Neighbouring invocations take neighbouring elements in memory: along k for a
// k-contiguous operand, along M (N) otherwise.
void slab_a(uint v, out uint k, out uint m4) {
  if (a_k_contiguous()) {
    k = v % BK;
    m4 = v / BK;
  } else {
    m4 = v % (BM / 4);
    k = v / (BM / 4);
  }
}
void slab_b(uint v, out uint k, out uint n4) {
  if (b_n_contiguous()) {
    n4 = v % (BN / 4);
    k = v / (BN / 4);
  } else {
    k = v % BK;
    n4 = v / BK;
  }
}

void fetch(uint k0, uint row0, uint col0, inout slab_t ra[kMaxLoads], inout slab_t rb[kMaxLoads]) {
  const uint t = gl_LocalInvocationID.x, nt = gl_WorkGroupSize.x;
  for (uint l = 0; l < kMaxLoads; ++l) {
    const uint v = t + l * nt;
    uint k, i4;
    if (v < BM * BK / 4) {
      slab_a(v, k, i4);
      const uint m = row0 + i4 * 4;
      ra[l] = slab_t(vec4(a_at(m, k0 + k), a_at(m + 1, k0 + k), a_at(m + 2, k0 + k), a_at(m + 3, k0 + k)));
    }
    if (v < BN * BK / 4) {
      slab_b(v, k, i4);
      const uint n = col0 + i4 * 4;
      rb[l] = slab_t(vec4(b_at(k0 + k, n), b_at(k0 + k, n + 1), b_at(k0 + k, n + 2), b_at(k0 + k, n + 3)));
    }
  }
}

void stash(const slab_t ra[kMaxLoads], const slab_t rb[kMaxLoads]) {
  const uint t = gl_LocalInvocationID.x, nt = gl_WorkGroupSize.x;
  for (uint l = 0; l < kMaxLoads; ++l) {
    const uint v = t + l * nt;
    uint k, i4;
    if (v < BM * BK / 4) {
      slab_a(v, k, i4);
      As[k * SA + i4] = ra[l];
    }
    if (v < BN * BK / 4) {
      slab_b(v, k, i4);
      Bs[k * SB + i4] = rb[l];
    }
  }
}

void main() {
  const uint t = gl_LocalInvocationID.x;
  const uint tx = t % (BN / TN), ty = t / (BN / TN);
  const uint row0 = gl_WorkGroupID.y * BM, col0 = gl_WorkGroupID.x * BN;
  const uint splits = gl_NumWorkGroups.z / batch_count(), split = gl_WorkGroupID.z % splits;
  tile_setup(gl_WorkGroupID.z / splits);
  const uint K = dim_k(), run = ((K + splits - 1) / splits + BK - 1) / BK * BK;
  const uint k_begin = min(split * run, K);
  k_end = min(k_begin + run, K);
  slab_t ra[kMaxLoads], rb[kMaxLoads];
  fetch(k_begin, row0, col0, ra, rb);
  stash(ra, rb);
  barrier();
  vec4 acc[kMaxT][kMaxT / 4];
  for (uint i = 0; i < TM; ++i)
    for (uint j = 0; j < TN / 4; ++j) acc[i][j] = vec4(0.0);
  for (uint k0 = k_begin; k0 < k_end; k0 += BK) {
    const bool more = k0 + BK < k_end;
    if (more) fetch(k0 + BK, row0, col0, ra, rb);
#ifdef HALF_PRODUCTS
    f16vec4 step[kMaxT][kMaxT / 4];
    for (uint i = 0; i < TM; ++i)
      for (uint j = 0; j < TN / 4; ++j) step[i][j] = f16vec4(0.0hf);
    for (uint k = 0; k < BK; ++k) {
      f16vec4 av[kMaxT / 4], bv[kMaxT / 4];
      for (uint i = 0; i < TM / 4; ++i) av[i] = As[k * SA + ty * (TM / 4) + i];
      for (uint j = 0; j < TN / 4; ++j) bv[j] = Bs[k * SB + tx + j * (BN / TN)];
      for (uint i = 0; i < TM; ++i)
        for (uint j = 0; j < TN / 4; ++j) step[i][j] = fma(f16vec4(av[i / 4][i % 4]), bv[j], step[i][j]);
    }
    for (uint i = 0; i < TM; ++i)
      for (uint j = 0; j < TN / 4; ++j) {
        if (all(lessThanEqual(abs(step[i][j]), f16vec4(65504.0hf)))) {
          acc[i][j] += vec4(step[i][j]);
          continue;
        }
        vec4 again = vec4(0.0);  // past float16's range (or NaN from the operands): float32
        for (uint k = 0; k < BK; ++k)
          again += float(As[k * SA + ty * (TM / 4) + i / 4][i % 4]) * vec4(Bs[k * SB + tx + j * (BN / TN)]);
        acc[i][j] += again;
      }
#else
    for (uint k = 0; k < BK; ++k) {
      vec4 av[kMaxT / 4], bv[kMaxT / 4];
      for (uint i = 0; i < TM / 4; ++i) av[i] = As[k * SA + ty * (TM / 4) + i];
      for (uint j = 0; j < TN / 4; ++j) bv[j] = Bs[k * SB + tx + j * (BN / TN)];
      for (uint i = 0; i < TM; ++i)
        for (uint j = 0; j < TN / 4; ++j) acc[i][j] += av[i / 4][i % 4] * bv[j];
    }
#endif
    barrier();
    if (more) stash(ra, rb);
    barrier();
  }
  for (uint i = 0; i < TM; ++i) {
    const uint m = row0 + ty * TM + i;
    if (m >= dim_m()) break;
    for (uint j = 0; j < TN / 4; ++j)
      for (uint e = 0; e < 4; ++e) {
        const uint n = col0 + (tx + j * (BN / TN)) * 4 + e;
        if (n >= dim_n()) continue;
        if (splits == 1)
          store_c(m, n, acc[i][j][e]);
        else
          partial[(gl_WorkGroupID.z * dim_m() + m) * dim_n() + n] = acc[i][j][e];
      }
  }
}
