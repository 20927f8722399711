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
          154 registers). No spills, no ptxas C75xx infos (nvcc 13.0). The overlap alone buys 1% (below): the
          S GEMM still waits for its own softmax; next: two S buffers, or ping-pong between warpgroups.
  HS 128: 128x64 (97 KB smem, 2 CTAs/SM at 127 registers: what src ships), 128x128 (161 KB,
          1 CTA/SM, 192 registers), 128x128 with O += P V as one n128 wgmma per k16 step (V's two
          column blocks joined by the descriptor's leading byte offset) instead of two n64 (198 registers).
          Non-Hopper GPUs: not supported.
Last run (H200, 2026-11-21, commit 98d5c03, validated on the whole set in the same call; anchors in dev/cuda/README.md):
  RESULT attention_forward 4 cfg=128x128/2wg B=64 NH=12 T=1024 HS=64 ms_med=0.3477 ms_min=0.3462 tflops=296.4 speedup_vs_2=7.60
  RESULT attention_forward 4 cfg=128x64/2wg/ovl B=64 NH=12 T=1024 HS=64 ms_med=0.3445 ms_min=0.3423 tflops=299.2 speedup_vs_2=7.67
  RESULT attention_forward 4 cfg=128x128/2wg/ovl B=64 NH=12 T=1024 HS=64 ms_med=0.4357 ms_min=0.4346 tflops=236.6
  RESULT attention_forward 4 cfg=128x64/2wg B=4 NH=16 T=8192 HS=128 ms_med=2.9009 ms_min=2.8598 tflops=379.0 speedup_vs_2=4.06
  RESULT attention_forward 4 cfg=128x128/2wg/pv128 B=4 NH=16 T=8192 HS=128 ms_med=3.1335 ms_min=3.1315 tflops=350.9 speedup_vs_2=3.76
*/
#pragma once

bool attention_forward4_supports(const Shape& s, int) { return (s.HS == 64 || s.HS == 128) && hopper_path_available(); }

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
