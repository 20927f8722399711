/*
Small device helpers shared by the layer kernels: 16-byte vectors of 8 bf16 (x128) with
load/store helpers, and deterministic warp/block reductions (fixed shuffle trees, so the same
inputs always give the same bits). Kept out of common.cuh, which holds no device code.
*/
#pragma once
#include <algorithm>
#include "common.cuh"

// 8 bf16 = 16 bytes: one vectorized load or store
struct alignas(16) x128 {
    floatX v[8];
    __device__ float f(int i) const { return __bfloat162float(v[i]); }
    __device__ void set(int i, float x) { v[i] = __float2bfloat16(x); }
};
#define X128_SIZE 8

__device__ inline x128 load128(const floatX* p) { return *reinterpret_cast<const x128*>(p); }
// streaming load (evict-first): for data read once
__device__ inline x128 load128cs(const floatX* p) {
    x128 r;
    *reinterpret_cast<int4*>(&r) = __ldcs(reinterpret_cast<const int4*>(p));
    return r;
}
__device__ inline void store128(floatX* p, const x128& v) { *reinterpret_cast<x128*>(p) = v; }
__device__ inline void store128cs(floatX* p, const x128& v) {
    __stcs(reinterpret_cast<int4*>(p), *reinterpret_cast<const int4*>(&v));
}

__device__ inline float warp_reduce_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffff, v, offset);
    return v;
}
__device__ inline float warp_reduce_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffff, v, offset));
    return v;
}

// sum over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
// shared: 32 floats of scratch, reusable after the call returns.
__device__ inline float block_reduce_sum(float v, float* shared) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, num_warps = blockDim.x / 32;
    v = warp_reduce_sum(v);
    __syncthreads();  // shared may still be read by a previous call
    if (lane == 0) shared[warp] = v;
    __syncthreads();  // all warp sums written
    v = lane < num_warps ? shared[lane] : 0.0f;
    return warp_reduce_sum(v);
}
__device__ inline float block_reduce_max(float v, float* shared) {
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32, num_warps = blockDim.x / 32;
    v = warp_reduce_max(v);
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    v = lane < num_warps ? shared[lane] : -INFINITY;
    return warp_reduce_max(v);
}

// ----------------------------------------------------------------------------
// Second stage of the deterministic column reductions (bias and layernorm weight gradients):
// partials (num_partials, num_outputs, C) fp32 -> out_k[c] += sum over partials, in a fixed order.
// grid (ceil(C/32), num_outputs), block (32, 32): threadIdx.x owns one column (a warp reads 128 contiguous
// bytes), threadIdx.y sums partials y, y + 32, y + 64, ... and the 32 row sums are added in order: one thread
// per column walking all ~1000 partials alone is latency bound.

#define REDUCE_PARTIALS_ROWS 32

__global__ void reduce_partials_add_kernel(floatX* out0, floatX* out1, floatX* out2, const float* partials, int num_partials, int C) {
    __shared__ float row_sums[REDUCE_PARTIALS_ROWS][32];
    const int c = blockIdx.x * 32 + threadIdx.x, k = blockIdx.y, num_outputs = gridDim.y;
    float sum = 0.0f;
    if (c < C) {
        #pragma unroll 8
        for (int p = threadIdx.y; p < num_partials; p += REDUCE_PARTIALS_ROWS) sum += partials[((size_t)p * num_outputs + k) * C + c];
    }
    row_sums[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y != 0 || c >= C) return;
    sum = 0.0f;
    for (int y = 0; y < REDUCE_PARTIALS_ROWS; y++) sum += row_sums[y][threadIdx.x];
    floatX* out = k == 0 ? out0 : k == 1 ? out1 : out2;
    out[c] = __float2bfloat16(__bfloat162float(out[c]) + sum);
}

inline void reduce_partials_add(floatX* out0, floatX* out1, const float* partials, int num_partials, int C, cudaStream_t stream,
                                floatX* out2 = nullptr) {
    dim3 grid(ceil_div(C, 32), out2 ? 3 : out1 ? 2 : 1);
    reduce_partials_add_kernel<<<grid, dim3(32, REDUCE_PARTIALS_ROWS), 0, stream>>>(out0, out1, out2, partials, num_partials, C);
    cudaCheck(cudaGetLastError());
}
