/*
flashgpt fused causal self-attention: forward and backward, bf16 in/out, fp32 accumulation.

  forward   out = softmax(scale * Q K^T, causal) V,  scale = 1/sqrt(HS)
            qkv  (B, T, 3, NH, HS) bf16, read in place (the fused QKV matmul output, no permutes)
            out  (B, T, NH, HS)    bf16
            lse  (B, NH, T)        fp32, the natural log of sum_j exp(scale * q_t . k_j) over the
                                   causal row: the only thing the backward needs besides out
  backward  recomputes P = exp(scale * Q K^T - lse) tile by tile (never stores T x T), writes
            dqkv (B, T, 3, NH, HS) bf16 in place.

Forward loop order is FlashAttention-2's: one CTA per (Q tile of kBlockM rows, b, h); each warp
owns 16 * kWarpTilesM query rows and walks the K/V tiles from the diagonal down to key 0, keeping
O, the row max and the row sum in registers (online softmax, normalised once at the end). The
longest Q tiles (the last ones, causal) are launched first.

Paths: sm_80+ mma.sync (m16n8k16 bf16, ldmatrix, cp.async double buffering, 128-byte swizzled
shared memory). Head sizes 64 and 128, any T >= 1, any B * NH. attention_unsupported_reason()
says why anything else is refused.
*/
#pragma once
#include <cmath>
#include "common.cuh"

// ----------------------------------------------------------------------------
// parameters: one struct per direction, shared with the dev/cuda harness

struct AttentionForwardParams {
    const floatX* qkv;   // (B, T, 3, NH, HS)
    floatX* out;         // (B, T, NH, HS)
    float* lse;          // (B, NH, T)
    int B, T, NH, HS;
};

constexpr float kLog2e = 1.4426950408889634f;

// ----------------------------------------------------------------------------
// PTX wrappers for the sm_80 tensor-core path

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

// 16-byte global->shared copy that bypasses L1; src_bytes = 0 zero-fills (rows past T)
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N)); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
// d += a (16x16, row) * b (16x8, col), bf16 inputs, fp32 accumulators
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}
// one MUFU.EX2, whatever the compile flags (exp2f without fast-math is 4 instructions)
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile whose rows hold HS bf16. The chunk index
// is XORed with row % 8, so the 8 row addresses of one ldmatrix (same chunk, 8 consecutive rows) hit 8
// different bank groups instead of one: the 128-byte swizzle, which TMA/wgmma use too.
template <int HS>
__device__ __forceinline__ int swizzle(int row, int chunk) {
    return row * (HS * 2) + ((chunk ^ (row & 7)) << 4);
}

// Copy rows [row0, row0 + rows) of one head's (T, HS) slice of a strided tensor into a swizzled tile;
// rows past T are zero-filled: a zero K row gives a finite score that the causal mask removes, a zero
// V row contributes nothing, whereas garbage could be NaN and 0 * NaN = NaN.
template <int HS, int kThreads>
__device__ __forceinline__ void load_tile_async(uint8_t* tile, const floatX* src, size_t row_stride, int row0, int rows, int T) {
    constexpr int kChunks = HS / 8;
    for (int c = threadIdx.x; c < rows * kChunks; c += kThreads) {
        int r = c / kChunks, ch = c % kChunks, t = row0 + r;
        bool valid = t < T;
        cp_async_16(smem_addr(tile + swizzle<HS>(r, ch)), src + (size_t)(valid ? t : 0) * row_stride + ch * 8, valid);
    }
}

// ----------------------------------------------------------------------------
// forward kernel (sm_80+ mma.sync)
//
// Fragments of mma.m16n8k16 (g = lane / 4, t = lane % 4): an S accumulator tile holds rows g and g + 8,
// keys 2t and 2t + 1; the four threads of a quad share a row, so row max / row sum need two shuffles.
// Two adjacent S tiles converted to bf16 are exactly the A fragment of P for the P V product: P never
// touches shared memory.

template <int HS, int kWarpTilesM, int kNWarps, int kBlockN>
struct ForwardTile {
    static constexpr int kBlockM = kNWarps * 16 * kWarpTilesM;   // query rows per CTA
    static constexpr int kThreads = kNWarps * 32;
    static constexpr int kTileBytes = kBlockN * HS * 2;          // one K or V tile
    // Q tile (reused to stage O) + K and V, double buffered
    static constexpr int kSmemBytes = kBlockM * HS * 2 + 2 * 2 * kTileBytes;
};

template <int HS, int kWarpTilesM, int kNWarps, int kBlockN>
__global__ void __launch_bounds__(kNWarps * 32)
attention_forward_kernel(const AttentionForwardParams p) {
    using Tile = ForwardTile<HS, kWarpTilesM, kNWarps, kBlockN>;
    constexpr int kBlockM = Tile::kBlockM, kThreads = Tile::kThreads;
    constexpr int kMT = kWarpTilesM;      // m16 tiles per warp
    constexpr int kNT = kBlockN / 8;      // n8 tiles of S per warp
    constexpr int kKS = HS / 16;          // k16 steps of Q K^T
    constexpr int kDT = HS / 8;           // n8 tiles of O
    constexpr int kPS = kBlockN / 16;     // k16 steps of P V
    extern __shared__ __align__(1024) uint8_t smem[];
    uint8_t* q_smem = smem;                              // (kBlockM, HS), later O staging
    uint8_t* kv_smem = smem + kBlockM * HS * 2;          // [stage][K, V] (kBlockN, HS) each

    const int T = p.T, NH = p.NH;
    const int b = blockIdx.x / NH, h = blockIdx.x % NH;
    const int m_block = gridDim.y - 1 - blockIdx.y;      // longest (last) Q tiles first
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, tq = lane % 4;
    const size_t row_stride = 3 * (size_t)NH * HS;      // between consecutive t in qkv
    const floatX* q_gl = p.qkv + (size_t)b * T * row_stride + h * HS;
    const floatX* k_gl = q_gl + NH * HS;
    const floatX* v_gl = q_gl + 2 * NH * HS;
    const int m_start = m_block * kBlockM;
    const int warp_row0 = warp * 16 * kMT;               // first row of this warp inside the tile
    // causal: keys up to the last row of this tile, and never past T
    const int n_blocks = min(ceil_div(m_start + kBlockM, kBlockN), ceil_div(T, kBlockN));
    auto k_tile = [&](int stage) { return kv_smem + stage * 2 * Tile::kTileBytes; };
    auto v_tile = [&](int stage) { return kv_smem + stage * 2 * Tile::kTileBytes + Tile::kTileBytes; };

    load_tile_async<HS, kThreads>(q_smem, q_gl, row_stride, m_start, kBlockM, T);
    load_tile_async<HS, kThreads>(k_tile(0), k_gl, row_stride, (n_blocks - 1) * kBlockN, kBlockN, T);
    load_tile_async<HS, kThreads>(v_tile(0), v_gl, row_stride, (n_blocks - 1) * kBlockN, kBlockN, T);
    cp_async_commit();

    uint32_t q_frag[kMT][kKS][4];
    float o_acc[kMT][kDT][4];
    float row_max[kMT][2], row_sum[kMT][2];   // [m tile][row g, row g + 8]; row_sum is this thread's partial
    #pragma unroll
    for (int mt = 0; mt < kMT; mt++) {
        #pragma unroll
        for (int dt = 0; dt < kDT; dt++) o_acc[mt][dt][0] = o_acc[mt][dt][1] = o_acc[mt][dt][2] = o_acc[mt][dt][3] = 0.0f;
        row_max[mt][0] = row_max[mt][1] = -INFINITY;
        row_sum[mt][0] = row_sum[mt][1] = 0.0f;
    }
    // softmax in base 2 with the scale folded in: exp(scale * (s - m)) = exp2(s * c - m * c)
    const float scale_log2 = rsqrtf((float)HS) * kLog2e;

    for (int it = 0; it < n_blocks; it++) {
        const int n_block = n_blocks - 1 - it;     // diagonal (masked) tiles first
        const int stage = it & 1;
        if (it + 1 < n_blocks) {                   // prefetch the next K/V tile into the other stage
            load_tile_async<HS, kThreads>(k_tile(stage ^ 1), k_gl, row_stride, (n_block - 1) * kBlockN, kBlockN, T);
            load_tile_async<HS, kThreads>(v_tile(stage ^ 1), v_gl, row_stride, (n_block - 1) * kBlockN, kBlockN, T);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();   // this stage's K/V (and Q on the first pass) are visible to every warp

        if (it == 0) {     // Q fragments stay in registers for the whole loop
            #pragma unroll
            for (int mt = 0; mt < kMT; mt++)
                #pragma unroll
                for (int ks = 0; ks < kKS; ks++) {
                    int row = warp_row0 + mt * 16 + (lane % 8) + 8 * ((lane / 8) % 2);
                    ldmatrix_x4(q_frag[mt][ks], smem_addr(q_smem + swizzle<HS>(row, 2 * ks + lane / 16)));
                }
        }
        // a warp whose rows all lie above this K tile has nothing to do here (every key masked)
        const bool warp_active = n_block * kBlockN <= m_start + warp_row0 + 16 * kMT - 1;
        if (warp_active) {
            // S = Q K^T  (kMT*16 x kBlockN per warp)
            float s[kMT][kNT][4];
            #pragma unroll
            for (int mt = 0; mt < kMT; mt++)
                #pragma unroll
                for (int nt = 0; nt < kNT; nt++) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.0f;
            const uint8_t* k_s = k_tile(stage);
            #pragma unroll
            for (int ks = 0; ks < kKS; ks++)
                #pragma unroll
                for (int np = 0; np < kNT / 2; np++) {
                    uint32_t kb[4];   // B fragments of key tiles 2np and 2np+1 for this k step
                    int key = np * 16 + (lane % 8) + 8 * (lane / 16);
                    ldmatrix_x4(kb, smem_addr(k_s + swizzle<HS>(key, 2 * ks + (lane / 8) % 2)));
                    #pragma unroll
                    for (int mt = 0; mt < kMT; mt++) {
                        mma_bf16_16816(s[mt][2 * np], q_frag[mt][ks], kb[0], kb[1]);
                        mma_bf16_16816(s[mt][2 * np + 1], q_frag[mt][ks], kb[2], kb[3]);
                    }
                }
            // causal mask, only on tiles that cross this warp's diagonal
            if (n_block * kBlockN + kBlockN - 1 > m_start + warp_row0) {
                #pragma unroll
                for (int mt = 0; mt < kMT; mt++)
                    #pragma unroll
                    for (int nt = 0; nt < kNT; nt++)
                        #pragma unroll
                        for (int e = 0; e < 4; e++) {
                            int row = m_start + warp_row0 + mt * 16 + g + 8 * (e / 2);
                            int key = n_block * kBlockN + nt * 8 + 2 * tq + (e % 2);
                            if (key > row) s[mt][nt][e] = -INFINITY;
                        }
            }
            // online softmax: new row max, rescale O and the sum by alpha, P = exp2(s*c - m*c)
            #pragma unroll
            for (int mt = 0; mt < kMT; mt++)
                #pragma unroll
                for (int half = 0; half < 2; half++) {
                    float mx = row_max[mt][half];
                    #pragma unroll
                    for (int nt = 0; nt < kNT; nt++) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * half], s[mt][nt][2 * half + 1]));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
                    // a row with every key masked so far has max -inf: use 0 so exp2 sees -inf, not NaN
                    const float m_scaled = mx == -INFINITY ? 0.0f : mx * scale_log2;
                    const float alpha = fast_exp2(row_max[mt][half] * scale_log2 - m_scaled);
                    row_max[mt][half] = mx;
                    float sum = 0.0f;
                    #pragma unroll
                    for (int nt = 0; nt < kNT; nt++)
                        #pragma unroll
                        for (int e = 2 * half; e < 2 * half + 2; e++) {
                            s[mt][nt][e] = fast_exp2(s[mt][nt][e] * scale_log2 - m_scaled);
                            sum += s[mt][nt][e];
                        }
                    row_sum[mt][half] = row_sum[mt][half] * alpha + sum;
                    #pragma unroll
                    for (int dt = 0; dt < kDT; dt++) { o_acc[mt][dt][2 * half] *= alpha; o_acc[mt][dt][2 * half + 1] *= alpha; }
                }
            // O += P V: the S accumulators of key tiles 2kk, 2kk+1 become the A fragment of k step kk
            const uint8_t* v_s = v_tile(stage);
            #pragma unroll
            for (int kk = 0; kk < kPS; kk++) {
                uint32_t pa[kMT][4];
                #pragma unroll
                for (int mt = 0; mt < kMT; mt++) {
                    pa[mt][0] = pack_bf16x2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                    pa[mt][1] = pack_bf16x2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                    pa[mt][2] = pack_bf16x2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                    pa[mt][3] = pack_bf16x2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
                }
                #pragma unroll
                for (int dp = 0; dp < kDT / 2; dp++) {
                    uint32_t vb[4];   // B fragments of d tiles 2dp and 2dp+1 (V is [key][d]: transposed load)
                    int key = 16 * kk + (lane % 8) + 8 * ((lane / 8) % 2);
                    ldmatrix_x4_trans(vb, smem_addr(v_s + swizzle<HS>(key, 2 * dp + lane / 16)));
                    #pragma unroll
                    for (int mt = 0; mt < kMT; mt++) {
                        mma_bf16_16816(o_acc[mt][2 * dp], pa[mt], vb[0], vb[1]);
                        mma_bf16_16816(o_acc[mt][2 * dp + 1], pa[mt], vb[2], vb[3]);
                    }
                }
            }
        }
        __syncthreads();   // every warp is done with this stage before the next prefetch overwrites it
    }

    // epilogue: O /= l, LSE = m * scale + log(l); O goes through shared memory for 16-byte stores.
    // Each warp stages only its own rows (whose Q it alone read), so a __syncwarp suffices.
    const float scale = rsqrtf((float)HS);
    #pragma unroll
    for (int mt = 0; mt < kMT; mt++)
        #pragma unroll
        for (int half = 0; half < 2; half++) {
            float l = row_sum[mt][half];
            l += __shfl_xor_sync(0xffffffff, l, 1);
            l += __shfl_xor_sync(0xffffffff, l, 2);
            const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
            const int row = warp_row0 + mt * 16 + g + 8 * half;
            if (tq == 0 && m_start + row < T)
                p.lse[((size_t)b * NH + h) * T + m_start + row] = l > 0.0f ? row_max[mt][half] * scale + logf(l) : -INFINITY;
            #pragma unroll
            for (int dt = 0; dt < kDT; dt++) {
                uint32_t packed = pack_bf16x2(o_acc[mt][dt][2 * half] * inv_l, o_acc[mt][dt][2 * half + 1] * inv_l);
                *reinterpret_cast<uint32_t*>(q_smem + swizzle<HS>(row, dt) + 4 * tq) = packed;
            }
        }
    __syncwarp();
    constexpr int kChunks = HS / 8;
    floatX* out_gl = p.out + ((size_t)b * T * NH + h) * HS;
    for (int c = lane; c < 16 * kMT * kChunks; c += 32) {
        int row = warp_row0 + c / kChunks, ch = c % kChunks;
        if (m_start + row < T)
            *reinterpret_cast<uint4*>(out_gl + (size_t)(m_start + row) * NH * HS + ch * 8) =
                *reinterpret_cast<const uint4*>(q_smem + swizzle<HS>(row, ch));
    }
}

template <int HS, int kWarpTilesM, int kNWarps, int kBlockN>
void launch_attention_forward(const AttentionForwardParams& p, cudaStream_t stream) {
    using Tile = ForwardTile<HS, kWarpTilesM, kNWarps, kBlockN>;
    auto kernel = attention_forward_kernel<HS, kWarpTilesM, kNWarps, kBlockN>;
    static bool smem_set = false;   // raise the dynamic shared memory limit once per instantiation
    if (!smem_set) {
        cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes));
        smem_set = true;
    }
    dim3 grid(p.B * p.NH, ceil_div(p.T, Tile::kBlockM));
    kernel<<<grid, Tile::kThreads, Tile::kSmemBytes, stream>>>(p);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// public API

// nullptr if the shape runs on this GPU, else the reason it does not
inline const char* attention_unsupported_reason(int B, int T, int NH, int HS) {
    if (HS != 64 && HS != 128) return "head size (C / NH) must be 64 or 128";
    if (B < 1 || T < 1 || NH < 1) return "B, T and NH must be at least 1";
    if ((long long)B * NH > 2147483647LL) return "B * NH too large for the grid";
    if (ceil_div(T, 64) > 65535) return "T too large for the grid";
    if (device_props().major < 8) return "needs compute capability 8.0 or newer (bf16 tensor cores)";
    return nullptr;
}

inline void attention_check_supported(int B, int T, int NH, int HS) {
    const char* why = attention_unsupported_reason(B, T, NH, HS);
    if (why) {
        fprintf(stderr, "attention: unsupported shape B=%d T=%d NH=%d HS=%d: %s\n", B, T, NH, HS, why);
        exit(EXIT_FAILURE);
    }
}

inline const char* attention_forward_path_name(int HS) {
    return HS == 64 ? "flash forward, mma.sync sm80, 128x64 tiles, 4 warps (HS=64)"
                    : "flash forward, mma.sync sm80, 128x64 tiles, 8 warps (HS=128)";
}

inline void attention_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH, int HS, cudaStream_t stream) {
    attention_check_supported(B, T, NH, HS);
    AttentionForwardParams p{qkv, out, lse, B, T, NH, HS};
    if (HS == 64) launch_attention_forward<64, 2, 4, 64>(p, stream);
    else launch_attention_forward<128, 1, 8, 64>(p, stream);
}

// ============================================================================
// BACKWARD (below this line)

inline const char* attention_backward_path_name(int HS) { return "not implemented yet"; }
inline size_t attention_backward_scratch_bytes(int B, int T, int NH, int HS) { return 0; }
inline void attention_backward(floatX* dqkv, void* scratch, const floatX* dout, const floatX* qkv, const floatX* out,
                               const float* lse, int B, int T, int NH, int HS, cudaStream_t stream) {
    fprintf(stderr, "attention_backward: not implemented yet\n");
    exit(EXIT_FAILURE);
}
