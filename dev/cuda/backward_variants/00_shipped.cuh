/*
Variant 0: whatever src/attention.cuh ships (attention_backward), so the shipped backward is always validated
and timed with everything else. Deterministic by default: on Hopper variant 6's split (HS 64 kv128x128+q128x128,
HS 128 kv128x64+q128x64) and at HS 128 from T = 8192 variant 7 /ordered; elsewhere variant 4's split.
FLASHGPT_ATTN_NONDETERMINISTIC=1 picks variant 7 at HS 128 on Hopper, and variant 8 off Hopper (variant 3 where
variant 8's shared memory does not fit). attention_backward_path_name() names the choice.
Last measured (H100, 2026-11-24, binaries of 4ebbd77, two rounds, ms_med): 64x12x1024x64 0.965 / 0.961,
8x12x1024x64 0.132 / 0.132, 4x12x4096x64 0.704 / 0.705, 1x12x16384x64 2.578 / 2.675, 4x16x8192x128 6.079 / 5.922.
*/
#pragma once

void attention_backward0(const AttentionBackwardParams& p, int config, cudaStream_t stream) {
    attention_backward(p, stream);
}
