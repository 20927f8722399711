/*
Variant 4: Hopper (sm_90a) wgmma, HS = 64. Variant 3's loop with each warpgroup owning 64 query rows:
S = Q K^T as wgmma m64nNk16 with Q and K read straight from the swizzled shared memory, P kept in
registers as the A operand of O += P V (V read transposed from shared memory). Still cp.async double
buffering and __syncthreads, no warp specialisation yet (no TMA producer, no ping-pong). Configs:
kBlockN 128 and 64, both with 2 warpgroups (kBlockM 128). HS 128 and non-Hopper GPUs: not supported.
Last run (H200, 2026-11-21, commit ab05b33; all configs and anchors in dev/cuda/README.md):
  RESULT attention_forward 4 cfg=128x128/2wg B=64 NH=12 T=1024 HS=64 ms_med=0.3593 ms_min=0.3573 tflops=286.9 speedup_vs_2=7.31
  RESULT attention_forward 4 cfg=128x128/2wg B=1 NH=12 T=16384 HS=64 ms_med=1.0472 ms_min=1.0460 tflops=393.7 speedup_vs_2=8.03
*/
#pragma once

bool attention_forward4_supports(const Shape& s) { return s.HS == 64 && hopper_path_available(); }

void attention_forward4(const AttentionForwardParams& p, int config, cudaStream_t stream) {
    if (config == 0) launch_attention_forward_hopper<128>(p, stream);
    else launch_attention_forward_hopper<64>(p, stream);
}
