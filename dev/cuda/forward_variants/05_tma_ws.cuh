/*
Variant 5: Hopper (sm_90a) TMA and warp specialisation, HS 64 and 128: the kernel src ships on Hopper
(attention_forward_hopper_ws_kernel). A producer warpgroup (24 registers) issues TMA loads of Q and a ring of K/V
tiles straight from the fused (B, T, 3, NH, HS) buffer (mbarriers: full = bytes landed, empty = every consumer
warp done). 2 or 3 consumer warpgroups (setmaxnreg) own 64 query rows each and overlap O += P V of tile j-1 with the
softmax of tile j; with "/pp" they take turns issuing their GEMMs (ping-pong). Persistent CTAs take the longest
items first; two Q slots let an item's first S run during the previous item's epilogue. 192-row query blocks are
counted back from T, so a ragged block is the first, shortest item. Configs: kBlockM x kBlockN / consumer
warpgroups / ping-pong / K-V ring depth (2 unless "/s3", "/s4"); "/c2": CTA pairs share each K/V tile by TMA
multicast (HS 128, an even number of 128-row blocks); "/claimed": items past the first round come from a counter.
ptxas: 168 registers (128 with 3 consumer warpgroups), no spills. Non-Hopper GPUs: not supported.
*/
#pragma once

// the clustered configs (HS 128 configs 4, 5) pair query blocks of 128 rows: an even number of them
bool attention_forward5_supports(const Shape& s, int config) {
    if (s.HS == 128 && (config == 4 || config == 5) && ceil_div(s.T, 128) % 2 != 0) return false;
    return (s.HS == 64 || s.HS == 128) && hopper_path_available();
}

void attention_forward5(const AttentionForwardParams& p, int config, cudaStream_t stream) {
    if (p.HS == 64) {
        switch (config) {
            case 0: launch_attention_forward_hopper_ws<64, 3, 128, 2, true>(p, stream); break;
            case 1: launch_attention_forward_hopper_ws<64, 2, 128, 2, true>(p, stream); break;
            case 2: launch_attention_forward_hopper_ws<64, 3, 128, 2, false>(p, stream); break;
            case 3: launch_attention_forward_hopper_ws<64, 3, 128, 3, true>(p, stream); break;
            case 4: launch_attention_forward_hopper_ws<64, 2, 128, 3, true>(p, stream); break;
            case 5: launch_attention_forward_hopper_ws<64, 2, 128, 4, true>(p, stream); break;
            case 6: launch_attention_forward_hopper_ws<64, 2, 128, 3, false>(p, stream); break;
            // src's two HS 64 kernels with their items claimed from a counter (kDynamic)
            case 7: launch_attention_forward_hopper_ws<64, 2, 128, 3, true, 1, true>(p, stream); break;
            case 8: launch_attention_forward_hopper_ws<64, 3, 128, 2, true, 1, true>(p, stream); break;
        }
    } else {
        switch (config) {
            case 0: launch_attention_forward_hopper_ws<128, 2, 128, 2, true>(p, stream); break;
            case 1: launch_attention_forward_hopper_ws<128, 2, 128, 2, false>(p, stream); break;
            case 2: launch_attention_forward_hopper_ws<128, 2, 64, 3, true>(p, stream); break;
            case 3: launch_attention_forward_hopper_ws<128, 3, 64, 2, true>(p, stream); break;
            case 4: launch_attention_forward_hopper_ws<128, 2, 128, 2, true, 2>(p, stream); break;
            // a 3-deep K/V ring: fits with O stored without staging (HopperWsTile::kStageO)
            case 5: launch_attention_forward_hopper_ws<128, 2, 128, 3, true, 2>(p, stream); break;
        }
    }
}
