/*
Fused classifier: softmax + cross-entropy loss + its backward, one block per (b, t) row.
    losses[b,t] = logsumexp(logits[b,t,:V]) - logits[b,t,target]                [F.cross_entropy]
    dlogits[b,t,:] = (softmax(logits[b,t,:V]) - onehot(target)) * dloss, written over the logits
The probabilities are never stored. Two kernels:
  - the row in shared memory (Vp <= 56K, GPT-2's 50304 columns among them): the row is read from memory once, its
    max taken as it arrives, then the sum of exp and the gradient come from shared memory;
  - any Vp: pass 1 computes the row max and sum (online softmax, fp32), pass 2 re-reads the row (from L2) and
    writes the gradient.
Padded columns V..Vp get zero gradient. With write_dlogits = false they only compute the losses (validation).
dev/cuda/fused_classifier.cu times them against each other.
*/
#pragma once
#include "cuda_utils.cuh"

// logits (B*T, Vp) in, dlogits out in place; losses (B*T); targets (B*T)
__global__ void __launch_bounds__(1024) fused_classifier_kernel(floatX* logits, float* losses, const int* targets,
                                                                float dloss, int V, int Vp, bool write_dlogits) {
    __shared__ float shared[32];
    size_t row = blockIdx.x;
    floatX* x = logits + row * Vp;
    // pass 1: running max and sum of exp(x - max) per thread, over the V real columns
    float thread_max = -INFINITY, thread_sum = 0.0f;
    for (int c = threadIdx.x * X128_SIZE; c < V; c += blockDim.x * X128_SIZE) {
        x128 v = load128(x + c);  // c < V <= Vp and Vp % 8 == 0, so the vector is in bounds
        // one rescale per 8 columns, not a compare-and-branch per column
        float vec_max = -INFINITY;
        for (int k = 0; k < X128_SIZE; k++) if (c + k < V) vec_max = fmaxf(vec_max, v.f(k));
        if (vec_max > thread_max) {
            thread_sum *= expf(thread_max - vec_max);  // rescale the old sum to the new max (exp(-inf) = 0 at first)
            thread_max = vec_max;
        }
        for (int k = 0; k < X128_SIZE; k++) if (c + k < V) thread_sum += expf(v.f(k) - thread_max);
    }
    float row_max = block_reduce_max(thread_max, shared);
    // threads that saw no column have thread_max = -inf and thread_sum = 0: contribute 0, not NaN
    float scaled = thread_sum > 0.0f ? thread_sum * expf(thread_max - row_max) : 0.0f;
    float row_sum = block_reduce_sum(scaled, shared);
    int target = targets[row];
    if (threadIdx.x == 0) {
        float logit_target = __bfloat162float(x[target]);
        losses[row] = logf(row_sum) + row_max - logit_target;
    }
    if (!write_dlogits) return;
    __syncthreads();  // thread 0 has read x[target] before anyone overwrites it
    // pass 2: gradient in place
    float inv_sum = 1.0f / row_sum;
    for (int c = threadIdx.x * X128_SIZE; c < Vp; c += blockDim.x * X128_SIZE) {
        x128 v = load128cs(x + c), g;
        for (int k = 0; k < X128_SIZE; k++) {
            int col = c + k;
            float grad = 0.0f;
            if (col < V) {
                float prob = expf(v.f(k) - row_max) * inv_sum;
                grad = (prob - (col == target ? 1.0f : 0.0f)) * dloss;
            }
            g.set(k, grad);
        }
        store128cs(x + c, g);
    }
}

// The row staged in shared memory (Vp * 2 bytes; two blocks of 1024 threads an SM up to Vp = 56K columns, so one
// block's exps run while the other's row streams in): the logits are read from memory once and their max is taken
// on the bf16 pairs (exact) as they arrive; the sum of exp and the gradient then read shared memory.
// exp(x - max) = 2^(x log2(e) - max log2(e)): one FFMA and one MUFU.EX2 a column, for the sum and for the gradient.
#define CLASSIFIER_SMEM_MAX_BYTES (113 * 1024)

__device__ __forceinline__ void unpack_bf16x2(uint32_t u, float& lo, float& hi) {
    lo = __uint_as_float(u << 16);
    hi = __uint_as_float(u & 0xffff0000u);
}
// word e (0..3) of a chunk of 8 bf16
__device__ __forceinline__ uint32_t chunk_word(const uint4& q, int e) { return e == 0 ? q.x : e == 1 ? q.y : e == 2 ? q.z : q.w; }

__global__ void __launch_bounds__(1024, 2) fused_classifier_smem_kernel(floatX* logits, float* losses, const int* targets,
                                                                        float dloss, int V, int Vp, bool write_dlogits) {
    constexpr float kLog2e = 1.4426950408889634f;
    extern __shared__ uint4 row_chunks[];   // Vp / 8 chunks of 8 bf16
    __shared__ float shared[32];
    floatX* x = logits + (size_t)blockIdx.x * Vp;
    const int target = targets[blockIdx.x], num_chunks = Vp / X128_SIZE;
    // load, and the max over the V real columns (only a chunk that crosses V needs them one by one)
    __nv_bfloat162 pair_max = __floats2bfloat162_rn(-INFINITY, -INFINITY);
    float thread_max = -INFINITY;
    #pragma unroll 4
    for (int i = threadIdx.x; i < num_chunks; i += blockDim.x) {
        const uint4 q = __ldcs(reinterpret_cast<const uint4*>(x) + i);   // read once from memory: evict first
        row_chunks[i] = q;
        const int c = i * X128_SIZE;
        #pragma unroll
        for (int e = 0; e < 4; e++) {
            const uint32_t w = chunk_word(q, e);
            if (c + X128_SIZE <= V) {
                pair_max = __hmax2(pair_max, *reinterpret_cast<const __nv_bfloat162*>(&w));
            } else {
                float lo, hi;
                unpack_bf16x2(w, lo, hi);
                if (c + 2 * e < V) thread_max = fmaxf(thread_max, lo);
                if (c + 2 * e + 1 < V) thread_max = fmaxf(thread_max, hi);
            }
        }
    }
    thread_max = fmaxf(thread_max, fmaxf(__bfloat162float(pair_max.x), __bfloat162float(pair_max.y)));
    const float row_max = block_reduce_max(thread_max, shared);   // its barriers also publish row_chunks
    const float max_log2 = row_max * kLog2e;
    float thread_sum = 0.0f;
    for (int i = threadIdx.x; i < num_chunks; i += blockDim.x) {
        const uint4 q = row_chunks[i];
        const int c = i * X128_SIZE;
        #pragma unroll
        for (int e = 0; e < 4; e++) {
            float lo, hi;
            unpack_bf16x2(chunk_word(q, e), lo, hi);
            if (c + 2 * e < V) thread_sum += exp2f(fmaf(lo, kLog2e, -max_log2));
            if (c + 2 * e + 1 < V) thread_sum += exp2f(fmaf(hi, kLog2e, -max_log2));
        }
    }
    const float row_sum = block_reduce_sum(thread_sum, shared);
    if (threadIdx.x == 0) {
        const floatX* row = reinterpret_cast<const floatX*>(row_chunks);
        losses[blockIdx.x] = logf(row_sum) + row_max - __bfloat162float(row[target]);
    }
    if (!write_dlogits) return;
    // dlogits = p * dloss - dloss at the target, p = exp(x - max) / sum
    const float scale = dloss / row_sum;
    for (int i = threadIdx.x; i < num_chunks; i += blockDim.x) {
        const uint4 q = row_chunks[i];
        const int c = i * X128_SIZE;
        uint32_t g[4];
        #pragma unroll
        for (int e = 0; e < 4; e++) {
            float lo, hi;
            unpack_bf16x2(chunk_word(q, e), lo, hi);
            float g_lo = c + 2 * e < V ? exp2f(fmaf(lo, kLog2e, -max_log2)) * scale : 0.0f;
            float g_hi = c + 2 * e + 1 < V ? exp2f(fmaf(hi, kLog2e, -max_log2)) * scale : 0.0f;
            if (c + 2 * e == target) g_lo -= dloss;
            if (c + 2 * e + 1 == target) g_hi -= dloss;
            const __nv_bfloat162 pair = __floats2bfloat162_rn(g_lo, g_hi);
            g[e] = *reinterpret_cast<const uint32_t*>(&pair);
        }
        __stcs(reinterpret_cast<uint4*>(x) + i, make_uint4(g[0], g[1], g[2], g[3]));
    }
}

// dloss: the weight of each row's loss in the objective, 1/(B*T*grad_accum_steps)
void fused_classifier(floatX* logits, float* losses, const int* targets, float dloss, int BT, int V, int Vp,
                      bool write_dlogits, cudaStream_t stream) {
    NVTX_RANGE_FN();
    const size_t smem = (size_t)Vp * sizeof(floatX);
    if (smem <= CLASSIFIER_SMEM_MAX_BYTES) {
        static size_t smem_set = 0;
        if (smem > smem_set) {   // above 48 KiB the kernel must opt in
            cudaCheck(cudaFuncSetAttribute(fused_classifier_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)CLASSIFIER_SMEM_MAX_BYTES));
            smem_set = CLASSIFIER_SMEM_MAX_BYTES;
        }
        fused_classifier_smem_kernel<<<BT, 1024, smem, stream>>>(logits, losses, targets, dloss, V, Vp, write_dlogits);
    } else {
        fused_classifier_kernel<<<BT, 1024, 0, stream>>>(logits, losses, targets, dloss, V, Vp, write_dlogits);
    }
    cudaCheck(cudaGetLastError());
}

// *accumulated_loss += scale * sum(losses (N)), deterministic: one block, fixed order
__global__ void accumulate_loss_kernel(float* accumulated_loss, const float* losses, int N, float scale) {
    __shared__ float shared[32];
    float sum = 0.0f;
    for (int i = threadIdx.x; i < N; i += blockDim.x) sum += losses[i];
    sum = block_reduce_sum(sum, shared);
    if (threadIdx.x == 0) *accumulated_loss += sum * scale;
}

void accumulate_loss(float* accumulated_loss, const float* losses, int N, float scale, cudaStream_t stream) {
    accumulate_loss_kernel<<<1, 1024, 0, stream>>>(accumulated_loss, losses, N, scale);
    cudaCheck(cudaGetLastError());
}
