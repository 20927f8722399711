/*
Variant 5: Hopper (sm_90a) wgmma, HS 64 and 128: variant 4's split (deterministic) on warpgroup MMAs. Same
pre-pass; a dK/dV kernel where each warpgroup owns 64 keys (S^T = K Q^T and dP^T = V dO^T read both operands
from the swizzled shared memory, dV += P^T dO and dK += dS^T Q take P^T / dS^T from registers), and a dQ kernel
where each warpgroup owns 64 query rows (S, dP from shared memory, dQ += dS K with dS from registers). The
exponentials of P run while the dP GEMM is still in flight. cp.async double buffering, no warp specialisation.
HS 128 stores tiles as two 64-column blocks (the forward's layout) and runs each HS-wide RS GEMM as two n64
wgmmas; its dK/dV kernel holds 64x128 fp32 dK and dV (128 of its ~250 registers a thread): with 1 warpgroup
2 CTAs per SM still fit (99 KB each), with 2 warpgroups 1 (131 KB). Not timed yet at HS 128.
Kernels: attention_backward_dkdv_hopper_kernel and attention_backward_dq_hopper_kernel in src/attention.cuh.
Configs: dK/dV keys x query-step / warpgroups (CTAs per SM asked of the compiler) + dQ queries x key-step / warpgroups.
*/
#pragma once

bool attention_backward5_supports(const Shape& s) { return (s.HS == 64 || s.HS == 128) && hopper_path_available(); }

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
