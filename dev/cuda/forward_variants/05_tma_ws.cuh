/*
Variant 5: Hopper (sm_90a) with TMA and warp specialisation, HS 64 and 128 (attention_forward_hopper_ws_kernel
in src/attention.cuh). One producer warpgroup at 24 registers issues TMA loads of Q and a ring of K/V tiles
(mbarriers: full = bytes landed, empty = every consumer warp done with the slot); 2 or 3 consumer warpgroups
(setmaxnreg 240 / 160) own 64 query rows each and run variant 4's intra-warpgroup overlap loop (O += P V of
tile j-1 under the softmax of tile j). "/pp": the consumers take turns issuing their GEMMs (named barriers),
so one's softmax hides behind the others' tensor-core work. Persistent: one CTA per SM, longest tiles first.
The tensor maps read Q, K and V straight from the fused (B, T, 3, NH, HS) buffer.
Configs, kBlockM x kBlockN / consumer warpgroups / ping-pong / K-V ring depth (2 unless "/s3"):
  HS 64:  192x128/3wg/pp, 128x128/2wg/pp, 192x128/3wg, 192x128/3wg/pp/s3
  HS 128: 128x128/2wg/pp, 128x128/2wg, 128x64/2wg/pp/s3, 192x64/3wg/pp
Non-Hopper GPUs: not supported.
*/
#pragma once

bool attention_forward5_supports(const Shape& s) { return (s.HS == 64 || s.HS == 128) && hopper_path_available(); }

void attention_forward5(const AttentionForwardParams& p, int config, cudaStream_t stream) {
    if (p.HS == 64) {
        switch (config) {
            case 0: launch_attention_forward_hopper_ws<64, 3, 128, 2, true>(p, stream); break;
            case 1: launch_attention_forward_hopper_ws<64, 2, 128, 2, true>(p, stream); break;
            case 2: launch_attention_forward_hopper_ws<64, 3, 128, 2, false>(p, stream); break;
            case 3: launch_attention_forward_hopper_ws<64, 3, 128, 3, true>(p, stream); break;
        }
    } else {
        switch (config) {
            case 0: launch_attention_forward_hopper_ws<128, 2, 128, 2, true>(p, stream); break;
            case 1: launch_attention_forward_hopper_ws<128, 2, 128, 2, false>(p, stream); break;
            case 2: launch_attention_forward_hopper_ws<128, 2, 64, 3, true>(p, stream); break;
            case 3: launch_attention_forward_hopper_ws<128, 3, 64, 2, true>(p, stream); break;
        }
    }
}
