/*
Variant 0: whatever src/attention.cuh ships (attention_forward), so the shipped kernel is always
validated and timed with everything else. Its tile choice is in attention_forward_path_name().
*/
#pragma once

void attention_forward0(const AttentionForwardParams& p, int config, cudaStream_t stream) {
    attention_forward(p.out, p.lse, p.qkv, p.B, p.T, p.NH, p.HS, stream);
}
