/*
Global gradient norm for clipping: norm = sqrt(sum over all parameters of grad^2).
Deterministic: a fixed grid (independent of the GPU) writes one partial sum per block, and a
single block adds the partials in order. The norm stays on the GPU; AdamW reads it from there,
so the step needs no host round trip.
*/
#pragma once
#include "cuda_utils.cuh"

#define GLOBAL_NORM_BLOCKS 512
#define GLOBAL_NORM_THREADS 512

// partials (GLOBAL_NORM_BLOCKS); grads (n), n a multiple of 8
__global__ void global_norm_squared_kernel(float* partials, const floatX* grads, size_t n) {
    __shared__ float shared[32];
    float sum = 0.0f;
    for (size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * X128_SIZE; i < n; i += (size_t)gridDim.x * blockDim.x * X128_SIZE) {
        x128 g = load128cs(grads + i);
        for (int k = 0; k < X128_SIZE; k++) sum += g.f(k) * g.f(k);
    }
    sum = block_reduce_sum(sum, shared);
    if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// squared: the sum of squares itself (ZeRO-1: one shard's, summed over the ranks before the square root)
__global__ void global_norm_finish_kernel(float* norm, const float* partials, int num_partials, bool squared) {
    __shared__ float shared[32];
    float sum = 0.0f;
    for (int i = threadIdx.x; i < num_partials; i += blockDim.x) sum += partials[i];
    sum = block_reduce_sum(sum, shared);
    if (threadIdx.x == 0) *norm = squared ? sum : sqrtf(sum);
}
__global__ void sqrt_in_place_kernel(float* x) { *x = sqrtf(*x); }

// norm (1 float, device); scratch >= GLOBAL_NORM_BLOCKS floats
void global_norm(float* norm, float* scratch, const floatX* grads, size_t n, cudaStream_t stream, bool squared = false) {
    NVTX_RANGE_FN();
    global_norm_squared_kernel<<<GLOBAL_NORM_BLOCKS, GLOBAL_NORM_THREADS, 0, stream>>>(scratch, grads, n);
    cudaCheck(cudaGetLastError());
    global_norm_finish_kernel<<<1, 1024, 0, stream>>>(norm, scratch, GLOBAL_NORM_BLOCKS, squared);
    cudaCheck(cudaGetLastError());
}
