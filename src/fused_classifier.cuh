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

__global__ void __launch_bounds__(1024, 2) fused_classifier_smem_kernel(floatX* logits, float* losses, const int* targets,
                                                                        float dloss, int V, int Vp, bool write_dlogits) {
    constexpr float kLog2e = 1.4426950408889634f;
    extern __shared__ x128 row_chunks[];   // Vp / 8 chunks of 8 bf16
    __shared__ float shared[32];
    floatX* x = logits + (size_t)blockIdx.x * Vp;
    const int target = targets[blockIdx.x], num_chunks = Vp / X128_SIZE;
    // load, and the max over the V real columns (only a chunk that crosses V needs them one by one)
    __nv_bfloat162 pair_max = __floats2bfloat162_rn(-INFINITY, -INFINITY);
    float thread_max = -INFINITY;
    #pragma unroll 4
    for (int i = threadIdx.x; i < num_chunks; i += blockDim.x) {
        const x128 q = load128cs(x + i * X128_SIZE);   // read once from memory: evict first
        row_chunks[i] = q;
        const int c = i * X128_SIZE;
        if (c + X128_SIZE <= V) {
            const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(q.v);
            #pragma unroll
            for (int e = 0; e < X128_SIZE / 2; e++) pair_max = __hmax2(pair_max, pairs[e]);
        } else {
            #pragma unroll
            for (int e = 0; e < X128_SIZE; e++) if (c + e < V) thread_max = fmaxf(thread_max, q.f(e));
        }
    }
    thread_max = fmaxf(thread_max, fmaxf(__bfloat162float(pair_max.x), __bfloat162float(pair_max.y)));
    const float row_max = block_reduce_max(thread_max, shared);   // its barriers also publish row_chunks
    const float max_log2 = row_max * kLog2e;
    float thread_sum = 0.0f;
    for (int i = threadIdx.x; i < num_chunks; i += blockDim.x) {
        const x128 q = row_chunks[i];
        const int c = i * X128_SIZE;
        #pragma unroll
        for (int e = 0; e < X128_SIZE; e++) if (c + e < V) thread_sum += exp2f(fmaf(q.f(e), kLog2e, -max_log2));
    }
    const float row_sum = block_reduce_sum(thread_sum, shared);
    if (threadIdx.x == 0) losses[blockIdx.x] = logf(row_sum) + row_max - row_chunks[target / X128_SIZE].f(target % X128_SIZE);
    if (!write_dlogits) return;
    // dlogits = p * dloss - dloss at the target, p = exp(x - max) / sum
    const float scale = dloss / row_sum;
    for (int i = threadIdx.x; i < num_chunks; i += blockDim.x) {
        const x128 q = row_chunks[i];
        const int c = i * X128_SIZE;
        x128 g;
        #pragma unroll
        for (int e = 0; e < X128_SIZE; e++) {
            float grad = c + e < V ? exp2f(fmaf(q.f(e), kLog2e, -max_log2)) * scale : 0.0f;
            if (c + e == target) grad -= dloss;
            g.set(e, grad);
        }
        store128cs(x + c, g);
    }
}

// dloss: the weight of each row's loss in the objective, 1/(B*T*grad_accum_steps)
void fused_classifier(floatX* logits, float* losses, const int* targets, float dloss, int BT, int V, int Vp,
                      bool write_dlogits, cudaStream_t stream) {
    NVTX_RANGE_FN();
    const size_t smem = (size_t)Vp * sizeof(floatX);
    if (smem <= CLASSIFIER_SMEM_MAX_BYTES) {
        static bool opted_in = false;   // above 48 KiB the kernel must opt in, once
        if (!opted_in) {
            cudaCheck(cudaFuncSetAttribute(fused_classifier_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, CLASSIFIER_SMEM_MAX_BYTES));
            opted_in = true;
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
