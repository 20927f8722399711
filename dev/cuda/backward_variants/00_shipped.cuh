/*
Variant 0: whatever src/attention.cuh ships (attention_backward), so the shipped backward is always validated
and timed with everything else. Run as the training default: deterministic (the split path; on Hopper at HS 128
from T = 8192 variant 7 /ordered) unless FLASHGPT_ATTN_NONDETERMINISTIC=1 is set. Its choice is in
attention_backward_path_name().
*/
#pragma once

void attention_backward0(const AttentionBackwardParams& p, int config, cudaStream_t stream) {
    attention_backward(p.dqkv, p.scratch, p.dout, p.qkv, p.out, p.lse, p.B, p.T, p.NH, p.HS, stream);
}
