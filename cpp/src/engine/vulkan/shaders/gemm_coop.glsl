// The body of the GEMMs on tensor cores (gemm_tiled_coop.comp, conv_gemm_coop.comp): the same
// product, operands and split along K as gemm_tiled.glsl, whose interface the including shader
// defines the same way, computed with cooperative matrices (GL_NV_cooperative_matrix): float16
// A and B in 16 x 16 x 16 blocks, float32 sums. For precision "fp16", where A and B already are
// float16 in memory, so nothing is rounded that the CUDA-core form keeps.
//
// A workgroup of (BM / WM) (BN / WN) subgroups of 32 invocations computes a BM x BN tile of C;
// each subgroup a WM x WN part of it, (WM / 16) (WN / 16) accumulators. Per step of BK along K
// the workgroup stages a BM x BK slab of A (rows k-contiguous) and a BK x BN slab of B (rows
// n-contiguous) in shared memory as float16, the next step's read into registers while this
// one computes. Row strides are padded by 8 halves (16 bytes): matrix loads stay 16-byte
// aligned and neighbouring rows start in different banks. At the end each subgroup passes its
// accumulators one at a time through a 16 x 16 float block of shared memory, from which its
// invocations apply store_c (the epilogue) element by element, or write the raw sums to
// `partial` when the product is split along K.
layout(constant_id = 6) const uint BM = 64;   // tile rows
layout(constant_id = 7) const uint BN = 64;   // tile columns
layout(constant_id = 8) const uint BK = 32;   // step along K, a multiple of 16
layout(constant_id = 9) const uint WM = 32;   // a subgroup's rows, a multiple of 16
layout(constant_id = 10) const uint WN = 32;  // a subgroup's columns, a multiple of 16
const uint kMaxFrags = 4;                     // accumulators along each side: WM / 16, WN / 16
const uint kMaxLoads = 16;                    // halves of A (and of B) an invocation stages per step
#define COOP_SCOPE 3                          // gl_ScopeSubgroup
#define HALF_MAT fcoopmatNV<16, COOP_SCOPE, 16, 16>
#define SUM_MAT fcoopmatNV<32, COOP_SCOPE, 16, 16>

const uint SA = BK + 8, SB = BN + 8;  // row strides of the slabs, in halves
shared float16_t As[BM * SA];         // As[m SA + k] = A[row0 + m][k0 + k]
shared float16_t Bs[BK * SB];         // Bs[k SB + n] = B[k0 + k][col0 + n]
shared float Cs[(BM / WM) * (BN / WN) * 256];  // one 16 x 16 block per subgroup

layout(std430, binding = 5) writeonly buffer Partial { float partial[]; };

uint k_end;  // where this workgroup's run of K ends

float16_t a_at(uint m, uint k) { return m < dim_m() && k < k_end ? float16_t(load_a(m, k)) : float16_t(0.0); }
float16_t b_at(uint k, uint n) { return k < k_end && n < dim_n() ? float16_t(load_b(k, n)) : float16_t(0.0); }

// Element v of a slab: neighbouring invocations take neighbouring elements in memory, along k
// for a k-contiguous A, along m otherwise (and along n or k for B).
void slab_a(uint v, out uint m, out uint k) {
  if (a_k_contiguous()) {
    k = v % BK;
    m = v / BK;
  } else {
    m = v % BM;
    k = v / BM;
  }
}
void slab_b(uint v, out uint k, out uint n) {
  if (b_n_contiguous()) {
    n = v % BN;
    k = v / BN;
  } else {
    k = v % BK;
    n = v / BK;
  }
}

void fetch(uint k0, uint row0, uint col0, inout float16_t ra[kMaxLoads], inout float16_t rb[kMaxLoads]) {
  const uint t = gl_LocalInvocationID.x, nt = gl_WorkGroupSize.x;
  for (uint l = 0; l < kMaxLoads; ++l) {
    const uint v = t + l * nt;
    uint m, k, n;
    if (v < BM * BK) {
      slab_a(v, m, k);
      ra[l] = a_at(row0 + m, k0 + k);
    }
    if (v < BK * BN) {
      slab_b(v, k, n);
      rb[l] = b_at(k0 + k, col0 + n);
    }
  }
}

void stash(const float16_t ra[kMaxLoads], const float16_t rb[kMaxLoads]) {
  const uint t = gl_LocalInvocationID.x, nt = gl_WorkGroupSize.x;
  for (uint l = 0; l < kMaxLoads; ++l) {
    const uint v = t + l * nt;
    uint m, k, n;
    if (v < BM * BK) {
      slab_a(v, m, k);
      As[m * SA + k] = ra[l];
    }
    if (v < BK * BN) {
      slab_b(v, k, n);
      Bs[k * SB + n] = rb[l];
    }
  }
}

void main() {
  const uint sg = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  const uint wy = sg / (BN / WN), wx = sg % (BN / WN);  // the subgroup's part of the tile
  const uint row0 = gl_WorkGroupID.y * BM, col0 = gl_WorkGroupID.x * BN;
  const uint splits = gl_NumWorkGroups.z / batch_count(), split = gl_WorkGroupID.z % splits;
  tile_setup(gl_WorkGroupID.z / splits);
  const uint K = dim_k(), run = ((K + splits - 1) / splits + BK - 1) / BK * BK;
  const uint k_begin = min(split * run, K);
  k_end = min(k_begin + run, K);
  float16_t ra[kMaxLoads], rb[kMaxLoads];
  fetch(k_begin, row0, col0, ra, rb);
  stash(ra, rb);
  barrier();
  SUM_MAT acc[kMaxFrags][kMaxFrags];
  for (uint i = 0; i < WM / 16; ++i)
    for (uint j = 0; j < WN / 16; ++j) acc[i][j] = SUM_MAT(0.0);
  for (uint k0 = k_begin; k0 < k_end; k0 += BK) {
    const bool more = k0 + BK < k_end;
    if (more) fetch(k0 + BK, row0, col0, ra, rb);
    for (uint kk = 0; kk < BK; kk += 16) {
      HALF_MAT fa[kMaxFrags];
      for (uint i = 0; i < WM / 16; ++i) coopMatLoadNV(fa[i], As, (wy * WM + i * 16) * SA + kk, SA, false);
      for (uint j = 0; j < WN / 16; ++j) {
        HALF_MAT fb;
        coopMatLoadNV(fb, Bs, kk * SB + wx * WN + j * 16, SB, false);
        for (uint i = 0; i < WM / 16; ++i) acc[i][j] = coopMatMulAddNV(fa[i], fb, acc[i][j]);
      }
    }
    barrier();
    if (more) stash(ra, rb);
    barrier();
  }
  // Each accumulator through this subgroup's block of Cs; every subgroup runs the same number
  // of rounds, so the workgroup barriers are met by all.
  const uint base = sg * 256;
  for (uint i = 0; i < WM / 16; ++i)
    for (uint j = 0; j < WN / 16; ++j) {
      coopMatStoreNV(acc[i][j], Cs, base, 16, false);
      barrier();
      for (uint e = lane; e < 256; e += 32) {
        const uint m = row0 + wy * WM + i * 16 + e / 16, n = col0 + wx * WN + j * 16 + e % 16;
        if (m >= dim_m() || n >= dim_n()) continue;
        if (splits == 1)
          store_c(m, n, Cs[base + e]);
        else
          partial[(gl_WorkGroupID.z * dim_m() + m) * dim_n() + n] = Cs[base + e];
      }
      barrier();
    }
}
