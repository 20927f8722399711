/*
Token + position embedding.
forward:  out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]
backward: dwpe[t,:] += sum_b dout[b,t,:]; dwte[v,:] += sum over positions with inp == v of dout.
The dwte backward has no float atomics, so it is bit-for-bit deterministic: the host sorts the
positions of the batch into one bucket per distinct token (a counting sort, so positions stay in
increasing order), and one thread block per (token, 256 channels) sums its bucket in that order.
*/
#pragma once
#include <vector>
#include "cuda_utils.cuh"

// ----------------------------------------------------------------------------
// document starts (train_gpt2cu -dm 1): every document of the token shards begins with <|endoftext|>, so the document
// of position t of row b starts at the last position p <= t holding it (0 if none): an inclusive max-scan along the row
// of (token == eot ? p : 0), one block per row, in chunks of blockDim.x positions (a multiple of 32)

__global__ void document_starts_kernel(int* doc_start, const int* inp, int T, int eot) {
    __shared__ int warp_last[32];
    const int b = blockIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    int carry = 0;
    for (int t0 = 0; t0 < T; t0 += blockDim.x) {
        const int t = t0 + threadIdx.x;
        int v = t < T && inp[(size_t)b * T + t] == eot ? t : 0;
        for (int off = 1; off < 32; off *= 2) { const int u = __shfl_up_sync(0xffffffff, v, off); if (lane >= off) v = max(v, u); }
        if (lane == 31) warp_last[warp] = v;
        __syncthreads();
        if (warp == 0) {
            int w = lane < warps ? warp_last[lane] : 0;
            for (int off = 1; off < 32; off *= 2) { const int u = __shfl_up_sync(0xffffffff, w, off); if (lane >= off) w = max(w, u); }
            warp_last[lane] = w;
        }
        __syncthreads();
        v = max(max(v, warp > 0 ? warp_last[warp - 1] : 0), carry);
        if (t < T) doc_start[(size_t)b * T + t] = v;
        carry = max(carry, warp_last[warps - 1]);
        __syncthreads();   // warp_last is rewritten by the next chunk
    }
}

void document_starts(int* doc_start, const int* inp, int B, int T, int eot, cudaStream_t stream) {
    document_starts_kernel<<<B, std::min(1024, ceil_div(T, 32) * 32), 0, stream>>>(doc_start, inp, T, eot);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// forward: one thread per 8 channels of one (b, t)

// out (B,T,C), inp (B,T) token ids, wte (Vp,C), wpe (maxT,C)
__global__ void encoder_forward_kernel(floatX* out, const int* inp, const floatX* wte, const floatX* wpe, int B, int T, int C) {
    size_t idx = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * X128_SIZE;
    if (idx >= (size_t)B * T * C) return;
    size_t bt = idx / C;
    int t = bt % T, c = idx % C;
    int ix = inp[bt];
    x128 tok = load128cs(wte + (size_t)ix * C + c);
    x128 pos = load128cs(wpe + (size_t)t * C + c);
    x128 result;
    for (int k = 0; k < X128_SIZE; k++) result.set(k, tok.f(k) + pos.f(k));
    store128(out + idx, result);
}

void encoder_forward(floatX* out, const int* inp, const floatX* wte, const floatX* wpe, int B, int T, int C, cudaStream_t stream) {
    NVTX_RANGE_FN();
    const int block_size = 256;
    size_t num_vectors = (size_t)B * T * C / X128_SIZE;
    encoder_forward_kernel<<<ceil_div(num_vectors, (size_t)block_size), block_size, 0, stream>>>(out, inp, wte, wpe, B, T, C);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// backward

// dwpe (maxT,C) += sum over b of dout (B,T,C): one thread per (t, 8 channels), b summed in order
__global__ void wpe_backward_kernel(floatX* dwpe, const floatX* dout, int B, int T, int C) {
    size_t idx = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * X128_SIZE;
    if (idx >= (size_t)T * C) return;
    float acc[X128_SIZE] = {0.0f};
    for (int b = 0; b < B; b++) {
        x128 d = load128cs(dout + (size_t)b * T * C + idx);
        for (int k = 0; k < X128_SIZE; k++) acc[k] += d.f(k);
    }
    x128 w = load128(dwpe + idx);
    for (int k = 0; k < X128_SIZE; k++) w.set(k, w.f(k) + acc[k]);
    store128(dwpe + idx, w);
}

// Host side of the dwte backward. Layout of the int array sent to the GPU:
// [num_buckets tokens][num_buckets+1 offsets][B*T positions sorted by token]
inline int build_token_buckets(std::vector<int>& out, std::vector<int>& counts, const int* inp, int BT, int V) {
    counts.assign(V + 1, 0);
    for (int i = 0; i < BT; i++) counts[inp[i]]++;
    int num_buckets = 0;
    for (int v = 0; v < V; v++) num_buckets += counts[v] > 0;
    out.resize(2 * num_buckets + 1 + BT);
    int* tokens = out.data();
    int* offsets = tokens + num_buckets;
    int* positions = offsets + num_buckets + 1;
    // exclusive prefix sum over the tokens present; counts[v] becomes the write cursor of bucket v
    int bucket = 0, offset = 0;
    for (int v = 0; v < V; v++) {
        if (counts[v] == 0) continue;
        tokens[bucket] = v;
        offsets[bucket] = offset;
        offset += counts[v];
        counts[v] = offsets[bucket];
        bucket++;
    }
    offsets[num_buckets] = offset;
    for (int i = 0; i < BT; i++) positions[counts[inp[i]]++] = i;  // stable: positions ascend in each bucket
    return num_buckets;
}

// dwte (Vp,C) += dout (B,T,C) gathered by bucket. grid (num_buckets, ceil(C/256)), block (32, 8):
// threadIdx.x owns 8 channels, threadIdx.y strides over the bucket's positions.
__global__ void wte_backward_kernel(floatX* dwte, const floatX* dout, const int* buckets, int num_buckets, int BT, int C) {
    __shared__ float partial[8][32][X128_SIZE];
    const int* tokens = buckets;
    const int* offsets = buckets + num_buckets;
    const int* positions = offsets + num_buckets + 1;
    int bucket = blockIdx.x;
    int c = (blockIdx.y * 32 + threadIdx.x) * X128_SIZE;
    float acc[X128_SIZE] = {0.0f};
    if (c < C) {
        // real text has buckets of thousands of rows (the most frequent token of a 64K-token tiny Shakespeare
        // batch: 4913): four independent row loads in flight per step instead of one latency-bound chain, added
        // in the same order as one row at a time
        const int end = offsets[bucket + 1];
        int i = offsets[bucket] + threadIdx.y;
        for (; i + 24 < end; i += 32) {
            x128 d[4];
            for (int u = 0; u < 4; u++) d[u] = load128(dout + (size_t)positions[i + 8 * u] * C + c);
            for (int u = 0; u < 4; u++)
                for (int k = 0; k < X128_SIZE; k++) acc[k] += d[u].f(k);
        }
        for (; i < end; i += 8) {
            x128 d = load128(dout + (size_t)positions[i] * C + c);
            for (int k = 0; k < X128_SIZE; k++) acc[k] += d.f(k);
        }
    }
    for (int k = 0; k < X128_SIZE; k++) partial[threadIdx.y][threadIdx.x][k] = acc[k];
    __syncthreads();  // all 8 row-groups have written their partial sums
    if (threadIdx.y != 0 || c >= C) return;
    for (int y = 1; y < 8; y++) {
        for (int k = 0; k < X128_SIZE; k++) acc[k] += partial[y][threadIdx.x][k];
    }
    floatX* row = dwte + (size_t)tokens[bucket] * C + c;
    x128 w = load128(row);
    for (int k = 0; k < X128_SIZE; k++) w.set(k, w.f(k) + acc[k]);
    store128(row, w);
}

// d_buckets is a device array built by build_token_buckets (already copied)
void encoder_backward(floatX* dwte, floatX* dwpe, const floatX* dout, const int* d_buckets, int num_buckets,
                      int B, int T, int C, cudaStream_t stream) {
    NVTX_RANGE_FN();
    const int block_size = 256;
    size_t num_vectors = (size_t)T * C / X128_SIZE;
    wpe_backward_kernel<<<ceil_div(num_vectors, (size_t)block_size), block_size, 0, stream>>>(dwpe, dout, B, T, C);
    cudaCheck(cudaGetLastError());
    dim3 grid(num_buckets, ceil_div(C, 32 * X128_SIZE));
    wte_backward_kernel<<<grid, dim3(32, 8), 0, stream>>>(dwte, dout, d_buckets, num_buckets, B * T, C);
    cudaCheck(cudaGetLastError());
}
