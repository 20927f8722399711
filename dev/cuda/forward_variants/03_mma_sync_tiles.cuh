/*
Variant 3: FlashAttention-2 on mma.sync, the kernel src/attention.cuh ships off Hopper (attention_forward_kernel),
swept over tile shapes: this is where the shipped tiles were chosen. mma.sync m16n8k16 bf16 with fp32 accumulators;
Q in registers; K/V tiles double buffered with cp.async into 128-byte-swizzled shared memory (conflict-free
ldmatrix); P stays in registers (the S accumulators are the A fragments of P V); online softmax in base 2 with the
scale folded into one FFMA, normalised once at the end; causal tiles skipped, the mask applied only on diagonal
tiles, the longest Q tiles launched first. Configs: kBlockM x kBlockN / warps. At HS 128, 32 rows a warp fit in 255
registers only with src's lean K/V loader and XOR fragment addressing; 128x48/4w is the largest key tile with no
spill on sm_80 or sm_90a, and 1.27x the 16-rows-a-warp config (ldmatrix traffic per MMA was the limit).
*/
#pragma once

void attention_forward3(const AttentionForwardParams& p, int config, cudaStream_t stream) {
    if (p.HS == 64) {
        switch (config) {
            case 0: launch_attention_forward<64, 2, 4, 64>(p, stream); break;    // 128x64, 4 warps x 32 rows
            case 1: launch_attention_forward<64, 1, 4, 64>(p, stream); break;    // 64x64, 4 warps x 16 rows
            case 2: launch_attention_forward<64, 1, 8, 64>(p, stream); break;    // 128x64, 8 warps x 16 rows
            case 3: launch_attention_forward<64, 2, 4, 32>(p, stream); break;    // 128x32, 4 warps x 32 rows
        }
    } else {
        switch (config) {
            case 0: launch_attention_forward<128, 1, 8, 64>(p, stream); break;   // 128x64, 8 warps x 16 rows
            case 1: launch_attention_forward<128, 2, 4, 48>(p, stream); break;   // 128x48, 4 warps x 32 rows (Q in smem)
            case 2: launch_attention_forward<128, 2, 4, 64>(p, stream); break;   // 128x64, 4 warps x 32 rows (Q in smem; FA2's)
            case 3: launch_attention_forward<128, 2, 4, 32>(p, stream); break;   // 128x32, 4 warps x 32 rows (Q in smem)
        }
    }
}
