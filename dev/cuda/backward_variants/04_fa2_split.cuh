/*
Variant 4: split, deterministic (jax-triton PR #177 / Triton tutorial 06 style, two kernels): after variant 3's
pre-pass (without the dQ accumulator), a dK/dV kernel per key block (S^T, dP^T, dV, dK: 4 GEMMs) and a dQ kernel
per query block (S, dP, dQ: 3 GEMMs, the forward's layout with Q and dO in registers). 7 GEMMs per tile pair
instead of 5, no atomics, no fp32 buffer, every output written once in a fixed order: bit-identical run to run.
Kernels: attention_backward_dkdv_kernel<.., kAtomicDq=false> and attention_backward_dq_kernel in src/attention.cuh.
Configs: dK/dV kBlockN x kBlockM / warps + dQ kBlockM x kBlockN / warps; "x2": two m16 tiles a warp.
"kv128x128/4x2w" / "kv128x64/4x2w/smem" take variant 8's kernel without dQ (attention_backward_split_wide) as the
dK/dV kernel: what src ships off Hopper where its shared memory fits (163 KB at HS 64, 193.5 KB at HS 128: not on
sm_86 / sm_89, not HS 128 on an A100; those GPUs skip both configs, attention_backward4_supports).
*/
#pragma once

// the wide configs (HS 64 config 4, HS 128 config 3) run variant 8's kernel: only where its shared memory fits
bool attention_backward4_supports(const Shape& s, int config) {
    if (s.HS == 64 && config == 4) return attention_backward_fused_fits<64, 2, 2, false>();
    if (s.HS == 128 && config == 3) return attention_backward_fused_fits<128, 2, 2, true>();
    return true;
}

void attention_backward4(const AttentionBackwardParams& p, int config, cudaStream_t stream) {
    if (p.HS == 64) {
        switch (config) {
            case 0: attention_backward_split<64, 8, 1, 64, 4, 1, 64>(p, stream); break;   // kv 128x64/8w   + q 64x64/4w
            case 1: attention_backward_split<64, 4, 1, 32, 4, 1, 64>(p, stream); break;   // kv 64x32/4w    + q 64x64/4w
            case 2: attention_backward_split<64, 4, 2, 16, 4, 2, 32>(p, stream); break;   // kv 128x16/4wx2 + q 128x32/4wx2
            case 3: attention_backward_split<64, 8, 1, 32, 8, 1, 64>(p, stream); break;   // kv 128x32/8w   + q 128x64/8w
            case 4: attention_backward_split_wide<64, 2, 2, false, 4, 1, 64>(p, stream); break;   // variant 8's dK/dV + q 64x64/4w
        }
    } else {
        switch (config) {
            case 0: attention_backward_split<128, 4, 1, 32, 4, 1, 32>(p, stream); break;  // kv 64x32/4w  + q 64x32/4w
            case 1: attention_backward_split<128, 4, 1, 64, 4, 1, 64>(p, stream); break;  // kv 64x64/4w  + q 64x64/4w
            case 2: attention_backward_split<128, 8, 1, 32, 4, 1, 32>(p, stream); break;  // kv 128x32/8w + q 64x32/4w
            case 3: attention_backward_split_wide<128, 2, 2, true, 4, 1, 32>(p, stream); break;   // variant 8's dK/dV + q 64x32/4w
        }
    }
}
