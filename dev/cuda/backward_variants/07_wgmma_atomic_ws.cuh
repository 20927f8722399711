/*
Variant 7: variant 6's warp-specialised dK/dV kernel with the dQ of variant 3 (sm_90a, HS 64 and 128): one kernel,
5 GEMMs a tile pair instead of the split's 7. attention_backward_dkdv_hopper_ws_kernel<..., kAtomicDq = true> in
src/attention.cuh. Per 64-query step each consumer warpgroup writes its dS^T (64 keys x 64 queries, bf16) to
shared memory while its dV / dK wgmmas run; after one barrier between the two warpgroups each computes HS / 2
columns of dQ = dS K over all 128 keys (both operands read transposed, wgmma SS), stages them as fp32 TMA boxes,
and one thread reduce-adds them into the fp32 dq_accum with cp.reduce.async.bulk.tensor (the adds happen in L2);
a post-pass converts dq_accum to bf16. Non-deterministic (the order of the adds varies), so opt-in:
FLASHGPT_ATTN_NONDETERMINISTIC=1.
Configs: the ring depth of the Q / dO stages.
*/
#pragma once

bool attention_backward7_supports(const Shape& s) { return (s.HS == 64 || s.HS == 128) && hopper_path_available(); }

void attention_backward7(const AttentionBackwardParams& p, int config, cudaStream_t stream) {
    if (p.HS == 64) {
        if (config == 0) attention_backward_atomic_hopper_ws<64, 2>(p, stream);
        else attention_backward_atomic_hopper_ws<64, 3>(p, stream);
    } else {
        attention_backward_atomic_hopper_ws<128, 2>(p, stream);
    }
}
