/*
Variant 8: variant 3 reshaped for shared-memory traffic (mma.sync, sm_80+): one kernel per 128-key block with 8
warps, 4 (keys) x 2 (queries) of 32 x 32 for S^T and dP^T. HS 64: 128-query stages in two 64-query passes, dK / dV
accumulated from registers over each warp's own queries; HS 128: 64-query stages, P^T and dS^T through shared
memory, dK / dV in 32 keys x 64 columns per warp, warps 4-7 taking dQ before dV/dK. dQ over the whole stage with
32 x 32 warp tiles, red.global.add from one base pointer. Two barriers a stage, a 3-deep Q / dO ring.
attention_backward_fused_kernel in src/attention.cuh: what FLASHGPT_ATTN_NONDETERMINISTIC=1 runs off Hopper.
Configs: kBlockN keys x kBlockM queries / (key warps) x (query warps); 8x1w = 16-key warps, dK / dV from
registers (kept to show the 4x2 layout's gain).
*/
#pragma once

// the config's shared memory fits this GPU (163 KB at HS 64 and 193.5 KB at HS 128 for config 0: not on sm_86 / sm_89)
bool attention_backward8_supports(const Shape& s, int config) {
    if (s.HS == 64) return config == 0 ? attention_backward_fused_fits<64, 2, 2, false>() : attention_backward_fused_fits<64, 1, 1, false>();
    return config == 0 ? attention_backward_fused_fits<128, 2, 2, true>() : attention_backward_fused_fits<128, 1, 1, false>();
}

void attention_backward8(const AttentionBackwardParams& p, int config, cudaStream_t stream) {
    if (p.HS == 64) {
        if (config == 0) attention_backward_fused<64, 2, 2, false>(p, stream);    // 4 x 2 warps of 32 keys x 32 queries
        else attention_backward_fused<64, 1, 1, false>(p, stream);                // 8 x 1 warps of 16 keys x 64 queries
    } else {
        if (config == 0) attention_backward_fused<128, 2, 2, true>(p, stream);    // 4 x 2, dV / dK through shared memory
        else attention_backward_fused<128, 1, 1, false>(p, stream);               // 8 x 1 warps of 16 keys x 64 queries
    }
}
