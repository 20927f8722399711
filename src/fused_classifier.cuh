/*
Fused classifier: softmax + cross-entropy loss + its backward, one block per (b, t) row.
    losses[b,t] = logsumexp(logits[b,t,:V]) - logits[b,t,target]                [F.cross_entropy]
    dlogits[b,t,:] = (softmax(logits[b,t,:V]) - onehot(target)) * dloss, written over the logits
The probabilities are never stored: pass 1 computes the row max and sum (online softmax, fp32),
pass 2 re-reads the row (from L2) and writes the gradient in place. Padded columns V..Vp get
zero gradient. With write_dlogits = false it only computes the losses (validation).
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

// dloss: the weight of each row's loss in the objective, 1/(B*T*grad_accum_steps)
void fused_classifier(floatX* logits, float* losses, const int* targets, float dloss, int BT, int V, int Vp,
                      bool write_dlogits, cudaStream_t stream) {
    NVTX_RANGE_FN();
    const int block_size = 1024;
    fused_classifier_kernel<<<BT, block_size, 0, stream>>>(logits, losses, targets, dloss, V, Vp, write_dlogits);
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
