/*
LayerNorm over the channels, one warp per row (the backward: two above 1024 channels), fp32 statistics.
forward:  out = (x - mean) * rstd * w + b, saving mean and rstd (fp32) for the backward
          (GPT-2's residual add before each layernorm runs in the epilogue of the matmul before it)
backward: dinp += rstd * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)),  dnorm = dout * w
          dw += sum over rows of dout * xhat,  db += sum over rows of dout
          optionally dsum += sum over rows of dinp as written: dinp is the residual stream's gradient, the dout of
          the projection (attproj, fcproj) before this layernorm in the backward, so dsum is that projection's bias
          gradient, summed here instead of in another pass over dinp
          optionally (-fp8) dinp as written, in FP8 with its amax: that projection's dout as its FP8 matmuls read it
          (an Fp8Copy), without a cast reading dinp back
The weight/bias gradients are column sums over B*T rows. To stay deterministic without atomics,
each warp accumulates its rows in its own slice of shared memory, the block adds the warp
slices in order into a per-block partial, and a second kernel adds the partials in order.
dev/cuda/layernorm.cu validates these kernels against fp64 and times them against its other variants; dev/cuda/matmul.cu's
FP8 checks validate the FP8 copy.
*/
#pragma once
#include "cuda_utils.cuh"
#include "ptx.cuh"   // named_barrier_sync, fp8x2_scaled

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

void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* weight, const floatX* bias,
                       int N, int C, cudaStream_t stream) {
    NVTX_RANGE_FN();
    const int block_size = 256;  // 8 rows per block
    layernorm_forward_kernel<<<ceil_div(N, block_size / 32), block_size, 0, stream>>>(out, mean, rstd, inp, weight, bias, N, C);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// backward

#define LN_BWD_WARPS 4
#define LN_BWD_MAX_BLOCKS 1024
#define LN_BWD_CHUNKS 4                                   // 16-byte chunks of a row a lane holds at once
#define LN_BWD_SEGMENT (LN_BWD_CHUNKS * 32 * X128_SIZE)   // the channels a warp holds at once: 1024

// A row's channels go to `split` warps (1, or 2 above LN_BWD_SEGMENT channels): part p takes channels p * width ..,
// width = C / split rounded up to whole chunks.
__host__ __device__ inline int ln_bwd_split(int C) { return C > LN_BWD_SEGMENT ? 2 : 1; }
__host__ __device__ inline int ln_bwd_width(int C) { return ceil_div(C, ln_bwd_split(C) * X128_SIZE) * X128_SIZE; }

// Each warp's sums are a (sums, width) slice of shared memory. Channel c + k of a lane's 8-channel chunk c sits at
// k * width/8 + c/8 (ln_bwd_slot, c counted from the part's first channel), so for each k the 32 lanes touch 32
// consecutive words: no bank conflict. With the plain layout (c + k) every access is an 8-way conflict, and the
// per-row read-modify-writes of the sums make the kernel shared-memory bound.
__device__ __forceinline__ int ln_bwd_slot(int channel, int width) { return (channel % X128_SIZE) * (width / X128_SIZE) + channel / X128_SIZE; }

// Element e of 8 bf16 packed in 16 bytes, as a float (exact: a bf16 is a float's upper half). The backward holds rows
// as uint4: an x128 in registers takes a register per bf16, twice as many, and an SM then holds fewer warps.
__device__ __forceinline__ float bf16_at(const uint4& r, int e) {
    const uint32_t word = e < 2 ? r.x : e < 4 ? r.y : e < 6 ? r.z : r.w;
    return __uint_as_float(e % 2 ? word & 0xffff0000u : word << 16);
}

// dinp (N,C) +=; partials (gridDim.x, sums, C) = per-block (dw, db[, dsum]) with sums = 2, or 3 with the column sums
// of dinp; dout/inp (N,C); weight (C); mean/rstd (N). dynamic shared memory: layernorm_backward_smem(C, sums).
// A lane holds its chunks of the row (its part's channels lane * 8 + 256 k, k < LN_BWD_CHUNKS) in registers: all of
// its loads of a row are in flight at once, and the second pass does not read the row again. The shared-memory sums
// limit how many warps an SM holds, so each warp needs many bytes in flight to keep HBM busy; splitting rows above
// 1024 channels over two warps halves each warp's slice, so that as many warps fit at C = 1600 as at C = 800. The two
// warps of a row add their parts of the row means in shared memory, in order. The weight's chunks stay in registers
// across rows. Parts wider than LN_BWD_SEGMENT (C above 2048) go through in segments, and the second pass then reads
// each segment's row and weight again.
// kFp8 (1: E4M3, 2: E5M2): also dinp as written in FP8 (f8, an Fp8Copy: row-major into q (N, C); src/fp8.cuh's
// fp8_transpose then writes the transpose the dweight matmul reads), 8 bytes a lane beside each 16 of bf16
template <int kSplit, int kFp8 = 0>   // ln_bwd_split(C)
__global__ void __launch_bounds__(LN_BWD_WARPS * 32, 5)   // 96 registers: the three sums leave room for 5-6 blocks an SM
layernorm_backward_kernel(floatX* dinp, float* partials, const floatX* dout, const floatX* inp, const floatX* weight,
                          const float* mean, const float* rstd, int N, int C, int sums, const Fp8Copy f8) {
    static_assert(kSplit == 1 || kSplit == 2, "the row parts' barriers are for one or two warps a row");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
    if constexpr (kFp8 != 0) {   // -fp8 runs on sm_89+ only: below, no FP8 conversions to emulate and compile
        __trap();
        return;
    }
#endif
    constexpr int kChunks = LN_BWD_CHUNKS, split = kSplit, rows_per_block = LN_BWD_WARPS / kSplit;
    extern __shared__ float ln_bwd_smem[];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int width = ln_bwd_width(C), part = warp % split, group = warp / split;
    const int c_begin = part * width, c_end = min(C, c_begin + width);
    float* dw_acc = ln_bwd_smem + (size_t)warp * sums * width;
    float* db_acc = dw_acc + width;
    float* dsum_acc = db_acc + width;   // only with sums == 3
    float2* row_parts = reinterpret_cast<float2*>(ln_bwd_smem + (size_t)LN_BWD_WARPS * sums * width);   // [2][LN_BWD_WARPS]
    __shared__ float warp_amax8[LN_BWD_WARPS];   // kFp8
    [[maybe_unused]] const float scale8 = kFp8 ? *f8.scale : 0.0f;
    [[maybe_unused]] float amax8 = 0.0f;
    const int slot_stride = width / X128_SIZE;   // between channel c + k and c + k + 1 of one chunk
    for (int c = lane; c < sums * width; c += 32) dw_acc[c] = 0.0f;  // each warp zeroes its own slice
    __syncwarp();
    const bool one_segment = c_end - c_begin <= LN_BWD_SEGMENT;
    uint4 d[kChunks], x[kChunks], w[kChunks];
    auto chunk = [&](int seg, int k) { return seg + lane * X128_SIZE + k * 32 * X128_SIZE; };
    auto slot = [&](int c, int e) { return e * slot_stride + (c - c_begin) / X128_SIZE; };
    auto load16 = [](const floatX* p) { return *reinterpret_cast<const uint4*>(p); };
    auto load_weight = [&](int seg) {
        #pragma unroll
        for (int k = 0; k < kChunks; k++)
            if (chunk(seg, k) < c_end) w[k] = load16(weight + chunk(seg, k));
    };
    auto load_row = [&](size_t off, int seg) {   // evict-first: read once (with segments, again in the second pass)
        #pragma unroll
        for (int k = 0; k < kChunks; k++)
            if (chunk(seg, k) < c_end) {
                d[k] = __ldcs(reinterpret_cast<const uint4*>(dout + off + chunk(seg, k)));
                x[k] = __ldcs(reinterpret_cast<const uint4*>(inp + off + chunk(seg, k)));
            }
    };
    if (one_segment) load_weight(c_begin);
    int parity = 0;   // row_parts alternates halves: a warp writes one half while its partner may still read the other
    for (int row = blockIdx.x * rows_per_block + group; row < N; row += gridDim.x * rows_per_block, parity ^= 1) {
        size_t off = (size_t)row * C;
        float m = mean[row], s = rstd[row];
        // pass 1: the two row means, and this row's contribution to dw, db
        float dnorm_sum = 0.0f, dnorm_xhat_sum = 0.0f;
        for (int seg = c_begin; seg < c_end; seg += LN_BWD_SEGMENT) {
            if (!one_segment) load_weight(seg);
            load_row(off, seg);
            #pragma unroll
            for (int k = 0; k < kChunks; k++) {
                const int c = chunk(seg, k);
                if (c >= c_end) continue;
                for (int e = 0; e < X128_SIZE; e++) {
                    float xhat = (bf16_at(x[k], e) - m) * s;
                    float dnorm = bf16_at(d[k], e) * bf16_at(w[k], e);
                    dnorm_sum += dnorm;
                    dnorm_xhat_sum += dnorm * xhat;
                    dw_acc[slot(c, e)] += bf16_at(d[k], e) * xhat;  // lane-private channels: no race
                    db_acc[slot(c, e)] += bf16_at(d[k], e);
                }
            }
        }
        dnorm_sum = warp_reduce_sum(dnorm_sum);
        dnorm_xhat_sum = warp_reduce_sum(dnorm_xhat_sum);
        if constexpr (split > 1) {   // the row's parts, added in part order by both warps
            float2* parts = row_parts + parity * LN_BWD_WARPS + group * split;
            if (lane == 0) parts[part] = make_float2(dnorm_sum, dnorm_xhat_sum);
            if (group == 0) named_barrier_sync(1, 64);   // constant ids: for a computed one ptxas reserves all 16
            else named_barrier_sync(2, 64);               // barriers
            dnorm_sum = parts[0].x;
            dnorm_xhat_sum = parts[0].y;
            for (int q = 1; q < split; q++) { dnorm_sum += parts[q].x; dnorm_xhat_sum += parts[q].y; }
        }
        float dnorm_mean = dnorm_sum / C;
        float dnorm_xhat_mean = dnorm_xhat_sum / C;
        // pass 2: the input gradient, from the row in registers
        for (int seg = c_begin; seg < c_end; seg += LN_BWD_SEGMENT) {
            if (!one_segment) { load_weight(seg); load_row(off, seg); }
            uint4 di_in[kChunks];
            #pragma unroll
            for (int k = 0; k < kChunks; k++)
                if (chunk(seg, k) < c_end) di_in[k] = load16(dinp + off + chunk(seg, k));
            #pragma unroll
            for (int k = 0; k < kChunks; k++) {
                const int c = chunk(seg, k);
                if (c >= c_end) continue;
                x128 di;
                for (int e = 0; e < X128_SIZE; e++) {
                    float xhat = (bf16_at(x[k], e) - m) * s;
                    float dnorm = bf16_at(d[k], e) * bf16_at(w[k], e);
                    di.set(e, bf16_at(di_in[k], e) + (dnorm - dnorm_mean - xhat * dnorm_xhat_mean) * s);
                }
                store128(dinp + off + c, di);
                if (sums == 3)   // the bf16 values just written, as a pass over dinp would read them
                    for (int e = 0; e < X128_SIZE; e++) dsum_acc[slot(c, e)] += di.f(e);
                if constexpr (kFp8) {   // the same values in FP8, as a cast of dinp would write them
                    uint16_t pairs[4];
                    for (int e = 0; e < 4; e++)
                        pairs[e] = fp8x2_scaled(di.f(2 * e), di.f(2 * e + 1), scale8, kFp8 == 2 ? __NV_E5M2 : __NV_E4M3, amax8);
                    *reinterpret_cast<uint2*>(f8.q + off + c) = *reinterpret_cast<const uint2*>(pairs);
                }
            }
        }
    }
    if constexpr (kFp8) {
        amax8 = warp_reduce_max(amax8);
        if (lane == 0) warp_amax8[warp] = amax8;
    }
    __syncthreads();  // every warp's slice is complete
    if (kFp8 && threadIdx.x == 0) {   // one atomic a CTA: on the one address, a warp's each would serialise
        for (int w = 1; w < LN_BWD_WARPS; w++) amax8 = fmaxf(amax8, warp_amax8[w]);
        atomicMax(f8.amax, __float_as_uint(amax8));
    }
    for (int c = threadIdx.x; c < sums * C; c += blockDim.x) {   // c = which * C + channel: the slices of its part, in order
        const int which = c / C, p = (c % C) / width, local = c % C - p * width;
        float sum = 0.0f;
        for (int g = 0; g < rows_per_block; g++)
            sum += ln_bwd_smem[(size_t)(g * split + p) * sums * width + which * width + ln_bwd_slot(local, width)];
        partials[(size_t)blockIdx.x * sums * C + c] = sum;
    }
}

// the sums' slices and the row parts' exchange (two halves of LN_BWD_WARPS float2)
inline size_t layernorm_backward_smem(int C, int sums) { return ((size_t)LN_BWD_WARPS * sums * ln_bwd_width(C) + 4 * LN_BWD_WARPS) * sizeof(float); }
// The copy for C (fp8: 0, or 1 E4M3 / 2 E5M2), opted in to the shared memory of `sums` sums (above 48 KiB a kernel
// must opt in).
typedef void (*LayernormBackwardKernel)(floatX*, float*, const floatX*, const floatX*, const floatX*, const float*, const float*, int, int,
                                        int, Fp8Copy);
inline LayernormBackwardKernel layernorm_backward_kernel_for(int C, int sums, int fp8 = 0) {
    const int split = ln_bwd_split(C);
    static const LayernormBackwardKernel kernels[3][2] = {
        {layernorm_backward_kernel<1, 0>, layernorm_backward_kernel<2, 0>},
        {layernorm_backward_kernel<1, 1>, layernorm_backward_kernel<2, 1>},
        {layernorm_backward_kernel<1, 2>, layernorm_backward_kernel<2, 2>}};
    const LayernormBackwardKernel kernel = kernels[fp8][split - 1];
    static size_t opted_in[3][2] = {};
    const size_t smem = layernorm_backward_smem(C, sums);
    if (smem > opted_in[fp8][split - 1]) {
        cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        opted_in[fp8][split - 1] = smem;
    }
    return kernel;
}
// Each warp strides over the rows, so the blocks share the work evenly and a second, partial wave of blocks would
// leave SMs idle: at most the blocks that fit at once, and at most LN_BWD_MAX_BLOCKS.
inline int layernorm_backward_num_blocks(int N, int C, int sums) {
    static int one_wave[4] = {}, one_wave_c[4] = {};   // by sums (2 or 3), for the last C asked
    if (one_wave_c[sums] != C) {
        int per_sm = 0;
        cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, layernorm_backward_kernel_for(C, sums), LN_BWD_WARPS * 32,
                                                                layernorm_backward_smem(C, sums)));
        one_wave[sums] = std::max(1, per_sm) * device_props().multiProcessorCount;
        one_wave_c[sums] = C;
    }
    return std::min({ceil_div(N, LN_BWD_WARPS / ln_bwd_split(C)), LN_BWD_MAX_BLOCKS, one_wave[sums]});
}
// fp32 scratch the backward needs, in floats (with the third sum: the most it takes)
inline size_t layernorm_backward_scratch_floats(int N, int C) {
    return (size_t)std::min(ceil_div(N, LN_BWD_WARPS / ln_bwd_split(C)), LN_BWD_MAX_BLOCKS) * 3 * C;
}

// scratch: layernorm_backward_scratch_floats(N, C) floats. dsum (C) += the column sums of dinp as written, unless null.
// f8: dinp also in FP8 (q 8-byte aligned), unless null. The FP8 copies run as many blocks as the plain
// one (the same grid: each warp's rows, so dweight, dbias and dsum add in the same order).
void layernorm_backward(floatX* dinp, floatX* dweight, floatX* dbias, float* scratch, const floatX* dout, const floatX* inp,
                        const floatX* weight, const float* mean, const float* rstd, int N, int C, cudaStream_t stream,
                        floatX* dsum = nullptr, const Fp8Copy* f8 = nullptr) {
    NVTX_RANGE_FN();
    const int sums = dsum ? 3 : 2, num_blocks = layernorm_backward_num_blocks(N, C, sums), fp8 = f8 ? (f8->e5m2 ? 2 : 1) : 0;
    layernorm_backward_kernel_for(C, sums, fp8)<<<num_blocks, LN_BWD_WARPS * 32, layernorm_backward_smem(C, sums), stream>>>(
        dinp, scratch, dout, inp, weight, mean, rstd, N, C, sums, f8 ? *f8 : Fp8Copy{});
    cudaCheck(cudaGetLastError());
    reduce_partials_add(dweight, dbias, scratch, num_blocks, C, stream, dsum);
}
