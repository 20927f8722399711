/*
Variant 1: naive. A direct port of the CPU reference: one warp per query row, lanes split the keys,
two passes (row max, then exp-sum and P V), fp32 throughout. It is the GPU reference kernel of
common.h writing bf16, so the harness's reference and this variant are the same code.
Slow by design; the correctness baseline on the GPU.
*/
#pragma once

void attention_forward1(const AttentionForwardParams& p, int config, cudaStream_t stream) {
    reference_forward<false, floatX>(p.out, p.lse, p.q, Shape{p.B, p.T, p.NH, p.HS}, stream);
}
