// Included by the GEMM shaders (gemm.comp, gemm_vec4.comp, gemm_vec4_nt.comp): their push
// constants (vulkan::GemmPush) and where batch element `batch` starts in A and in B.
layout(push_constant, std430) uniform Push {
  uint M, N, K;
  uint bdims[4];          // the batch dims, outermost first (padded with 1)
  uint a_bs[4], b_bs[4];  // A's and B's strides along them, in elements (0 where broadcast)
  uint a_rs, a_cs;        // op(A)[i][k] = a[a_rs * i + a_cs * k]
  uint b_rs, b_cs;        // op(B)[k][j] = b[b_rs * k + b_cs * j]
  uint bias_rs, bias_cs;  // bias[i][j] = bias[bias_rs * i + bias_cs * j]
  float alpha, beta;
} p;

void batch_offsets(uint batch, out uint aoff, out uint boff) {
  uint r = batch;
  aoff = 0;
  boff = 0;
  for (int d = 3; d >= 0; --d) {
    uint i = r % p.bdims[d];
    r /= p.bdims[d];
    aoff += i * p.a_bs[d];
    boff += i * p.b_bs[d];
  }
}
