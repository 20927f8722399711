/*
Variant 4: split, deterministic (jax-triton PR #177 / Triton tutorial 06 style, two kernels): after the
same pre-pass as variant 3 (without the dQ accumulator), a dK/dV kernel per key block (S^T, dP^T, dV, dK:
4 GEMMs) and a dQ kernel per query block (S, dP, dQ: 3 GEMMs, the forward's layout with Q and dO in
registers). 7 GEMMs per tile pair instead of 5, no atomics, no fp32 buffer, every output written once in a
fixed order: bit-identical run to run. More independent CTAs than variant 3 at small B*NH.
Kernels: attention_backward_dkdv_kernel<.., kAtomicDq=false> and attention_backward_dq_kernel in src/attention.cuh.
Configs: dK/dV kBlockN keys x kBlockM queries / warps + dQ kBlockM queries x kBlockN keys / warps; "x2": each warp
owns two m16 tiles (32 keys or 32 query rows), which loads each shared B fragment once for twice the MMAs.
Registers (ptxas, sm_90a, HS 64): kv 128x64/8w 255, kv 64x32/4w 171, kv 128x16/4wx2 246, kv 128x32/8w 169,
q 64x64/4w 185, q 128x32/4wx2 251, q 128x64/8w 186; HS 128: kv 64x32/4w 255, q 64x32/4w 240, kv 128x32/8w 169; kv 64x64/4w and q 64x64/4w spill
~64 and 8 bytes (kept in the sweep to show what the spill costs).
"kv128x128/4x2w" / "kv128x64/4x2w/smem" (seventh session): variant 8's kernel without dQ (attention_backward_fused_kernel
<.., kDq=false>, attention_backward_split_wide) as the dK/dV kernel; what src ships off Hopper where its shared memory
fits (163 KB at HS 64, 193.5 KB at HS 128: not on sm_86 / sm_89, and not HS 128 on an A100; those GPUs skip
these two configs, attention_backward4_supports). H100, call 10, bit-identical on every validation run, memcheck / racecheck clean, bwd ms against
kv64x32/4w + q64x64/4w (HS 128: + q64x32/4w) in the same call: 64x12x1024 1.720 vs 1.794, 8x12x1024 0.217 vs 0.230,
4x12x4096 1.280 vs 1.466, 1x12x16384 4.763 vs 5.590, 4x16x8192x128 13.40 vs 14.66.
Last run (H200, 2026-11-21, on bd0434e + uncommitted backward); bit-identical on every validation run, max error ratio 1.00:
  RESULT attention_backward 4 cfg=kv64x32/4w+q64x64/4w B=64 NH=12 T=1024 HS=64 ms_med=1.8316 ms_min=1.7579 tflops=140.7 speedup_vs_2=4.71 fwd_bwd_tflops=156.8
  RESULT attention_backward 4 cfg=kv128x16/4wx2+q128x32/4wx2 B=64 NH=12 T=1024 HS=64 ms_med=1.7770 ms_min=1.7638 tflops=145.0 speedup_vs_2=4.86 fwd_bwd_tflops=160.7
  RESULT attention_backward 4 cfg=kv64x32/4w+q64x64/4w B=8 NH=12 T=1024 HS=64 ms_med=0.2272 ms_min=0.2255 tflops=141.8 speedup_vs_2=4.61 fwd_bwd_tflops=154.1
  RESULT attention_backward 4 cfg=kv128x64/8w+q64x64/4w B=1 NH=12 T=16384 HS=64 ms_med=5.5741 ms_min=5.5723 tflops=184.9 speedup_vs_2=10.45 fwd_bwd_tflops=204.9
The x2 config (two m16 tiles per warp) did not pay off: within 3% on the big shapes, 5-43% slower where there
are few CTAs (12x1024, 12x4096, 48x1024: larger tiles, fewer blocks).
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
