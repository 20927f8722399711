/*
GPU sampler: one block per sequence picks the next token from its row of logits by src/sampler.h's rules (greedy, or
top-k + temperature with a seeded coin) and writes it to next_tokens[b]; with advance it also appends the token to the
sequence: history[b, lengths[b]] = token, lengths[b] += 1. Nothing is read back: the host copies next_tokens when it
wants them, and the next decode step reads the token from history on the GPU.
A sequence's coins follow its request (coin_ids[b]), not its row, so its tokens do not depend on where it runs. A row
whose length has reached limits[b] is frozen: it writes -1 and changes nothing, so the decode step that recomputes its
newest token rewrites the same keys and values; sampling the stop token sets the limit to the new length.

  1. argmax over the order keys (lowest id on ties): the greedy pick, and the max logit for the softmax
  2. top-k threshold, an exact radix select over the 16-bit keys: a 256-bin histogram of the high bytes finds the bin
     that holds the k-th largest key, a second histogram over that bin's low bytes the key itself (integer atomics in
     shared memory: the counts do not depend on the order)
  3. weights exp((l - max) / temperature) of the kept logits: each thread sums a contiguous chunk of ids, a block scan
     of the chunk sums (a fixed order: deterministic, and non-decreasing) gives the total and every chunk's start, and
     the one thread whose chunk holds coin * total walks it to the token
*/
#pragma once
#include "cuda_utils.cuh"
#include "sampler.h"

constexpr int kSamplerThreads = 1024;

__device__ inline unsigned long long block_reduce_max_u64(unsigned long long v, unsigned long long* shared) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int offset = 16; offset > 0; offset >>= 1) v = max(v, __shfl_xor_sync(0xffffffff, v, offset));
    if (lane == 0) shared[warp] = v;
    __syncthreads();  // every warp's maximum written
    v = lane < blockDim.x / 32 ? shared[lane] : 0ull;
    for (int offset = 16; offset > 0; offset >>= 1) v = max(v, __shfl_xor_sync(0xffffffff, v, offset));
    return v;
}

// Inclusive prefix sums of the threads' v (>= 0) into scan (blockDim.x floats), in a fixed order and non-decreasing,
// so the intervals [scan[t-1], scan[t]) are disjoint and cover [0, total): warp 0's lane l adds up threads
// 32l..32l+31 one after another, the lanes' offsets are chained one after another (offset of l + 1 = offset of l +
// lane l's total, the same sum that ends lane l), then every lane adds its offset. A tree (Kogge-Stone) scan rounds
// neighbouring prefixes through different sums and can step down.
__device__ inline void block_inclusive_scan(float v, float* scan) {
    scan[threadIdx.x] = v;
    __syncthreads();  // every thread's value in place
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x, per_lane = blockDim.x / 32;
        float* mine = scan + lane * per_lane;
        float run = 0.0f;
        for (int j = 0; j < per_lane; j++) { run += mine[j]; mine[j] = run; }
        float offset = 0.0f;
        for (int l = 0; l < 31; l++) {
            const float prev_offset = __shfl_sync(0xffffffff, offset, l), prev_total = __shfl_sync(0xffffffff, run, l);
            if (lane == l + 1) offset = prev_offset + prev_total;
        }
        if (lane > 0) for (int j = 0; j < per_lane; j++) mine[j] = offset + mine[j];
    }
    __syncthreads();  // every prefix visible
}

// the k-th largest order key of the row (top-k keeps keys >= it); hist 256 counters, sel 2 words of shared memory
__device__ inline uint32_t topk_threshold_key(const uint16_t* row, int V, int k, unsigned int* hist, uint32_t* sel) {
    uint32_t high = 0;
    unsigned int remaining = k;  // rank of the wanted key among the keys still in play
    for (int pass = 0; pass < 2; pass++) {
        for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
        __syncthreads();  // counters zeroed (and the previous pass's thread 0 done reading them)
        for (int i = threadIdx.x; i < V; i += blockDim.x) {
            const uint32_t key = bf16_order_key(row[i]);
            if (pass == 0) atomicAdd(&hist[key >> 8], 1u);
            else if ((key >> 8) == high) atomicAdd(&hist[key & 255], 1u);
        }
        __syncthreads();  // histogram complete
        if (threadIdx.x == 0) {
            int bin = 255;
            for (; bin > 0; bin--) {
                if (hist[bin] >= remaining) break;
                remaining -= hist[bin];
            }
            sel[0] = pass == 0 ? (uint32_t)bin : (high << 8 | (uint32_t)bin);
            sel[1] = remaining;
        }
        __syncthreads();  // the bin chosen
        high = sel[0];
        remaining = sel[1];
    }
    return high;
}

// logits (B, Vp) bf16, row b for sequence b; next_tokens (B); history (B, Tmax); lengths, limits, coin_ids (B)
__global__ void __launch_bounds__(kSamplerThreads) sample_tokens_kernel(int* next_tokens, int* history, int* lengths,
                                                                       int* limits, const int* coin_ids,
                                                                       const floatX* logits, int V, int Vp, int Tmax,
                                                                       SamplerSettings s, int stop_token, int advance) {
    __shared__ float scan[kSamplerThreads];
    __shared__ unsigned long long warp_best[32];
    __shared__ unsigned int hist[256];
    __shared__ uint32_t sel[2];
    __shared__ int picked;
    const int b = blockIdx.x;
    const uint16_t* row = reinterpret_cast<const uint16_t*>(logits + (size_t)b * Vp);
    const int len = lengths[b];
    if (len >= limits[b]) {   // the whole block: a frozen row
        if (threadIdx.x == 0) next_tokens[b] = -1;
        return;
    }

    // argmax: (key, ~id) packed so that the largest key wins and, among equal keys, the lowest id
    unsigned long long best = 0;
    for (int i = threadIdx.x; i < V; i += blockDim.x)
        best = max(best, (unsigned long long)bf16_order_key(row[i]) << 32 | (0xffffffffu - (uint32_t)i));
    best = block_reduce_max_u64(best, warp_best);
    int token = (int)(0xffffffffu - (uint32_t)best);

    if (!s.greedy) {
        const float max_logit = bf16_bits_to_float(row[token]);
        const uint32_t threshold = s.top_k > 0 && s.top_k < V ? topk_threshold_key(row, V, s.top_k, hist, sel) : 0u;
        const float inv_temperature = 1.0f / s.temperature;
        const int chunk = ceil_div(V, (int)blockDim.x);
        const int start = min(V, (int)threadIdx.x * chunk), end = min(V, start + chunk);
        float partial = 0.0f;
        for (int i = start; i < end; i++)
            if (bf16_order_key(row[i]) >= threshold) partial += expf((bf16_bits_to_float(row[i]) - max_logit) * inv_temperature);
        block_inclusive_scan(partial, scan);
        // the max logit is kept with weight 1, so total >= 1; the target stays below it, so exactly one chunk
        // [scan[t-1], scan[t]) holds it, and that chunk has a kept token
        const float total = scan[blockDim.x - 1];
        const float target = fminf(sampler_coin(s.seed, coin_ids[b], len) * total, nextafterf(total, 0.0f));
        const float chunk_start = threadIdx.x > 0 ? scan[threadIdx.x - 1] : 0.0f;
        if (chunk_start <= target && target < scan[threadIdx.x]) {
            // the same sums in the same order as partial; rounding may leave the walk short of the target: then
            // the chunk's last kept token
            const float r = target - chunk_start;
            float sum = 0.0f;
            int pick = -1, last_kept = -1;
            for (int i = start; i < end && pick < 0; i++) {
                if (bf16_order_key(row[i]) < threshold) continue;
                sum += expf((bf16_bits_to_float(row[i]) - max_logit) * inv_temperature);
                last_kept = i;
                if (r < sum) pick = i;
            }
            picked = pick >= 0 ? pick : last_kept;
        }
        __syncthreads();  // the claiming thread has written picked
        token = picked;
    }
    if (threadIdx.x == 0) {
        next_tokens[b] = token;
        if (advance) {
            if (len < Tmax) history[(size_t)b * Tmax + len] = token;
            lengths[b] = len + 1;
            if (token == stop_token) limits[b] = len + 1;
        }
    }
}

// With advance, the token is appended to each sequence (history, lengths); without, lengths are only read (the coin's
// position) and only next_tokens is written. stop_token -1: none.
void sample_tokens(int* next_tokens, int* history, int* lengths, int* limits, const int* coin_ids, const floatX* logits,
                   int B, int V, int Vp, int Tmax, const SamplerSettings& s, int stop_token, bool advance, cudaStream_t stream) {
    NVTX_RANGE_FN();
    sample_tokens_kernel<<<B, kSamplerThreads, 0, stream>>>(next_tokens, history, lengths, limits, coin_ids, logits, V, Vp,
                                                            Tmax, s, stop_token, advance);
    cudaCheck(cudaGetLastError());
}
