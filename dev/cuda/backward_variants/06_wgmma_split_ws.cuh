/*
Variant 6: variant 5's deterministic split on Hopper with the forward's TMA warp specialisation (sm_90a, HS 64 and
128): attention_backward_dkdv_hopper_ws_kernel and attention_backward_dq_hopper_ws_kernel in src/attention.cuh.
One producer warpgroup (24 registers) issues every load: TMA boxes of Q, K, V straight from the fused
(B, T, 3, NH, HS) buffer and of dO, 1-D bulk copies of the lse2 / D rows; 2 consumer warpgroups (240 registers)
run variant 5's steps unchanged (dkdv_hopper_step, dq_hopper_step) and hand each ring stage back through an
mbarrier, with no CTA-wide barrier in the loop. Persistent (one CTA per SM, longest work first); the outputs
are staged in their own shared memory, so the next item's loads overlap the stores.
Configs: dK/dV keys x query-step + dQ queries x key-step, all 2 consumer warpgroups; ring depth 2 unless "/s3".
*/
#pragma once

bool attention_backward6_supports(const Shape& s) { return (s.HS == 64 || s.HS == 128) && hopper_path_available(); }

void attention_backward6(const AttentionBackwardParams& p, int config, cudaStream_t stream) {
    if (p.HS == 64) {
        switch (config) {
            case 0: attention_backward_split_hopper_ws<64, 2, 64, 2, 64, 2>(p, stream); break;     // kv128x64 + q128x64
            case 1: attention_backward_split_hopper_ws<64, 2, 128, 2, 128, 2>(p, stream); break;   // kv128x128 + q128x128
            case 2: attention_backward_split_hopper_ws<64, 2, 64, 2, 128, 2>(p, stream); break;    // kv128x64 + q128x128
            case 3: attention_backward_split_hopper_ws<64, 2, 64, 2, 64, 3>(p, stream); break;     // kv128x64 + q128x64, 3 stages
        }
    } else {
        switch (config) {
            case 0: attention_backward_split_hopper_ws<128, 2, 64, 2, 64, 2>(p, stream); break;    // kv128x64 + q128x64
            case 1: attention_backward_split_hopper_ws<128, 2, 64, 2, 128, 2>(p, stream); break;   // kv128x64 + q128x128
        }
    }
}
