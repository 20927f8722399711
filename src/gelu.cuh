/*
GELU, tanh approximation (GPT-2's "gelu_new"):
forward:  out = 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
backward: dinp = dout * gelu'(x), in place over dout
*/
#pragma once
#include "cuda_utils.cuh"

#define GELU_SCALE 0.7978845608028654f  // sqrt(2/pi)

// gelu(x) and gelu'(x) from one tanh
__device__ inline void gelu_and_grad(float x, float& y, float& dy) {
    float cube = 0.044715f * x * x * x;
    float tanh_out = tanhf(GELU_SCALE * (x + cube));
    float sech2 = 1.0f - tanh_out * tanh_out;
    y = 0.5f * x * (1.0f + tanh_out);
    dy = 0.5f * (1.0f + tanh_out) + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
}
__device__ inline float gelu(float x) { float y, dy; gelu_and_grad(x, y, dy); return y; }
__device__ inline float gelu_grad(float x) { float y, dy; gelu_and_grad(x, y, dy); return dy; }

// out, inp (N) with N a multiple of 8
__global__ void gelu_forward_kernel(floatX* out, const floatX* inp, size_t N) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * X128_SIZE;
    if (i >= N) return;
    x128 x = load128cs(inp + i), r;
    for (int k = 0; k < X128_SIZE; k++) r.set(k, gelu(x.f(k)));
    store128(out + i, r);
}

// d_in_out (N): dout in, dinp out; inp (N) the pre-GELU activation
__global__ void gelu_backward_inplace_kernel(floatX* d_in_out, const floatX* inp, size_t N) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * X128_SIZE;
    if (i >= N) return;
    x128 d = load128cs(d_in_out + i), x = load128cs(inp + i);
    for (int k = 0; k < X128_SIZE; k++) d.set(k, d.f(k) * gelu_grad(x.f(k)));
    store128(d_in_out + i, d);
}

void gelu_forward(floatX* out, const floatX* inp, size_t N, cudaStream_t stream) {
    NVTX_RANGE_FN();
    const int block_size = 256;
    gelu_forward_kernel<<<ceil_div(N / X128_SIZE, (size_t)block_size), block_size, 0, stream>>>(out, inp, N);
    cudaCheck(cudaGetLastError());
}

void gelu_backward_inplace(floatX* d_in_out, const floatX* inp, size_t N, cudaStream_t stream) {
    NVTX_RANGE_FN();
    const int block_size = 256;
    gelu_backward_inplace_kernel<<<ceil_div(N / X128_SIZE, (size_t)block_size), block_size, 0, stream>>>(d_in_out, inp, N);
    cudaCheck(cudaGetLastError());
}
