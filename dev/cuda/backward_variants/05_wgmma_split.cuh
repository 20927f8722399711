/*
Variant 5: Hopper (sm_90a) wgmma, HS 64 and 128: variant 4's split (deterministic) on warpgroup MMAs. Same
pre-pass; a dK/dV kernel where each warpgroup owns 64 keys (S^T = K Q^T and dP^T = V dO^T read both operands
from swizzled shared memory, dV += P^T dO and dK += dS^T Q take P^T / dS^T from registers), and a dQ kernel
where each warpgroup owns 64 query rows (S, dP from shared memory, dQ += dS K with dS from registers).
cp.async double buffering, no warp specialisation. HS 128 stores tiles as two 64-column blocks.
Its kernels (attention_backward_dkdv_hopper_kernel, attention_backward_dq_hopper_kernel) live in this file; src
shipped them on Hopper until 054a36c. Configs: dK/dV keys x query-step / warpgroups + dQ queries x key-step /
warpgroups. ptxas (sm_90a): no spills. Non-Hopper GPUs: not supported.
*/
#pragma once
#include "dev/cuda/wgmma_cp_async.cuh"

template <int HS, int kNWG, int kBlockM>
struct HopperBackwardKVTile {
    static constexpr int kBlockN = 64 * kNWG, kThreads = 128 * kNWG;
    static constexpr int kKVBytes = kBlockN * HS * 2;
    static constexpr int kQBytes = kBlockM * HS * 2;
    static constexpr int kStageBytes = 2 * kQBytes + 1024;     // Q, dO, then lse2 and dpsum (2 * kBlockM floats <= 1 KB)
    // + 1 KB to align to the swizzle atom. HS 128, kBlockM 64: 99 KB with 1 warpgroup, so 2 CTAs per SM fit
    // (the 64x128 fp32 dK + dV alone take 128 registers a thread, but 2 x 128 threads x 256 registers is the
    // whole 64K register file); 131 KB with 2 warpgroups: 1 CTA per SM.
    static constexpr int kSmemBytes = 2 * kKVBytes + 2 * kStageBytes + 1024;
};

template <int HS, int kNWG, int kBlockM, int kMinBlocks>
__global__ void __launch_bounds__(128 * kNWG, kMinBlocks) attention_backward_dkdv_hopper_kernel(const AttentionBackwardParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(HS == 64 || HS == 128, "head size 64 or 128");
    using Tile = HopperBackwardKVTile<HS, kNWG, kBlockM>;
    constexpr int kBlockN = Tile::kBlockN, kThreads = Tile::kThreads;
    constexpr int kDT = HS / 8;           // n8 column groups of dK, dV
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    // K, V (kBlockN, HS) and per stage Q, dO (kBlockM, HS): swizzle_wgmma; dK, dV staged as swizzle<HS> at the end
    uint8_t* k_smem = smem;
    uint8_t* v_smem = smem + Tile::kKVBytes;
    uint8_t* stage_smem = smem + 2 * Tile::kKVBytes;
    auto q_tile = [&](int s) { return stage_smem + s * Tile::kStageBytes; };
    auto do_tile = [&](int s) { return stage_smem + s * Tile::kStageBytes + Tile::kQBytes; };
    auto lse2_tile = [&](int s) { return reinterpret_cast<float*>(stage_smem + s * Tile::kStageBytes + 2 * Tile::kQBytes); };

    const int T = p.T, NH = p.NH, Tp = bwd_padded_T(T);
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int n_block = blockIdx.y;                       // block 0 has the most query tiles: launched first
    const int warp = threadIdx.x / 32, wg = threadIdx.x / 128;
    const size_t row_stride = 3 * (size_t)NH * HS;
    const floatX* q_gl = p.q + (size_t)b * T * row_stride + h * HS;
    const floatX* k_gl = q_gl + NH * HS;
    const floatX* v_gl = q_gl + 2 * NH * HS;
    const floatX* do_gl = p.dout + ((size_t)b * T * NH + h) * HS;
    const BackwardScratch sc = backward_scratch(p);
    const float* lse2_gl = sc.lse2 + (size_t)bh * Tp;
    const float* dpsum_gl = sc.dpsum + (size_t)bh * Tp;
    const int n_start = n_block * kBlockN;
    const int warp_row0 = wg * 64 + (warp % 4) * 16;      // this warp's 16 keys inside the tile
    const int m_first = n_start / kBlockM;
    const int m_blocks = ceil_div(T, kBlockM);

    auto load_stage = [&](int s, int m_block) {
        load_tile_async_wgmma<HS, kBlockM, kThreads>(q_tile(s), q_gl, row_stride, m_block * kBlockM, T);
        load_tile_async_wgmma<HS, kBlockM, kThreads>(do_tile(s), do_gl, (size_t)NH * HS, m_block * kBlockM, T);
        for (int c = threadIdx.x; c < kBlockM / 2; c += kThreads) {   // lse2 then dpsum, 16 bytes a copy (padded rows)
            const int which = c / (kBlockM / 4), i = c % (kBlockM / 4);
            const float* src = (which ? dpsum_gl : lse2_gl) + m_block * kBlockM + 4 * i;
            cp_async_16(smem_addr(lse2_tile(s) + which * kBlockM + 4 * i), src, true);
        }
    };
    load_tile_async_wgmma<HS, kBlockN, kThreads>(k_smem, k_gl, row_stride, n_start, T);
    load_tile_async_wgmma<HS, kBlockN, kThreads>(v_smem, v_gl, row_stride, n_start, T);
    load_stage(0, m_first);
    cp_async_commit();

    // dK, dV (64 keys x HS per warpgroup), the m64nHS accumulator layout: registers [32c, 32c + 32) are the
    // m64n64 accumulator of head dims 64c .. 64c + 63
    float dk_acc[kDT * 4], dv_acc[kDT * 4];
    #pragma unroll
    for (int i = 0; i < kDT * 4; i++) dk_acc[i] = dv_acc[i] = 0.0f;
    const uint64_t k_desc = wgmma_desc(k_smem + wg * 64 * 128);   // this warpgroup's keys in column block 0
    const uint64_t v_desc = wgmma_desc(v_smem + wg * 64 * 128);

    for (int m_block = m_first; m_block < m_blocks; m_block++) {
        const int stage = (m_block - m_first) & 1;
        if (m_block + 1 < m_blocks) {
            load_stage(stage ^ 1, m_block + 1);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        fence_proxy_async();
        __syncthreads();   // this stage (and K, V on the first pass) visible to every warpgroup's wgmma
        // No warpgroup skips a tile whose keys all lie after its queries (possible only with 2 warpgroups, on
        // the first query tile): a branch around the wgmmas makes ptxas serialise them (C7520), and a fully
        // masked tile just gives P = 0.
        dkdv_hopper_step<false, HS, kBlockM, kBlockN>(dk_acc, dv_acc, k_desc, v_desc, q_tile(stage), do_tile(stage), lse2_tile(stage),
                                               lse2_tile(stage) + kBlockM, n_start, m_block * kBlockM, warp_row0, p.scale * kLog2e);
        __syncthreads();   // every warpgroup is done with this stage before the next prefetch overwrites it
    }
    // the loop's last __syncthreads came after every warpgroup's last wgmma: K and V are dead, stage dK, dV there
    dkdv_hopper_epilogue<false, HS>(p, dk_acc, dv_acc, k_smem, v_smem, b, h, n_start, warp_row0);
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

template <int HS, int kNWG, int kBlockN>
struct HopperBackwardQTile {
    static constexpr int kBlockM = 64 * kNWG, kThreads = 128 * kNWG;
    static constexpr int kTileBytes = kBlockN * HS * 2;
    // Q, dO, 2 x (K, V), align. HS 128: 97 KB (1 warpgroup, kBlockN 64: 2 CTAs per SM), 129 KB (2 warpgroups)
    static constexpr int kSmemBytes = 2 * kBlockM * HS * 2 + 2 * 2 * kTileBytes + 1024;
};

template <int HS, int kNWG, int kBlockN, int kMinBlocks>
__global__ void __launch_bounds__(128 * kNWG, kMinBlocks) attention_backward_dq_hopper_kernel(const AttentionBackwardParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(HS == 64 || HS == 128, "head size 64 or 128");
    using Tile = HopperBackwardQTile<HS, kNWG, kBlockN>;
    constexpr int kBlockM = Tile::kBlockM, kThreads = Tile::kThreads;
    constexpr int kDT = HS / 8;
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    // Q, dO (kBlockM, HS) and per stage K, V (kBlockN, HS): swizzle_wgmma; dQ staged as swizzle<HS> at the end
    uint8_t* q_smem = smem;
    uint8_t* do_smem = smem + kBlockM * HS * 2;
    uint8_t* kv_smem = smem + 2 * kBlockM * HS * 2;       // [stage][K, V]
    auto k_tile = [&](int s) { return kv_smem + s * 2 * Tile::kTileBytes; };
    auto v_tile = [&](int s) { return kv_smem + s * 2 * Tile::kTileBytes + Tile::kTileBytes; };

    const int T = p.T, NH = p.NH, Tp = bwd_padded_T(T);
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int m_block = gridDim.y - 1 - blockIdx.y;       // longest (last) query tiles first
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wg = threadIdx.x / 128;
    const int g = lane / 4;
    const size_t row_stride = 3 * (size_t)NH * HS;
    const floatX* q_gl = p.q + (size_t)b * T * row_stride + h * HS;
    const floatX* k_gl = q_gl + NH * HS;
    const floatX* v_gl = q_gl + 2 * NH * HS;
    const floatX* do_gl = p.dout + ((size_t)b * T * NH + h) * HS;
    const int m_start = m_block * kBlockM;
    const int warp_row0 = wg * 64 + (warp % 4) * 16;      // this warp's 16 query rows inside the tile
    const int n_blocks = min(ceil_div(m_start + kBlockM, kBlockN), ceil_div(T, kBlockN));

    load_tile_async_wgmma<HS, kBlockM, kThreads>(q_smem, q_gl, row_stride, m_start, T);
    load_tile_async_wgmma<HS, kBlockM, kThreads>(do_smem, do_gl, (size_t)NH * HS, m_start, T);
    load_tile_async_wgmma<HS, kBlockN, kThreads>(k_tile(0), k_gl, row_stride, (n_blocks - 1) * kBlockN, T);
    load_tile_async_wgmma<HS, kBlockN, kThreads>(v_tile(0), v_gl, row_stride, (n_blocks - 1) * kBlockN, T);
    cp_async_commit();

    const BackwardScratch sc = backward_scratch(p);   // rows g, g + 8 of this warp (padded: in bounds)
    float row_lse2[2], row_dpsum[2];
    #pragma unroll
    for (int half = 0; half < 2; half++) {
        const size_t r = (size_t)bh * Tp + m_start + warp_row0 + g + 8 * half;
        row_lse2[half] = sc.lse2[r];
        row_dpsum[half] = sc.dpsum[r];
    }
    float dq_acc[kDT * 4];   // registers [32c, 32c + 32): the m64n64 accumulator of head dims 64c .. 64c + 63
    #pragma unroll
    for (int i = 0; i < kDT * 4; i++) dq_acc[i] = 0.0f;
    const uint64_t q_desc = wgmma_desc(q_smem + wg * 64 * 128);   // this warpgroup's rows in column block 0
    const uint64_t do_desc = wgmma_desc(do_smem + wg * 64 * 128);

    for (int it = 0; it < n_blocks; it++) {
        const int n_block = n_blocks - 1 - it;            // diagonal (masked) tile first
        const int stage = it & 1;
        if (it + 1 < n_blocks) {
            load_tile_async_wgmma<HS, kBlockN, kThreads>(k_tile(stage ^ 1), k_gl, row_stride, (n_block - 1) * kBlockN, T);
            load_tile_async_wgmma<HS, kBlockN, kThreads>(v_tile(stage ^ 1), v_gl, row_stride, (n_block - 1) * kBlockN, T);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        fence_proxy_async();
        __syncthreads();
        // no warpgroup skips the tile even when all its 64 rows lie above it (the first tile, with 2
        // warpgroups): see the dK/dV kernel
        dq_hopper_step<false, HS, kBlockM, kBlockN>(dq_acc, q_desc, do_desc, k_tile(stage), v_tile(stage), row_lse2, row_dpsum,
                                             n_block, m_start, warp_row0, p.scale * kLog2e);
        __syncthreads();
    }
    // every wgmma is done (the loop's last barrier): stage dQ in Q's shared memory
    dq_hopper_epilogue<false, HS>(p, dq_acc, q_smem, b, h, m_start, warp_row0);
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

template <int HS, int kNWG, int kBlockM, int kMinBlocks>
void launch_attention_backward_dkdv_hopper(const AttentionBackwardParams& p, cudaStream_t stream) {
    using Tile = HopperBackwardKVTile<HS, kNWG, kBlockM>;
    launch_with_smem<attention_backward_dkdv_hopper_kernel<HS, kNWG, kBlockM, kMinBlocks>>(dim3(p.B * p.NH, ceil_div(p.T, Tile::kBlockN)),
                         Tile::kThreads, Tile::kSmemBytes, stream, p);
}

template <int HS, int kNWG, int kBlockN, int kMinBlocks>
void launch_attention_backward_dq_hopper(const AttentionBackwardParams& p, cudaStream_t stream) {
    using Tile = HopperBackwardQTile<HS, kNWG, kBlockN>;
    launch_with_smem<attention_backward_dq_hopper_kernel<HS, kNWG, kBlockN, kMinBlocks>>(dim3(p.B * p.NH, ceil_div(p.T, Tile::kBlockM)),
                         Tile::kThreads, Tile::kSmemBytes, stream, p);
}

// Hopper split path (HS 64 or 128, sm_90a): preprocess, dK/dV on wgmma (kKVWG warpgroups of 64 keys,
// kKVBlockM-query steps), dQ on wgmma (kQWG warpgroups of 64 query rows, kQBlockN-key steps). Deterministic.
template <int HS, int kKVWG, int kKVBlockM, int kKVMinBlocks, int kQWG, int kQBlockN, int kQMinBlocks>
void attention_backward_split_hopper(const AttentionBackwardParams& p, cudaStream_t stream) {
    launch_attention_backward_preprocess<HS>(p, /*zero_dq=*/false, stream);
    launch_attention_backward_dkdv_hopper<HS, kKVWG, kKVBlockM, kKVMinBlocks>(p, stream);
    launch_attention_backward_dq_hopper<HS, kQWG, kQBlockN, kQMinBlocks>(p, stream);
}


bool attention_backward5_supports(const Shape& s, int) { return (s.HS == 64 || s.HS == 128) && hopper_path_available(); }

void attention_backward5(const AttentionBackwardParams& p, int config, cudaStream_t stream) {
    if (p.HS == 64) {
        switch (config) {
            case 0: attention_backward_split_hopper<64, 2, 64, 1, 2, 64, 1>(p, stream); break;    // kv 128x64/2wg + q 128x64/2wg
            case 1: attention_backward_split_hopper<64, 1, 64, 2, 1, 64, 3>(p, stream); break;    // kv 64x64/1wg  + q 64x64/1wg
            case 2: attention_backward_split_hopper<64, 2, 64, 1, 2, 128, 1>(p, stream); break;   // kv 128x64/2wg + q 128x128/2wg
            case 3: attention_backward_split_hopper<64, 1, 128, 2, 1, 128, 2>(p, stream); break;  // kv 64x128/1wg + q 64x128/1wg
        }
    } else {
        switch (config) {
            case 0: attention_backward_split_hopper<128, 1, 64, 2, 1, 64, 2>(p, stream); break;   // kv 64x64/1wg  + q 64x64/1wg
            case 1: attention_backward_split_hopper<128, 2, 64, 1, 1, 64, 2>(p, stream); break;   // kv 128x64/2wg + q 64x64/1wg
            case 2: attention_backward_split_hopper<128, 2, 64, 1, 2, 64, 1>(p, stream); break;   // kv 128x64/2wg + q 128x64/2wg
            case 3: attention_backward_split_hopper<128, 1, 64, 2, 2, 64, 1>(p, stream); break;   // kv 64x64/1wg  + q 128x64/2wg
        }
    }
}
