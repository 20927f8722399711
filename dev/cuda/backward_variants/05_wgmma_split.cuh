/*
Variant 5: Hopper (sm_90a) wgmma, HS 64 and 128: variant 4's split (deterministic) on warpgroup MMAs. Same
pre-pass; a dK/dV kernel where each warpgroup owns 64 keys (S^T = K Q^T and dP^T = V dO^T read both operands
from the swizzled shared memory, dV += P^T dO and dK += dS^T Q take P^T / dS^T from registers), and a dQ kernel
where each warpgroup owns 64 query rows (S, dP from shared memory, dQ += dS K with dS from registers). The
exponentials of P run while the dP GEMM is still in flight. cp.async double buffering, no warp specialisation.
HS 128 stores tiles as two 64-column blocks (the forward's layout) and runs each HS-wide RS GEMM as two n64
wgmmas; its dK/dV kernel holds 64x128 fp32 dK and dV (128 of its ~250 registers a thread): with 1 warpgroup
2 CTAs per SM still fit (99 KB each), with 2 warpgroups 1 (131 KB).
Kernels: attention_backward_dkdv_hopper_kernel and attention_backward_dq_hopper_kernel in src/attention.cuh.
Configs: dK/dV keys x query-step / warpgroups (CTAs per SM asked of the compiler) + dQ queries x key-step / warpgroups.
ptxas (sm_90a): HS 64 dK/dV 198 registers (1 or 2 warpgroups, 64-query steps), 255 (128-query steps); dQ 144 / 229;
HS 128 dK/dV 250, dQ 212; no spills. Every instantiation gets one compiler-inserted warpgroup arrive/wait (C7519/C7517).
Last run (H200, 2026-11-21, commit 98d5c03; every config validated on the whole set, bit-identical twice, in the same call):
  RESULT attention_backward 5 cfg=kv64x64/1wg+q64x64/1wg B=64 NH=12 T=1024 HS=64 ms_med=1.3008 ms_min=1.2558 tflops=198.1 speedup_vs_2=6.73 fwd_bwd_tflops=218.9
  RESULT attention_backward 5 cfg=kv64x128/1wg+q64x128/1wg B=64 NH=12 T=1024 HS=64 ms_med=1.2688 ms_min=1.2359 tflops=203.1 speedup_vs_2=6.90 fwd_bwd_tflops=223.2
  RESULT attention_backward 5 cfg=kv128x64/2wg+q128x64/2wg B=64 NH=12 T=1024 HS=64 ms_med=1.4414 ms_min=1.4196 tflops=178.8 speedup_vs_2=6.08 fwd_bwd_tflops=201.7
  RESULT attention_backward 5 cfg=kv128x64/2wg+q128x64/2wg B=4 NH=16 T=8192 HS=128 ms_med=8.9500 ms_min=8.9449 tflops=307.1 speedup_vs_2=8.91 fwd_bwd_tflops=334.7
  RESULT attention_backward 5 cfg=kv64x64/1wg+q64x64/1wg B=4 NH=16 T=8192 HS=128 ms_med=9.7358 ms_min=9.4431 tflops=282.3 speedup_vs_2=8.19 fwd_bwd_tflops=313.3
One warpgroup per CTA (2-3 CTAs per SM, no barrier shared between warpgroups) wins at HS 64; at HS 128 the 2-warpgroup
CTAs, which share each Q/dO (K/V) stage between 128 keys (queries), win. src/attention.cuh ships kv64x64+q64x64 below
T = 2048, kv64x128+q64x128 from there, and kv128x64/2wg+q128x64/2wg at HS 128.
*/
#pragma once

bool attention_backward5_supports(const Shape& s, int) { return (s.HS == 64 || s.HS == 128) && hopper_path_available(); }

void attention_backward5(const AttentionBackwardParams& p, int config, cudaStream_t stream) {
    if (p.HS == 64) {
        switch (config) {
            case 0: attention_backward_split_hopper<64, 2, 64, 1, 2, 64, 1>(p, stream); break;    // kv 128x64/2wg + q 128x64/2wg
            case 1: attention_backward_split_hopper<64, 1, 64, 2, 1, 64, 3>(p, stream); break;    // kv 64x64/1wg  + q 64x64/1wg
            case 2: attention_backward_split_hopper<64, 2, 64, 1, 2, 128, 1>(p, stream); break;   // kv 128x64/2wg + q 128x128/2wg
            case 3: attention_backward_split_hopper<64, 1, 128, 2, 1, 128, 2>(p, stream); break;  // kv 64x128/1wg + q 64x128/1wg
        }
    } else {
        switch (config) {
            case 0: attention_backward_split_hopper<128, 1, 64, 2, 1, 64, 2>(p, stream); break;   // kv 64x64/1wg  + q 64x64/1wg
            case 1: attention_backward_split_hopper<128, 2, 64, 1, 1, 64, 2>(p, stream); break;   // kv 128x64/2wg + q 64x64/1wg
            case 2: attention_backward_split_hopper<128, 2, 64, 1, 2, 64, 1>(p, stream); break;   // kv 128x64/2wg + q 128x64/2wg
            case 3: attention_backward_split_hopper<128, 1, 64, 2, 2, 64, 1>(p, stream); break;   // kv 64x64/1wg  + q 128x64/2wg
        }
    }
}
