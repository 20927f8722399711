/*
Variant 6: variant 5's deterministic split on Hopper with the forward's TMA warp specialisation (sm_90a, HS 64 and
128): attention_backward_dkdv_hopper_ws_kernel and attention_backward_dq_hopper_ws_kernel in src/attention.cuh.
One producer warpgroup (24 registers) issues every load: TMA boxes of Q, K, V straight from the fused
(B, T, 3, NH, HS) buffer and of dO, 1-D bulk copies of the lse2 / D rows; 2 consumer warpgroups (240 registers)
run variant 5's steps unchanged (dkdv_hopper_step, dq_hopper_step) and hand each ring stage back through an
mbarrier, with no CTA-wide barrier in the loop. Persistent (one CTA per SM, longest work first); the outputs
are staged in their own shared memory, so the next item's loads overlap the stores.
Configs: dK/dV keys x query-step + dQ queries x key-step, all 2 consumer warpgroups; ring depth 2 unless "/s3".
"/ovl" (HS 64, 3 stages): intra-warpgroup overlap of consecutive steps in both kernels: step j issues its S^T, dP^T
(S, dP) and then step j-1's dV, dK (dQ) before waiting, and hands stage j-1 back once those are done.
FLASHGPT_ATTN_SCHEDULE=dynamic (eleventh session, opt-in, every config): items past the first round are claimed
from a global counter (the kernels' kDynamic) instead of round-robin; see dev/cuda/README.md, "Eleventh session".
ptxas: 168 registers at launch, no spills except HS 128 kv128x64+q128x128 (its dQ kernel: 120 bytes; dQ + S + dP
+ dS alone are 224 of the 240 registers). The dK/dV consumers read lse2 and D with ordinary loads, so every consumer
thread (not one per warp) arrives on a stage's empty barrier: racecheck flagged the per-warp version.
Last run (H100, 2026-11-21, commit 054a36c with the per-warp release; validated in that call, 48 passed, and again
after the fix in the next call with racecheck, memcheck and synccheck clean; same-call cuDNN bwd 1.452 / 0.286 /
0.858 / 2.477 / 6.063 ms, FlashAttention-2 2.033 / 0.357 / 1.284 / 3.956 / 9.769; variant 5's best 1.401 / 0.164 /
0.944 / 3.576 / 8.942):
  RESULT attention_backward 6 cfg=kv128x64+q128x64/s3 B=64 NH=12 T=1024 HS=64 ms_med=1.1246 ms_min=1.1173 tflops=229.1 speedup_vs_2=10.48 fwd_bwd_tflops=241.2
  RESULT attention_backward 6 cfg=kv128x64+q128x64/s3 B=8 NH=12 T=1024 HS=64 ms_med=0.1522 ms_min=0.1503 tflops=211.6 speedup_vs_2=9.09 fwd_bwd_tflops=224.3
  RESULT attention_backward 6 cfg=kv128x128+q128x128 B=4 NH=12 T=4096 HS=64 ms_med=0.7974 ms_min=0.7921 tflops=323.2 speedup_vs_2=20.24 fwd_bwd_tflops=346.0
  RESULT attention_backward 6 cfg=kv128x64+q128x64 B=1 NH=12 T=16384 HS=64 ms_med=3.0279 ms_min=2.9331 tflops=340.4 speedup_vs_2=22.82 fwd_bwd_tflops=373.3
  RESULT attention_backward 6 cfg=kv128x64+q128x64 B=4 NH=16 T=8192 HS=128 ms_med=7.2979 ms_min=6.8549 tflops=376.7 speedup_vs_2=12.56 fwd_bwd_tflops=409.6
Fourth session, call 4 (H100, commit 50dfb5b; --check 58 passed with bit-identical reruns, racecheck and synccheck
clean at B=2 T=300 NH=2 HS=64 for every config), bwd ms_med at 64x12x1024 / 8x12x1024 / 4x12x4096 / 1x12x16384:
  kv128x64+q128x64         1.0656  0.1564  0.8364  3.0980
  kv128x128+q128x128       1.0284  0.1532  0.7899  2.8543     <- best everywhere in this call: src ships it at HS 64
  kv128x64+q128x128        1.0784  0.1549  0.8633  3.1432
  kv128x64+q128x64/s3      1.0681  0.1543  0.8036  3.0823
  kv128x64+q128x64/s3/ovl  1.0742  0.1542  0.8326  3.0638
  HS 128, 4x16x8192: kv128x64+q128x64 7.3035, kv128x64+q128x128 7.2934 (spills; src keeps the first)
The overlap gains nothing, and the SASS says why: ptxas schedules most of the step's MUFU.EX2 (19 of 32 a thread in
dK/dV) after the WARPGROUP.DEPBAR that waits for the older GEMMs, though the source computes them before it, so the
softmax still runs while this warpgroup's tensor work is drained. The shipped forward shows the same thing (its
exps follow the wait for P V; the gain there comes from ping-pong). The asm register fences (reg_fence) order the
PTX, not ptxas's schedule; pinning them needs a dependency ptxas cannot reorder (next step). At HS 128 the overlap
does not fit (dK, dV, S^T, dP^T and the fragments: ptxas spills and serialises the wgmmas, C7512), so it is HS 64 only.
Fifth session (H100): with the softmax pinned ahead of the wait (schedule_pin, SASS 32 of 32 exps before it),
call 1 (commit 1897fb4, --check 38 passed), bwd ms_med at the same four shapes:
  kv128x64+q128x64/s3/ovl  1.0485  0.1572  0.8108  3.0346     (src, kv128x128+q128x128: 1.0062 0.1523 0.7739 2.7860)
  kv128x128+q128x128/sec   1.0167  0.1608  0.8527  3.1645     (16 MB head sections forced); HS 128 kv128x64+q128x64/sec
                           6.8453 against src's 7.1562 in plain order, so src now sections every shape above 64 MB
Call 2 (commit 9cc908d, --check 24 passed): kv128x128+q128x128/s3 1.0264 0.1536 0.8240 2.9140 (src 1.0161 0.1518
0.7801 2.9223). The overlap now beats its own non-overlapped config but not kv128x128: two steps' registers force
64-query steps. src ships the best config of each shape (see attention_backward()). ncu (H100, 1x12x16384, fifth
session call 3): dK/dV tensor pipe 55.6%, dQ 52.2%, DRAM 6%, issue slots 41-44%: each consumer warpgroup waits on
its chain of dependent GEMMs (S, dP -> softmax -> dV, dK). Call 7 (commit a11f4c6, --check 34 passed): 3 consumer
warpgroups, kv192x64+q192x64, 1.0972 0.1681 0.8319 3.0100 against src's 1.0166 0.1510 0.7680 2.9069: slower, so
the config (and the 384-row lse2 / D padding its 192-row dQ blocks needed) was taken out again. Next:
the dQ GEMM in a warpgroup of its own, or 2-CTA clusters sharing Q/dO (TMA multicast).
*/
#pragma once

bool attention_backward6_supports(const Shape& s, int) { return (s.HS == 64 || s.HS == 128) && hopper_path_available(); }

void attention_backward6(const AttentionBackwardParams& p, int config, cudaStream_t stream) {
    if (p.HS == 64) {
        switch (config) {
            case 0: attention_backward_split_hopper_ws<64, 2, 64, 2, 64, 2>(p, stream); break;     // kv128x64 + q128x64
            case 1: attention_backward_split_hopper_ws<64, 2, 128, 2, 128, 2>(p, stream); break;   // kv128x128 + q128x128
            case 2: attention_backward_split_hopper_ws<64, 2, 64, 2, 128, 2>(p, stream); break;    // kv128x64 + q128x128
            case 3: attention_backward_split_hopper_ws<64, 2, 64, 2, 64, 3>(p, stream); break;     // kv128x64 + q128x64, 3 stages
            case 4: attention_backward_split_hopper_ws<64, 2, 128, 2, 128, 3>(p, stream); break;   // kv128x128 + q128x128, 3 stages
        }
    } else {
        switch (config) {
            case 0: attention_backward_split_hopper_ws<128, 2, 64, 2, 64, 2>(p, stream); break;    // kv128x64 + q128x64
            case 1: attention_backward_split_hopper_ws<128, 2, 64, 2, 128, 2>(p, stream); break;   // kv128x64 + q128x128
        }
    }
}
