/*
Variant 3: fused FlashAttention-2 backward on mma.sync (FA2's KV-parallel backward): a pre-pass
(D = rowsum(dO * O), lse * log2(e), zero the fp32 dQ accumulator); one CTA per (key block, b, h) walking
the Q tiles at or below the diagonal with dK, dV in registers (S^T / dP^T with keys as MMA rows, so P^T and
dS^T feed dV and dK straight from the accumulators), dS^T staged in swizzled shared memory for
dQ += dS K, added to the fp32 accumulator with red.global.add; a post-pass dQ * scale -> bf16 into dqkv.
5 GEMMs per tile pair; the dQ summation order varies run to run (not bit-reproducible).
Kernels: attention_backward_dkdv_kernel<.., kAtomicDq=true> in src/attention.cuh. Configs: kBlockN keys x kBlockM
queries / warps (16 keys per warp). Superseded by variant 8 (its 16-key warps load 0.6 ldmatrix.x4 per MMA); src
runs 64x64/4w under FLASHGPT_ATTN_NONDETERMINISTIC=1 only where variant 8's shared memory does not fit.
*/
#pragma once

void attention_backward3(const AttentionBackwardParams& p, int config, cudaStream_t stream) {
    if (p.HS == 64) {
        switch (config) {
            case 0: attention_backward_atomic<64, 8, 64>(p, stream); break;     // 128x64, 8 warps
            case 1: attention_backward_atomic<64, 4, 64>(p, stream); break;     // 64x64, 4 warps
        }
    } else {
        switch (config) {
            case 0: attention_backward_atomic<128, 4, 64>(p, stream); break;    // 64x64, 4 warps
            case 1: attention_backward_atomic<128, 8, 64>(p, stream); break;    // 128x64, 8 warps
        }
    }
}
