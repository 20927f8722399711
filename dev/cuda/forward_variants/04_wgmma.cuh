/*
Variant 4: Hopper (sm_90a) wgmma, HS 64 and 128. Variant 3's loop with each warpgroup owning 64 query rows:
S = Q K^T as wgmma m64nNk16 reading Q and K from swizzled shared memory, P kept in registers as the A operand of
O += P V (V read transposed). Still cp.async double buffering and __syncthreads: no TMA producer, no ping-pong.
HS 128 tiles are two 64-column blocks in the HS 64 layout. "/ovl" (HS 64): FA3's intra-warpgroup overlap
(attention_forward_hopper_overlap_kernel: O += P V of tile j-1 under the softmax of tile j, separate 3-slot K and V
rings). "/pv128" (HS 128): P V as one n128 wgmma a k16 step. Both kernels live in this file; src shipped
attention_forward_hopper_kernel on Hopper until b6ae92a. Non-Hopper GPUs: not supported.
*/
#pragma once
#include "dev/cuda/wgmma_cp_async.cuh"

template <int HS, int kBlockN>
struct HopperForwardTile {
    static constexpr int kBlockM = 128, kThreads = 256;   // 2 warpgroups x 64 rows
    static constexpr int kTileBytes = kBlockN * HS * 2;
    // + 1 KB to align the base to the 1024-byte swizzle atom by hand
    static constexpr int kSmemBytes = kBlockM * HS * 2 + 2 * 2 * kTileBytes + 1024;
    // 2 CTAs per SM (128 registers) where the shared memory allows: with no warp specialisation, one CTA's
    // softmax and loads hide behind the other's MMAs. HS 64: 49 / 81 KB (kBlockN 64 / 128); HS 128: 97 KB
    // with kBlockN 64, but 161 KB with kBlockN 128, which leaves 1 CTA per SM (and up to 255 registers).
    static constexpr int kMinBlocks = 2 * kSmemBytes <= 227 * 1024 ? 2 : 1;
};

// kPvN128 (HS 128 only): O += P V as one m64n128k16 per k16 step, V's two column blocks joined through the
// descriptor's leading byte offset, instead of one m64n64k16 per column block
template <int HS, int kBlockN, bool kPvN128 = false>
__global__ void __launch_bounds__(256, HopperForwardTile<HS, kBlockN>::kMinBlocks)
attention_forward_hopper_kernel(const AttentionForwardParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(HS == 64 || HS == 128, "head size 64 or 128");
    static_assert(!kPvN128 || HS == 128, "kPvN128 joins HS 128's two column blocks");
    using Tile = HopperForwardTile<HS, kBlockN>;
    constexpr int kBlockM = Tile::kBlockM, kThreads = Tile::kThreads;
    constexpr int kNT = kBlockN / 8;      // n8 column groups of S per thread
    constexpr int kPS = kBlockN / 16;     // k16 steps of P V
    constexpr int kDT = HS / 8;           // n8 column groups of O
    constexpr int kCB = HS / 64;          // 64-column blocks of a tile (swizzle_wgmma)
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    uint8_t* q_smem = smem;                          // (kBlockM, HS) swizzle_wgmma, later O staging (swizzle<HS>)
    uint8_t* kv_smem = smem + kBlockM * HS * 2;      // [stage][K, V] (kBlockN, HS) swizzle_wgmma each

    const int T = p.T, NH = p.NH;
    const int b = blockIdx.x / NH, h = blockIdx.x % NH;
    const int m_block = gridDim.y - 1 - blockIdx.y;  // longest (last) Q tiles first
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wg = threadIdx.x / 128;
    const int g = lane / 4, tq = lane % 4;
    const size_t row_stride = 3 * (size_t)NH * HS;
    const floatX* q_gl = p.q + (size_t)b * T * row_stride + h * HS;
    const floatX* k_gl = q_gl + NH * HS;
    const floatX* v_gl = q_gl + 2 * NH * HS;
    const int m_start = m_block * kBlockM;
    const int warp_row0 = wg * 64 + (warp % 4) * 16;   // this warp's 16 rows of its warpgroup's 64
    const int n_blocks = min(ceil_div(m_start + kBlockM, kBlockN), ceil_div(T, kBlockN));
    auto k_tile = [&](int stage) { return kv_smem + stage * 2 * Tile::kTileBytes; };
    auto v_tile = [&](int stage) { return kv_smem + stage * 2 * Tile::kTileBytes + Tile::kTileBytes; };

    load_tile_async_wgmma<HS, kBlockM, kThreads>(q_smem, q_gl, row_stride, m_start, T);
    load_tile_async_wgmma<HS, kBlockN, kThreads>(k_tile(0), k_gl, row_stride, (n_blocks - 1) * kBlockN, T);
    load_tile_async_wgmma<HS, kBlockN, kThreads>(v_tile(0), v_gl, row_stride, (n_blocks - 1) * kBlockN, T);
    cp_async_commit();

    // O (64 x HS per warpgroup): o_acc[4 * dt + e] is column 8 * dt + 2 * tq + e % 2 of row g + 8 * (e / 2);
    // registers 32c .. 32c + 31 are exactly the m64n64 accumulator of column block c
    float o_acc[kDT * 4];
    #pragma unroll
    for (int i = 0; i < kDT * 4; i++) o_acc[i] = 0.0f;
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};   // rows g and g + 8
    const float scale_log2 = rsqrtf((float)HS) * kLog2e;
    const uint64_t q_desc = wgmma_desc(q_smem + wg * 64 * 128);   // this warpgroup's rows of column block 0

    for (int it = 0; it < n_blocks; it++) {
        const int n_block = n_blocks - 1 - it;
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
        __syncthreads();   // this stage's K/V (and Q) are visible to every warpgroup's wgmma

        // a warpgroup whose 64 rows all lie above this K tile skips it (wgmma is warpgroup-wide)
        if (n_block * kBlockN <= m_start + wg * 64 + 63) {
            float s[kNT * 4];
            #pragma unroll
            for (int i = 0; i < kNT * 4; i++) s[i] = 0.0f;
            const uint8_t* k_s = k_tile(stage);
            wgmma_fence();
            // (wgmma_ss_over_hs, written out: this is the form whose code was validated and timed as shipped)
            #pragma unroll
            for (int ks = 0; ks < HS / 16; ks++) {   // k16 steps: column block ks / 4, +32 bytes per step inside its atom
                const uint64_t a = q_desc + (ks / 4) * (kBlockM * 128 / 16) + 2 * (ks % 4);
                const uint64_t b = wgmma_desc(k_s + (ks / 4) * kBlockN * 128 + 32 * (ks % 4));
                wgmma_ss_m64k16<false, kBlockN>(s, a, b);
            }
            wgmma_commit();
            wgmma_wait_all();
            if (n_block * kBlockN + kBlockN - 1 > m_start + warp_row0)   // causal mask on diagonal tiles
                mask_tile<kNT>(s, m_start + warp_row0, n_block * kBlockN, p.T, g, tq);
            float alpha[2];
            online_softmax_tile<kNT>(s, row_max, row_sum, alpha, scale_log2);
            #pragma unroll
            for (int dt = 0; dt < kDT; dt++) {
                o_acc[4 * dt + 0] *= alpha[0]; o_acc[4 * dt + 1] *= alpha[0];
                o_acc[4 * dt + 2] *= alpha[1]; o_acc[4 * dt + 3] *= alpha[1];
            }
            // P in bf16: k step j takes S column groups 2j, 2j+1, exactly the A-fragment register order
            uint32_t pa[kPS][4];
            #pragma unroll
            for (int j = 0; j < kPS; j++) {
                pa[j][0] = pack_x2<false>(s[8 * j + 0], s[8 * j + 1]);
                pa[j][1] = pack_x2<false>(s[8 * j + 2], s[8 * j + 3]);
                pa[j][2] = pack_x2<false>(s[8 * j + 4], s[8 * j + 5]);
                pa[j][3] = pack_x2<false>(s[8 * j + 6], s[8 * j + 7]);
            }
            const uint8_t* v_s = v_tile(stage);
            wgmma_fence();   // o_acc and pa were written by ordinary instructions
            #pragma unroll
            for (int j = 0; j < kPS; j++) {   // k16 step j: keys 16j .. 16j + 15, 16 rows of 128 bytes into each column block
                if constexpr (kPvN128) {
                    wgmma_rs_m64k16_trans_b<false, HS, kBlockN>(o_acc, pa[j], v_s, j);   // HS 128: one n128
                } else {
                    #pragma unroll
                    for (int c = 0; c < kCB; c++)
                        wgmma_rs_m64n64k16_trans_b<false>(*reinterpret_cast<float(*)[32]>(o_acc + 32 * c), pa[j],
                                                   wgmma_desc(v_s + c * kBlockN * 128 + j * 16 * 128));
                }
            }
            wgmma_commit();
            wgmma_wait_all();
        }
        __syncthreads();   // every warpgroup is done with this stage before the next prefetch overwrites it
    }

    hopper_forward_epilogue<HS, false>(p, o_acc, row_max, row_sum, q_smem, b, h, m_start, warp_row0);
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

template <int HS, int kBlockN, bool kPvN128 = false>
void launch_attention_forward_hopper(const AttentionForwardParams& p, cudaStream_t stream) {
    using Tile = HopperForwardTile<HS, kBlockN>;
    launch_with_smem<attention_forward_hopper_kernel<HS, kBlockN, kPvN128>>(dim3(p.B * p.NH, ceil_div(p.T, Tile::kBlockM)),
                         Tile::kThreads, Tile::kSmemBytes, stream, p);
}


// ----------------------------------------------------------------------------
// forward kernel, Hopper (sm_90a), with intra-warpgroup overlap (FA3 paper section 3.2)
//
// The kernel above waits for every wgmma right after issuing it, so within a warpgroup the tensor cores
// and the softmax take turns. Here O += P V of K/V tile j-1 runs on the tensor cores while the same
// warpgroup does the softmax of tile j. Tiles are numbered in loop order (tile i = key block n_blocks-1-i,
// the diagonal first). One iteration, tile j:
//   1. cp.async.wait_group, fence.proxy.async, __syncthreads: K_j and V_{j-1} are visible to wgmma, and
//      both warpgroups have finished iteration j-1 (see "overwrites" below)
//   2. cp.async K_{j+kStages-1} and V_{j+kStages-2} (those that exist); commit (always: the count stays uniform)
//   3. issue S = Q K_j^T (SS), commit; issue O += P_{j-1} V_{j-1} (RS: P_{j-1} in bf16 registers), commit
//   4. wgmma.wait_group 1: S is done, P V may still run -> causal mask, row max, P_j = exp2 (fp32, in the S
//      registers), row sums, alpha. Nothing here touches O or P_{j-1}, which the running P V owns.
//   5. wgmma.wait_group 0: P V done -> O *= alpha; P_j -> bf16 registers, the A operand of step 3 next time
// Tile 0's S and softmax are peeled in front of the loop and the last P V behind it, so the loop issues both
// GEMMs unconditionally and no warpgroup ever branches around a wgmma (ptxas serialises those, C7520); a
// warpgroup whose 64 rows all lie above a tile (kBlockN 64, tile 0 of warpgroup 0) gets S = -inf
// everywhere, and the m_scaled guard turns that into P = 0, alpha = 0 while its row max is still -inf.
//
// Shared memory: Q, then a ring of kStages K slots and a ring of kStages V slots; K_i lives in K slot
// i % kStages, V_i in V slot i % kStages. V is consumed one iteration after K, so it is loaded one tile
// behind: cp.async group c (c = 0, 1, ...) holds K_c and V_{c-1} (group 0: Q and K_0); groups 0 ..
// kStages-2 are committed before the loop, iteration j commits group j + kStages - 1.
//   Reads are safe: iteration j reads group j. When it waits, groups up to j + kStages - 2 are committed,
//   so cp.async.wait_group kStages-2 means group j has landed for this thread; fence.proxy.async (generic
//   proxy writes -> async proxy reads) and the barrier extend that to every thread's copies.
//   Overwrites are safe: step 2 writes K slot (j-1) % kStages and V slot (j-2) % kStages. The last reader of
//   K_{j-1} is S = Q K_{j-1}^T and that of V_{j-2} is O += P_{j-2} V_{j-2}, both issued in step 3 of iteration
//   j-1 (iteration 0's S: before the loop; P V of the last tile: after it, behind its own barrier). Every
//   thread reaches step 1's barrier of iteration j only after its step 5 of iteration j-1 (wgmma.wait_group
//   0), so both wgmmas have completed in both warpgroups before any thread issues step 2.
//   Step 2 never hits a slot read in iteration j (K_j: slot j, V_{j-1}: slot j-1; kStages >= 2).
// Registers: the wgmma accumulators and the RS A operand are fenced (reg_fence) right after the waits that
// free them and right before the issue that hands them over, so the compiler cannot move an ordinary
// access to them into the window where a wgmma owns them (ptxas would inject waits there, C7517/C7519).

template <int HS, int kBlockN>
struct HopperForwardOverlapTile {
    static constexpr int kBlockM = 128, kThreads = 256;   // 2 warpgroups x 64 rows
    static constexpr int kStages = 3;                      // K/V ring depth: loads are issued 2 tiles ahead for K
    static constexpr int kTileBytes = kBlockN * HS * 2;
    // + 1 KB to align the base to the 1024-byte swizzle atom by hand. HS 64: 65 KB (kBlockN 64), 113 KB (128).
    static constexpr int kSmemBytes = kBlockM * HS * 2 + 2 * kStages * kTileBytes + 1024;
    // Registers live through the loop, per thread: S (kBlockN / 2 fp32), P (kBlockN / 4 bf16x2), O (HS / 2).
    // HS 64 kBlockN 64: 80, which fits the 128 of 2 CTAs per SM. kBlockN 128 (or HS 128): 112-128 before
    // any address or row statistic, so 1 CTA per SM (up to 255 registers).
    static constexpr int kMinBlocks = kBlockN / 2 + kBlockN / 4 + HS / 2 <= 80 && 2 * kSmemBytes <= 227 * 1024 ? 2 : 1;
};

template <int HS, int kBlockN>
__global__ void __launch_bounds__(256, HopperForwardOverlapTile<HS, kBlockN>::kMinBlocks)
attention_forward_hopper_overlap_kernel(const AttentionForwardParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(HS == 64 || HS == 128, "head size 64 or 128");
    using Tile = HopperForwardOverlapTile<HS, kBlockN>;
    constexpr int kBlockM = Tile::kBlockM, kThreads = Tile::kThreads, kStages = Tile::kStages;
    static_assert(kStages >= 2, "V_{j-1} and the slot being refilled must differ");
    constexpr int kNT = kBlockN / 8;      // n8 column groups of S per thread
    constexpr int kPS = kBlockN / 16;     // k16 steps of P V
    constexpr int kDT = HS / 8;           // n8 column groups of O
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    uint8_t* q_smem = smem;                                    // (kBlockM, HS) swizzle_wgmma, later O staging (swizzle<HS>)
    uint8_t* k_smem = smem + kBlockM * HS * 2;                 // [kStages] (kBlockN, HS) swizzle_wgmma
    uint8_t* v_smem = k_smem + kStages * Tile::kTileBytes;     // [kStages] (kBlockN, HS) swizzle_wgmma

    const int T = p.T, NH = p.NH;
    const int b = blockIdx.x / NH, h = blockIdx.x % NH;
    const int m_block = gridDim.y - 1 - blockIdx.y;  // longest (last) Q tiles first
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wg = threadIdx.x / 128;
    const int g = lane / 4, tq = lane % 4;
    const size_t row_stride = 3 * (size_t)NH * HS;
    const floatX* q_gl = p.q + (size_t)b * T * row_stride + h * HS;
    const floatX* k_gl = q_gl + NH * HS;
    const floatX* v_gl = q_gl + 2 * NH * HS;
    const int m_start = m_block * kBlockM;
    const int warp_row0 = wg * 64 + (warp % 4) * 16;   // this warp's 16 rows of its warpgroup's 64
    const int n_blocks = min(ceil_div(m_start + kBlockM, kBlockN), ceil_div(T, kBlockN));

    // tile i (loop order) = key block n_blocks - 1 - i; tiles past the last one are simply not loaded
    auto load_kv = [&](uint8_t* ring, const floatX* src, int i) {
        if (i < 0 || i >= n_blocks) return;
        uint8_t* tile = ring + (i % kStages) * Tile::kTileBytes;
        const int row0 = (n_blocks - 1 - i) * kBlockN;
        if constexpr (HS == 64) load_tile_rows_async<64, kThreads, kBlockN>(tile, src, row_stride, row0, T);
        else load_tile_async_wgmma<HS, kBlockN, kThreads>(tile, src, row_stride, row0, T);
    };
    // group 0: Q and K_0; groups 1 .. kStages-2: K_c and V_{c-1}
    load_tile_async_wgmma<HS, kBlockM, kThreads>(q_smem, q_gl, row_stride, m_start, T);
    load_kv(k_smem, k_gl, 0);
    cp_async_commit();
    #pragma unroll
    for (int c = 1; c <= kStages - 2; c++) {
        load_kv(k_smem, k_gl, c);
        load_kv(v_smem, v_gl, c - 1);
        cp_async_commit();
    }

    float s[kNT * 4];       // S of the current tile, then P in fp32; same layout as o_acc
    uint32_t pa[kPS][4];    // P of the previous tile in bf16: the A fragments of P V
    // O (64 x HS per warpgroup): o_acc[4 * dt + e] is column 8 * dt + 2 * tq + e % 2 of row g + 8 * (e / 2);
    // registers 32c .. 32c + 31 are exactly the m64n64 accumulator of column block c
    float o_acc[kDT * 4];
    #pragma unroll
    for (int i = 0; i < kDT * 4; i++) o_acc[i] = 0.0f;
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};   // rows g and g + 8
    float alpha[2];
    const float scale_log2 = rsqrtf((float)HS) * kLog2e;
    const uint64_t q_desc = wgmma_desc(q_smem + wg * 64 * 128);   // this warpgroup's rows of column block 0

    // steps 1 and 2 of iteration j
    auto wait_and_prefetch = [&](int j) {
        cp_async_wait<kStages - 2>();
        fence_proxy_async();
        __syncthreads();   // K_j, V_{j-1} visible to every warpgroup's wgmma; all wgmmas of iteration j-1 complete
        load_kv(k_smem, k_gl, j + kStages - 1);   // into the slot of K_{j-1}
        load_kv(v_smem, v_gl, j + kStages - 2);   // into the slot of V_{j-2}
        cp_async_commit();
    };
    // S = Q K_j^T; step 0 overwrites s (no zeroing)
    auto issue_s = [&](int j) {
        wgmma_ss_over_hs<false, HS, kBlockN, kBlockM, /*kScaleD0=*/0>(s, q_desc, k_smem + (j % kStages) * Tile::kTileBytes);
        wgmma_commit();
    };
    auto issue_pv = [&](int j) {   // O += P_j V_j: k16 step i = keys 16i .. 16i + 15
        #pragma unroll
        for (int i = 0; i < kPS; i++) wgmma_rs_m64k16_trans_b<false, HS, kBlockN>(o_acc, pa[i], v_smem + (j % kStages) * Tile::kTileBytes, i);
        wgmma_commit();
    };
    // step 4 on tile j: s holds S_j; leaves P_j (fp32) in s, updates row_max / row_sum, sets alpha
    auto softmax = [&](int j) {
        const int n_block = n_blocks - 1 - j;
        if (n_block * kBlockN + kBlockN - 1 > m_start + warp_row0)   // causal mask on diagonal tiles
            mask_tile<kNT>(s, m_start + warp_row0, n_block * kBlockN, p.T, g, tq);
        online_softmax_tile<kNT>(s, row_max, row_sum, alpha, scale_log2);
    };
    auto pack_p = [&]() {
        #pragma unroll
        for (int i = 0; i < kPS; i++) accum_to_a_frag<false>(pa[i], s, i);
    };

    // tile 0: S and softmax only (O is still 0, so alpha is not needed)
    wait_and_prefetch(0);
    wgmma_fence();
    issue_s(0);
    wgmma_wait<0>();
    reg_fence(s);
    softmax(0);
    pack_p();

    for (int j = 1; j < n_blocks; j++) {
        wait_and_prefetch(j);
        reg_fence(s); reg_fence(pa); reg_fence(o_acc);   // every ordinary write to them is done
        wgmma_fence();                                   // ... and visible to wgmma
        issue_s(j);
        issue_pv(j - 1);
        wgmma_wait<1>();   // S_j done; P_{j-1} V_{j-1} may still run: o_acc and pa are not ours yet
        reg_fence(s);
        softmax(j);
        wgmma_wait<0>();   // P V done
        reg_fence(o_acc); reg_fence(pa);
        #pragma unroll
        for (int dt = 0; dt < kDT; dt++) {
            o_acc[4 * dt + 0] *= alpha[0]; o_acc[4 * dt + 1] *= alpha[0];
            o_acc[4 * dt + 2] *= alpha[1]; o_acc[4 * dt + 3] *= alpha[1];
        }
        pack_p();
    }

    // the last P V
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();   // V_{n_blocks-1} visible (its group may be the newest); every S wgmma is complete, so Q is free
    reg_fence(pa); reg_fence(o_acc);
    wgmma_fence();
    issue_pv(n_blocks - 1);
    wgmma_wait<0>();
    reg_fence(o_acc);

    // the barrier above ordered every read of Q before the epilogue stages O in its rows
    hopper_forward_epilogue<HS, false>(p, o_acc, row_max, row_sum, q_smem, b, h, m_start, warp_row0);
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

template <int HS, int kBlockN>
void launch_attention_forward_hopper_overlap(const AttentionForwardParams& p, cudaStream_t stream) {
    using Tile = HopperForwardOverlapTile<HS, kBlockN>;
    launch_with_smem<attention_forward_hopper_overlap_kernel<HS, kBlockN>>(dim3(p.B * p.NH, ceil_div(p.T, Tile::kBlockM)),
                         Tile::kThreads, Tile::kSmemBytes, stream, p);
}


bool attention_forward4_supports(const Shape& s, int) { return (s.HS == 64 || s.HS == 128) && hopper_path_available(); }

void attention_forward4(const AttentionForwardParams& p, int config, cudaStream_t stream) {
    if (p.HS == 64) {
        switch (config) {
            case 0: launch_attention_forward_hopper<64, 128>(p, stream); break;
            case 1: launch_attention_forward_hopper<64, 64>(p, stream); break;
            case 2: launch_attention_forward_hopper_overlap<64, 64>(p, stream); break;
            case 3: launch_attention_forward_hopper_overlap<64, 128>(p, stream); break;
        }
    } else {
        switch (config) {
            case 0: launch_attention_forward_hopper<128, 64>(p, stream); break;
            case 1: launch_attention_forward_hopper<128, 128>(p, stream); break;
            case 2: launch_attention_forward_hopper<128, 128, /*kPvN128=*/true>(p, stream); break;
        }
    }
}
