/*
Variant 3: the FlashAttention-2 kernel that src/attention.cuh ships (attention_forward_kernel),
swept over tile shapes: this is where the shipped tiles were chosen. What it does: mma.sync
m16n8k16 bf16 with fp32 accumulators; Q kept in registers; K/V tiles double buffered with cp.async
into 128-byte-swizzled shared memory (conflict-free ldmatrix); P stays in registers (the S
accumulators are the A fragments of P V); online softmax in base 2 with the scale folded into one
FFMA, normalised once at the end; causal tiles skipped, the mask applied only on diagonal tiles, and
the longest Q tiles launched first. The configs: kBlockM x kBlockN / warps (rows per warp).
HS 128 with 32 rows per warp (O alone is 128 registers) fits in 255 registers only with the lean K/V
loader and XOR fragment addressing of src/attention.cuh; ptxas (CUDA 13.0), registers / spill bytes
sm_80 | sm_90a: 128x64/8w 177/0 | 178/0, 128x48/4w 255/0 | 254/0, 128x64/4w 255/0 | 255/36,
128x32/4w 239/0 | 238/0. 128x48/4w (new, replaces 64x64/4w) is the largest key tile with no spill on
either arch; its last tile of a diagonal may be partly past the Q tile, which the mask already covers.
Last run (H200, 2026-11-21, commit bd3b985; every config validated on the whole set in the same call; PyTorch's
FlashAttention-2 in that call: 212.4 TF/s at 64x12x1024x64, 233.3 at 4x12x4096x64, 332.5 at 4x16x8192x128):
  RESULT attention_forward 3 cfg=128x64/4w B=64 NH=12 T=1024 HS=64 ms_med=0.4697 ms_min=0.4688 tflops=219.5 speedup_vs_2=5.61
  RESULT attention_forward 3 cfg=128x64/4w B=4 NH=12 T=4096 HS=64 ms_med=0.3871 ms_min=0.3861 tflops=266.3 speedup_vs_2=5.42
  RESULT attention_forward 3 cfg=128x48/4w B=4 NH=16 T=8192 HS=128 ms_med=3.1095 ms_min=3.0364 tflops=353.6 speedup_vs_2=3.90
  RESULT attention_forward 3 cfg=128x64/4w B=4 NH=16 T=8192 HS=128 ms_med=3.3005 ms_min=3.2969 tflops=333.1 speedup_vs_2=3.67
  RESULT attention_forward 3 cfg=128x32/4w B=4 NH=16 T=8192 HS=128 ms_med=3.4371 ms_min=3.4356 tflops=319.9 speedup_vs_2=3.53
  RESULT attention_forward 3 cfg=128x64/8w B=4 NH=16 T=8192 HS=128 ms_med=3.9452 ms_min=3.9096 tflops=278.7 speedup_vs_2=3.07
At HS 128, 32 rows per warp without spills (128x48/4w) is 1.27x the 16-rows-per-warp config: ldmatrix traffic
per MMA, not occupancy, was the limit. The portable HS 128 dispatch uses 128x48/4w since.
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
