/*
Variant 2: the materialized baseline, what llm.c does without cuDNN, in bf16 (the timing baseline):
permute qkv and dout to (B, NH, T, HS); recompute att = softmax(scale q k^T) with cuBLAS and the forward
baseline's causal softmax; cuBLAS dV = att^T dout and dAtt = dout v^T; a softmax backward kernel
dS = att * (dAtt - rowsum(att * dAtt)) in place; cuBLAS dQ = scale dS k and dK = scale dS^T q; then one
kernel scatters dq, dk, dv into dqkv (B, T, 3, NH, HS). Two T x T bf16 matrices per head live in the workspace.
Accuracy: its scores are bf16 (llm.c), like the naive bf16 computation the FlashAttention rule measures against.
*/
#pragma once
#include "dev/cuda/forward_variants/02_cublas_softmax.cuh"   // permute_qkv_kernel, causal_softmax_kernel

// dout (B, T, NH, HS) -> (B, NH, T, HS)
__global__ void permute_bthd_kernel(floatX* out, const floatX* in, int B, int T, int NH, int HS) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * NH * T * HS) return;
    int d = idx % HS, t = idx / HS % T, h = idx / ((size_t)HS * T) % NH, b = idx / ((size_t)HS * T * NH);
    out[idx] = in[(((size_t)b * T + t) * NH + h) * HS + d];
}

// dq, dk, dv each (B, NH, T, HS) -> dqkv (B, T, 3, NH, HS)
__global__ void unpermute_dqkv_kernel(floatX* dqkv, const floatX* dq, const floatX* dk, const floatX* dv, int B, int T, int NH, int HS) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * NH * T * HS) return;
    int d = idx % HS, t = idx / HS % T, h = idx / ((size_t)HS * T) % NH, b = idx / ((size_t)HS * T * NH);
    size_t dst = (((size_t)b * T + t) * 3 * NH + h) * HS + d;
    dqkv[dst] = dq[idx];
    dqkv[dst + NH * HS] = dk[idx];
    dqkv[dst + 2 * NH * HS] = dv[idx];
}

// datt <- att * (datt - sum_j att_j datt_j) over keys <= t, 0 above the diagonal; one warp per row (B*NH*T rows)
__global__ void causal_softmax_backward_kernel(floatX* datt, const floatX* att, size_t rows, int T) {
    size_t row = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= rows) return;
    int t = row % T;
    floatX* dx = datt + row * T;
    const floatX* x = att + row * T;
    float D = 0.0f;
    for (int j = lane; j <= t; j += 32) D += __bfloat162float(x[j]) * __bfloat162float(dx[j]);
    for (int o = 16; o > 0; o >>= 1) D += __shfl_xor_sync(0xffffffff, D, o);
    for (int j = lane; j < T; j += 32)
        dx[j] = __float2bfloat16(j <= t ? __bfloat162float(x[j]) * (__bfloat162float(dx[j]) - D) : 0.0f);
}

void attention_backward2(const AttentionBackwardParams& p, int config, cudaStream_t stream) {
    const int B = p.B, T = p.T, NH = p.NH, HS = p.HS;
    const size_t n = (size_t)B * NH * T * HS, tt = (size_t)B * NH * T * T;
    floatX* ws = (floatX*)harness_workspace((7 * n + 2 * tt) * sizeof(floatX) + (size_t)B * NH * T * sizeof(float));
    floatX *q = ws, *k = q + n, *v = k + n, *dout = v + n, *dq = dout + n, *dk = dq + n, *dv = dk + n;
    floatX *att = dv + n, *datt = att + tt;
    float* lse = (float*)(datt + tt);   // the recomputed softmax writes one; unused
    const int block = 256;
    const float one = 1.0f, zero = 0.0f, scale = rsqrtf((float)HS);
    const long long sT = (long long)T * HS, sA = (long long)T * T;
    permute_qkv_kernel<<<ceil_div(n, (size_t)block), block, 0, stream>>>(q, k, v, p.q, B, T, NH, HS);
    permute_bthd_kernel<<<ceil_div(n, (size_t)block), block, 0, stream>>>(dout, p.dout, B, T, NH, HS);
    cudaCheck(cudaGetLastError());
    cublasCheck(cublasSetStream(cublas_handle(), stream));
    // att (T x T per head, row-major) = q k^T: column-major C = k^T q, then the causal softmax
    cublasCheck(cublasGemmStridedBatchedEx(cublas_handle(), CUBLAS_OP_T, CUBLAS_OP_N, T, T, HS, &one,
        k, CUDA_R_16BF, HS, sT, q, CUDA_R_16BF, HS, sT, &zero, att, CUDA_R_16BF, T, sA, B * NH, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    const size_t rows = (size_t)B * NH * T;
    causal_softmax_kernel<<<ceil_div(rows, (size_t)8), 256, 0, stream>>>(att, lse, rows, T, scale);
    cudaCheck(cudaGetLastError());
    // dV (T x HS, row-major) = att^T dout: column-major dV^T = dout^T att
    cublasCheck(cublasGemmStridedBatchedEx(cublas_handle(), CUBLAS_OP_N, CUBLAS_OP_T, HS, T, T, &one,
        dout, CUDA_R_16BF, HS, sT, att, CUDA_R_16BF, T, sA, &zero, dv, CUDA_R_16BF, HS, sT, B * NH, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    // dAtt (T x T) = dout v^T, then dS = att * (dAtt - D) in place
    cublasCheck(cublasGemmStridedBatchedEx(cublas_handle(), CUBLAS_OP_T, CUBLAS_OP_N, T, T, HS, &one,
        v, CUDA_R_16BF, HS, sT, dout, CUDA_R_16BF, HS, sT, &zero, datt, CUDA_R_16BF, T, sA, B * NH, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    causal_softmax_backward_kernel<<<ceil_div(rows, (size_t)8), 256, 0, stream>>>(datt, att, rows, T);
    cudaCheck(cudaGetLastError());
    // dQ (T x HS) = scale dS k: column-major dQ^T = k^T dS^T
    cublasCheck(cublasGemmStridedBatchedEx(cublas_handle(), CUBLAS_OP_N, CUBLAS_OP_N, HS, T, T, &scale,
        k, CUDA_R_16BF, HS, sT, datt, CUDA_R_16BF, T, sA, &zero, dq, CUDA_R_16BF, HS, sT, B * NH, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    // dK (T x HS) = scale dS^T q: column-major dK^T = q^T dS
    cublasCheck(cublasGemmStridedBatchedEx(cublas_handle(), CUBLAS_OP_N, CUBLAS_OP_T, HS, T, T, &scale,
        q, CUDA_R_16BF, HS, sT, datt, CUDA_R_16BF, T, sA, &zero, dk, CUDA_R_16BF, HS, sT, B * NH, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    unpermute_dqkv_kernel<<<ceil_div(n, (size_t)block), block, 0, stream>>>(p.dq, dq, dk, dv, B, T, NH, HS);
    cudaCheck(cudaGetLastError());
}
