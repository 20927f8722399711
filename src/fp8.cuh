/*
FP8 for training (-fp8, sm_89+): per-tensor scales with delayed scaling, the cast of a bf16 tensor to FP8 in the
layouts cuBLASLt's FP8 matmuls read, and those matmuls.

Layouts. Hopper's cuBLASLt takes FP8 operands only K-major (its "TN" form). The forward out = x @ W^T reads x (N, K)
and W (OC, K) as they lie; the backward's dinp = dout @ W reduces over OC and dW = dout^T @ x over the N tokens, so
it reads W, x and dout transposed. One cast writes a tensor row-major, transposed, or both, in one pass over the bf16
(one launch for up to four tensors: a layer's weights). Where a tensor's producer can write it in FP8 itself, no cast
runs: the layernorm before qkv and fc writes both layouts (layernorm_forward_fp8), the fc matmul writes gelu(.) for
fcproj (matmul_fp8 with an FP8 D), on Hopper the MLP's DGELU kernel, itself on FP8 operands, writes dfch both ways
and gelu(fch) transposed (src/matmul_hopper.cuh, DgeluFp8Out), the attention's backward writes dqkv both ways
(src/attention.cuh) and the layernorm backward dresidual row-major (src/layernorm.cuh), each as an Fp8Copy
(src/common.cuh), and fp8_transpose adds dresidual's transpose from the FP8 bytes.

Delayed scaling (Transformer Engine's recipe). A tensor's scale in a step is fmax / (the largest amax of its last
kFp8History steps): it is known before the tensor is cast, so the cast needs one pass and records the tensor's amax as
it goes. The first step has no history: its matmuls run in bf16 while the casts record (fp8_update_scales then sets
the scales). A value past the history's range saturates to the format's largest finite value.

Formats. Activations and weights are E4M3 (3 mantissa bits, up to 448). Gradients are E5M2 (2 mantissa bits, up to
57344), whose wider range holds the gradients' spread within a tensor, as Transformer Engine's hybrid format does
(-fp8 1), or E4M3 like the rest (-fp8 2).
*/
#pragma once
#include <cuda_fp8.h>
#include "cuda_utils.cuh"
#include "matmul.cuh"
#include "layernorm.cuh"   // LN_EPS, bf16_at

// One tensor's scaling state. cuBLASLt reads scale_inv (an operand's), scale (an FP8 output's) and writes
// matmul_amax through pointers that must be 16-byte aligned: each starts 16 bytes of the struct (an array of them
// from cudaMalloc).
struct __align__(16) Fp8Scale {
    float scale_inv;     // what the matmul multiplies back: 1 / scale
    float fmax;          // the format's largest finite value: 448 (E4M3) or 57344 (E5M2)
    unsigned int amax;   // the largest |x| cast since the last update, as the float's bits (non-negative floats order as their bits)
    float pad0;
    float scale;         // what a cast multiplies by, and a matmul writing this tensor in FP8
    float pad1[3];
    float matmul_amax;   // where a matmul writing this tensor leaves its output's amax (fp8_fold_amax folds it in)
    float pad2[3];
};
static_assert(sizeof(Fp8Scale) == 48, "cuBLASLt's scale and amax pointers must be 16-byte aligned");
constexpr int kFp8History = 16;   // steps of amax each scale looks back over
constexpr float kFp8MaxE4M3 = 448.0f, kFp8MaxE5M2 = 57344.0f;

// FP8 tensor cores and conversions: sm_89+. Below, the FP8 kernels here trap (they are not compiled there).
inline bool fp8_supported() { return device_props().major * 10 + device_props().minor >= 89; }

inline Fp8Scale fp8_scale_init(bool e5m2) {
    Fp8Scale s = {};
    s.scale_inv = s.scale = 1.0f;
    s.fmax = e5m2 ? kFp8MaxE5M2 : kFp8MaxE4M3;
    return s;
}

// ----------------------------------------------------------------------------
// the cast: x (M, K) bf16 -> q (M, K) and / or qT (K, M) FP8 (either may be null; both null: the amax alone), q =
// saturate(x * scale), and the amax into slot->amax. A CTA casts 64 x 64 tiles in turn: each thread reads 16 bytes of
// two rows, writes their 8 bytes of q, and leaves them in shared memory, from which each thread gathers 16 rows of one
// column, 16 bytes of qT. The CTAs stay resident over the tiles, so each adds its amax once: one atomic a CTA, not a
// warp's per tile, which serialised on the one address. K % 8 == 0 and M % 16 == 0 (FP8 leading dimensions).
// One launch casts up to kFp8CastJobs tensors of one format (a layer's four weights): blockIdx.y picks the tensor,
// so each launch pays its latency once for all of them.

constexpr int kFp8CastTile = 64;
constexpr int kFp8CastStride = kFp8CastTile + 2;   // the tile's row stride in bytes: the column gathers spread over the banks
constexpr int kFp8CastJobs = 4;

struct Fp8CastJob {
    uint8_t *q, *qT;
    const floatX* x;
    int M, K;
    Fp8Scale* slot;
};
struct Fp8CastJobs { Fp8CastJob job[kFp8CastJobs]; };

template <bool kE5M2>
__global__ void __launch_bounds__(256) fp8_cast_kernel(const __grid_constant__ Fp8CastJobs jobs) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890   // -fp8 runs on sm_89+ only: below, no FP8 conversions to emulate
    __trap();
#else
    __shared__ __align__(16) uint8_t tile[kFp8CastTile * kFp8CastStride];
    __shared__ float warp_amax[8];
    const Fp8CastJob& job = jobs.job[blockIdx.y];
    uint8_t *q = job.q, *qT = job.qT;
    const floatX* x = job.x;
    const int M = job.M, K = job.K;
    const float scale = job.slot->scale;
    const int tiles_k = ceil_div(K, kFp8CastTile), tiles = tiles_k * ceil_div(M, kFp8CastTile);
    if (blockIdx.x >= tiles) return;   // a smaller tensor of the launch: the whole CTA leaves, its amax adds nothing
    float amax = 0.0f;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        const int m0 = (t / tiles_k) * kFp8CastTile, k0 = (t % tiles_k) * kFp8CastTile;
        x128 v[2];
        bool in[2];
        for (int j = 0; j < 2; j++) {   // both loads in flight before either converts
            const int c = threadIdx.x + j * 256, m = m0 + c / 8, k = k0 + (c % 8) * 8;
            in[j] = m < M && k < K;
            if (in[j]) v[j] = load128cs(x + (size_t)m * K + k);
        }
        for (int j = 0; j < 2; j++) {
            const int c = threadIdx.x + j * 256, r = c / 8, col = (c % 8) * 8;
            uint16_t pairs[4] = {0, 0, 0, 0};
            if (in[j]) {
                for (int i = 0; i < 4; i++) pairs[i] = fp8x2_scaled(v[j].f(2 * i), v[j].f(2 * i + 1), scale, kE5M2 ? __NV_E5M2 : __NV_E4M3, amax);
                if (q) *reinterpret_cast<uint2*>(q + (size_t)(m0 + r) * K + k0 + col) = *reinterpret_cast<const uint2*>(pairs);
            }
            uint16_t* row = reinterpret_cast<uint16_t*>(tile + r * kFp8CastStride + col);
            for (int i = 0; i < 4; i++) row[i] = pairs[i];
        }
        if (qT) {
            __syncthreads();   // the tile is written
            const int col = threadIdx.x / 4, r0 = (threadIdx.x % 4) * 16, k = k0 + col, m = m0 + r0;
            if (k < K && m < M) {
                alignas(16) uint8_t column[16];
                for (int i = 0; i < 16; i++) column[i] = tile[(r0 + i) * kFp8CastStride + col];
                *reinterpret_cast<uint4*>(qT + (size_t)k * M + m) = *reinterpret_cast<const uint4*>(column);
            }
            __syncthreads();   // read before the next tile overwrites it
        }
    }
    amax = warp_reduce_max(amax);
    if (threadIdx.x % 32 == 0) warp_amax[threadIdx.x / 32] = amax;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < 8; w++) amax = fmaxf(amax, warp_amax[w]);
        atomicMax(&job.slot->amax, __float_as_uint(amax));
    }
#endif
}

// the first `count` jobs, all of one format: e5m2 (every slot's fmax must be its); q and qT 16-byte aligned
inline void fp8_cast_batch(const Fp8CastJobs& jobs, int count, bool e5m2, cudaStream_t stream) {
    NVTX_RANGE_FN();
    int most_tiles = 0;
    for (int i = 0; i < count; i++) {
        const Fp8CastJob& j = jobs.job[i];
        if (j.K % 8 != 0 || j.M % 16 != 0) {
            fprintf(stderr, "fp8_cast: needs K %% 8 == 0 and M %% 16 == 0 (M=%d K=%d)\n", j.M, j.K);
            exit(EXIT_FAILURE);
        }
        most_tiles = std::max(most_tiles, ceil_div(j.K, kFp8CastTile) * ceil_div(j.M, kFp8CastTile));
    }
    // 8 CTAs of 256 threads fill an SM; a batch's CTAs share that over its tensors
    const int blocks = std::min(most_tiles, std::max(1, device_props().multiProcessorCount * 8 / count));
    const dim3 grid(blocks, count);
    if (e5m2) fp8_cast_kernel<true><<<grid, 256, 0, stream>>>(jobs);
    else fp8_cast_kernel<false><<<grid, 256, 0, stream>>>(jobs);
    cudaCheck(cudaGetLastError());
}

// A GPT-2 layer's four weights in FP8, one after another in 12 C^2 bytes (training casts them in one launch): linear 0
// qkv, 1 attproj, 2 fc, 3 fcproj, each (out, in) channels at its byte offset
struct Fp8LayerWeight { int out, in; size_t offset; };
inline Fp8LayerWeight fp8_layer_weight(int linear, int C) {
    const size_t CC = (size_t)C * C;
    const Fp8LayerWeight weights[4] = {{3 * C, C, 0}, {C, C, 3 * CC}, {4 * C, C, 4 * CC}, {C, 4 * C, 8 * CC}};
    return weights[linear];
}

// one tensor: e5m2 the format (the slot's fmax must be its); q and qT 16-byte aligned
inline void fp8_cast(uint8_t* q, uint8_t* qT, const floatX* x, int M, int K, Fp8Scale* slot, bool e5m2, cudaStream_t stream) {
    Fp8CastJobs jobs = {};
    jobs.job[0] = {q, qT, x, M, K, slot};
    fp8_cast_batch(jobs, 1, e5m2, stream);
}

// the transpose of an FP8 tensor: q (M, K) -> qT (K, M), for a producer that writes q itself (the layernorm backward's
// dresidual). A CTA takes 128 x 64 byte tiles in turn: each thread loads two 16-byte pieces of rows into shared memory
// (rows 68 bytes apart: the gathers below meet no bank twice), then half the threads each gather 4 columns of 16 rows
// a word a row, transpose them 4 x 4 bytes at a time in registers, and store 16 bytes of each column.
// K % 16 == 0 and M % 16 == 0.
constexpr int kFp8TransposeRows = 128, kFp8TransposeCols = 64, kFp8TransposeStride = kFp8TransposeCols + 4;

__global__ void __launch_bounds__(256) fp8_transpose_kernel(uint8_t* qT, const uint8_t* q, int M, int K) {
    __shared__ __align__(16) uint8_t tile[kFp8TransposeRows * kFp8TransposeStride];
    const int tiles_k = ceil_div(K, kFp8TransposeCols), tiles = tiles_k * ceil_div(M, kFp8TransposeRows);
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        const int m0 = (t / tiles_k) * kFp8TransposeRows, k0 = (t % tiles_k) * kFp8TransposeCols;
        uint4 v[2];
        for (int j = 0; j < 2; j++) {   // both loads in flight before either lands in shared memory
            const int c = threadIdx.x + j * 256, m = m0 + c / 4, k = k0 + (c % 4) * 16;
            v[j] = m < M && k < K ? __ldcs(reinterpret_cast<const uint4*>(q + (size_t)m * K + k)) : make_uint4(0, 0, 0, 0);
        }
        for (int j = 0; j < 2; j++) {
            const int c = threadIdx.x + j * 256;
            uint32_t* dst = reinterpret_cast<uint32_t*>(tile + (c / 4) * kFp8TransposeStride + (c % 4) * 16);
            dst[0] = v[j].x; dst[1] = v[j].y; dst[2] = v[j].z; dst[3] = v[j].w;
        }
        __syncthreads();
        if (threadIdx.x < 128) {   // columns 4 (t % 16) .. + 3 of rows 16 (t / 16) .. + 15
            const int cq = threadIdx.x % 16, r0 = (threadIdx.x / 16) * 16, k = k0 + 4 * cq, m = m0 + r0;
            uint4 column[4];
            uint32_t* words = reinterpret_cast<uint32_t*>(column);
            for (int g = 0; g < 4; g++) {
                uint32_t w[4];
                for (int r = 0; r < 4; r++) w[r] = *reinterpret_cast<const uint32_t*>(tile + (r0 + 4 * g + r) * kFp8TransposeStride + 4 * cq);
                const uint32_t lo01 = __byte_perm(w[0], w[1], 0x5140), lo23 = __byte_perm(w[2], w[3], 0x5140);
                const uint32_t hi01 = __byte_perm(w[0], w[1], 0x7362), hi23 = __byte_perm(w[2], w[3], 0x7362);
                words[0 * 4 + g] = __byte_perm(lo01, lo23, 0x5410);   // column k: byte 0 of rows 4g .. 4g + 3
                words[1 * 4 + g] = __byte_perm(lo01, lo23, 0x7632);
                words[2 * 4 + g] = __byte_perm(hi01, hi23, 0x5410);
                words[3 * 4 + g] = __byte_perm(hi01, hi23, 0x7632);
            }
            if (m < M && k < K)
                for (int j = 0; j < 4; j++) *reinterpret_cast<uint4*>(qT + (size_t)(k + j) * M + m) = column[j];
        }
        __syncthreads();   // read before the next tile overwrites it
    }
}

// qT and q 16-byte aligned
inline void fp8_transpose(uint8_t* qT, const uint8_t* q, int M, int K, cudaStream_t stream) {
    NVTX_RANGE_FN();
    if (K % 16 != 0 || M % 16 != 0) {
        fprintf(stderr, "fp8_transpose: needs K %% 16 == 0 and M %% 16 == 0 (M=%d K=%d)\n", M, K);
        exit(EXIT_FAILURE);
    }
    const int tiles = ceil_div(K, kFp8TransposeCols) * ceil_div(M, kFp8TransposeRows);
    fp8_transpose_kernel<<<std::min(tiles, device_props().multiProcessorCount * 8), 256, 0, stream>>>(qT, q, M, K);
    cudaCheck(cudaGetLastError());
}

// a matmul's output amax (slot->matmul_amax, which cuBLASLt overwrites) into the slot's amax of the step
__global__ void fp8_fold_amax_kernel(Fp8Scale* slot) { atomicMax(&slot->amax, __float_as_uint(fabsf(slot->matmul_amax))); }
inline void fp8_fold_amax(Fp8Scale* slot, cudaStream_t stream) {
    fp8_fold_amax_kernel<<<1, 1, 0, stream>>>(slot);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// the layernorm with its output in FP8 (the forward's ln1 and ln2 under -fp8): out8 (N, C) row-major for the linear
// after it, out8T (C, N) for that linear's dweight in the backward, mean and rstd as layernorm_forward's, the amax into
// slot (E4M3); no bf16 output. A CTA normalises 32 rows, each of its 16 warps two, and leaves their FP8 bytes in shared
// memory, from which each thread writes 32 rows of a column of out8T (a whole 32-byte sector). C % 8 == 0, N % 32 == 0,
// C <= 2048. A warp reads its row from memory once and keeps it in registers, up to 8 16-byte chunks a lane, for the
// mean, the variance and the output: read again, the rows miss the L1 that the CTAs' shared memory leaves, and the
// kernel waits on those reads.

constexpr int kLnFp8Rows = 32, kLnFp8Warps = 16, kLnFp8Chunks = 8;

__global__ void __launch_bounds__(kLnFp8Warps * 32, 2) layernorm_forward_fp8_kernel(uint8_t* out8, uint8_t* out8T, float* mean,
                                                                                 float* rstd, const floatX* inp, const floatX* weight,
                                                                                 const floatX* bias, int N, int C, Fp8Scale* slot) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890   // as fp8_cast_kernel
    __trap();
#else
    extern __shared__ __align__(16) uint8_t ln_fp8_rows[];   // (kLnFp8Rows, C)
    __shared__ float warp_amax[kLnFp8Warps];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, row0 = blockIdx.x * kLnFp8Rows;
    const float scale = slot->scale;
    float amax = 0.0f;
    for (int r = warp; r < kLnFp8Rows; r += kLnFp8Warps) {
        const int row = row0 + r;
        const floatX* x = inp + (size_t)row * C;
        uint4 v[kLnFp8Chunks];   // chunk i at channel (lane + 32 i) * 8, where < C; packed: an x128 takes a register a bf16
        #pragma unroll
        for (int i = 0; i < kLnFp8Chunks; i++)
            if ((lane + 32 * i) * X128_SIZE < C) v[i] = __ldcs(reinterpret_cast<const uint4*>(x + (lane + 32 * i) * X128_SIZE));
        float sum = 0.0f;
        #pragma unroll
        for (int i = 0; i < kLnFp8Chunks; i++)
            if ((lane + 32 * i) * X128_SIZE < C)
                for (int k = 0; k < X128_SIZE; k++) sum += bf16_at(v[i], k);
        const float m = warp_reduce_sum(sum) / C;
        float var = 0.0f;
        #pragma unroll
        for (int i = 0; i < kLnFp8Chunks; i++)
            if ((lane + 32 * i) * X128_SIZE < C)
                for (int k = 0; k < X128_SIZE; k++) { const float d = bf16_at(v[i], k) - m; var += d * d; }
        const float s = rsqrtf(warp_reduce_sum(var) / C + LN_EPS);
        #pragma unroll
        for (int i = 0; i < kLnFp8Chunks; i++) {
            const int c = (lane + 32 * i) * X128_SIZE;
            if (c >= C) break;
            const x128 w = load128(weight + c), b = load128(bias + c);
            uint16_t pairs[4];
            for (int e = 0; e < 4; e++) {
                const float y0 = (bf16_at(v[i], 2 * e) - m) * s * w.f(2 * e) + b.f(2 * e);
                const float y1 = (bf16_at(v[i], 2 * e + 1) - m) * s * w.f(2 * e + 1) + b.f(2 * e + 1);
                pairs[e] = fp8x2_scaled(y0, y1, scale, __NV_E4M3, amax);
            }
            const uint2 packed = *reinterpret_cast<const uint2*>(pairs);
            *reinterpret_cast<uint2*>(out8 + (size_t)row * C + c) = packed;
            *reinterpret_cast<uint2*>(ln_fp8_rows + (size_t)r * C + c) = packed;
        }
        if (lane == 0) { mean[row] = m; rstd[row] = s; }
    }
    __syncthreads();   // the rows' bytes are in shared memory
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        alignas(16) uint8_t column[kLnFp8Rows];
        for (int i = 0; i < kLnFp8Rows; i++) column[i] = ln_fp8_rows[(size_t)i * C + c];
        uint4* dst = reinterpret_cast<uint4*>(out8T + (size_t)c * N + row0);
        dst[0] = reinterpret_cast<const uint4*>(column)[0];
        dst[1] = reinterpret_cast<const uint4*>(column)[1];
    }
    amax = warp_reduce_max(amax);
    if (lane == 0) warp_amax[warp] = amax;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < kLnFp8Warps; w++) amax = fmaxf(amax, warp_amax[w]);
        atomicMax(&slot->amax, __float_as_uint(amax));
    }
#endif
}

inline bool layernorm_forward_fp8_fits(int N, int C) { return N % kLnFp8Rows == 0 && C % 8 == 0 && C <= kLnFp8Chunks * 32 * X128_SIZE; }

// mean, rstd (N) are required; out8, out8T 16-byte aligned
inline void layernorm_forward_fp8(uint8_t* out8, uint8_t* out8T, float* mean, float* rstd, const floatX* inp, const floatX* weight,
                                  const floatX* bias, int N, int C, Fp8Scale* slot, cudaStream_t stream) {
    NVTX_RANGE_FN();
    if (!layernorm_forward_fp8_fits(N, C)) {
        fprintf(stderr, "layernorm_forward_fp8: needs N %% %d == 0, C %% 8 == 0 and C <= %d (N=%d C=%d)\n", kLnFp8Rows,
                kLnFp8Chunks * 32 * X128_SIZE, N, C);
        exit(EXIT_FAILURE);
    }
    const int smem = kLnFp8Rows * C;
    static int opted_in = 0;   // above 48 KiB (C > 1536) the kernel opts in, once for the largest C
    if (smem > opted_in) {
        cudaCheck(cudaFuncSetAttribute(layernorm_forward_fp8_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        opted_in = smem;
    }
    layernorm_forward_fp8_kernel<<<N / kLnFp8Rows, kLnFp8Warps * 32, smem, stream>>>(out8, out8T, mean, rstd, inp, weight,
                                                                                           bias, N, C, slot);
    cudaCheck(cudaGetLastError());
}

// After a step: each slot's amax joins its history (entry `update` % kFp8History), the next step's scale is fmax over
// the history's largest, and amax starts again from 0. A non-finite amax is not kept (the scale stays finite).
__global__ void fp8_update_scales_kernel(Fp8Scale* slots, float* history, int n, int update) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    Fp8Scale s = slots[i];
    float* h = history + (size_t)i * kFp8History;
    const float amax = __uint_as_float(s.amax);
    h[update % kFp8History] = isfinite(amax) ? amax : 0.0f;
    float largest = 0.0f;
    for (int j = 0; j < kFp8History; j++) largest = fmaxf(largest, h[j]);
    if (largest > 0.0f) {
        s.scale = s.fmax / largest;
        s.scale_inv = 1.0f / s.scale;
    }
    s.amax = 0u;
    slots[i] = s;
}

inline void fp8_update_scales(Fp8Scale* slots, float* history, int n, int update, cudaStream_t stream) {
    fp8_update_scales_kernel<<<ceil_div(n, 256), 256, 0, stream>>>(slots, history, n, update);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// D (m, n) = a_scale_inv * b_scale_inv * A^T B [+ bias (m)] [+ C (m, n), D's layout: c == d accumulates]
// [gelu_aux: D = gelu(.), gelu_aux the pre-GELU values], A (k, m) and B (k, n) column-major FP8 of the given types
// (K contiguous). D is bf16, or FP8 (d_type) times *d_scale with its amax before the scale written to *d_amax.
// fast_accum: the tensor cores' own accumulation throughout (faster, fewer bits); else cuBLASLt promotes partial sums
// into fp32. The scale and amax pointers must be 16-byte aligned (cuBLASLt refuses the call otherwise). False where
// cuBLASLt has no algorithm for the combination.
inline bool matmul_fp8(void* d, const void* a, cudaDataType_t a_type, const void* b, cudaDataType_t b_type,
                       const float* a_scale_inv, const float* b_scale_inv, const floatX* c, const floatX* bias,
                       floatX* gelu_aux, int m, int n, int k, bool fast_accum, cudaStream_t stream,
                       cudaDataType_t d_type = CUDA_R_16BF, const float* d_scale = nullptr, float* d_amax = nullptr) {
    cublasLtMatmulDesc_t desc;
    cublasCheck(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
    const int8_t fast = fast_accum;
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof(op_t)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof(op_n)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale_inv, sizeof(a_scale_inv)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale_inv, sizeof(b_scale_inv)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
    if (d_scale) cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, &d_scale, sizeof(d_scale)));
    if (d_amax) cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, &d_amax, sizeof(d_amax)));
    cublasLtEpilogue_t epilogue = gelu_aux ? (bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX)
                                           : bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    if (gelu_aux) {
        const int64_t ld_aux = m;
        const cudaDataType_t aux_type = CUDA_R_16BF;
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &gelu_aux, sizeof(gelu_aux)));
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld_aux, sizeof(ld_aux)));
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &aux_type, sizeof(aux_type)));
    }
    if (bias) {
        const cudaDataType_t bias_type = CUDA_R_16BF;
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }
    // C is bf16 also where D is FP8 (cuBLASLt's rule); without a C (beta = 0: not read) D's memory stands in, or none
    // where D is FP8 (its layout is not C's)
    cublasLtMatrixLayout_t layout_a, layout_b, layout_c, layout_d;
    cublasCheck(cublasLtMatrixLayoutCreate(&layout_a, a_type, k, m, k));
    cublasCheck(cublasLtMatrixLayoutCreate(&layout_b, b_type, k, n, k));
    cublasCheck(cublasLtMatrixLayoutCreate(&layout_c, CUDA_R_16BF, m, n, m));
    cublasCheck(cublasLtMatrixLayoutCreate(&layout_d, d_type, m, n, m));
    cublasLtMatmulPreference_t preference;
    cublasCheck(cublasLtMatmulPreferenceCreate(&preference));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &cublaslt_workspace_size, sizeof(cublaslt_workspace_size)));
    cublasLtMatmulHeuristicResult_t heuristic;
    int returned = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(cublaslt_handle, desc, layout_a, layout_b, layout_c, layout_d,
                                                                 preference, 1, &heuristic, &returned);
    const float alpha = 1.0f, beta = c ? 1.0f : 0.0f;
    const bool fp8_out = d_type != CUDA_R_16BF;
    bool ok = status == CUBLAS_STATUS_SUCCESS && returned > 0;
    if (ok) {   // the heuristic may offer what the call then refuses (NOT_SUPPORTED; INVALID_VALUE for some FP8 D forms):
                // false, as where it offers nothing
        const cublasStatus_t run = cublasLtMatmul(cublaslt_handle, desc, &alpha, a, layout_a, b, layout_b, &beta,
                                                  c ? (const void*)c : fp8_out ? nullptr : d, layout_c, d, layout_d,
                                                  &heuristic.algo, cublaslt_workspace, cublaslt_workspace_size, stream);
        if (run != CUBLAS_STATUS_NOT_SUPPORTED && !(fp8_out && run == CUBLAS_STATUS_INVALID_VALUE)) cublasCheck(run);
        ok = run == CUBLAS_STATUS_SUCCESS;
    }
    cublasCheck(cublasLtMatmulPreferenceDestroy(preference));
    cublasCheck(cublasLtMatmulDescDestroy(desc));
    for (cublasLtMatrixLayout_t l : {layout_a, layout_b, layout_c, layout_d}) cublasCheck(cublasLtMatrixLayoutDestroy(l));
    return ok;
}
