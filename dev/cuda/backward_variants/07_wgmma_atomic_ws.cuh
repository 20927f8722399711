/*
Variant 7: variant 6's dK/dV kernel computing dQ too (sm_90a, HS 64 and 128): 5 GEMMs a tile pair instead of the
split's 7 (attention_backward_dkdv_hopper_ws_kernel<..., kAtomicDq = true>). Each consumer warpgroup writes its
dS^T to shared memory; after one barrier between the two, each computes HS / 2 columns of dQ = dS K over all 128
keys and stages them as fp32 boxes. A writer warp of the producer warpgroup (dq_full / dq_empty mbarriers per
buffer) reduce-adds them into the fp32 dq_accum with cp.reduce.async.bulk.tensor; a post-pass converts to bf16.
Non-deterministic: src runs it at HS 128 under FLASHGPT_ATTN_NONDETERMINISTIC=1. "/ordered" is deterministic: a
counter per (head, 64-query block) makes the adds land in a fixed order, from the diagonal key block down, with a
head's items taken shortest first; src runs it at HS 128 from T = 8192. Configs: /ordered, the Q / dO ring depth.
ptxas: no spills; SASS has UTMAREDG.3D.ADD.
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
