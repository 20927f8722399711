/*
Variant 8: variant 3 reshaped for shared-memory traffic (mma.sync, sm_80+): one kernel per 128-key block with 8
warps, 128-query stages walked in two 64-query passes; HS 64 puts the warps 4 (keys) x 2 (queries), 32 x 32 each,
with partial dK, dV per query warp summed at the end; dQ over the whole 128-query stage with 32 x HS/2 warp tiles.
attention_backward_fused_kernel in src/attention.cuh (its header has the load counts). Non-deterministic (atomic dQ).
Configs: kBlockN keys x kBlockM queries / warps as (key warps) x (query warps).
*/
#pragma once

void attention_backward8(const AttentionBackwardParams& p, int config, cudaStream_t stream) {
    if (p.HS == 64) {
        if (config == 0) attention_backward_fused<64, 2, 2, false>(p, stream);    // 4 x 2 warps of 32 keys x 32 queries
        else attention_backward_fused<64, 1, 1, false>(p, stream);                // 8 x 1 warps of 16 keys x 64 queries
    } else {
        if (config == 0) attention_backward_fused<128, 2, 2, true>(p, stream);    // 4 x 2, dV / dK through shared memory
        else attention_backward_fused<128, 1, 1, false>(p, stream);               // 8 x 1 warps of 16 keys x 64 queries
    }
}
