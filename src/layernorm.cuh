/*
LayerNorm over the channels, one warp per row, fp32 statistics.
forward:  out = (x - mean) * rstd * w + b, saving mean and rstd (fp32) for the backward
          (GPT-2's residual add before each layernorm runs in the epilogue of the matmul before it)
backward: dinp += rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)),  dnorm = dout * w
          dw += sum over rows of dout * xhat,  db += sum over rows of dout
The weight/bias gradients are column sums over B*T rows. To stay deterministic without atomics,
each warp accumulates its rows in a fixed order, the block adds the warps' sums in order into a
per-block partial, and a second kernel adds the partials in order.
Where C <= 1024 (C / 256 16-byte chunks a lane at most 4) a lane keeps its chunks of the row and its
channels' dw/db sums in registers (the _registers kernels); wider rows run the kernels that re-read the
row and accumulate in shared memory. Both add in the same order: their results are bit-identical.
dev/cuda/layernorm.cu validates and times them.
*/
#pragma once
#include "cuda_utils.cuh"

#define LN_EPS 1e-5f

// inp/out (N, C), mean/rstd (N) (may be null), weight/bias (C)
__global__ void layernorm_forward_kernel(floatX* out, float* mean, float* rstd, const floatX* inp,
                                         const floatX* weight, const floatX* bias, int N, int C) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    const floatX* x = inp + (size_t)row * C;
    float sum = 0.0f;
    for (int c = lane * X128_SIZE; c < C; c += 32 * X128_SIZE) {
        x128 v = load128(x + c);
        for (int k = 0; k < X128_SIZE; k++) sum += v.f(k);
    }
    float m = warp_reduce_sum(sum) / C;
    float var = 0.0f;
    for (int c = lane * X128_SIZE; c < C; c += 32 * X128_SIZE) {
        x128 v = load128(x + c);
        for (int k = 0; k < X128_SIZE; k++) { float d = v.f(k) - m; var += d * d; }
    }
    float s = rsqrtf(warp_reduce_sum(var) / C + LN_EPS);
    floatX* o = out + (size_t)row * C;
    for (int c = lane * X128_SIZE; c < C; c += 32 * X128_SIZE) {
        x128 v = load128cs(x + c), w = load128(weight + c), b = load128(bias + c), r;
        for (int k = 0; k < X128_SIZE; k++) r.set(k, (v.f(k) - m) * s * w.f(k) + b.f(k));
        store128(o + c, r);
    }
    if (lane == 0 && mean) mean[row] = m;
    if (lane == 0 && rstd) rstd[row] = s;
}

// the same with the row read once into registers: lane l holds channels l*8 + 256k .. for k < kChunks
template <int kChunks>
__global__ void layernorm_forward_registers_kernel(floatX* out, float* mean, float* rstd, const floatX* inp,
                                                   const floatX* weight, const floatX* bias, int N, int C) {
    int lane = threadIdx.x % 32;
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    const floatX* x = inp + (size_t)row * C;
    x128 v[kChunks];
    float sum = 0.0f;
    #pragma unroll
    for (int k = 0; k < kChunks; k++) {
        const int c = lane * X128_SIZE + k * 32 * X128_SIZE;
        if (c < C) {
            v[k] = load128cs(x + c);
            for (int e = 0; e < X128_SIZE; e++) sum += v[k].f(e);
        }
    }
    float m = warp_reduce_sum(sum) / C;
    float var = 0.0f;
    #pragma unroll
    for (int k = 0; k < kChunks; k++) {
        const int c = lane * X128_SIZE + k * 32 * X128_SIZE;
        if (c < C) for (int e = 0; e < X128_SIZE; e++) { float d = v[k].f(e) - m; var += d * d; }
    }
    float s = rsqrtf(warp_reduce_sum(var) / C + LN_EPS);
    floatX* o = out + (size_t)row * C;
    #pragma unroll
    for (int k = 0; k < kChunks; k++) {
        const int c = lane * X128_SIZE + k * 32 * X128_SIZE;
        if (c < C) {
            x128 w = load128(weight + c), b = load128(bias + c), r;
            for (int e = 0; e < X128_SIZE; e++) r.set(e, (v[k].f(e) - m) * s * w.f(e) + b.f(e));
            store128(o + c, r);
        }
    }
    if (lane == 0 && mean) mean[row] = m;
    if (lane == 0 && rstd) rstd[row] = s;
}

// 16-byte chunks a lane holds for rows of C channels (C / 256 rounded up), or 0 where the register kernels do not apply
inline int layernorm_register_chunks(int C) { return C % X128_SIZE == 0 && C <= 4 * 32 * X128_SIZE ? ceil_div(C, 32 * X128_SIZE) : 0; }

void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* weight, const floatX* bias,
                       int N, int C, cudaStream_t stream) {
    NVTX_RANGE_FN();
    const int block_size = 256;  // 8 rows per block
    const int grid = ceil_div(N, block_size / 32);
    switch (layernorm_register_chunks(C)) {
    case 1: layernorm_forward_registers_kernel<1><<<grid, block_size, 0, stream>>>(out, mean, rstd, inp, weight, bias, N, C); break;
    case 2: layernorm_forward_registers_kernel<2><<<grid, block_size, 0, stream>>>(out, mean, rstd, inp, weight, bias, N, C); break;
    case 3: layernorm_forward_registers_kernel<3><<<grid, block_size, 0, stream>>>(out, mean, rstd, inp, weight, bias, N, C); break;
    case 4: layernorm_forward_registers_kernel<4><<<grid, block_size, 0, stream>>>(out, mean, rstd, inp, weight, bias, N, C); break;
    default: layernorm_forward_kernel<<<grid, block_size, 0, stream>>>(out, mean, rstd, inp, weight, bias, N, C);
    }
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// backward

#define LN_BWD_WARPS 4
#define LN_BWD_MAX_BLOCKS 1024

// dinp (N,C) +=; partials (gridDim.x, 2, C) = per-block (dw, db); dout/inp (N,C); weight (C); mean/rstd (N)
// dynamic shared memory: (LN_BWD_WARPS, 2, C) floats. Channel c + k of a lane's 8-channel chunk c sits at
// k * C/8 + c/8 (ln_bwd_slot), so for each k the 32 lanes touch 32 consecutive words: no bank conflict. With
// the plain layout (c + k) every access is an 8-way conflict, and the per-row dw/db read-modify-writes make the
// kernel shared-memory bound.
__device__ __forceinline__ int ln_bwd_slot(int channel, int C) { return (channel % X128_SIZE) * (C / X128_SIZE) + channel / X128_SIZE; }

__global__ void layernorm_backward_kernel(floatX* dinp, float* partials, const floatX* dout, const floatX* inp,
                                          const floatX* weight, const float* mean, const float* rstd, int N, int C) {
    extern __shared__ float ln_bwd_smem[];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float* dw_acc = ln_bwd_smem + (size_t)warp * 2 * C;
    float* db_acc = dw_acc + C;
    const int slot_stride = C / X128_SIZE;   // between channel c + k and c + k + 1 of one chunk
    for (int c = lane; c < 2 * C; c += 32) dw_acc[c] = 0.0f;  // each warp zeroes its own slice
    __syncwarp();
    for (int row = blockIdx.x * LN_BWD_WARPS + warp; row < N; row += gridDim.x * LN_BWD_WARPS) {
        size_t off = (size_t)row * C;
        float m = mean[row], s = rstd[row];
        // pass 1: the two row means, and this row's contribution to dw, db
        float dnorm_sum = 0.0f, dnorm_xhat_sum = 0.0f;
        for (int c = lane * X128_SIZE; c < C; c += 32 * X128_SIZE) {
            x128 d = load128(dout + off + c), x = load128(inp + off + c), w = load128(weight + c);
            for (int k = 0; k < X128_SIZE; k++) {
                float xhat = (x.f(k) - m) * s;
                float dnorm = d.f(k) * w.f(k);
                dnorm_sum += dnorm;
                dnorm_xhat_sum += dnorm * xhat;
                dw_acc[k * slot_stride + c / X128_SIZE] += d.f(k) * xhat;  // lane-private channels: no race
                db_acc[k * slot_stride + c / X128_SIZE] += d.f(k);
            }
        }
        float dnorm_mean = warp_reduce_sum(dnorm_sum) / C;
        float dnorm_xhat_mean = warp_reduce_sum(dnorm_xhat_sum) / C;
        // pass 2: the input gradient (the row is still in L1)
        for (int c = lane * X128_SIZE; c < C; c += 32 * X128_SIZE) {
            x128 d = load128cs(dout + off + c), x = load128cs(inp + off + c), w = load128(weight + c);
            x128 di = load128(dinp + off + c);
            for (int k = 0; k < X128_SIZE; k++) {
                float xhat = (x.f(k) - m) * s;
                float dnorm = d.f(k) * w.f(k);
                di.set(k, di.f(k) + (dnorm - dnorm_mean - xhat * dnorm_xhat_mean) * s);
            }
            store128(dinp + off + c, di);
        }
    }
    __syncthreads();  // every warp's dw/db slice is complete
    for (int c = threadIdx.x; c < 2 * C; c += blockDim.x) {   // c = which * C + channel
        const int slot = (c / C) * C + ln_bwd_slot(c % C, C);
        float sum = 0.0f;
        for (int w = 0; w < LN_BWD_WARPS; w++) sum += ln_bwd_smem[(size_t)w * 2 * C + slot];
        partials[(size_t)blockIdx.x * 2 * C + c] = sum;
    }
}

// The same with the sums in registers: lane l owns channels l*8 + 256k .. (k < kChunks) and keeps their dw, db sums
// over its rows there; the warps' sums meet in shared memory once, at the end. The second pass re-reads the row
// (from L1), as the other kernel does: keeping it in registers too would halve the warps an SM holds.
template <int kChunks>
__global__ void layernorm_backward_registers_kernel(floatX* dinp, float* partials, const floatX* dout, const floatX* inp,
                                                    const floatX* weight, const float* mean, const float* rstd, int N, int C) {
    extern __shared__ float ln_bwd_smem[];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float dw[kChunks][X128_SIZE] = {}, db[kChunks][X128_SIZE] = {};
    x128 w[kChunks];
    #pragma unroll
    for (int k = 0; k < kChunks; k++) {
        const int c = lane * X128_SIZE + k * 32 * X128_SIZE;
        if (c < C) w[k] = load128(weight + c);
    }
    for (int row = blockIdx.x * LN_BWD_WARPS + warp; row < N; row += gridDim.x * LN_BWD_WARPS) {
        size_t off = (size_t)row * C;
        float m = mean[row], s = rstd[row];
        float dnorm_sum = 0.0f, dnorm_xhat_sum = 0.0f;
        #pragma unroll
        for (int k = 0; k < kChunks; k++) {
            const int c = lane * X128_SIZE + k * 32 * X128_SIZE;
            if (c >= C) continue;
            const x128 d = load128(dout + off + c), x = load128(inp + off + c);
            for (int e = 0; e < X128_SIZE; e++) {
                float xhat = (x.f(e) - m) * s;
                float dnorm = d.f(e) * w[k].f(e);
                dnorm_sum += dnorm;
                dnorm_xhat_sum += dnorm * xhat;
                dw[k][e] += d.f(e) * xhat;
                db[k][e] += d.f(e);
            }
        }
        float dnorm_mean = warp_reduce_sum(dnorm_sum) / C;
        float dnorm_xhat_mean = warp_reduce_sum(dnorm_xhat_sum) / C;
        #pragma unroll
        for (int k = 0; k < kChunks; k++) {
            const int c = lane * X128_SIZE + k * 32 * X128_SIZE;
            if (c >= C) continue;
            const x128 d = load128cs(dout + off + c), x = load128cs(inp + off + c);
            x128 di = load128(dinp + off + c);
            for (int e = 0; e < X128_SIZE; e++) {
                float xhat = (x.f(e) - m) * s;
                float dnorm = d.f(e) * w[k].f(e);
                di.set(e, di.f(e) + (dnorm - dnorm_mean - xhat * dnorm_xhat_mean) * s);
            }
            store128(dinp + off + c, di);
        }
    }
    // each warp's sums into its slice ((LN_BWD_WARPS, 2, C) floats), then the block adds the slices in order
    float* dw_slice = ln_bwd_smem + (size_t)warp * 2 * C;
    #pragma unroll
    for (int k = 0; k < kChunks; k++) {
        const int c = lane * X128_SIZE + k * 32 * X128_SIZE;
        if (c >= C) continue;
        for (int e = 0; e < X128_SIZE; e++) { dw_slice[c + e] = dw[k][e]; dw_slice[C + c + e] = db[k][e]; }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < 2 * C; c += blockDim.x) {
        float sum = 0.0f;
        for (int w = 0; w < LN_BWD_WARPS; w++) sum += ln_bwd_smem[(size_t)w * 2 * C + c];
        partials[(size_t)blockIdx.x * 2 * C + c] = sum;
    }
}

inline int layernorm_backward_num_blocks(int N) { return std::min(ceil_div(N, LN_BWD_WARPS), LN_BWD_MAX_BLOCKS); }
// fp32 scratch the backward needs, in floats
inline size_t layernorm_backward_scratch_floats(int N, int C) { return (size_t)layernorm_backward_num_blocks(N) * 2 * C; }

// scratch: layernorm_backward_scratch_floats(N, C) floats
void layernorm_backward(floatX* dinp, floatX* dweight, floatX* dbias, float* scratch, const floatX* dout, const floatX* inp,
                        const floatX* weight, const float* mean, const float* rstd, int N, int C, cudaStream_t stream) {
    NVTX_RANGE_FN();
    int num_blocks = layernorm_backward_num_blocks(N);
    size_t smem = (size_t)LN_BWD_WARPS * 2 * C * sizeof(float);
    static size_t smem_set = 0;
    if (smem > smem_set) {  // above 48 KiB (C > 1536) the kernel must opt in
        cudaCheck(cudaFuncSetAttribute(layernorm_backward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        smem_set = smem;
    }
    const int threads = LN_BWD_WARPS * 32;
    switch (layernorm_register_chunks(C)) {
    case 1: layernorm_backward_registers_kernel<1><<<num_blocks, threads, smem, stream>>>(dinp, scratch, dout, inp, weight, mean, rstd, N, C); break;
    case 2: layernorm_backward_registers_kernel<2><<<num_blocks, threads, smem, stream>>>(dinp, scratch, dout, inp, weight, mean, rstd, N, C); break;
    case 3: layernorm_backward_registers_kernel<3><<<num_blocks, threads, smem, stream>>>(dinp, scratch, dout, inp, weight, mean, rstd, N, C); break;
    case 4: layernorm_backward_registers_kernel<4><<<num_blocks, threads, smem, stream>>>(dinp, scratch, dout, inp, weight, mean, rstd, N, C); break;
    default: layernorm_backward_kernel<<<num_blocks, threads, smem, stream>>>(dinp, scratch, dout, inp, weight, mean, rstd, N, C);
    }
    cudaCheck(cudaGetLastError());
    reduce_partials_add(dweight, dbias, scratch, num_blocks, C, stream);
}
