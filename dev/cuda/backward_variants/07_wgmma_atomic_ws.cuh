/*
Variant 7: variant 6's warp-specialised dK/dV kernel with the dQ of variant 3 (sm_90a, HS 64 and 128): one kernel,
5 GEMMs a tile pair instead of the split's 7. attention_backward_dkdv_hopper_ws_kernel<..., kAtomicDq = true> in
src/attention.cuh. Per 64-query step each consumer warpgroup writes its dS^T (64 keys x 64 queries, bf16) to
shared memory while its dV / dK wgmmas run; after one barrier between the two warpgroups each computes HS / 2
columns of dQ = dS K over all 128 keys (both operands read transposed, wgmma SS), stages them as fp32 TMA boxes,
and one thread reduce-adds them into the fp32 dq_accum with cp.reduce.async.bulk.tensor (the adds happen in L2);
a post-pass converts dq_accum to bf16. Non-deterministic (the order of the adds varies).
Configs: the ring depth of the Q / dO stages. ptxas: no spills; SASS has HGMMA.64x32x16 (HS 64) / 64x64x16 with
.tnspA.tnspB for dQ and UTMAREDG.3D.ADD. The dQ operands are read transposed from a 64-byte offset inside the
128-byte swizzle atom at HS 64 (n32 per warpgroup): validated, so the hardware swizzles by address.
Validation (H100, 2026-11-21, calls 1-3 of the fourth session): --check 24 passed (both configs, every shape at x1
and x8), compute-sanitizer memcheck, racecheck and synccheck clean at B=2 T=200 NH=2 HS=64 and B=1 T=77 NH=3 HS=128.
Last run (H100, commit 1f07def, call 3; variant 0 = the deterministic split of the same call; cuDNN bwd 1.438 /
0.353 / 0.864 / 2.579 / 6.141 ms):
  RESULT attention_backward 7 cfg=kv128x64 B=64 NH=12 T=1024 HS=64 ms_med=1.0940 tflops=235.6   (v0 1.0335)
  RESULT attention_backward 7 cfg=kv128x64 B=8 NH=12 T=1024 HS=64 ms_med=0.1559 tflops=206.6    (v0 0.1554)
  RESULT attention_backward 7 cfg=kv128x64 B=4 NH=12 T=4096 HS=64 ms_med=0.8125 tflops=317.2    (v0 0.7923)
  RESULT attention_backward 7 cfg=kv128x64/s3 B=1 NH=12 T=16384 HS=64 ms_med=2.8752 tflops=358.5 (v0 3.0466)
  RESULT attention_backward 7 cfg=kv128x64 B=4 NH=16 T=8192 HS=128 ms_med=8.2409 tflops=333.6   (v0 7.4563)
It does 5 GEMMs a tile pair against the split's 7 but wins only at long T: its two consumer warpgroups meet at a
named barrier every step (each one's dQ needs both halves of dS^T), so neither hides the other's softmax and
dS^T / dQ staging the way the free-running warpgroups of the split kernels do. Sections of heads (persistent_item)
took HS 128 from 9.70 to 8.01 ms (the fp32 dQ rows of 64 heads are 256 MB) but cost at 1x12x16384 (2.78 -> 3.01).
Its best case, 1x12x16384, ties the split's kv128x128 config (2.854 ms in call 4, which is what src now ships), so
src does not use it, not even with FLASHGPT_ATTN_NONDETERMINISTIC=1.
Configs /pipe (sixth session, the kernel's kOverlap): step j issues step j-1's dQ right behind its own S^T, dP^T, so
dQ runs under step j's softmax, and each warpgroup hands its dS^T half to the other through a named barrier split
into bar.arrive (writer) and bar.sync (reader), ids alternating per step. H100, call 1 of the sixth session (commit
ab5d659, with the S/dP fix; --check 62 passed with variant 0; memcheck / racecheck / synccheck clean), bwd ms_med,
kv128x64 -> kv128x64/pipe (src split in brackets): 64x12x1024 1.178 -> 1.074 (0.974), 8x12x1024 0.163 -> 0.153
(0.147), 4x12x4096 0.915 -> 0.779 (0.735), 1x12x16384 3.037 -> 2.767 (2.738), 4x16x8192x128 8.80 -> 9.41 (6.68-7.03;
the HS 128 pipe spills 272 bytes). Still no faster than the split: the warpgroups still meet every step.
ncu (eleventh session, H100, 2x16x8192x128, the dK/dV kernel): SMs active 77% of the cycles (the round-robin
schedule's ragged end), issue slots 23%, tensor 39%, L2 50%, DRAM 46% (1.53 TB/s), L2 hit rate 57%, 6.5 GB of
reduce-add sectors; 4x16x8192x128 8.49 ms. (ptxas 13.0 now reports 384 bytes of spills for the HS 128 pipe.)
Twelfth session (H100): without its reduce-add path the dK/dV kernel took 3.41 ms instead of 4.57 (ncu, 2x16x8192x128),
so the reduces moved to a writer warp of the producer warpgroup (mbarriers dq_full / dq_empty per dQ buffer, two
buffers at HS 128 too), and the kernel claims its items at T >= 4096 like the split: 4.57 -> 3.14 ms there, and bwd
ms_med at 4x16x8192x128 5.59-5.65 against the split's 6.05-6.10 (call 7); at HS 64 still slower than the split
(1x12x16384 2.81 vs 2.60, 64x12x1024 1.14 vs 0.96). src runs it at HS 128 with FLASHGPT_ATTN_NONDETERMINISTIC=1.
Config /ordered (thirteenth session, kernel parameter ordered_dq): deterministic. A counter per (head, 64-query
block) in the scratch; the writer waits until it is its key block's turn before the reduce-adds, and counts itself
once bulk_wait says they completed. In key-block order from block 0: H100, 4x16x8192x128 bwd ms_med 8.03 against
5.70 unordered and 6.2 for the split, because in a section of 4 heads ~33 key blocks of a head start together and
each waits for the one before. From the diagonal block down with the items shortest first (call 8): 5.93, 6.03
against the split's 6.39, 6.16; 2x16x8192x128 3.06 against 3.17, 3.01; but 4x16x4096x128 1.63 against 1.52-1.54.
Every /ordered run bit-identical (--check 62 passed), racecheck / synccheck clean. src runs it at HS 128 from
T = 8192. dev/cuda/README.md, "Thirteenth session", has the calls.
*/
#pragma once

bool attention_backward7_supports(const Shape& s, int) { return (s.HS == 64 || s.HS == 128) && hopper_path_available(); }

void attention_backward7(const AttentionBackwardParams& p, int config, cudaStream_t stream) {
    const bool ordered = config == 0;   // /ordered: dQ added in a fixed order (deterministic)
    if (p.HS == 64) {
        switch (config) {
            case 0: case 1: attention_backward_atomic_hopper_ws<64, 2>(p, stream, ordered); break;
            case 2: attention_backward_atomic_hopper_ws<64, 3>(p, stream, false); break;
        }
    } else {
        attention_backward_atomic_hopper_ws<128, 2>(p, stream, ordered);
    }
}
