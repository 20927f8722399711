/*
Variant 4: split, deterministic (jax-triton PR #177 / Triton tutorial 06 style, two kernels): after the
same pre-pass as variant 3 (without the dQ accumulator), a dK/dV kernel per key block (S^T, dP^T, dV, dK:
4 GEMMs) and a dQ kernel per query block (S, dP, dQ: 3 GEMMs, the forward's layout with Q and dO in
registers). 7 GEMMs per tile pair instead of 5, no atomics, no fp32 buffer, every output written once in a
fixed order: bit-identical run to run. More independent CTAs than variant 3 at small B*NH.
Kernels: attention_backward_dkdv_kernel<.., kAtomicDq=false> and attention_backward_dq_kernel in src/attention.cuh.
Configs: dK/dV kBlockN x kBlockM / warps + dQ kBlockM x kBlockN / warps.
*/
#pragma once

void attention_backward4(const AttentionBackwardParams& p, int config, cudaStream_t stream) {
    if (p.HS == 64) {
        switch (config) {
            case 0: attention_backward_split<64, 8, 64, 4, 64>(p, stream); break;   // kv 128x64/8w + q 64x64/4w
            case 1: attention_backward_split<64, 4, 64, 4, 64>(p, stream); break;   // kv 64x64/4w  + q 64x64/4w
            case 2: attention_backward_split<64, 8, 64, 8, 64>(p, stream); break;   // kv 128x64/8w + q 128x64/8w
        }
    } else {
        switch (config) {
            case 0: attention_backward_split<128, 4, 64, 4, 64>(p, stream); break;  // kv 64x64/4w  + q 64x64/4w
            case 1: attention_backward_split<128, 8, 64, 4, 64>(p, stream); break;  // kv 128x64/8w + q 64x64/4w
            case 2: attention_backward_split<128, 4, 64, 4, 32>(p, stream); break;  // kv 64x64/4w  + q 64x32/4w
        }
    }
}
