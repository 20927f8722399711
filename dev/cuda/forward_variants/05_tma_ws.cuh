/*
Variant 5: Hopper (sm_90a) with TMA and warp specialisation, HS 64 and 128 (attention_forward_hopper_ws_kernel
in src/attention.cuh). One producer warpgroup at 24 registers issues TMA loads of Q and a ring of K/V tiles
(mbarriers: full = bytes landed, empty = every consumer warp done with the slot); 2 or 3 consumer warpgroups
(setmaxnreg 240 / 160) own 64 query rows each and run variant 4's intra-warpgroup overlap loop (O += P V of
tile j-1 under the softmax of tile j; the softmax is pinned ahead of the wait for P V, see schedule_pin). "/pp": the consumers take turns issuing their GEMMs (named barriers),
so one's softmax hides behind the others' tensor-core work. Persistent: one CTA per SM, longest tiles first.
The tensor maps read Q, K and V straight from the fused (B, T, 3, NH, HS) buffer.
Two Q slots (every config but /c2/s3): each work item's first S is issued in the previous item's last turn and
runs during its epilogue.
Configs, kBlockM x kBlockN / consumer warpgroups / ping-pong / K-V ring depth (2 unless "/s3", "/s4"):
  HS 64:  192x128/3wg/pp, 128x128/2wg/pp, 192x128/3wg, 192x128/3wg/pp/s3, 128x128/2wg/pp/s3, 128x128/2wg/pp/s4,
          128x128/2wg/s3, 128x128/2wg/pp/s3/claimed, 192x128/3wg/pp/claimed ("/claimed": items past the first
          round taken from a counter, the kDynamic schedule of src's HS 128 pairs and backward)
  HS 128: 128x128/2wg/pp, 128x128/2wg, 128x64/2wg/pp/s3, 192x64/3wg/pp, 128x128/2wg/pp/c2
"/c2" (eighth session): CTA pairs (a thread-block cluster of 2) take two neighbouring query blocks of a head and
share one K/V walk, each CTA's producer loading one of the two 64-column boxes of each K and V tile into both CTAs
(TMA multicast); each slot is released by the consumers of both (remote mbarrier arrives). Needs an even number of
128-row query blocks: other shapes skip it (src falls back to 128x128/2wg/pp). H100 (call 6, 4x16x8192x128, four
A/B rounds of 100 launches, ms_med / ms_min): 128x128/2wg/pp 2.197 / 1.883, 2.148 / 1.887, 2.104 / 1.922, 2.132 /
1.934; /c2 1.886 / 1.830, 2.079 / 1.832, 1.992 / 1.834, 2.025 / 1.832. ncu: L2 bytes 13.41 -> 7.15 GB, DRAM read 3.46
-> 2.06 GB, L2 throughput 67% -> 48%, DRAM 50% -> 31%, elapsed cycles 3.10 M -> 3.07 M (at ncu's locked clocks);
SM busy 67%, no eligible warp 54% of cycles in both. Validated in call 5 (--check 50 passed for 0 and five configs;
T = 200, 256, 1000 x8 and 4000 at HS 128; compute-sanitizer memcheck, racecheck, synccheck clean at B=2 T=200 NH=2).
Ninth session (commit ec1fb16): with 128-row blocks and 128-key tiles (the 2-warpgroup configs at HS 64) consumer
warpgroup 0 computes only the left 64 keys of each item's diagonal tile (S, softmax; P's right half zero), in its own
copy of the consumer code; H100, 64x12x1024, 128x128/2wg/pp/s3 as src: 0.317-0.321 -> 0.306-0.309 ms over six A/B
rounds in two calls. At HS 128, P V is one n128 wgmma per k16 step (both column blocks through the descriptor's LBO).
Tenth session (2026-11-23, H100): /c2/s3, the pairs with a 3-deep K/V ring, which fits once O is stored from
registers without staging (HopperWsTile::kStageO): 4x16x8192 ms_min 1.772-1.777 -> 1.754-1.761 over three A/B
rounds (medians within the slow mode's spread), 16x16x2048 unchanged; not shipped. The pairs without ping-pong
were 2% slower by minimum. Both, and Q held in registers (tried, removed), in dev/cuda/README.md.
ptxas (nvcc 13.0): 168 registers at launch (128 with 3 consumer warpgroups), no spills, no C75xx infos; SASS has
UTMALDG.4D, HGMMA.64x128x16 / 64x64x16, USETMAXREG. Non-Hopper GPUs: not supported.
Last run (H100, 2026-11-21, commit b6ae92a; --check of every config on the validation set: 56 passed, 0 failed;
compute-sanitizer memcheck, racecheck, synccheck clean at B=2 T=300 NH=3 HS=64 and B=1 T=77 NH=2 HS=128; same-call
cuDNN fwd 0.320 / 0.066 / 0.278 / 0.957 / 1.908 ms at the five shapes below, FlashAttention-2 0.482 / 0.091 / 0.425 /
1.542 / 3.390; all RESULT lines in dev/cuda/README.md):
  RESULT attention_forward 5 cfg=192x128/3wg/pp B=64 NH=12 T=1024 HS=64 ms_med=0.3700 ms_min=0.3674 tflops=278.6 speedup_vs_2=8.45
  RESULT attention_forward 5 cfg=128x128/2wg/pp B=8 NH=12 T=1024 HS=64 ms_med=0.0490 ms_min=0.0479 tflops=263.0 speedup_vs_2=8.55
  RESULT attention_forward 5 cfg=192x128/3wg/pp B=4 NH=12 T=4096 HS=64 ms_med=0.2436 ms_min=0.2428 tflops=423.1 speedup_vs_2=11.18
  RESULT attention_forward 5 cfg=192x128/3wg/pp B=1 NH=12 T=16384 HS=64 ms_med=0.8333 ms_min=0.8311 tflops=494.8 speedup_vs_2=13.10
  RESULT attention_forward 5 cfg=128x128/2wg/pp B=4 NH=16 T=8192 HS=128 ms_med=2.2589 ms_min=2.0312 tflops=486.7 speedup_vs_2=6.79
Ping-pong is worth 3-6% (192x128/3wg 270.1 / 405.2 / 469.4, 128x128/2wg at HS 128 454.5); 3 consumer warpgroups beat
2 by 4-18% except at 8x12x1024 (96 heads: too few 192-row tiles per SM).
Fifth session, call 5 (H100, commit fdf6e3b; --check 68 passed for 0 and the five configs below; same-call cuDNN fwd
0.319 / 0.084 / 0.291 / 1.033 / 1.799 ms), ms_med at the five shapes (HS 128: 128x128/2wg/pp only):
  192x128/3wg/pp       0.3604  0.0596  0.2545  0.8745  2.1281 (128x128/2wg/pp; timed after src, see the order bias in README.md)
  128x128/2wg/pp       0.3370  0.0528  0.2774  1.0337
  192x128/3wg/pp/s3    0.3398  0.0563  0.2490  0.8777
  128x128/2wg/pp/s3    0.3248  0.0503  0.2709  1.0507     <- src below T = 2048 then (a 192-row tiling left a ragged tile at 1024)
  128x128/2wg/pp/s4    0.3265  0.0506  0.2742  1.0402
src shipped 192x128/3wg/pp at HS 64 from T = 2048 with B*NH*T >= 128K, else 128x128/2wg/pp/s3, and 128x128/2wg/pp
at HS 128 (call 6: 4x16x8192 128x128/2wg/pp 2.012, 192x64/3wg/pp 2.314, 128x64/2wg/pp/s3 2.485 ms). Call 8:
without ping-pong (128x128/2wg/s3) 1-2.5% slower at T = 1024 even with the overlap working. Above 64 MB
of K/V the heads run in L2-sized sections (persistent_item in src/attention.cuh).
Fourteenth session (H100, 2026-11-24): where the query blocks are not the key tiles (192 rows, or 64-key tiles) they
are counted back from T (block_start in src), so a ragged block is the first, one-tile item instead of the last,
longest one. 192x128/3wg/pp at 64x12x1024: 0.369 -> 0.322 ms (two rounds, old and new builds alternating); 4x12x4096
0.241 -> 0.229; 1x12x16384 0.798 -> 0.782; 2x12x3000 0.0768 -> 0.0747. With 3 stages it is the faster HS 64 kernel
from 128K query rows (64x12x1024: 0.304 against 128x128/2wg/pp/s3's 0.310, three rounds), so src ships
192x128/3wg/pp/s3 there (dev/cuda/README.md, fourteenth session). The /claimed configs lost: 64x12x1024 0.316 vs
0.310, 8x12x1024 0.049 vs 0.048, 4x12x4096 0.242 vs 0.241; 1x12x16384 0.793 vs 0.796 (one call, before the above).
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
            // src's two HS 64 kernels with their items claimed from a counter (kDynamic; fourteenth session)
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
            // a 3-deep K/V ring: fits with O stored without staging (HopperWsTile::kStageO; tenth session)
            case 5: launch_attention_forward_hopper_ws<128, 2, 128, 3, true, 2>(p, stream); break;
        }
    }
}
