/*
GELU, tanh approximation (GPT-2's "gelu_new"):
forward:  out = 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))
backward: dinp = dout * gelu'(x), in place over dout
*/
#pragma once
#include "cuda_utils.cuh"

#define GELU_SCALE 0.7978845608028654f  // sqrt(2/pi)

// With t = tanh(sqrt(2/pi) (x + 0.044715 x^3)): gelu = x (1 + t) / 2 and
// gelu' = (1 + t) / 2 + x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2) / 2.
__device__ inline float gelu_tanh(float x, float x2) { return tanhf(x * fmaf(GELU_SCALE * 0.044715f, x2, GELU_SCALE)); }
// gelu'(x) times s from t, its constants scaled once (the -fp8 DGELU kernel folds its operands' and output's scales in)
struct GeluGradScale { float half, x2, one; };
__host__ __device__ constexpr GeluGradScale gelu_grad_scale(float s) {
    return {0.5f * s, 0.5f * GELU_SCALE * 3.0f * 0.044715f * s, 0.5f * GELU_SCALE * s};
}
__device__ inline float gelu_grad_from_tanh(float x, float x2, float t, GeluGradScale k) {
    return fmaf(x * fmaf(-t, t, 1.0f), fmaf(k.x2, x2, k.one), fmaf(k.half, t, k.half));
}
// gelu(x) and gelu'(x) from one tanh, in 9 fp32 operations besides it
__device__ inline void gelu_and_grad(float x, float& y, float& dy) {
    const float x2 = x * x;
    const float t = gelu_tanh(x, x2);
    y = x * fmaf(0.5f, t, 0.5f);
    dy = gelu_grad_from_tanh(x, x2, t, gelu_grad_scale(1.0f));
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
