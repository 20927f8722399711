/*
Variant 8: variant 3 reshaped for shared-memory traffic (mma.sync, sm_80+): one kernel per 128-key block with 8
warps, 4 (keys) x 2 (queries) of 32 x 32 for S^T and dP^T. HS 64: 128-query stages in two 64-query passes, dK / dV
accumulated from registers over each warp's own queries (partials of the two query warps summed at the end);
HS 128: 64-query stages, P^T and dS^T through shared memory and dK / dV in 32 keys x 64 columns per warp. dQ over the
whole stage with 32 x 32 warp tiles, red.global.add from one base pointer. Two barriers a stage, a 3-deep Q / dO ring.
attention_backward_fused_kernel in src/attention.cuh (its header has the load counts); what the non-deterministic
opt-in runs off Hopper since the seventh session. Non-deterministic (atomic dQ).
Configs: kBlockN keys x kBlockM queries / warps as (key warps) x (query warps); 8x1w = 16-key warps, dK / dV from
registers (kept to show the 4x2 layout's gain).
ncu (H100, 1x12x16384, call 3 of the seventh session): L1 60% busy, tensor pipe 39%, 7.28 M cycles, against variant
3's 71% / 33% / 8.71 M and FlashAttention-2's kernel 65% / 43% / 6.63 M (call 1). Its instructions: 1.25 G against
variant 3's 1.41 G and FlashAttention-2's 1.20 G.
Validation (H100, commit 90586bc, eighth session call 7): --check passed for both shipped configs (7 shapes x 2
scales, with every other variant: 164 passed; worst error ratio to the naive bf16 computation 1.28), compute-sanitizer
memcheck / racecheck clean at B=2 T=300 NH=2 HS=64 and B=1 T=277 NH=3 HS=128 (synccheck too in call 3). Since the
seventh session the HS 128 config's warps 4-7 take dQ before dV/dK (10.07 -> 9.90 ms, A/B in call 2). Last run (same
call; PyTorch FlashAttention-2 bwd 2.073 / 0.440 / 1.337 / 3.929 / 9.854 ms):
  RESULT attention_backward 8 cfg=128x128/4x2w B=64 NH=12 T=1024 HS=64 ms_med=1.5167 tflops=169.9 speedup_vs_2=7.92
  RESULT attention_backward 8 cfg=128x128/4x2w B=8 NH=12 T=1024 HS=64 ms_med=0.1995 tflops=161.5 speedup_vs_2=7.10
  RESULT attention_backward 8 cfg=128x128/4x2w B=4 NH=12 T=4096 HS=64 ms_med=1.1072 tflops=232.7 speedup_vs_2=14.62
  RESULT attention_backward 8 cfg=128x128/4x2w B=1 NH=12 T=16384 HS=64 ms_med=3.8755 tflops=266.0 speedup_vs_2=17.73
  RESULT attention_backward 8 cfg=128x64/4x2w/smem B=4 NH=16 T=8192 HS=128 ms_med=9.6668 tflops=284.4 speedup_vs_2=9.43
(8x1w: 1.584 / 0.210 / 1.196 / 4.361 ms at HS 64, 10.53 at HS 128.)
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
