/*
Variant 4: Hopper (sm_90a) wgmma, HS 64 and 128. Variant 3's loop with each warpgroup owning 64 query
rows: S = Q K^T as wgmma m64nNk16 with Q and K read straight from the swizzled shared memory, P kept in
registers as the A operand of O += P V (V read transposed from shared memory). Still cp.async double
buffering and __syncthreads, no warp specialisation yet (no TMA producer, no ping-pong). HS 128 tiles
are stored as two 64-column blocks, each in the HS 64 layout (swizzle_wgmma in src/attention.cuh).
Configs, all 2 warpgroups (kBlockM 128), named kBlockM x kBlockN:
  HS 64:  128x128, 128x64 (both 2 CTAs/SM), and with "/ovl" the FA3 intra-warpgroup overlap
          (attention_forward_hopper_overlap_kernel: O += P V of tile j-1 runs while the softmax of tile j
          does; separate 3-slot K and V rings, V loaded one tile behind K): 128x64/2wg/ovl (2 CTAs/SM, 65 KB
          smem, 106 registers), 128x128/2wg/ovl (1 CTA/SM: S + P + O alone are 128 registers; 113 KB smem,
          154 registers). No spills, no ptxas C75xx infos (nvcc 13.0). Not run yet.
  HS 128: 128x64 (97 KB smem, 2 CTAs/SM at 127 registers: what src ships, untimed), 128x128 (161 KB,
          1 CTA/SM, 192 registers), 128x128 with O += P V as one n128 wgmma per k16 step (V's two
          column blocks joined by the descriptor's leading byte offset) instead of two n64 (198 registers).
          Non-Hopper GPUs: not supported.
Last run (H200, 2026-11-21, commit ab05b33; all configs and anchors in dev/cuda/README.md):
  RESULT attention_forward 4 cfg=128x128/2wg B=64 NH=12 T=1024 HS=64 ms_med=0.3593 ms_min=0.3573 tflops=286.9 speedup_vs_2=7.31
  RESULT attention_forward 4 cfg=128x128/2wg B=1 NH=12 T=16384 HS=64 ms_med=1.0472 ms_min=1.0460 tflops=393.7 speedup_vs_2=8.03
HS 128: not run yet.
*/
#pragma once

bool attention_forward4_supports(const Shape& s) { return (s.HS == 64 || s.HS == 128) && hopper_path_available(); }

void attention_forward4(const AttentionForwardParams& p, int config, cudaStream_t stream) {
    if (p.HS == 64) {
        switch (config) {
            case 0: launch_attention_forward_hopper<64, 128>(p, stream); break;
            case 1: launch_attention_forward_hopper<64, 64>(p, stream); break;
            case 2: launch_attention_forward_hopper_overlap<64, 64>(p, stream); break;
            case 3: launch_attention_forward_hopper_overlap<64, 128>(p, stream); break;
        }
    } else {
        switch (config) {
            case 0: launch_attention_forward_hopper<128, 64>(p, stream); break;
            case 1: launch_attention_forward_hopper<128, 128>(p, stream); break;
            case 2: launch_attention_forward_hopper<128, 128, /*kPvN128=*/true>(p, stream); break;
        }
    }
}
