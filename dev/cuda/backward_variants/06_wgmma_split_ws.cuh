/*
Variant 6: variant 5's deterministic split with the forward's TMA warp specialisation (sm_90a, HS 64 and 128):
attention_backward_dkdv_hopper_ws_kernel and attention_backward_dq_hopper_ws_kernel, what src ships on Hopper.
One producer warpgroup (24 registers) issues every load: TMA boxes of Q, K, V from the fused buffer and of dO,
bulk copies of the lse2 / D rows. 2 consumer warpgroups (240 registers) run variant 5's steps and hand each ring
stage back through an mbarrier, with no CTA-wide barrier in the loop; every consumer thread arrives on a stage's
empty barrier, since the lse2 / D reads are ordinary loads. Persistent; items claimed from a counter at
T >= 4096 (--schedule forces either schedule); the preprocess, dK/dV and dQ kernels overlap by programmatic
dependent launch (--pdl 0 turns it off). Configs: dK/dV keys x query-step + dQ queries x key-step, ring depth 2
unless "/s3". ptxas: 168 registers, no spills except HS 128 kv128x64+q128x128 (120 bytes in its dQ kernel). HS 128
q128x96 (what src ships): the dQ kernel's S and dP as n96 wgmmas, whose operands take 5 KB of shared memory per 48
tensor-core cycles where n64's take 4 KB per 32, all the 128 bytes a cycle an SM reads.
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
            case 2: attention_backward_split_hopper_ws<128, 2, 64, 2, 96, 2>(p, stream); break;    // kv128x64 + q128x96
        }
    }
}
