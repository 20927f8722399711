/*
flashgpt's own GEMM on Hopper (sm_90a), where it does in one kernel what cuBLASLt does in three passes: the MLP's
projection backward through GELU,
  dinp (N, C)   = (dout (N, OC) @ weight (OC, C)) * gelu'(pre)     cuBLASLt: its DGELU epilogue
  gelu_out (N, C) = gelu(pre)                                        the GELU recompute pass (-r 1)
  bias partials = dinp summed over each 64 rows, fp32 (ceil(N/64), C)  bias_backward's pass over dinp
with pre (N, C) the MLP's pre-GELU activation fch, C = 4 * channels. The weight gradient then reads gelu_out, and
reduce_partials_add adds the partials (in order) into the gradient of the bias before the GELU.

The kernel is persistent, warp-specialised and runs in clusters of two CTAs. One TMA producer thread fills a ring of
(128 x 64 dout, 64 x 128 weight) stages with the 128-byte swizzle; the weight is read as it lies, (K, N) with N
contiguous, by wgmma's transposed (MN-major) B. The two CTAs of a cluster compute neighbouring 128-column tiles of
the same rows, so each loads half of the dout rows into both by TMA multicast, and a stage is rewritten only once
both CTAs' consumers have released it. Two consumer warpgroups ping-pong: each computes whole 128 x 128 tiles (two
m64n128k16 wgmmas a k16 step), every other one of the CTA's, and their mainloops take turns, so one warpgroup's
epilogue runs while the other's mainloop keeps the tensor cores busy. Each warpgroup loads its tile's pre from global
memory before the tile's mainloop, so that the loads' latency passes under the wgmmas, and writes gelu(pre) back in
the epilogue, 16 bytes a lane both ways: each warp passes them through 1 KB of shared memory between that and the
accumulators' layout, where a quad of lanes holds a row's 8 columns and global accesses would fill half of each
sector. The epilogue's GELU takes 9 fp32 operations and a tanh per element (gelu.cuh), and the bias sums of a warp's
rows are reduced and scattered over its lanes in 7 shuffles per 8 columns. It stages dinp in shared memory for one
TMA store, which runs on while the next tile's mainloop does; each warp's column sums of its 16 rows meet in shared
memory and leave as one partial row per 64 rows. dev/cuda/RESULTS.md has the designs this one replaced
and what each cost: 128 x 192 tiles, pre staged by TMA with gelu written over it, gelu stored from registers 4 bytes
a lane, the epilogue spread over the next tile's k-blocks, two warpgroups sharing each tile, clusters of 2 x 2
sharing the weight too.

Under -fp8 (DgeluFp8Out) a second kernel, matmul_dgelu_fp8_hopper_kernel, runs the GEMM on FP8: dout in E5M2 (or
E4M3) and the weight's transpose in E4M3, both K-major as FP8 wgmma takes them, 128 of K a stage (the same 16 KB as
bf16's 64), the product scaled back by their scales in the epilogue. The tensor cores accumulate it alone, without
promoting partial sums into fp32 (cuBLASLt's split accumulation, which the other backward matmuls use): a second
accumulator does not fit beside the tile's 128, and dev/cuda/matmul.cu finds the result within an FP8 step of fp64's
on the dequantised operands. It writes the tensors the FP8 matmuls after it read, instead of bf16 dinp and gelu_out:
dinp scaled and saturated to FP8 both row-major (fc's dinp reads it) and transposed (fcw's gradient), and gelu(pre)
transposed in E4M3 (fcprojw's gradient), with dinp's amax (delayed scaling: the scales are the step's, src/fp8.cuh;
gelu's amax is the forward's, whose fc matmul wrote the same values). No cast reads dinp back and nothing recomputes
gelu: 24 bytes a row and column of C fewer than the bf16 outputs and their casts. Its tiles are the transposed
product, (weight^T @ dout^T), so that a thread's accumulators hold neighbouring rows of a column: two of the three
outputs are then written as they lie, two bytes a cvt, and the bias sums need no shuffles but the quad's; pre comes
in by TMA and out of shared memory transposed by ldmatrix, and a thread of the producer warpgroup per consumer
warpgroup loads it and stores the outputs by TMA. In the bf16 kernel's layout two of the outputs would need byte-wise
transposes and the sums a butterfly of shuffles per 8 columns; here only the row-major dinp8 is scattered byte by byte.
*/
#pragma once
#include <type_traits>
#include <cuda_fp8.h>
#include "ptx.cuh"
#include "gelu.cuh"

constexpr int kDgeluBM = 128, kDgeluBN = 128, kDgeluBK = 64, kDgeluThreads = 384, kDgeluPartialRows = 64, kDgeluCluster = 2;

// shared memory: the ring, then per consumer warpgroup the dinp staging (128 x 128: four boxes of 64 x 64) and its
// warps' column sums (per 64-row half), then per consumer warp a 16 x 32 bf16 transpose of pre and gelu
struct DgeluTile {
    static constexpr int kStageA = kDgeluBM * kDgeluBK * 2, kStageB = kDgeluBN * kDgeluBK * 2;
    static constexpr int kStageOut = kDgeluBM * kDgeluBN * 2;
    static constexpr int kSums = 2 * 4 * kDgeluBN * 4;
    static constexpr int kTranspose = 16 * 32 * 2;
    static constexpr int kStages = 4;
    static constexpr int kSmemBytes = 1024 + kStages * (kStageA + kStageB) + 2 * (kStageOut + kSums) + 8 * kTranspose + 2 * kStages * 8;
};

// the FP8 outputs (kFp8): dinp8 (N, C) and dinp8T (C, N) = saturate(dinp * *dinp_scale) in E5M2 or E4M3, gelu8T
// (C, N) = saturate(gelu(pre) * *gelu_scale) in E4M3 (may be null), dinp's amax (unscaled, as float bits) atomically
// into *dinp_amax. N % 16 == 0.
// The FP8 operands: dout8 (N, OC) and weight8T (C, OC), in the gradient format (dinp's) and E4M3, with their
// inverse scales.
struct DgeluFp8Out {
    uint8_t *dinp8, *dinp8T, *gelu8T;
    const float *dinp_scale, *gelu_scale;
    unsigned int* dinp_amax;
    bool dinp_e5m2;
    const uint8_t *dout8, *weight8T;
    const float *dout_scale_inv, *weight_scale_inv;
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// a consumer warpgroup's mainloop over one tile's k blocks (both kernels): each stage, once full, gets its wgmmas
// (issue(s): one commit group), and the stage before it is released once those are done; returns the last stage,
// its wgmmas still in flight
template <int kStages, class Issue, class Release>
__device__ __forceinline__ int dgelu_mainloop(uint64_t* full, int it0, int k_blocks, const Issue& issue, const Release& release) {
    int prev = -1;
    for (int kb = 0, it = it0; kb < k_blocks; kb++, it++) {
        const int s = it % kStages;
        mbar_wait(&full[s], (it / kStages) & 1);
        issue(s);
        wgmma_commit();
        wgmma_wait<1>();   // the previous stage's wgmmas are done: release it
        if (prev >= 0) release(prev);
        prev = s;
    }
    return prev;
}
#endif

// map_dout: (OC, N) boxes of 64 x 64; map_weight: (C, OC) boxes of 64 x 64, two a stage; map_dinp: (C, N) boxes of
// 64 x 64; pre, gelu_out (N, C), gelu_out may be null. The CTAs pair up in clusters of two: pair tile t covers rows
// 128 (t / (C / 256)) and columns 256 (t % (C / 256)), CTA rank r the 128 columns at + 128 r. Both need the same dout
// rows, so each loads 64 of them into both (TMA multicast): a quarter less traffic out of L2 per tile than alone.
// Consumer warpgroup w takes the CTA's tiles w, w + 2, ...
__global__ void __launch_bounds__(kDgeluThreads, 1)
matmul_dgelu_hopper_kernel(const __grid_constant__ CUtensorMap map_dout, const __grid_constant__ CUtensorMap map_weight,
                           const __grid_constant__ CUtensorMap map_dinp, const floatX* pre, floatX* gelu_out, float* bias_partials,
                           int N, int C, int OC) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using Tile = DgeluTile;
    constexpr int kBN = kDgeluBN;
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    uint8_t* tiles_a = smem;
    uint8_t* tiles_b = tiles_a + Tile::kStages * Tile::kStageA;
    uint8_t* staging = tiles_b + Tile::kStages * Tile::kStageB;
    float* warp_sums = reinterpret_cast<float*>(staging + 2 * Tile::kStageOut);
    uint8_t* transposes = reinterpret_cast<uint8_t*>(warp_sums + 2 * Tile::kSums / 4);
    uint64_t* full = reinterpret_cast<uint64_t*>(transposes + 8 * Tile::kTranspose);
    uint64_t* empty = full + Tile::kStages;
    if (threadIdx.x == 0) {
        // empty: the consuming warpgroup's four warps in both CTAs (each stage's dout rows come from both)
        for (int s = 0; s < Tile::kStages; s++) { mbar_init(&full[s], 1); mbar_init(&empty[s], 4 * kDgeluCluster); }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    cluster_sync();   // the peer's barriers exist before anything reaches them
    const int rank = cluster_cta_rank(), cluster = blockIdx.x / kDgeluCluster, num_clusters = gridDim.x / kDgeluCluster;
    constexpr int kBK = kDgeluBK;
    const int n_pairs = C / (kDgeluCluster * kBN), num_tiles = ceil_div(N, kDgeluBM) * n_pairs, k_blocks = ceil_div(OC, kBK);
    auto tile_origin = [&](int t, int& m0, int& n0) { m0 = (t / n_pairs) * kDgeluBM; n0 = ((t % n_pairs) * kDgeluCluster + rank) * kBN; };
    const int wg = threadIdx.x / 128;
    if (wg == 0) {   // ---- producer: one thread loads the ring, tile after tile
        setmaxnreg_dec<24>();
        if (threadIdx.x == 0) {
            int it = 0;
            for (int t = cluster; t < num_tiles; t += num_clusters) {
                int m0, n0;
                tile_origin(t, m0, n0);
                for (int kb = 0; kb < k_blocks; kb++, it++) {
                    const int s = it % Tile::kStages;
                    mbar_wait(&empty[s], ((it / Tile::kStages) & 1) ^ 1);   // a fresh barrier passes parity 1 at once
                    mbar_arrive_expect_tx(&full[s], Tile::kStageA + Tile::kStageB);   // the peer's half of dout included
                    tma_load_2d_multicast(tiles_a + s * Tile::kStageA + rank * 8192, &map_dout, &full[s], 0x3, kb * kBK, m0 + 64 * rank);
                    for (int blk = 0; blk < kBN / 64; blk++)
                        tma_load_2d(tiles_b + s * Tile::kStageB + blk * 8192, &map_weight, &full[s], n0 + 64 * blk, kb * kBK);
                }
            }
        }
        cluster_sync();   // matches the consumers' (see the end)
        return;
    }
    // ---- consumers: warpgroup cwg owns whole tiles, every other one of the CTA's
    setmaxnreg_inc<240>();
    const int cwg = wg - 1, tid = threadIdx.x % 128, lane = threadIdx.x % 32, warp = tid / 32, g = lane / 4, tq = lane % 4;
    uint8_t* stage_out = staging + cwg * Tile::kStageOut;
    float* sums = warp_sums + cwg * Tile::kSums / 4;
    // this warp's 16 rows x 32 columns: pre and gelu go through it between the accumulators' layout (a quad of lanes
    // holds 8 columns of a row, 4 bytes each) and 16 bytes a lane, so that global loads and stores fill whole sectors.
    // Row r's 16-byte chunk c lies at chunk c ^ ((r / 2) % 4): conflict-free both ways.
    uint8_t* transpose = transposes + (cwg * 4 + warp) * Tile::kTranspose;
    auto chunk_at = [](int r, int c) { return r * 64 + ((c ^ (r / 2)) & 3) * 16; };
    float acc[2][kBN / 2];   // rows 0-63 and 64-127 of the tile
    auto release = [&](int s) {   // after this warp's wgmma_wait: both CTAs' copies of the stage are rewritten together
        if (lane == 0) {
            mbar_arrive(&empty[s]);
            mbar_arrive_remote(&empty[s], rank ^ 1);
        }
    };
    int tile_it = cwg;
    for (int t = cluster + cwg * num_clusters; t < num_tiles; t += 2 * num_clusters, tile_it += 2) {
        int m0, n0;
        tile_origin(t, m0, n0);
        #pragma unroll
        for (int i = 0; i < kBN / 2; i++) { acc[0][i] = 0.0f; acc[1][i] = 0.0f; }
        // the tile's pre, 8 columns a lane (rows 64 mh + 16 warp + g (+ 8), columns 32 q + 8 tq ..), loaded before the
        // mainloop so that their latency passes under it
        uint4 pre_tile[2][kBN / 32][2];
        #pragma unroll
        for (int mh = 0; mh < 2; mh++)
            #pragma unroll
            for (int q = 0; q < kBN / 32; q++)
                #pragma unroll
                for (int half = 0; half < 2; half++) {
                    const int row = min(m0 + mh * 64 + warp * 16 + g + 8 * half, N - 1);
                    pre_tile[mh][q][half] = *reinterpret_cast<const uint4*>(pre + (size_t)row * C + n0 + 32 * q + 8 * tq);
                }
        // the mainloops take turns, tile by tile: a barrier's parity tells only its last two phases apart, so this
        // warpgroup waits on its tile's stages only once the other has waited on its own tile's, one phase earlier
        if (tile_it > 0) named_barrier_sync(3 + cwg, 256);
        const int prev = dgelu_mainloop<Tile::kStages>(full, tile_it * k_blocks, k_blocks, [&](int s) {
            const uint8_t* a = tiles_a + s * Tile::kStageA;
            const uint8_t* b = tiles_b + s * Tile::kStageB;
            wgmma_fence();
            #pragma unroll
            for (int ks = 0; ks < 4; ks++) {   // A: k step ks at +32 bytes of each row; B: at +16 rows
                const uint64_t desc_b = wgmma_desc(b + ks * 16 * 128, 8192);
                wgmma_ss_m64n128k16_b<1>(acc[0], wgmma_desc(a + 32 * ks), desc_b);
                wgmma_ss_m64n128k16_b<1>(acc[1], wgmma_desc(a + 64 * 128 + 32 * ks), desc_b);
            }
        }, release);
        if (t + num_clusters < num_tiles) named_barrier_arrive(3 + (cwg ^ 1), 256);   // the next tile's turn
        wgmma_wait<0>();
        release(prev);
        // epilogue, while the other warpgroup's mainloop runs: rows r and r + 8 of this warp in each 64-row half,
        // columns 8 j + 2 tq, + 1
        if (tid == 0) bulk_wait_read<0>();   // this warpgroup's previous store has read the staging ...
        named_barrier_sync(1 + cwg, 128);   // ... and every warp has read the previous tile's sums
        #pragma unroll
        for (int mh = 0; mh < 2; mh++) {
            const int row_lo = m0 + mh * 64 + warp * 16 + g;   // this thread's first row of the output
            const uint4 (&pre8)[kBN / 32][2] = pre_tile[mh];
            #pragma unroll
            for (int q = 0; q < kBN / 32; q++) {   // columns 32 q ..: the accumulators of j = 4 q .. 4 q + 3
                __syncwarp();   // the previous chunk's gelu has left the transpose
                #pragma unroll
                for (int half = 0; half < 2; half++)
                    *reinterpret_cast<uint4*>(transpose + chunk_at(g + 8 * half, tq)) = pre8[q][half];
                __syncwarp();
                float part[8];   // this lane's two rows summed, at columns 32 q + 8 jj + 2 tq + e: part[2 jj + e]
                #pragma unroll
                for (int jj = 0; jj < 4; jj++) {
                    const int j = 4 * q + jj, c = 8 * j + 2 * tq;   // the tile's column
                    float sum0 = 0.0f, sum1 = 0.0f;
                    #pragma unroll
                    for (int half = 0; half < 2; half++) {
                        const int rr = mh * 64 + warp * 16 + g + 8 * half;   // the tile's row
                        const int at = (c / 64) * 16384 + rr * 128 + (((c % 64) / 8) ^ (rr % 8)) * 16 + (c % 8) * 2;
                        // pre at this lane's two columns, read from where a lane of its quad wrote it; gelu
                        // goes back to the same place (each lane reads its own 4 bytes before it writes them)
                        __nv_bfloat162* pair = reinterpret_cast<__nv_bfloat162*>(transpose + chunk_at(g + 8 * half, jj) + 4 * tq);
                        const __nv_bfloat162 pre2 = *pair;
                        float y0, y1, dy0, dy1;
                        gelu_and_grad(__bfloat162float(pre2.x), y0, dy0);
                        gelu_and_grad(__bfloat162float(pre2.y), y1, dy1);
                        const float d0 = acc[mh][4 * j + 2 * half] * dy0, d1 = acc[mh][4 * j + 2 * half + 1] * dy1;
                        *reinterpret_cast<__nv_bfloat162*>(stage_out + at) = __floats2bfloat162_rn(d0, d1);
                        *pair = __floats2bfloat162_rn(y0, y1);
                        if (row_lo + 8 * half < N) {
                            sum0 += d0;
                            sum1 += d1;
                        }
                    }
                    part[2 * jj] = sum0;
                    part[2 * jj + 1] = sum1;
                }
                // the sums over the warp's 8 row pairs (lane bits 2-4), reduced and scattered: each round a lane keeps
                // half of what it holds and adds the partner's copy of that half, so 7 shuffles leave part g on lane g
                #pragma unroll
                for (int width = 4, bit = 16; width >= 1; width /= 2, bit /= 2) {
                    const bool upper = lane & bit;
                    #pragma unroll
                    for (int i = 0; i < width; i++) {
                        const float send = upper ? part[i] : part[i + width];
                        part[i] = (upper ? part[i + width] : part[i]) + __shfl_xor_sync(0xffffffffu, send, bit);
                    }
                }
                sums[(mh * 4 + warp) * kBN + 32 * q + 8 * (g / 2) + 2 * tq + g % 2] = part[0];
                if (gelu_out) {
                    __syncwarp();   // the quad's gelu pairs are in the transpose
                    #pragma unroll
                    for (int half = 0; half < 2; half++)
                        if (row_lo + 8 * half < N)
                            *reinterpret_cast<uint4*>(gelu_out + (size_t)(row_lo + 8 * half) * C + n0 + 32 * q + 8 * tq) =
                                *reinterpret_cast<const uint4*>(transpose + chunk_at(g + 8 * half, tq));
                }
            }
        }
        fence_proxy_async();   // the staging's writes are visible to the TMA ...
        named_barrier_sync(1 + cwg, 128);   // ... from every thread of the warpgroup, and so are the sums
        if (tid == 0) {   // the staging: column block cb of rows 64 mh.. at (cb * 2 + mh) * 8 KB
            for (int cb = 0; cb < kBN / 64; cb++)
                for (int mh = 0; mh < 2; mh++)
                    tma_store_2d(&map_dinp, stage_out + cb * 16384 + mh * 8192, n0 + 64 * cb, m0 + 64 * mh);
            bulk_commit();
        }
        {   // each 64 rows' sums, its four warps added in order: threads 0-63 the first half, 64-127 the second
            const int mh = tid / 64, c2 = 2 * (tid % 64);
            if (m0 + 64 * mh < N) {
                float2 s = *reinterpret_cast<const float2*>(sums + mh * 4 * kBN + c2);
                #pragma unroll
                for (int w = 1; w < 4; w++) {
                    const float2 sw = *reinterpret_cast<const float2*>(sums + (mh * 4 + w) * kBN + c2);
                    s.x += sw.x;
                    s.y += sw.y;
                }
                *reinterpret_cast<float2*>(bias_partials + (size_t)(m0 / 64 + mh) * C + n0 + c2) = s;
            }
        }
    }
    if (tid == 0) bulk_wait<0>();   // every store done before the kernel ends
    cluster_sync();   // no CTA leaves while its peer may still write into its ring or arrive on its barriers
#endif
}

// ---------------------------------------------------------------------------------------------------------------------
// -fp8: the same product on FP8 operands, computed transposed. Each consumer warpgroup's tile is 128 columns of C (the
// wgmma's M: the weight's transpose, two m64 halves) by 128 rows of N (its N: dout), so a thread's accumulators hold
// pairs of neighbouring rows of one column: one cvt makes 2 bytes of the transposed outputs (dinp8T, gelu8T) as they
// lie in memory, and the bias sums run along a thread's own registers. pre arrives by TMA (rows past N as zeros,
// whose products are zeros too) and leaves shared memory through ldmatrix.trans in that layout; its buffer then holds
// the transposed outputs, and the row-major dinp8 is scattered byte by byte into a second buffer. A thread of the
// producer warpgroup per consumer warpgroup loads its pre and stores its outputs by TMA, so the consumers wait on
// neither; the mainloops ping-pong as in the bf16 kernel.
struct Dgelu8Tile {
    static constexpr int kStageA = 128 * 128, kStageB = 128 * 128;   // the weight's transpose, dout: 128 rows of 128 k
    static constexpr int kPre = 128 * 128 * 2;   // per consumer warpgroup: pre (two boxes of 64 columns x 128 rows), then
                                                 // per 64 columns dinp8T's and gelu8T's 64 x 128 bytes
    static constexpr int kRowOut = 128 * 128;    // per consumer warpgroup: dinp8's 128 rows x 128 bytes
    static constexpr int kStages = 4;
    static constexpr int kSmemBytes = 1024 + kStages * (kStageA + kStageB) + 2 * (kPre + kRowOut) + (2 * kStages + 4) * 8;
    static_assert(kSmemBytes <= 227 * 1024, "shared memory");
};

// map_weight8T: (OC, C) bytes in boxes of 128 x 128; map_dout8: (OC, N) bytes, boxes of 128 x 64 (each CTA of a pair
// loads half of the rows into both); map_pre: (C, N) bf16, boxes of 64 x 128; map_dinp8: (C, N) bytes, boxes of
// 128 x 128; map_dinp8T, map_gelu8T: (N, C) bytes, boxes of 128 x 64. Stages past OC read as zeros. Tiles as the bf16
// kernel's: pair tile t at rows 128 (t / (C / 256)), CTA rank r at columns 256 (t % (C / 256)) + 128 r.
template <bool kE5M2>   // dout8 and dinp in E5M2, else E4M3
__global__ void __launch_bounds__(kDgeluThreads, 1)
matmul_dgelu_fp8_hopper_kernel(const __grid_constant__ CUtensorMap map_weight8T, const __grid_constant__ CUtensorMap map_dout8,
                               const __grid_constant__ CUtensorMap map_pre, const __grid_constant__ CUtensorMap map_dinp8,
                               const __grid_constant__ CUtensorMap map_dinp8T, const __grid_constant__ CUtensorMap map_gelu8T,
                               float* bias_partials, int N, int C, int OC, const DgeluFp8Out f8) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using Tile = Dgelu8Tile;
    constexpr int kStages = Tile::kStages, kBK = 128;
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    uint8_t* tiles_w = smem;                                       // A: the weight's transpose
    uint8_t* tiles_d = tiles_w + kStages * Tile::kStageA;          // B: dout
    uint8_t* pre_bufs = tiles_d + kStages * Tile::kStageB;         // [consumer warpgroup]
    uint8_t* row_bufs = pre_bufs + 2 * Tile::kPre;                 // [consumer warpgroup]
    uint64_t* full = reinterpret_cast<uint64_t*>(row_bufs + 2 * Tile::kRowOut);
    uint64_t* empty = full + kStages;
    uint64_t* pre_full = empty + kStages;   // [consumer warpgroup]: its tile's pre has landed (and its last stores read the buffers)
    uint64_t* out_full = pre_full + 2;      // [consumer warpgroup]: its tile's outputs are staged
    if (threadIdx.x == 0) {
        for (int s = 0; s < kStages; s++) { mbar_init(&full[s], 1); mbar_init(&empty[s], 4 * kDgeluCluster); }
        for (int w = 0; w < 2; w++) { mbar_init(&pre_full[w], 1); mbar_init(&out_full[w], 128); }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    cluster_sync();   // the peer's barriers exist before anything reaches them
    const int rank = cluster_cta_rank(), cluster = blockIdx.x / kDgeluCluster, num_clusters = gridDim.x / kDgeluCluster;
    const int n_pairs = C / (kDgeluCluster * 128), num_tiles = ceil_div(N, 128) * n_pairs, k_blocks = ceil_div(OC, kBK);
    auto tile_origin = [&](int t, int& m0, int& n0) { m0 = (t / n_pairs) * 128; n0 = ((t % n_pairs) * kDgeluCluster + rank) * 128; };
    const int wg = threadIdx.x / 128;
    if (wg == 0) {
        setmaxnreg_dec<24>();
        if (threadIdx.x == 0) {   // the ring, tile after tile
            int it = 0;
            for (int t = cluster; t < num_tiles; t += num_clusters) {
                int m0, n0;
                tile_origin(t, m0, n0);
                for (int kb = 0; kb < k_blocks; kb++, it++) {
                    const int s = it % kStages;
                    mbar_wait(&empty[s], ((it / kStages) & 1) ^ 1);
                    mbar_arrive_expect_tx(&full[s], Tile::kStageA + Tile::kStageB);   // the peer's half of dout included
                    tma_load_2d(tiles_w + s * Tile::kStageA, &map_weight8T, &full[s], kb * kBK, n0);
                    tma_load_2d_multicast(tiles_d + s * Tile::kStageB + rank * 8192, &map_dout8, &full[s], 0x3, kb * kBK, m0 + 64 * rank);
                }
            }
        } else if (threadIdx.x == 32 || threadIdx.x == 64) {   // consumer warpgroup cwg's pre in, outputs out
            const int cwg = threadIdx.x / 32 - 1;
            uint8_t* pre_buf = pre_bufs + cwg * Tile::kPre;
            uint8_t* row_buf = row_bufs + cwg * Tile::kRowOut;
            int it = 0;
            for (int t = cluster + cwg * num_clusters; t < num_tiles; t += 2 * num_clusters, it++) {
                int m0, n0;
                tile_origin(t, m0, n0);
                bulk_wait_read<0>();   // the previous tile's stores have read both buffers
                mbar_arrive_expect_tx(&pre_full[cwg], Tile::kPre);
                tma_load_2d(pre_buf, &map_pre, &pre_full[cwg], n0, m0);
                tma_load_2d(pre_buf + Tile::kPre / 2, &map_pre, &pre_full[cwg], n0 + 64, m0);
                mbar_wait(&out_full[cwg], it & 1);
                tma_store_2d(&map_dinp8, row_buf, n0, m0);   // rows past N are clipped
                for (int h = 0; h < 2; h++) {
                    tma_store_2d(&map_dinp8T, pre_buf + h * 16384, m0, n0 + 64 * h);
                    if (f8.gelu8T) tma_store_2d(&map_gelu8T, pre_buf + h * 16384 + 8192, m0, n0 + 64 * h);
                }
                bulk_commit();
            }
            bulk_wait<0>();   // every store done before the kernel ends
        }
        cluster_sync();   // matches the consumers' (see the end)
        return;
    }
    // ---- consumers: warpgroup cwg owns whole tiles, every other one of the CTA's
    setmaxnreg_inc<240>();
    const int cwg = wg - 1, tid = threadIdx.x % 128, lane = threadIdx.x % 32, warp = tid / 32, g = lane / 4, tq = lane % 4;
    uint8_t* pre_buf = pre_bufs + cwg * Tile::kPre;
    uint8_t* row_buf = row_bufs + cwg * Tile::kRowOut;
    float acc[2][64];   // columns 64 h + 16 warp + g (+ 8) of the tile, rows 8 j + 2 tq (+ 1)
    auto release = [&](int s) {   // after this warp's wgmma_wait: both CTAs' copies of the stage are rewritten together
        if (lane == 0) {
            mbar_arrive(&empty[s]);
            mbar_arrive_remote(&empty[s], rank ^ 1);
        }
    };
    // the step's scales, folded: e = acc * gelu'(pre) * k_scale is dinp * dinp_scale, what the cast takes; the amax and
    // the bias sums divide by dinp_scale once at the end; gelu(pre) * gelu_scale = pre * (1 + t) * gelu_scale / 2
    const float dinp_scale = *f8.dinp_scale, gelu_half = f8.gelu8T ? 0.5f * *f8.gelu_scale : 0.0f;
    const GeluGradScale k = gelu_grad_scale(*f8.dout_scale_inv * *f8.weight_scale_inv * dinp_scale);
    constexpr __nv_fp8_interpretation_t dinp_format = kE5M2 ? __NV_E5M2 : __NV_E4M3;
    float amax = 0.0f;   // of e
    int tile_it = cwg, my_it = 0;
    for (int t = cluster + cwg * num_clusters; t < num_tiles; t += 2 * num_clusters, tile_it += 2, my_it++) {
        int m0, n0;
        tile_origin(t, m0, n0);
        #pragma unroll
        for (int i = 0; i < 64; i++) { acc[0][i] = 0.0f; acc[1][i] = 0.0f; }
        // the mainloops take turns, tile by tile (the bf16 kernel's reason)
        if (tile_it > 0) named_barrier_sync(3 + cwg, 256);
        const int prev = dgelu_mainloop<kStages>(full, tile_it * k_blocks, k_blocks, [&](int s) {
            const uint64_t desc_w = wgmma_desc(tiles_w + s * Tile::kStageA), desc_d = wgmma_desc(tiles_d + s * Tile::kStageB);
            wgmma_fence();
            #pragma unroll
            for (int ks = 0; ks < 4; ks++) {   // k step ks at +32 bytes of each row (2 in the descriptors' 16-byte units)
                wgmma_ss_m64n128k32_fp8<kE5M2>(acc[0], desc_w + 2 * ks, desc_d + 2 * ks);
                wgmma_ss_m64n128k32_fp8<kE5M2>(acc[1], desc_w + 64 * 128 / 16 + 2 * ks, desc_d + 2 * ks);
            }
        }, release);
        if (t + num_clusters < num_tiles) named_barrier_arrive(3 + (cwg ^ 1), 256);   // the next tile's turn
        wgmma_wait<0>();
        release(prev);
        // epilogue, while the other warpgroup's mainloop runs
        mbar_wait(&pre_full[cwg], my_it & 1);
        float sums[2][2][2];   // [h][half][64-row group]: e summed over this thread's rows
        #pragma unroll
        for (int h = 0; h < 2; h++) {   // columns 64 h ..: pre's box h, then dinp8T's and gelu8T's
            uint8_t* box = pre_buf + h * 16384;
            uint32_t pre2[2][16];   // [half][j]: pre at rows 8 j + 2 tq, + 1 of column 64 h + 16 warp + 8 half + g, bf16 pairs
            #pragma unroll
            for (int half = 0; half < 2; half++)
                #pragma unroll
                for (int jq = 0; jq < 4; jq++) {   // four 8 x 8 matrices, rows 8 j .. 8 j + 7 (j = 4 jq ..): lane l gives row l % 8 of matrix l / 8
                    const int row = 32 * jq + lane, chunk = 2 * warp + half;
                    uint32_t r[4];
                    ldmatrix_x4_trans(r, smem_addr(box + row * 128 + ((chunk ^ (row % 8)) * 16)));
                    #pragma unroll
                    for (int i = 0; i < 4; i++) pre2[half][4 * jq + i] = r[i];
                }
            named_barrier_sync(1 + cwg, 128);   // the warpgroup has read box h: its outputs go there
            uint8_t* out_t = box;   // dinp8T's 64 columns x 128 rows, then gelu8T's, 128-byte swizzle
            #pragma unroll
            for (int half = 0; half < 2; half++) {
                const int col = 16 * warp + 8 * half + g;   // within box h
                const int c = 64 * h + col;                 // within the tile
                sums[h][half][0] = sums[h][half][1] = 0.0f;
                #pragma unroll
                for (int j = 0; j < 16; j++) {
                    const uint32_t p = pre2[half][j];
                    const float x[2] = {__uint_as_float(p << 16), __uint_as_float(p & 0xffff0000u)};
                    float e[2], y[2];
                    #pragma unroll
                    for (int i = 0; i < 2; i++) {
                        const float x2 = x[i] * x[i], th = gelu_tanh(x[i], x2);
                        e[i] = acc[h][4 * j + 2 * half + i] * gelu_grad_from_tanh(x[i], x2, th, k);
                        y[i] = x[i] * fmaf(gelu_half, th, gelu_half);
                    }
                    const int r = 8 * j + 2 * tq;   // the tile's row of e[0]; e[1] is row r + 1
                    const __nv_fp8x2_storage_t dq = __nv_cvt_float2_to_fp8x2(make_float2(e[0], e[1]), __NV_SATFINITE, dinp_format);
                    const int at = col * 128 + (((r / 16) ^ (col % 8)) * 16) + r % 16;   // dinp8T: column col, rows r, r + 1
                    *reinterpret_cast<__nv_fp8x2_storage_t*>(out_t + at) = dq;
                    if (f8.gelu8T)
                        *reinterpret_cast<__nv_fp8x2_storage_t*>(out_t + 8192 + at) =
                            __nv_cvt_float2_to_fp8x2(make_float2(y[0], y[1]), __NV_SATFINITE, __NV_E4M3);
                    // dinp8, row-major: rows r and r + 1 of column c, in the 128-byte swizzle (conflict-free: a quad's
                    // rows fall in four chunks)
                    row_buf[r * 128 + (((c / 16) ^ (r % 8)) * 16) + c % 16] = (uint8_t)dq;
                    row_buf[(r + 1) * 128 + (((c / 16) ^ ((r + 1) % 8)) * 16) + c % 16] = (uint8_t)(dq >> 8);
                    sums[h][half][j / 8] += e[0];
                    sums[h][half][j / 8] += e[1];
                    amax = fmaxf(amax, fmaxf(fabsf(e[0]), fabsf(e[1])));
                }
            }
        }
        fence_proxy_async();          // the staged outputs are visible to the TMA ...
        mbar_arrive(&out_full[cwg]);  // ... once the storing thread has seen all 128 arrivals
        // the bias partials: each 64 rows' sums over the quad (a fixed order), one row of partials per 64 rows
        const float unscale = 1.0f / dinp_scale;
        #pragma unroll
        for (int h = 0; h < 2; h++)
            #pragma unroll
            for (int half = 0; half < 2; half++)
                #pragma unroll
                for (int grp = 0; grp < 2; grp++) {
                    float v = sums[h][half][grp];
                    v += __shfl_xor_sync(0xffffffffu, v, 1);
                    v += __shfl_xor_sync(0xffffffffu, v, 2);
                    if (tq == 0 && m0 + 64 * grp < N)
                        bias_partials[(size_t)(m0 / 64 + grp) * C + n0 + 64 * h + 16 * warp + 8 * half + g] = v * unscale;
                }
    }
    #pragma unroll
    for (int bit = 16; bit >= 1; bit /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, bit));
    if (lane == 0) atomicMax(f8.dinp_amax, __float_as_uint(amax / dinp_scale));
    cluster_sync();   // no CTA leaves while its peer may still write into its ring or arrive on its barriers
#endif
}

inline int matmul_dgelu_partial_rows(int N) { return ceil_div(N, kDgeluPartialRows); }
// fp8: on FP8 operands, whose stages past OC read as zeros, and N % 16 == 0 (FP8 dinp's transposed rows)
inline bool matmul_dgelu_hopper_supported(int N, int C, int OC, bool fp8 = false) {
    return C % (kDgeluCluster * kDgeluBN) == 0 && OC % (fp8 ? 16 : kDgeluBK) == 0 && (!fp8 || N % 16 == 0) && hopper_path_available();
}

// dinp (N, C) = (dout (N, OC) @ weight (OC, C)) * gelu'(pre (N, C)); gelu_out (N, C) = gelu(pre) unless null;
// bias_partials (matmul_dgelu_partial_rows(N), C) fp32 = dinp's sums over each 64 rows. f8 (-fp8): the product of
// its FP8 operands instead (dout and weight unused), dinp and gelu there in FP8 (dinp and gelu_out unused). False
// (nothing run) where matmul_dgelu_hopper_supported is not.
bool matmul_backward_dgelu_hopper(floatX* dinp, floatX* gelu_out, float* bias_partials, const floatX* dout, const floatX* weight,
                                  const floatX* pre, int N, int C, int OC, cudaStream_t stream, const DgeluFp8Out* f8 = nullptr) {
    if (!matmul_dgelu_hopper_supported(N, C, OC, f8)) return false;
    NVTX_RANGE_FN();
    const int pair_tiles = ceil_div(N, kDgeluBM) * (C / (kDgeluCluster * kDgeluBN));
    const int clusters = std::min(pair_tiles, device_props().multiProcessorCount / kDgeluCluster);
    const cuuint64_t dims_dout[2] = {(cuuint64_t)OC, (cuuint64_t)N}, dims_out[2] = {(cuuint64_t)C, (cuuint64_t)N};
    if (f8) {
        const cuuint64_t dims_weight8[2] = {(cuuint64_t)OC, (cuuint64_t)C}, dims_t[2] = {(cuuint64_t)N, (cuuint64_t)C};
        const cuuint64_t stride_oc8[1] = {(cuuint64_t)OC}, stride_c8[1] = {(cuuint64_t)C}, stride_n8[1] = {(cuuint64_t)N};
        const cuuint64_t stride_pre[1] = {(cuuint64_t)C * 2};
        const cuuint32_t box_128x64[2] = {128, 64}, box_128x128[2] = {128, 128}, box_64x128[2] = {64, 128};
        const CUtensorMap map_weight8T = swizzled_tensor_map(CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, f8->weight8T, dims_weight8, stride_oc8, box_128x128);
        const CUtensorMap map_dout8 = swizzled_tensor_map(CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, f8->dout8, dims_dout, stride_oc8, box_128x64);
        const CUtensorMap map_pre = swizzled_tensor_map(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, pre, dims_out, stride_pre, box_64x128);
        const CUtensorMap map_dinp8 = swizzled_tensor_map(CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, f8->dinp8, dims_out, stride_c8, box_128x128);
        const CUtensorMap map_dinp8T = swizzled_tensor_map(CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, f8->dinp8T, dims_t, stride_n8, box_128x64);
        const CUtensorMap map_gelu8T = f8->gelu8T ? swizzled_tensor_map(CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, f8->gelu8T, dims_t, stride_n8, box_128x64)
                                                  : map_dinp8T;
        auto launch = [&](auto e5m2) {
            launch_persistent_clusters<matmul_dgelu_fp8_hopper_kernel<decltype(e5m2)::value>, kDgeluCluster>(
                clusters, kDgeluThreads, Dgelu8Tile::kSmemBytes, stream, map_weight8T, map_dout8, map_pre, map_dinp8, map_dinp8T,
                map_gelu8T, bias_partials, N, C, OC, *f8);
        };
        if (f8->dinp_e5m2) launch(std::true_type{});
        else launch(std::false_type{});
        return true;
    }
    const cuuint64_t dims_weight[2] = {(cuuint64_t)C, (cuuint64_t)OC};
    const cuuint64_t stride_dout[1] = {(cuuint64_t)OC * 2}, stride_c[1] = {(cuuint64_t)C * 2};
    const cuuint32_t box_64[2] = {64, 64};
    const CUtensorMap map_dout = swizzled_tensor_map(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, dout, dims_dout, stride_dout, box_64);
    const CUtensorMap map_weight = swizzled_tensor_map(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, weight, dims_weight, stride_c, box_64);
    const CUtensorMap map_dinp = swizzled_tensor_map(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, dinp, dims_out, stride_c, box_64);
    launch_persistent_clusters<matmul_dgelu_hopper_kernel, kDgeluCluster>(clusters, kDgeluThreads, DgeluTile::kSmemBytes, stream, map_dout,
                                                                          map_weight, map_dinp, pre, gelu_out, bias_partials, N, C, OC);
    return true;
}
