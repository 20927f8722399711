/*
Variant 2: the materialized baseline, what llm.c does without cuDNN, in bf16:
permute qkv -> q, k, v (B, NH, T, HS); cuBLAS batched preatt = q k^T (B*NH, T, T); a causal scaled
softmax in place (which also writes LSE); cuBLAS batched out = att v; unpermute to (B, T, NH, HS).
It reads and writes the whole T x T matrix several times: this is the timing baseline.
*/
#pragma once

// qkv (B, T, 3, NH, HS) -> q, k, v each (B, NH, T, HS)
__global__ void permute_qkv_kernel(floatX* q, floatX* k, floatX* v, const floatX* qkv, int B, int T, int NH, int HS) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * NH * T * HS) return;
    int d = idx % HS, t = idx / HS % T, h = idx / ((size_t)HS * T) % NH, b = idx / ((size_t)HS * T * NH);
    size_t src = (((size_t)b * T + t) * 3 * NH + h) * HS + d;
    q[idx] = qkv[src];
    k[idx] = qkv[src + NH * HS];
    v[idx] = qkv[src + 2 * NH * HS];
}

// (B, NH, T, HS) -> (B, T, NH, HS)
__global__ void unpermute_kernel(floatX* out, const floatX* in, int B, int T, int NH, int HS) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * NH * T * HS) return;
    int d = idx % HS, t = idx / HS % T, h = idx / ((size_t)HS * T) % NH, b = idx / ((size_t)HS * T * NH);
    out[(((size_t)b * T + t) * NH + h) * HS + d] = in[idx];
}

// att = softmax(scale * preatt) over keys <= t, zero above the diagonal, in place; one warp per row.
// lse = scale * max + log(sum) from the bf16 scores.
__global__ void causal_softmax_kernel(floatX* att, float* lse, size_t rows, int T, float scale) {
    size_t row = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;   // (b * NH + h) * T + t
    int lane = threadIdx.x % 32;
    if (row >= rows) return;
    int t = row % T;
    floatX* x = att + row * T;
    float mx = -INFINITY;
    for (int j = lane; j <= t; j += 32) mx = fmaxf(mx, __bfloat162float(x[j]));
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, o));
    float sum = 0.0f;
    for (int j = lane; j <= t; j += 32) sum += expf(scale * (__bfloat162float(x[j]) - mx));
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffff, sum, o);
    float inv = 1.0f / sum;
    for (int j = lane; j < T; j += 32)
        x[j] = __float2bfloat16(j <= t ? expf(scale * (__bfloat162float(x[j]) - mx)) * inv : 0.0f);
    if (lane == 0) lse[row] = scale * mx + logf(sum);
}

void attention_forward2(const AttentionForwardParams& p, int config, cudaStream_t stream) {
    const int B = p.B, T = p.T, NH = p.NH, HS = p.HS;
    const size_t n = (size_t)B * NH * T * HS;
    floatX* ws = (floatX*)harness_workspace((4 * n + (size_t)B * NH * T * T) * sizeof(floatX));
    floatX *q = ws, *k = q + n, *v = k + n, *out_perm = v + n, *att = out_perm + n;
    const int block = 256;
    permute_qkv_kernel<<<ceil_div(n, (size_t)block), block, 0, stream>>>(q, k, v, p.q, B, T, NH, HS);
    cudaCheck(cudaGetLastError());
    cublasCheck(cublasSetStream(cublas_handle(), stream));
    const float one = 1.0f, zero = 0.0f;
    // preatt (T x T per head, row-major) = q k^T: column-major C = k^T q
    cublasCheck(cublasGemmStridedBatchedEx(cublas_handle(), CUBLAS_OP_T, CUBLAS_OP_N, T, T, HS, &one,
        k, CUDA_R_16BF, HS, (long long)T * HS, q, CUDA_R_16BF, HS, (long long)T * HS, &zero,
        att, CUDA_R_16BF, T, (long long)T * T, B * NH, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    const size_t rows = (size_t)B * NH * T;
    causal_softmax_kernel<<<ceil_div(rows, (size_t)8), 256, 0, stream>>>(att, p.lse, rows, T, rsqrtf((float)HS));
    cudaCheck(cudaGetLastError());
    // out (T x HS per head, row-major) = att v: column-major C = v att
    cublasCheck(cublasGemmStridedBatchedEx(cublas_handle(), CUBLAS_OP_N, CUBLAS_OP_N, HS, T, T, &one,
        v, CUDA_R_16BF, HS, (long long)T * HS, att, CUDA_R_16BF, T, (long long)T * T, &zero,
        out_perm, CUDA_R_16BF, HS, (long long)T * HS, B * NH, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    unpermute_kernel<<<ceil_div(n, (size_t)block), block, 0, stream>>>(p.out, out_perm, B, T, NH, HS);
    cudaCheck(cudaGetLastError());
}
