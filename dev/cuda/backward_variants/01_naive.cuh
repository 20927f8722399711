/*
Variant 1: naive. A direct port of the CPU reference backward, fp32: one warp per query row for D and dQ,
one warp per key row for dK and dV, lanes split the head dimension, P recomputed from lse. It is the GPU
reference of common.h writing bf16 (D goes to the scratch), so the harness's reference and this variant
are the same code. Slow by design; the correctness baseline on the GPU.
*/
#pragma once

void attention_backward1(const AttentionBackwardParams& p, int config, cudaStream_t stream) {
    reference_backward<false, floatX>(p.dq, (float*)p.scratch, p.dout, p.q, p.out, p.lse, Shape{p.B, p.T, p.NH, p.HS}, stream);
}
