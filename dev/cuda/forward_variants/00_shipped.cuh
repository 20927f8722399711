/*
Variant 0: whatever src/attention.cuh ships (attention_forward), so the shipped kernel is always
validated and timed with everything else. Its tile choice is in attention_forward_path_name().
Last run (H200, 2026-11-21, commit ab05b33; all configs and anchors in dev/cuda/README.md):
  RESULT attention_forward 0 cfg=src B=64 NH=12 T=1024 HS=64 ms_med=0.3492 ms_min=0.3474 tflops=295.2 speedup_vs_2=7.52
  RESULT attention_forward 0 cfg=src B=4 NH=16 T=8192 HS=128 ms_med=4.2212 ms_min=4.1879 tflops=260.5 speedup_vs_2=2.80
*/
#pragma once

void attention_forward0(const AttentionForwardParams& p, int config, cudaStream_t stream) {
    attention_forward(p.out, p.lse, p.qkv, p.B, p.T, p.NH, p.HS, stream);
}
