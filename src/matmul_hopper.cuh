/*
flashgpt's own GEMM on Hopper (sm_90a), where it does in one kernel what cuBLASLt does in three passes: the MLP's
projection backward through GELU,
  dinp (N, C)   = (dout (N, OC) @ weight (OC, C)) * gelu'(pre)     cuBLASLt: its DGELU epilogue
  gelu_out (N, C) = gelu(pre)                                        the GELU recompute pass (-r 1)
  bias partials = dinp summed over each 64 rows, fp32 (ceil(N/64), C)  bias_backward's pass over dinp
with pre (N, C) the MLP's pre-GELU activation fch, C = 4 * channels. The weight gradient then reads gelu_out, and
reduce_partials_add adds the partials (in order) into the gradient of the bias before the GELU.

The kernel is persistent and warp-specialised. One TMA producer warpgroup fills a ring of (128 x 64 dout, 64 x 128
weight) stages with the 128-byte swizzle; the weight is read as it lies, (K, N) with N contiguous, by wgmma's
transposed (MN-major) B. Two consumer warpgroups each own 64 rows of the 128 x 128 output tile and keep one stage's
wgmmas in flight. A second producer thread loads each tile's pre into a staging area by TMA as soon as the epilogue
before has read it, so the load has a whole mainloop to land. The epilogue reads pre there, stores gelu(pre) from
registers, and writes dinp into a second staging area, which one thread stores by TMA while the next tile's mainloop
runs; each warp's column sums of its 16 rows meet in shared memory and leave as one partial row per 64 rows. (gelu
written over pre in the staging and stored by TMA, the staging then waiting for that store, took 0.25 ms more at d12.) (128 x 192 tiles measured slower at GPT-2 small's 4C = 3072, and
4C of the larger GPT-2s is no multiple of 192.)
*/
#pragma once
#include "ptx.cuh"
#include "gelu.cuh"

constexpr int kDgeluBM = 128, kDgeluBN = 128, kDgeluBK = 64, kDgeluThreads = 384, kDgeluPartialRows = 64;

// shared memory: the ring, then per consumer warpgroup the staging (dinp, then pre / gelu(pre)) and its warps' sums
struct DgeluTile {
    static constexpr int kStageA = kDgeluBM * kDgeluBK * 2, kStageB = kDgeluBN * kDgeluBK * 2;
    static constexpr int kStageOut = 64 * kDgeluBN * 2;   // one warpgroup's rows of one tensor: two boxes of 64 x 64
    static constexpr int kStaging = 2 * 2 * kStageOut;
    static constexpr int kSums = 2 * 4 * kDgeluBN * 4;
    static constexpr int kStages = 4;
    static constexpr int kSmemBytes = 1024 + kStages * (kStageA + kStageB) + kStaging + kSums + (2 * kStages + 2) * 8;
};

// map_dout: (OC, N) boxes of 64 x 128; map_weight: (C, OC) boxes of 64 x 64, two a stage; map_dinp, map_pre: (C, N)
// boxes of 64 x 64; gelu_out (N, C) or null. Tile t covers rows 128 (t / (C / 128)), columns 128 (t % (C / 128)).
__global__ void __launch_bounds__(kDgeluThreads, 1)
matmul_dgelu_hopper_kernel(const __grid_constant__ CUtensorMap map_dout, const __grid_constant__ CUtensorMap map_weight,
                           const __grid_constant__ CUtensorMap map_dinp, const __grid_constant__ CUtensorMap map_pre,
                           floatX* gelu_out, float* bias_partials, int N, int C, int OC) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using Tile = DgeluTile;
    constexpr int kBN = kDgeluBN;
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    uint8_t* tiles_a = smem;
    uint8_t* tiles_b = tiles_a + Tile::kStages * Tile::kStageA;
    uint8_t* staging = tiles_b + Tile::kStages * Tile::kStageB;
    float* warp_sums = reinterpret_cast<float*>(staging + Tile::kStaging);
    uint64_t* full = reinterpret_cast<uint64_t*>(staging + Tile::kStaging + Tile::kSums);
    uint64_t* empty = full + Tile::kStages;
    uint64_t* pre_full = empty + Tile::kStages;   // a tile's pre is in the staging
    uint64_t* pre_empty = pre_full + 1;           // every consumer thread has read the tile's pre
    if (threadIdx.x == 0) {
        for (int s = 0; s < Tile::kStages; s++) { mbar_init(&full[s], 1); mbar_init(&empty[s], 256); }
        mbar_init(pre_full, 1);
        mbar_init(pre_empty, 256);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    const int n_tiles = C / kBN, num_tiles = ceil_div(N, kDgeluBM) * n_tiles, k_blocks = OC / kDgeluBK;
    const int wg = threadIdx.x / 128;
    if (wg == 0) {   // ---- producer: one thread loads the ring
        setmaxnreg_dec<24>();
        if (threadIdx.x == 0) {
            int it = 0, tile_it = 0;
            for (int t = blockIdx.x; t < num_tiles; t += gridDim.x, tile_it++) {
                const int m0 = (t / n_tiles) * kDgeluBM, n0 = (t % n_tiles) * kBN;
                for (int kb = 0; kb < k_blocks; kb++, it++) {
                    const int s = it % Tile::kStages;
                    mbar_wait(&empty[s], ((it / Tile::kStages) & 1) ^ 1);   // a fresh barrier passes parity 1 at once
                    mbar_arrive_expect_tx(&full[s], Tile::kStageA + Tile::kStageB);
                    tma_load_2d(tiles_a + s * Tile::kStageA, &map_dout, &full[s], kb * kDgeluBK, m0);
                    for (int blk = 0; blk < kBN / 64; blk++)
                        tma_load_2d(tiles_b + s * Tile::kStageB + blk * 8192, &map_weight, &full[s], n0 + 64 * blk, kb * kDgeluBK);
                }
            }
        } else if (threadIdx.x == 32) {   // a second thread loads each tile's pre, as soon as the epilogue before has read its own
            int tile_it = 0;
            for (int t = blockIdx.x; t < num_tiles; t += gridDim.x, tile_it++) {
                const int m0 = (t / n_tiles) * kDgeluBM, n0 = (t % n_tiles) * kBN;
                mbar_wait(pre_empty, (tile_it & 1) ^ 1);
                mbar_arrive_expect_tx(pre_full, 2 * Tile::kStageOut);
                for (int w = 0; w < 2; w++)
                    for (int blk = 0; blk < kBN / 64; blk++)
                        tma_load_2d(staging + (2 * w + 1) * Tile::kStageOut + blk * 8192, &map_pre, pre_full, n0 + 64 * blk, m0 + 64 * w);
            }
        }
        return;
    }
    // ---- consumers: warpgroup cwg owns rows 64 cwg .. 64 cwg + 63 of each tile
    setmaxnreg_inc<240>();
    const int cwg = wg - 1, tid = threadIdx.x % 128, lane = threadIdx.x % 32, warp = tid / 32, g = lane / 4, tq = lane % 4;
    uint8_t* stage_out = staging + cwg * 2 * Tile::kStageOut;
    uint8_t* stage_pre = stage_out + Tile::kStageOut;
    float* sums = warp_sums + cwg * 4 * kBN;
    float acc[kBN / 2];
    int it = 0, tile_it = 0;
    for (int t = blockIdx.x; t < num_tiles; t += gridDim.x, tile_it++) {
        const int m0 = (t / n_tiles) * kDgeluBM, n0 = (t % n_tiles) * kBN;
        #pragma unroll
        for (int i = 0; i < kBN / 2; i++) acc[i] = 0.0f;
        int prev = -1;   // the stage whose wgmmas are still in flight
        for (int kb = 0; kb < k_blocks; kb++, it++) {
            const int s = it % Tile::kStages;
            mbar_wait(&full[s], (it / Tile::kStages) & 1);
            const uint8_t* a = tiles_a + s * Tile::kStageA + cwg * 64 * 128;
            const uint8_t* b = tiles_b + s * Tile::kStageB;
            wgmma_fence();
            #pragma unroll
            for (int ks = 0; ks < kDgeluBK / 16; ks++)   // A: k16 step ks at +32 bytes of each row; B: at +16 rows
                wgmma_ss_m64k16_b<kBN, 1>(acc, wgmma_desc(a + 32 * ks), wgmma_desc(b + ks * 16 * 128, 8192));
            wgmma_commit();
            wgmma_wait<1>();   // the previous stage's wgmmas are done: release it
            if (prev >= 0) mbar_arrive(&empty[prev]);
            prev = s;
        }
        wgmma_wait<0>();
        mbar_arrive(&empty[prev]);
        // epilogue: rows r and r + 8 of this warp, columns 8 j + 2 tq, + 1
        if (tid == 0) bulk_wait_read<0>();   // the previous tile's store has read the dinp staging (a mainloop ago) ...
        named_barrier_sync(1 + cwg, 128);   // ... and every warp has read the previous tile's sums
        mbar_wait(pre_full, tile_it & 1);
        const int row_lo = m0 + cwg * 64 + warp * 16 + g;   // this thread's first row of the output
        #pragma unroll
        for (int j = 0; j < kBN / 8; j++) {
            const int c = 8 * j + 2 * tq;   // the tile's column
            float sum0 = 0.0f, sum1 = 0.0f;
            #pragma unroll
            for (int half = 0; half < 2; half++) {
                const int rr = warp * 16 + g + 8 * half;   // the warpgroup's row
                const int at = (c / 64) * 8192 + rr * 128 + (((c % 64) / 8) ^ (rr % 8)) * 16 + (c % 8) * 2;
                const __nv_bfloat162 pre = *reinterpret_cast<const __nv_bfloat162*>(stage_pre + at);
                float y0, y1, dy0, dy1;
                gelu_and_grad(__bfloat162float(pre.x), y0, dy0);
                gelu_and_grad(__bfloat162float(pre.y), y1, dy1);
                const float d0 = acc[4 * j + 2 * half] * dy0, d1 = acc[4 * j + 2 * half + 1] * dy1;
                *reinterpret_cast<__nv_bfloat162*>(stage_out + at) = __floats2bfloat162_rn(d0, d1);
                if (row_lo + 8 * half < N) {
                    sum0 += d0;
                    sum1 += d1;
                    if (gelu_out) *reinterpret_cast<__nv_bfloat162*>(gelu_out + (size_t)(row_lo + 8 * half) * C + n0 + c) = __floats2bfloat162_rn(y0, y1);
                }
            }
            #pragma unroll
            for (int off = 4; off < 32; off *= 2) {   // over the warp's 8 row pairs
                sum0 += __shfl_xor_sync(0xffffffffu, sum0, off);
                sum1 += __shfl_xor_sync(0xffffffffu, sum1, off);
            }
            if (g == 0) *reinterpret_cast<float2*>(sums + warp * kBN + c) = make_float2(sum0, sum1);
        }
        mbar_arrive(pre_empty);   // this thread has read its pre: the next tile's may be loaded
        fence_proxy_async();   // the staging's writes are visible to the TMA ...
        named_barrier_sync(1 + cwg, 128);   // ... from every thread of the warpgroup, and so are the sums
        if (tid == 0) {
            for (int blk = 0; blk < kBN / 64; blk++) tma_store_2d(&map_dinp, stage_out + blk * 8192, n0 + 64 * blk, m0 + 64 * cwg);
            bulk_commit();
        }
        if (tid < kBN / 2 && m0 + 64 * cwg < N) {   // the warpgroup's 64 rows, its four warps added in order
            float2 s = *reinterpret_cast<const float2*>(sums + 2 * tid);
            #pragma unroll
            for (int w = 1; w < 4; w++) {
                const float2 sw = *reinterpret_cast<const float2*>(sums + w * kBN + 2 * tid);
                s.x += sw.x;
                s.y += sw.y;
            }
            *reinterpret_cast<float2*>(bias_partials + (size_t)(m0 / 64 + cwg) * C + n0 + 2 * tid) = s;
        }
    }
    if (tid == 0) bulk_wait<0>();   // every store done before the kernel ends
#endif
}

inline int matmul_dgelu_partial_rows(int N) { return ceil_div(N, kDgeluPartialRows); }
inline bool matmul_dgelu_hopper_supported(int C, int OC) { return C % kDgeluBN == 0 && OC % kDgeluBK == 0 && hopper_path_available(); }

// dinp (N, C) = (dout (N, OC) @ weight (OC, C)) * gelu'(pre (N, C)); gelu_out (N, C) = gelu(pre) unless null;
// bias_partials (matmul_dgelu_partial_rows(N), C) fp32 = dinp's sums over each 64 rows. False (nothing run) where
// matmul_dgelu_hopper_supported is not.
bool matmul_backward_dgelu_hopper(floatX* dinp, floatX* gelu_out, float* bias_partials, const floatX* dout, const floatX* weight,
                                  const floatX* pre, int N, int C, int OC, cudaStream_t stream) {
    if (!matmul_dgelu_hopper_supported(C, OC)) return false;
    NVTX_RANGE_FN();
    const cuuint64_t dims_dout[2] = {(cuuint64_t)OC, (cuuint64_t)N}, dims_weight[2] = {(cuuint64_t)C, (cuuint64_t)OC};
    const cuuint64_t dims_out[2] = {(cuuint64_t)C, (cuuint64_t)N};
    const cuuint64_t stride_dout[1] = {(cuuint64_t)OC * 2}, stride_c[1] = {(cuuint64_t)C * 2};
    const cuuint32_t box_dout[2] = {kDgeluBK, kDgeluBM}, box_64[2] = {64, 64};
    const CUtensorMap map_dout = swizzled_tensor_map(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, dout, dims_dout, stride_dout, box_dout);
    const CUtensorMap map_weight = swizzled_tensor_map(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, weight, dims_weight, stride_c, box_64);
    const CUtensorMap map_dinp = swizzled_tensor_map(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, dinp, dims_out, stride_c, box_64);
    const CUtensorMap map_pre = swizzled_tensor_map(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, pre, dims_out, stride_c, box_64);
    const int tiles = ceil_div(N, kDgeluBM) * (C / kDgeluBN);
    launch_with_smem<matmul_dgelu_hopper_kernel>(dim3(std::min(tiles, device_props().multiProcessorCount)), kDgeluThreads,
                                                 DgeluTile::kSmemBytes, stream, map_dout, map_weight, map_dinp, map_pre, gelu_out,
                                                 bias_partials, N, C, OC);
    return true;
}
