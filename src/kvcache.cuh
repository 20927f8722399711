/*
KV cache for incremental inference: per layer, the K and V of every position so far, (B, Tmax, NH, HS) each, so a
decode step computes q, k, v of each sequence's newest token only and attends over that sequence's cached keys.

  prefill   the prompts, right-padded to the longest (Tp), run the normal forward; kv_cache_append copies each layer's
            K and V of each prompt's rows out of the fused qkv (B, Tp, 3, NH, HS) into slots 0..length-1 (the padded
            rows have none).
  decode    lengths[b] counts sequence b's tokens so far (prompt + generated); its newest token is history[b, len - 1]
            at position len - 1. embed_newest_tokens embeds it, kv_cache_append writes its k, v to slot len - 1, and
            src/attention.cuh's attention_forward_kvcache with seqlens_k = lengths lets it see keys 0..len-1.
  paged     (generate_gpt2cu -pg) the same slots in pages of one pool, through a block table (KVCacheLayout)
  gather_newest_rows picks row lengths[b] - 1 of each sequence out of a (B, T, D) activation (prefill's last layer
            norm, the full-recompute path's logits).
Every position these kernels use comes from lengths on the GPU, so a decode step has no host input and replays as one
CUDA graph.
*/
#pragma once
#include "cuda_utils.cuh"
#include "generate.h"         // the position rules: newest_position, kv_cache_slot

// ----------------------------------------------------------------------------
// kernels: one thread per 8 channels of a row

// out (B, C): row b = wte[history[b, len - 1]] + wpe[len - 1], len = lengths[b] (encoder_forward's arithmetic)
__global__ void embed_newest_tokens_kernel(floatX* out, const int* history, const int* lengths, const floatX* wte,
                                           const floatX* wpe, int B, int Tmax, int C) {
    size_t idx = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * X128_SIZE;
    if (idx >= (size_t)B * C) return;
    int b = idx / C, c = idx % C;
    int pos = newest_position(lengths[b]);
    int ix = history[(size_t)b * Tmax + pos];
    x128 tok = load128cs(wte + (size_t)ix * C + c);
    x128 wp = load128cs(wpe + (size_t)pos * C + c);
    x128 result;
    for (int k = 0; k < X128_SIZE; k++) result.set(k, tok.f(k) + wp.f(k));
    store128(out + idx, result);
}

// where the caches keep slot s of sequence b: row b * Tmax + s of contiguous (B, Tmax, NH, HS) caches, or with a
// block table (B, pages_per_seq) row s % page_size of page block_table[b, s / page_size] of a pool
// (pages, page_size, NH, HS) (generate.h's GenerateSchedule)
struct KVCacheLayout {
    int Tmax;                  // positions per sequence
    const int* block_table;    // nullptr: contiguous
    int pages_per_seq, page_size;
};
__device__ inline size_t kv_cache_row(const KVCacheLayout& lay, int b, int slot) {
    if (!lay.block_table) return (size_t)b * lay.Tmax + slot;
    return (size_t)lay.block_table[b * lay.pages_per_seq + slot / lay.page_size] * lay.page_size + slot % lay.page_size;
}

// qkv (B, Tq, 3, NH, HS) -> the caches, C = NH * HS: prefill, row t of sequence b to slot t where t < lengths[b] (the
// padding past a prompt has no slot); else to slot lengths[b] - Tq + t (the sequence's newest Tq tokens)
__global__ void kv_cache_append_kernel(floatX* k_cache, floatX* v_cache, const floatX* qkv, const int* lengths, bool prefill,
                                       KVCacheLayout lay, int B, int Tq, int C) {
    size_t idx = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * X128_SIZE;
    if (idx >= (size_t)B * Tq * C) return;
    size_t bt = idx / C;
    int c = idx % C, b = bt / Tq, t = bt % Tq;
    int slot = prefill ? t : kv_cache_slot(lengths[b], Tq, t);
    if (slot < 0 || slot >= lengths[b] || slot >= lay.Tmax) return;
    const floatX* row = qkv + bt * 3 * C;
    size_t dst = kv_cache_row(lay, b, slot) * C + c;
    store128(k_cache + dst, load128cs(row + C + c));
    store128(v_cache + dst, load128cs(row + 2 * C + c));
}

// out (B, D) = inp[b, lengths[b] - 1, :] of inp (B, T, D)
__global__ void gather_newest_rows_kernel(floatX* out, const floatX* inp, const int* lengths, int B, int T, int D) {
    size_t idx = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * X128_SIZE;
    if (idx >= (size_t)B * D) return;
    int b = idx / D, d = idx % D;
    int t = min(max(newest_position(lengths[b]), 0), T - 1);
    store128(out + idx, load128(inp + ((size_t)b * T + t) * D + d));
}

// ----------------------------------------------------------------------------
// launchers

void embed_newest_tokens(floatX* out, const int* history, const int* lengths, const floatX* wte, const floatX* wpe,
                         int B, int Tmax, int C, cudaStream_t stream) {
    NVTX_RANGE_FN();
    const int block_size = 256;
    size_t num_vectors = (size_t)B * C / X128_SIZE;
    embed_newest_tokens_kernel<<<ceil_div(num_vectors, (size_t)block_size), block_size, 0, stream>>>(out, history, lengths, wte, wpe, B, Tmax, C);
    cudaCheck(cudaGetLastError());
}

// lengths (B): the sequences' tokens so far (the prefill: the prompts' lengths)
void kv_cache_append(floatX* k_cache, floatX* v_cache, const floatX* qkv, const int* lengths, bool prefill,
                     const KVCacheLayout& lay, int B, int Tq, int C, cudaStream_t stream) {
    NVTX_RANGE_FN();
    const int block_size = 256;
    size_t num_vectors = (size_t)B * Tq * C / X128_SIZE;
    kv_cache_append_kernel<<<ceil_div(num_vectors, (size_t)block_size), block_size, 0, stream>>>(k_cache, v_cache, qkv, lengths,
                                                                                                   prefill, lay, B, Tq, C);
    cudaCheck(cudaGetLastError());
}

void gather_newest_rows(floatX* out, const floatX* inp, const int* lengths, int B, int T, int D, cudaStream_t stream) {
    NVTX_RANGE_FN();
    const int block_size = 256;
    size_t num_vectors = (size_t)B * D / X128_SIZE;
    gather_newest_rows_kernel<<<ceil_div(num_vectors, (size_t)block_size), block_size, 0, stream>>>(out, inp, lengths, B, T, D);
    cudaCheck(cudaGetLastError());
}
