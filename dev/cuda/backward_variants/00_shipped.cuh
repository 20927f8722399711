/*
Variant 0: whatever src/attention.cuh ships for GPT-2's calls (attention_backward_self_causal_path, which
attention_backward runs for them), so the shipped backward is always validated and timed with everything else. Deterministic by default: on Hopper variant 6's split (HS 64 kv128x128+q128x128,
HS 128 kv128x64+q128x96) and at HS 128 from T = 8192 variant 7 /ordered; elsewhere variant 4's split.
FLASHGPT_ATTN_NONDETERMINISTIC=1 picks variant 7 at HS 128 on Hopper, and variant 8 off Hopper (variant 3 where
variant 8's shared memory does not fit). attention_backward_path_name() names the choice.
*/
#pragma once

void attention_backward0(const AttentionBackwardParams& p, int config, cudaStream_t stream) {
    attention_check_self_causal(p);
    attention_backward_self_causal_path(p, stream);
}
