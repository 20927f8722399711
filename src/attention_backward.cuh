/*
flashgpt attention, the backward's kernels (the forward's are in src/attention_forward.cuh, whose helpers these share):
the preprocess, the mma.sync split, atomic and fused kernels (sm_80+), the warp-specialised wgmma/TMA split and atomic
kernels (sm_90a), the dBias reductions, and their launchers. src/attention_backward.cu and _general.cu instantiate what
their dispatch reaches; dev/cuda/attention_backward.cu's variants include this header to run the same kernels with other tiles.
*/
/*
Backward: dq, dk, dv from dout, the forward's out and lse, and q, k, v (the forward's layouts and strides).
  D = rowsum(dout * out); P = exp(scale * Q K^T - lse); dV = P^T dO; dP = dO V^T; dS = P * (dP - D);
  dQ = scale * dS K; dK = scale * dS^T Q                     (FA2 paper section 3.1.2)
Kernels (sm_80+ mma.sync, the forward's fragments, swizzle and cp.async loads):
  preprocess  D ("dpsum") and lse2 = lse * log2(e) into scratch, padded to a multiple of kBwdRowPad rows per
              head: padded rows get D = 0 and lse2 = +inf, so their P is exactly 0 and no kernel needs a
              row-bounds check on them. Zeroes the fp32 dQ accumulator when the atomic path runs.
  dkdv        one CTA per (key block of kBlockN = 16 * kMT * warps keys, b, key/value head); each warp owns 16 * kMT
              keys. It walks the query tiles that see its keys (with GQA those of each query head of the group) computing S^T = K Q^T and dP^T = V dO^T with the keys as
              the MMA rows, so P^T and dS^T come out of the accumulators already in the A-fragment layout of
              dV += P^T dO and dK += dS^T Q (FA3's "swapAB"): dK and dV stay in registers for the whole walk.
              With kAtomicDq it also stages dS^T in shared memory and adds dQ += dS K into an fp32 accumulator
              with red.global.add (FA2's KV-parallel backward: 5 GEMMs per tile pair, summation order varies).
  dq          (split path) one CTA per (query block, b, h): recomputes S and dP, dQ += dS K in registers,
              written once. With dkdv it is 7 GEMMs per tile pair instead of 5, but no atomics: deterministic.
  fused       one kernel per 128-key block with wider warp tiles than dkdv (see its
              header). The atomic path runs it with dQ (FA2's 5 GEMMs, less shared-memory traffic); the split
              path runs it without (kDq = false), in place of dkdv, next to the dq kernel.
  postprocess (atomic path) the fp32 dQ accumulator * scale -> bf16 into dq.
Paths: "split" (deterministic, bit-identical run to run: the training default) and "atomic" (opt-in:
FLASHGPT_ATTN_NONDETERMINISTIC=1 or attention_backward_nondeterministic() = true): the fused kernel where its shared
memory fits, else the dkdv kernel's atomic mode. The atomic path is faster at every shape measured (its grid is key
blocks x B*NH, so it does not starve the GPU at small B*NH, and it runs 5 GEMMs a tile pair instead of 7); the split
path exists for determinism.
On Hopper with sm_90a code in the binary, the split path runs on the warp-specialised TMA kernels (*_hopper_ws
below), and the atomic one, at HS 128 only, is the warp-specialised dK/dV kernel with atomic dQ
(attention_backward_atomic_hopper_ws). At HS 128 from T = 8192 the default is that kernel with its dQ adds in a fixed
order, deterministic (attention_backward_ordered_dq). dev/cuda/RESULTS.md has the measurements behind each choice.
The fused and atomic kernels serve causal self-attention without GQA (GPT-2's family); every other call runs the split.
*/
#pragma once
#include <cuda_fp8.h>
#include "attention_forward.cuh"


// lse2 / dpsum rows per head are padded to this (the largest query tile), so tiles never read past them
constexpr int kBwdRowPad = 128;
__host__ __device__ inline int bwd_padded_T(int T) { return ceil_div(T, kBwdRowPad) * kBwdRowPad; }

// the Hopper dK/dV kernel's ordered dQ: one counter per (head, 64-query block) = the key blocks that have added
// their dQ into it (see the kernel's dQ writer)
constexpr int kDqOrderRows = 64;
// scratch = lse2 (B*NH, Tpad) fp32 | dpsum (B*NH, Tpad) fp32 | [atomic path] dq_accum (B*NH, T, HS) fp32 |
// dq_order (B*NH, T / kDqOrderRows) int
// | [dbias] ds (B*NH, T, Tk) fp32 | [gate] dO = dout * gate, bf16, rows as Q's (the extras never take the atomic path)
struct BackwardScratch { float* lse2; float* dpsum; float* dq_accum; int* dq_order; float* ds; floatX* gated_dout; };
__host__ __device__ inline BackwardScratch backward_scratch(const AttentionBackwardParams& p) {
    const size_t rows = (size_t)p.B * p.NH * bwd_padded_T(p.T);
    float* base = (float*)p.scratch;
    float* ds_end = base + 2 * rows + (p.dbias || p.dbias2 ? (size_t)p.B * p.NH * p.T * p.Tk : 0);
    return {base, base + rows, base + 2 * rows, (int*)(base + 2 * rows + (size_t)p.B * p.NH * p.T * p.HS), base + 2 * rows, (floatX*)ds_end};
}
// the gated dO's strides in the scratch: row r of sequence b (packed: r = its first row + t) at r * NH * HS
__host__ __device__ inline AttentionStrides gated_dout_strides(const AttentionBackwardParams& p) {
    return {p.x.cu_seqlens_q ? 0 : (long long)p.T * p.NH * p.HS, (long long)p.NH * p.HS, p.HS};
}

// ----------------------------------------------------------------------------
// preprocess: dpsum = rowsum(dout * out), lse2 = lse * log2(e); a power of two of lanes per row (the shuffle reduction
// needs it: 16 at HS 96, HS / 8 otherwise), 16 bytes each
template <int HS> __host__ __device__ constexpr int preprocess_lanes() { return HS == 96 ? 16 : HS / 8; }

template <int HS, bool kExtras = false, bool kHalf = false>
__global__ void attention_backward_preprocess_kernel(const AttentionBackwardParams p, bool zero_dq) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    pdl_launch_dependents();   // the Hopper dK/dV kernel may get ready meanwhile (it waits for this grid's results)
#endif
    constexpr int kLanes = preprocess_lanes<HS>();
    const int T = p.T, NH = p.NH, Tp = bwd_padded_T(T);
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t row = idx / kLanes;                 // (b * NH + h) * Tp + t
    const int chunk = idx % kLanes;
    const int bh = row / Tp, t = row % Tp, b = bh / NH, h = bh % NH;
    // packed sequences: sequence b's rows are q0 .. q0 + T_b - 1; its rows from T_b are padding
    int T_b = T, q0 = 0;
    if (kExtras && p.x.cu_seqlens_q && row < (size_t)p.B * NH * Tp) { q0 = p.x.cu_seqlens_q[b]; T_b = p.x.cu_seqlens_q[b + 1] - q0; }
    // HS 16: 8 or 16; the kExtras copy also takes a head dim below HS (its kernels' zero-padded ones)
    const bool valid = row < (size_t)p.B * NH * Tp && t < T_b && chunk < (HS == 16 || kExtras ? p.HS / 8 : HS / 8);
    BackwardScratch sc = backward_scratch(p);
    float sum = 0.0f;
    if (valid) {
        const int r = q0 + t;
        const uint4 o = *reinterpret_cast<const uint4*>(p.out + b * p.o_st.batch + r * p.o_st.row + h * p.o_st.head + chunk * 8);
        uint4 d = *reinterpret_cast<const uint4*>(p.dout + b * p.do_st.batch + r * p.do_st.row + h * p.do_st.head + chunk * 8);
        if (kExtras && p.x.gate) {   // gating: dgate = dout * O; the kernels' dO = dout * gate, in the scratch
            const AttentionStrides& gs = p.x.gate_st;
            const uint4 gv = *reinterpret_cast<const uint4*>(p.x.gate + b * gs.batch + r * gs.row + h * gs.head + chunk * 8);
            *reinterpret_cast<uint4*>(p.dgate + b * gs.batch + r * gs.row + h * gs.head + chunk * 8) = mul_x8<kHalf>(d, o);
            d = mul_x8<kHalf>(d, gv);
            const AttentionStrides ds = gated_dout_strides(p);
            *reinterpret_cast<uint4*>(sc.gated_dout + b * ds.batch + r * ds.row + h * ds.head + chunk * 8) = d;
        }
        const uint32_t* o2 = reinterpret_cast<const uint32_t*>(&o);
        const uint32_t* d2 = reinterpret_cast<const uint32_t*>(&d);
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            float2 of = unpack_x2<kHalf>(o2[i]), df = unpack_x2<kHalf>(d2[i]);
            sum += of.x * df.x + of.y * df.y;
        }
        if (zero_dq) {
            float4* acc = reinterpret_cast<float4*>(sc.dq_accum + ((size_t)bh * T + t) * HS + chunk * 8);
            acc[0] = acc[1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (chunk == 0 && t % kDqOrderRows == 0) sc.dq_order[(size_t)bh * ceil_div(T, kDqOrderRows) + t / kDqOrderRows] = 0;
        }
    }
    #pragma unroll
    for (int off = kLanes / 2; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffff, sum, off);
    if (chunk == 0 && row < (size_t)p.B * NH * Tp) {
        // padded rows: D = 0 and lse2 = +inf make P = exp2(s - inf) = 0 exactly (a -inf LSE would too)
        const float l = valid ? p.lse[(size_t)bh * T + t] : -INFINITY;
        sc.dpsum[row] = valid ? sum : 0.0f;
        sc.lse2[row] = l == -INFINITY ? INFINITY : l * kLog2e;
    }
}

// postprocess (atomic path): dq (bf16 or fp16) = scale * dq_accum (B*NH, T, HS) fp32; 8 elements per thread
template <int HS, bool kHalf = false>
__global__ void attention_backward_postprocess_kernel(const AttentionBackwardParams p) {
    constexpr int kChunks = HS / 8;
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)p.B * p.NH * p.T * kChunks) return;
    const int chunk = idx % kChunks;
    const size_t r = idx / kChunks;                  // (b * NH + h) * T + t
    const int t = r % p.T, bh = r / p.T, b = bh / p.NH, h = bh % p.NH;
    const float scale = p.scale;
    const float4* acc = reinterpret_cast<const float4*>(backward_scratch(p).dq_accum + r * HS + chunk * 8);
    float4 x = acc[0], y = acc[1];
    uint4 packed = make_uint4(pack_x2<kHalf>(x.x * scale, x.y * scale), pack_x2<kHalf>(x.z * scale, x.w * scale),
                              pack_x2<kHalf>(y.x * scale, y.y * scale), pack_x2<kHalf>(y.z * scale, y.w * scale));
    *reinterpret_cast<uint4*>(p.dq + b * p.dq_st.batch + t * p.dq_st.row + h * p.dq_st.head + chunk * 8) = packed;
}

// ----------------------------------------------------------------------------
// Warp-level steps of the dK/dV and fused kernels (S^T with the keys as MMA rows, so P^T and dS^T come out of the
// accumulators already in the A-fragment layout of dV += P^T dO and dK += dS^T Q: FA3's "swapAB"). A warp owns
// kMT m16 tiles of keys (rows warp_row0.. of the K, V tiles); accumulator tile [mt][nt] holds keys mt*16 + g, + 8
// and queries q0 + nt*8 + 2tq, +1 of the stage's Q, dO tiles (g = lane / 4, tq = lane % 4).

// S^T = K Q^T and dP^T = V dO^T, 16 * kMT keys x kQT * 8 queries
template <bool kHalf, int HS, int kMT, int kQT>
__device__ __forceinline__ void backward_st_dpt(float (&st)[kMT][kQT][4], float (&dpt)[kMT][kQT][4], const uint8_t* k_smem,
                                                const uint8_t* v_smem, const uint8_t* q_s, const uint8_t* do_s,
                                                int warp_row0, int q0, int lane) {
    #pragma unroll
    for (int mt = 0; mt < kMT; mt++)
        #pragma unroll
        for (int nt = 0; nt < kQT; nt++)
            #pragma unroll
            for (int e = 0; e < 4; e++) st[mt][nt][e] = dpt[mt][nt][e] = 0.0f;
    #pragma unroll
    for (int ks = 0; ks < HS / 16; ks++) {
        uint32_t ka[kMT][4], va[kMT][4];   // A fragments: this warp's keys, d = 16ks..16ks+15
        #pragma unroll
        for (int mt = 0; mt < kMT; mt++) {
            const int key = warp_row0 + mt * 16 + (lane % 8) + 8 * ((lane / 8) % 2);
            ldmatrix_x4(ka[mt], smem_addr(k_smem + swizzle<HS>(key, 2 * ks + lane / 16)));
            ldmatrix_x4(va[mt], smem_addr(v_smem + swizzle<HS>(key, 2 * ks + lane / 16)));
        }
        #pragma unroll
        for (int np = 0; np < kQT / 2; np++) {
            uint32_t qb[4], dob[4];   // B fragments of query tiles 2np and 2np+1 (Q, dO are [query][d])
            const int qrow = q0 + np * 16 + (lane % 8) + 8 * (lane / 16);
            ldmatrix_x4(qb, smem_addr(q_s + swizzle<HS>(qrow, 2 * ks + (lane / 8) % 2)));
            ldmatrix_x4(dob, smem_addr(do_s + swizzle<HS>(qrow, 2 * ks + (lane / 8) % 2)));
            #pragma unroll
            for (int mt = 0; mt < kMT; mt++) {
                mma_16816<kHalf>(st[mt][2 * np], ka[mt], qb[0], qb[1]);
                mma_16816<kHalf>(st[mt][2 * np + 1], ka[mt], qb[2], qb[3]);
                mma_16816<kHalf>(dpt[mt][2 * np], va[mt], dob[0], dob[1]);
                mma_16816<kHalf>(dpt[mt][2 * np + 1], va[mt], dob[2], dob[3]);
            }
        }
    }
}

// In place: P^T = exp2(S^T * c - lse2[query]), 0 where key > query (masked only); dS^T = P^T * (dP^T - D[query]).
// lse2_s, dpsum_s: the stage's rows; warp_key0 / m_start: the key index of row warp_row0 and the query index of row 0
template <int kMT, int kQT>
__device__ __forceinline__ void backward_p_ds(float (&st)[kMT][kQT][4], float (&dpt)[kMT][kQT][4], const float* lse2_s,
                                              const float* dpsum_s, int q0, bool masked, int warp_key0, int m_start,
                                              float scale_log2, int lane) {
    const int g = lane / 4, tq = lane % 4;
    #pragma unroll
    for (int nt = 0; nt < kQT; nt++) {
        const int q = q0 + nt * 8 + 2 * tq;
        const float2 l2 = *reinterpret_cast<const float2*>(lse2_s + q);
        const float2 dps = *reinterpret_cast<const float2*>(dpsum_s + q);
        #pragma unroll
        for (int mt = 0; mt < kMT; mt++)
            #pragma unroll
            for (int e = 0; e < 4; e++) {
                float x = st[mt][nt][e] * scale_log2 - (e % 2 ? l2.y : l2.x);
                if (masked && warp_key0 + mt * 16 + g + 8 * (e / 2) > m_start + q + (e % 2)) x = -INFINITY;
                const float pr = fast_exp2(x);
                st[mt][nt][e] = pr;
                dpt[mt][nt][e] = pr * (dpt[mt][nt][e] - (e % 2 ? dps.y : dps.x));
            }
    }
}

// dV += P^T dO and dK += dS^T Q over the warp's kQT * 8 queries: accumulator tiles 2kk, 2kk+1 are the A fragment of
// k step kk; B fragments of d tiles 2dp, 2dp+1 by transposed loads of the [query][d] tiles. mma_accum_times_tile
// twice (dV, then dK) would do the same, but the two interleaved share the address math: as two calls ptxas spilled
// 4 more bytes in the fused kernel and took up to 7 more registers elsewhere.
// kCols < HS: only the head-dim columns col0 .. col0 + kCols - 1 of dV and dK (the accumulators hold those)
template <bool kHalf, int HS, int kMT, int kQT, int kCols = HS>
__device__ __forceinline__ void backward_dv_dk(float (&dv_acc)[kMT][kCols / 8][4], float (&dk_acc)[kMT][kCols / 8][4],
                                               const float (&st)[kMT][kQT][4], const float (&dpt)[kMT][kQT][4],
                                               const uint8_t* q_s, const uint8_t* do_s, int q0, int lane, int col0 = 0) {
    #pragma unroll
    for (int kk = 0; kk < kQT / 2; kk++) {
        uint32_t pa[kMT][4], dsa[kMT][4];
        #pragma unroll
        for (int mt = 0; mt < kMT; mt++) {
            accum_tiles_to_a_frag<kHalf>(pa[mt], st[mt][2 * kk], st[mt][2 * kk + 1]);
            accum_tiles_to_a_frag<kHalf>(dsa[mt], dpt[mt][2 * kk], dpt[mt][2 * kk + 1]);
        }
        #pragma unroll
        for (int dp = 0; dp < kCols / 16; dp++) {
            uint32_t dob[4], qb[4];
            const int qrow = q0 + 16 * kk + (lane % 8) + 8 * ((lane / 8) % 2);
            ldmatrix_x4_trans(dob, smem_addr(do_s + swizzle<HS>(qrow, col0 / 8 + 2 * dp + lane / 16)));
            ldmatrix_x4_trans(qb, smem_addr(q_s + swizzle<HS>(qrow, col0 / 8 + 2 * dp + lane / 16)));
            #pragma unroll
            for (int mt = 0; mt < kMT; mt++) {
                mma_16816<kHalf>(dv_acc[mt][2 * dp], pa[mt], dob[0], dob[1]);
                mma_16816<kHalf>(dv_acc[mt][2 * dp + 1], pa[mt], dob[2], dob[3]);
                mma_16816<kHalf>(dk_acc[mt][2 * dp], dsa[mt], qb[0], qb[1]);
                mma_16816<kHalf>(dk_acc[mt][2 * dp + 1], dsa[mt], qb[2], qb[3]);
            }
        }
    }
}

// epilogue: dK *= scale; dK, dV (the warp's keys x kDT * 8 columns from col0) -> bf16, staged in the warp's own rows
// of the K/V tiles (swizzle<HS>; free once every warp is past the last barrier) for 16-byte stores
// (dk_gl, dv_gl: key 0 of the head; Tk keys)
template <bool kHalf, int HS, int kMT, int kDT>
__device__ __forceinline__ void backward_store_dk_dv(const float (&dk_acc)[kMT][kDT][4], const float (&dv_acc)[kMT][kDT][4],
                                                     uint8_t* k_smem, uint8_t* v_smem, floatX* dk_gl, long long dk_row,
                                                     floatX* dv_gl, long long dv_row, float scale, int Tk, int n_start,
                                                     int warp_row0, int col0, int lane, int head_chunks = HS / 8) {
    const int g = lane / 4, tq = lane % 4;
    #pragma unroll
    for (int mt = 0; mt < kMT; mt++)
        #pragma unroll
        for (int half = 0; half < 2; half++) {
            const int row = warp_row0 + mt * 16 + g + 8 * half;
            #pragma unroll
            for (int dt = 0; dt < kDT; dt++) {
                *reinterpret_cast<uint32_t*>(k_smem + swizzle<HS>(row, col0 / 8 + dt) + 4 * tq) =
                    pack_x2<kHalf>(dk_acc[mt][dt][2 * half] * scale, dk_acc[mt][dt][2 * half + 1] * scale);
                *reinterpret_cast<uint32_t*>(v_smem + swizzle<HS>(row, col0 / 8 + dt) + 4 * tq) =
                    pack_x2<kHalf>(dv_acc[mt][dt][2 * half], dv_acc[mt][dt][2 * half + 1]);
            }
        }
    __syncwarp();
    for (int c = lane; c < 16 * kMT * kDT; c += 32) {
        const int row = warp_row0 + c / kDT, ch = col0 / 8 + c % kDT, t = n_start + row;
        if (t < Tk && ch < head_chunks) {
            *reinterpret_cast<uint4*>(dk_gl + t * dk_row + ch * 8) = *reinterpret_cast<const uint4*>(k_smem + swizzle<HS>(row, ch));
            *reinterpret_cast<uint4*>(dv_gl + t * dv_row + ch * 8) = *reinterpret_cast<const uint4*>(v_smem + swizzle<HS>(row, ch));
        }
    }
}

// ----------------------------------------------------------------------------
// dK/dV kernel (optionally with atomic dQ), on the warp steps above: each warp owns 16 * kMT keys and all kBlockM
// queries of a step. kMT = 2 loads each Q / dO fragment once for twice the MMAs (ldmatrix traffic, not the tensor
// cores, limits kMT = 1) at the price of twice the dK/dV registers.

template <int HS, int kNWarps, int kMT, int kBlockM, bool kAtomicDq>
struct BackwardKVTile {
    static constexpr int kBlockN = 16 * kMT * kNWarps;          // keys per CTA, 16 * kMT per warp
    static constexpr int kThreads = 32 * kNWarps;
    static constexpr int kKVBytes = kBlockN * HS * 2;            // one K or V tile
    static constexpr int kQBytes = kBlockM * HS * 2;             // one Q or dO tile
    static constexpr int kStageBytes = 2 * kQBytes + 2 * kBlockM * 4;   // Q, dO, lse2, dpsum
    static constexpr int kDsBytes = kAtomicDq ? kBlockN * kBlockM * 2 : 0;   // dS^T (kBlockN, kBlockM) bf16
    // K, V, [dS^T], then the two stages of the Q/dO pipeline
    static constexpr int kSmemBytes = 2 * kKVBytes + kDsBytes + 2 * kStageBytes;
};

template <int HS, int kNWarps, int kMT, int kBlockM, bool kAtomicDq, bool kExtras, bool kHalf>
__device__ __forceinline__ void attention_backward_dkdv_tiles(const AttentionBackwardParams& p) {
    using Tile = BackwardKVTile<HS, kNWarps, kMT, kBlockM, kAtomicDq>;
    constexpr int kBlockN = Tile::kBlockN, kThreads = Tile::kThreads;
    constexpr int kQT = kBlockM / 8;      // n8 tiles of S^T (queries)
    constexpr int kDT = HS / 8;           // n8 tiles of dK, dV
    // HS 256: dK and dV of all 256 columns would fill the registers alone, so blockIdx.z takes half the columns (S^T
    // and dP^T, over every column, are computed by both halves)
    constexpr int kDSplit = HS > 128 ? 2 : 1, kAccDT = kDT / kDSplit;
    static_assert(!kAtomicDq || kDSplit == 1, "the atomic dQ adds every column once");
    const int col0 = blockIdx.z * (HS / kDSplit);
    static_assert(!kAtomicDq || kBlockM % 64 == 0, "dS^T rows must be a multiple of 128 bytes for the swizzle");
    extern __shared__ __align__(1024) uint8_t smem[];
    uint8_t* k_smem = smem;                                     // (kBlockN, HS), dK staging at the end
    uint8_t* v_smem = smem + Tile::kKVBytes;                    // (kBlockN, HS), dV staging at the end
    uint8_t* ds_smem = smem + 2 * Tile::kKVBytes;               // (kBlockN, kBlockM) dS^T, atomic path only
    uint8_t* stage_smem = ds_smem + Tile::kDsBytes;
    auto q_tile = [&](int s) { return stage_smem + s * Tile::kStageBytes; };
    auto do_tile = [&](int s) { return stage_smem + s * Tile::kStageBytes + Tile::kQBytes; };
    auto lse2_tile = [&](int s) { return reinterpret_cast<float*>(stage_smem + s * Tile::kStageBytes + 2 * Tile::kQBytes); };

    // one CTA per (key block, b, key/value head): with GQA it walks the query blocks of every query head of its group,
    // head by head, so dK and dV are summed in registers in a fixed order and written once
    const int NH = p.NH, Tp = bwd_padded_T(p.T), group = NH / p.NH_kv;
    const int b = blockIdx.x / p.NH_kv, h_kv = blockIdx.x % p.NH_kv;
    // sequence b's own lengths and rows (AttentionExtras, in the kExtras copy only)
    const SequenceSpan seq = kExtras ? attention_sequence(p, b) : SequenceSpan{p.T, p.Tk, 0, 0};
    const KeyBand band = attention_band(p.x, p.causal, seq.T, seq.Tk);
    const int T = seq.T, Tk = seq.Tk, diag = band.hi;
    const int n_block = blockIdx.y;                     // block 0 has the most query tiles: launched first
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, tq = lane % 4;
    const floatX* k_gl = p.k + b * p.k_st.batch + h_kv * p.k_st.head + seq.k0 * p.k_st.row;
    const floatX* v_gl = p.v + b * p.v_st.batch + h_kv * p.v_st.head + seq.k0 * p.v_st.row;
    const BackwardScratch sc = backward_scratch(p);
    const int n_start = n_block * kBlockN;
    // packed keys: nothing of this sequence here. Padded (seqlens_k): the block's rows are written, as zeros.
    if (kExtras && p.x.cu_seqlens_k && n_start >= Tk) return;
    const int head_chunks = HS == 16 ? p.HS / 8 : HS / 8;   // head dim 8 runs the HS 16 copy, zero-padded
    const int warp_row0 = warp * 16 * kMT;              // this warp's first key row inside the tile
    const int warp_key0 = n_start + warp_row0;          // ... and as a key index
    // the query blocks with a query that sees a key here (attention_query_blocks: the band's two diagonals)
    const QueryBlocks qb = attention_query_blocks(n_start, kBlockN, kBlockM, band, ceil_div(T, kBlockM));
    const int m_first = qb.first;
    // document masking: the query blocks end at the first whose first row starts a document after these keys
    int m_end = qb.end;
    if (kExtras && p.x.doc_start) {
        const int* docs = p.x.doc_start + (size_t)b * p.T;
        m_end = m_first;
        while (m_end < qb.end && docs[m_end * kBlockM] < n_start + kBlockN) m_end++;
    }
    const int head_steps = n_start < Tk ? max(m_end - m_first, 0) : 0, steps = group * head_steps;
    auto step_bh = [&](int i) { return b * NH + h_kv * group + i / head_steps; };   // the step's query head (b * NH + h)
    auto step_m_block = [&](int i) { return m_first + i % head_steps; };

    // kExtras with a bias: its (kBlockM queries, kBlockN keys) tile of each stage, after the two stages
    const int bias_pitch = kExtras ? bias_tile_pitch(kBlockN, p.x.bias_fp32) : 0;
    auto bias_tile = [&](int s) { return stage_smem + 2 * Tile::kStageBytes + s * kBlockM * bias_pitch; };
    auto load_stage = [&](int s, int i) {
        const int bh = step_bh(i), h = bh % NH, m_block = step_m_block(i);
        if constexpr (kExtras) {
            if (p.x.bias) load_bias_tile<kBlockM, kBlockN, kThreads>(bias_tile(s), bias_rows(p.x, b, h), m_block * kBlockM, n_start, T, Tk);
        }
        load_tile_async<HS, kThreads>(q_tile(s), p.q + b * p.q_st.batch + h * p.q_st.head + seq.q0 * p.q_st.row, p.q_st.row, m_block * kBlockM,
                                      kBlockM, T, head_chunks);
        load_tile_async<HS, kThreads>(do_tile(s), p.dout + b * p.do_st.batch + h * p.do_st.head + seq.q0 * p.do_st.row, p.do_st.row,
                                      m_block * kBlockM, kBlockM, T, head_chunks);
        // lse2 then dpsum, kBlockM floats each; the padding keeps these in bounds and 16-byte aligned
        for (int c = threadIdx.x; c < kBlockM / 2; c += kThreads) {
            const int which = c / (kBlockM / 4), j = c % (kBlockM / 4);
            const float* src = (which ? sc.dpsum : sc.lse2) + (size_t)bh * Tp + m_block * kBlockM + 4 * j;
            cp_async_16(smem_addr(lse2_tile(s) + which * kBlockM + 4 * j), src, true);
        }
    };
    load_tile_async<HS, kThreads>(k_smem, k_gl, p.k_st.row, n_start, kBlockN, Tk, head_chunks);
    load_tile_async<HS, kThreads>(v_smem, v_gl, p.v_st.row, n_start, kBlockN, Tk, head_chunks);
    if (steps > 0) load_stage(0, 0);
    cp_async_commit();

    float dk_acc[kMT][kAccDT][4], dv_acc[kMT][kAccDT][4];
    #pragma unroll
    for (int mt = 0; mt < kMT; mt++)
        #pragma unroll
        for (int dt = 0; dt < kAccDT; dt++)
            #pragma unroll
            for (int e = 0; e < 4; e++) dk_acc[mt][dt][e] = dv_acc[mt][dt][e] = 0.0f;
    const float scale_log2 = p.scale * kLog2e;

    for (int i = 0; i < steps; i++) {
        const int stage = i & 1, m_block = step_m_block(i);
        if (i + 1 < steps) {                            // prefetch the next Q/dO tile into the other stage
            load_stage(stage ^ 1, i + 1);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();   // this stage's Q, dO, lse2, dpsum (and K, V on the first pass) are visible to every warp
        const int m_start = m_block * kBlockM;
        const uint8_t* q_s = q_tile(stage);
        const uint8_t* do_s = do_tile(stage);
        const float* lse2_s = lse2_tile(stage);
        const float* dpsum_s = lse2_s + kBlockM;

        // S^T = K Q^T and dP^T = V dO^T: 16 * kMT keys x kBlockM queries per warp
        float st[kMT][kQT][4], dpt[kMT][kQT][4];
        backward_st_dpt<kHalf, HS, kMT, kQT>(st, dpt, k_smem, v_smem, q_s, do_s, warp_row0, 0, lane);
        // softcap and ALiBi first, as the forward applies them (the softcap would turn a -inf document mask finite)
        const ScoreMods mods = score_mods(p.x, b, step_bh(i) % NH, T, Tk, NH);
        if (attention_has_score_mods(p.x)) apply_score_mods_t<kMT, kQT>(st, mods, warp_key0, m_start, lane);
        if (kExtras && p.x.bias) add_bias_tile_t<kMT, kQT>(st, bias_tile(stage), bias_pitch, p.x.bias_fp32, warp_row0, 1.0f / p.scale, lane);
        if (kExtras && p.x.key_bias) add_key_bias_t<kMT, kQT>(st, key_bias_of(p.x, b, step_bh(i) % NH), n_start + warp_row0, 1.0f / p.scale, lane);
        if (kExtras && p.x.doc_start) {   // document masking: key < its query's document start
            const int* docs = p.x.doc_start + (size_t)b * p.T;
            #pragma unroll
            for (int nt = 0; nt < kQT; nt++)
                #pragma unroll
                for (int e2 = 0; e2 < 2; e2++) {
                    const int q = m_start + nt * 8 + 2 * tq + e2, first = q < T ? docs[q] : 0;
                    #pragma unroll
                    for (int mt = 0; mt < kMT; mt++)
                        #pragma unroll
                        for (int half = 0; half < 2; half++)
                            if (warp_key0 + mt * 16 + g + 8 * half < first) st[mt][nt][2 * half + e2] = -INFINITY;
                }
        }
        // P^T = exp2(S^T * c - lse2[query]), 0 where key > query + diag or key < query + lo (the window, as -inf
        // scores); dS^T = P^T * (dP^T - D[query]). Only tiles where some key of this warp passes some query's limits
        // need the masks (keys past Tk need none: their rows of dK, dV are not stored).
        const bool need_mask = warp_key0 + 16 * kMT - 1 > m_start + diag;
        if (warp_key0 < m_start + kBlockM - 1 + band.lo) mask_before_window_t<kMT, kQT>(st, warp_key0, m_start, band.lo, lane);
        // dropout: dS^T = P^T (dP^T over the kept, scaled, - D), dV from the kept P^T, scaled (the forward's mask)
        uint32_t keep[kMT];
        const bool dropout = kExtras && p.x.dropout_p > 0.0f;
        if (dropout) {
            dropout_keep_bits<kMT, kQT, true>(keep, attention_dropout(p.x), step_bh(i), m_start, warp_key0, lane);
            dropout_apply<kMT, kQT>(dpt, keep, attention_dropout(p.x).scale);
        }
        backward_p_ds<kMT, kQT>(st, dpt, lse2_s, dpsum_s, 0, need_mask, warp_key0, m_start + diag, scale_log2, lane);
        if (p.x.softcap_in != 0.0f) softcap_grad_t<kMT, kQT>(dpt, st, mods, lse2_s, warp_key0, m_start, lane);
        if (dropout) dropout_apply<kMT, kQT>(st, keep, attention_dropout(p.x).scale);
        if constexpr (kAtomicDq) {   // dS^T (bf16) to shared memory, [key][query], for dQ = dS K below
            #pragma unroll
            for (int mt = 0; mt < kMT; mt++)
                #pragma unroll
                for (int nt = 0; nt < kQT; nt++) {
                    const int row = warp_row0 + mt * 16 + g;
                    *reinterpret_cast<uint32_t*>(ds_smem + swizzle<kBlockM>(row, nt) + 4 * tq) = pack_x2<kHalf>(dpt[mt][nt][0], dpt[mt][nt][1]);
                    *reinterpret_cast<uint32_t*>(ds_smem + swizzle<kBlockM>(row + 8, nt) + 4 * tq) = pack_x2<kHalf>(dpt[mt][nt][2], dpt[mt][nt][3]);
                }
        }
        backward_dv_dk<kHalf, HS, kMT, kQT, kAccDT * 8>(dv_acc, dk_acc, st, dpt, q_s, do_s, 0, lane, col0);   // dV += P^T dO, dK += dS^T Q
        if constexpr (kAtomicDq) {
            __syncthreads();   // all of dS^T is in shared memory before any warp reads it
            // dQ (kBlockM x HS) += dS K: warp -> (16-row m tile, slice of the d tiles)
            constexpr int kMTiles = kBlockM / 16, kParts = kNWarps / kMTiles, kPartDT = kDT / kParts;
            static_assert(kNWarps % kMTiles == 0 && kPartDT % 2 == 0, "warps must tile the dQ block");
            const int mt = warp % kMTiles, part = warp / kMTiles;
            float dq[kPartDT][4];
            #pragma unroll
            for (int dt = 0; dt < kPartDT; dt++) dq[dt][0] = dq[dt][1] = dq[dt][2] = dq[dt][3] = 0.0f;
            #pragma unroll
            for (int kk = 0; kk < kBlockN / 16; kk++) {
                uint32_t dsa[4];   // A fragment of dS (queries 16mt.., keys 16kk..) from dS^T: transposed load
                const int key = 16 * kk + (lane % 8) + 8 * (lane / 16);
                ldmatrix_x4_trans(dsa, smem_addr(ds_smem + swizzle<kBlockM>(key, 2 * mt + (lane / 8) % 2)));
                #pragma unroll
                for (int dp = 0; dp < kPartDT / 2; dp++) {
                    uint32_t kb[4];   // B fragments of K (k = key, n = d): transposed load
                    const int krow = 16 * kk + (lane % 8) + 8 * ((lane / 8) % 2);
                    ldmatrix_x4_trans(kb, smem_addr(k_smem + swizzle<HS>(krow, 2 * (part * kPartDT / 2 + dp) + lane / 16)));
                    mma_16816<kHalf>(dq[2 * dp], dsa, kb[0], kb[1]);
                    mma_16816<kHalf>(dq[2 * dp + 1], dsa, kb[2], kb[3]);
                }
            }
            // red.global.add into dq_accum (B*NH, T, HS): atomicAdd with the result unused. sm_90 has a
            // two-float version (one instruction for the thread's adjacent pair of columns)
            #pragma unroll
            for (int half = 0; half < 2; half++) {
                const int t = m_start + 16 * mt + g + 8 * half;
                if (t < T) {
                    float* acc = sc.dq_accum + ((size_t)step_bh(i) * T + t) * HS + part * kPartDT * 8 + 2 * tq;
                    #pragma unroll
                    for (int dt = 0; dt < kPartDT; dt++) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
                        atomicAdd(reinterpret_cast<float2*>(acc + dt * 8), make_float2(dq[dt][2 * half], dq[dt][2 * half + 1]));
#else
                        atomicAdd(acc + dt * 8, dq[dt][2 * half]);
                        atomicAdd(acc + dt * 8 + 1, dq[dt][2 * half + 1]);
#endif
                    }
                }
            }
        }
        __syncthreads();   // every warp is done with this stage (and dS^T) before the next prefetch / store overwrites it
    }

    if (steps == 0) {   // no step waited for the K/V copies: they must land before dK, dV are staged in their buffers
        cp_async_wait<0>();
        __syncthreads();
    }
    if (kExtras && p.x.seqlens_k) {   // padded keys past Tk_b saw zeros for K and V: their gradients are zero
        #pragma unroll
        for (int mt = 0; mt < kMT; mt++)
            #pragma unroll
            for (int e = 0; e < 4; e++)
                if (warp_key0 + mt * 16 + g + 8 * (e / 2) >= Tk)
                    #pragma unroll
                    for (int dt = 0; dt < kAccDT; dt++) dk_acc[mt][dt][e] = dv_acc[mt][dt][e] = 0.0f;
    }
    backward_store_dk_dv<kHalf, HS, kMT, kAccDT>(dk_acc, dv_acc, k_smem, v_smem, p.dk + b * p.dk_st.batch + h_kv * p.dk_st.head + seq.k0 * p.dk_st.row,
                                          p.dk_st.row, p.dv + b * p.dv_st.batch + h_kv * p.dv_st.head + seq.k0 * p.dv_st.row, p.dv_st.row,
                                          p.scale, kExtras && p.x.cu_seqlens_k ? Tk : p.Tk, n_start, warp_row0, col0, lane, head_chunks);
}
template <int HS, int kNWarps, int kMT, int kBlockM, bool kAtomicDq, bool kExtras = false, bool kHalf = false>
__global__ void __launch_bounds__(kNWarps * 32)
attention_backward_dkdv_kernel(const AttentionBackwardParams p) {
    if constexpr (kCompilingSm90a && !kExtras && (kHalf || (HS != 64 && HS != 128))) __trap();   // unreached (kCompilingSm90a)
    else attention_backward_dkdv_tiles<HS, kNWarps, kMT, kBlockM, kAtomicDq, kExtras, kHalf>(p);
}

// ----------------------------------------------------------------------------
// dQ kernel (split path): the forward's layout. One CTA per (query block, b, h), each warp owns 16 * kMT query
// rows with their Q and dO A fragments in registers, and walks the key tiles from the diagonal down. S, dP
// accumulator tile [mt][nt] holds rows mt*16 + g, + 8 and keys nt*8 + 2tq, +1; dS converted to bf16 is the A
// fragment of dQ += dS K, so dS never touches shared memory. kMT = 2 halves the K/V ldmatrix traffic per MMA.

template <int HS, int kNWarps, int kMT, int kBlockN>
struct BackwardQTile {
    static constexpr int kBlockM = 16 * kMT * kNWarps;           // query rows per CTA
    static constexpr int kThreads = 32 * kNWarps;
    static constexpr int kTileBytes = kBlockN * HS * 2;          // one K or V tile
    // Q and dO (Q's rows later stage dQ), then K and V double buffered
    static constexpr int kSmemBytes = 2 * kBlockM * HS * 2 + 2 * 2 * kTileBytes;
};

template <int HS, int kNWarps, int kMT, int kBlockN, bool kExtras, bool kHalf>
__device__ __forceinline__ void attention_backward_dq_tiles(const AttentionBackwardParams& p) {
    using Tile = BackwardQTile<HS, kNWarps, kMT, kBlockN>;
    constexpr int kBlockM = Tile::kBlockM, kThreads = Tile::kThreads;
    constexpr int kKS = HS / 16;          // k16 steps of S = Q K^T, dP = dO V^T
    constexpr int kNT = kBlockN / 8;      // n8 tiles of S per warp (keys)
    constexpr int kDT = HS / 8;           // n8 tiles of dQ
    extern __shared__ __align__(1024) uint8_t smem[];
    uint8_t* q_smem = smem;                                     // (kBlockM, HS), dQ staging at the end
    uint8_t* do_smem = smem + kBlockM * HS * 2;                 // (kBlockM, HS)
    uint8_t* kv_smem = smem + 2 * kBlockM * HS * 2;             // [stage][K, V] (kBlockN, HS) each
    auto k_tile = [&](int s) { return kv_smem + s * 2 * Tile::kTileBytes; };
    auto v_tile = [&](int s) { return kv_smem + s * 2 * Tile::kTileBytes + Tile::kTileBytes; };

    const int NH = p.NH, Tp = bwd_padded_T(p.T);
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH, h_kv = h / (NH / p.NH_kv);
    // sequence b's own lengths and rows (AttentionExtras, in the kExtras copy only)
    const SequenceSpan seq = kExtras ? attention_sequence(p, b) : SequenceSpan{p.T, p.Tk, 0, 0};
    const KeyBand band = attention_band(p.x, p.causal, seq.T, seq.Tk);
    const int T = seq.T, Tk = seq.Tk, diag = band.hi, lo = band.lo;
    const int m_block = gridDim.y - 1 - blockIdx.y;     // longest (last) query tiles first
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, tq = lane % 4;
    const floatX* q_gl = p.q + b * p.q_st.batch + h * p.q_st.head + seq.q0 * p.q_st.row;
    const floatX* k_gl = p.k + b * p.k_st.batch + h_kv * p.k_st.head + seq.k0 * p.k_st.row;
    const floatX* v_gl = p.v + b * p.v_st.batch + h_kv * p.v_st.head + seq.k0 * p.v_st.row;
    const floatX* do_gl = p.dout + b * p.do_st.batch + h * p.do_st.head + seq.q0 * p.do_st.row;
    const int m_start = m_block * kBlockM;
    if (kExtras && m_start >= T) return;                // a packed sequence shorter than the longest
    const int head_chunks = HS == 16 ? p.HS / 8 : HS / 8;   // head dim 8 runs the HS 16 copy, zero-padded
    const int warp_row0 = warp * 16 * kMT;              // first row of this warp inside the tile
    const int n_blocks = attention_key_blocks(m_start + kBlockM - 1, diag, Tk, kBlockN);
    // the key tiles before the block's first row's window, or (document masking) before its document, are skipped
    int n_first = min(attention_first_key_block(m_start, lo, kBlockN), n_blocks - 1), doc_first[kMT][2] = {}, warp_doc_first = 0;
    if constexpr (kExtras) {
        if (p.x.doc_start)
            query_block_documents<kMT, kBlockN>(n_first, doc_first, warp_doc_first, p.x.doc_start + (size_t)b * p.T, m_start,
                                                warp_row0, T, lane);
    }

    // kExtras with a bias: its (kBlockM, kBlockN) tiles ride in the K/V pipeline, double buffered after the K/V stages
    const int bias_pitch = kExtras ? bias_tile_pitch(kBlockN, p.x.bias_fp32) : 0;
    auto bias_tile = [&](int stage) { return kv_smem + 4 * Tile::kTileBytes + stage * kBlockM * bias_pitch; };
    auto load_bias = [&](int stage, int n_block) {
        if constexpr (kExtras) {
            if (p.x.bias) load_bias_tile<kBlockM, kBlockN, kThreads>(bias_tile(stage), bias_rows(p.x, b, h), m_start, n_block * kBlockN, T, Tk);
        }
    };
    load_tile_async<HS, kThreads>(q_smem, q_gl, p.q_st.row, m_start, kBlockM, T, head_chunks);
    load_tile_async<HS, kThreads>(do_smem, do_gl, p.do_st.row, m_start, kBlockM, T, head_chunks);
    load_tile_async<HS, kThreads>(k_tile(0), k_gl, p.k_st.row, (n_blocks - 1) * kBlockN, kBlockN, Tk, head_chunks);
    load_tile_async<HS, kThreads>(v_tile(0), v_gl, p.v_st.row, (n_blocks - 1) * kBlockN, kBlockN, Tk, head_chunks);
    load_bias(0, n_blocks - 1);
    cp_async_commit();

    // this thread's rows (mt*16 + g, + 8): lse2 and D from the (padded) scratch
    const BackwardScratch sc = backward_scratch(p);
    float row_lse2[kMT][2], row_dpsum[kMT][2];
    #pragma unroll
    for (int mt = 0; mt < kMT; mt++)
        #pragma unroll
        for (int half = 0; half < 2; half++) {
            const size_t r = (size_t)bh * Tp + m_start + warp_row0 + mt * 16 + g + 8 * half;
            row_lse2[mt][half] = sc.lse2[r];
            row_dpsum[mt][half] = sc.dpsum[r];
        }
    // Q and dO fragments stay in registers for the whole walk up to HS 128; at HS 256 they would take 128 registers
    // next to dQ's 128, so they are re-read from shared memory each k step
    constexpr bool kFragsInRegs = HS <= 128;
    uint32_t q_frag[kMT][kFragsInRegs ? kKS : 1][4], do_frag[kMT][kFragsInRegs ? kKS : 1][4];
    auto load_frags = [&](uint32_t (&qf)[4], uint32_t (&df)[4], int mt, int ks) {
        const int row = warp_row0 + mt * 16 + (lane % 8) + 8 * ((lane / 8) % 2);
        ldmatrix_x4(qf, smem_addr(q_smem + swizzle<HS>(row, 2 * ks + lane / 16)));
        ldmatrix_x4(df, smem_addr(do_smem + swizzle<HS>(row, 2 * ks + lane / 16)));
    };
    float dq_acc[kMT][kDT][4];
    #pragma unroll
    for (int mt = 0; mt < kMT; mt++)
        #pragma unroll
        for (int dt = 0; dt < kDT; dt++) dq_acc[mt][dt][0] = dq_acc[mt][dt][1] = dq_acc[mt][dt][2] = dq_acc[mt][dt][3] = 0.0f;
    const float scale_log2 = p.scale * kLog2e;

    for (int it = 0; it < n_blocks - n_first; it++) {
        const int n_block = n_blocks - 1 - it;     // diagonal (masked) tile first
        const int stage = it & 1;
        if (it + 1 < n_blocks - n_first) {         // prefetch the next K/V tile into the other stage
            load_tile_async<HS, kThreads>(k_tile(stage ^ 1), k_gl, p.k_st.row, (n_block - 1) * kBlockN, kBlockN, Tk, head_chunks);
            load_tile_async<HS, kThreads>(v_tile(stage ^ 1), v_gl, p.v_st.row, (n_block - 1) * kBlockN, kBlockN, Tk, head_chunks);
            load_bias(stage ^ 1, n_block - 1);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();   // this stage's K/V (and Q, dO on the first pass) are visible to every warp

        if (kFragsInRegs && it == 0) {   // Q and dO fragments stay in registers for the whole walk
            #pragma unroll
            for (int mt = 0; mt < kMT; mt++)
                #pragma unroll
                for (int ks = 0; ks < kKS; ks++) load_frags(q_frag[mt][kFragsInRegs ? ks : 0], do_frag[mt][kFragsInRegs ? ks : 0], mt, ks);
        }
        // a warp whose rows all lie above this K tile, or whose windows all begin past it, has nothing to do here
        const int warp_last_row = m_start + warp_row0 + 16 * kMT - 1;
        if (n_block * kBlockN <= warp_last_row + diag && n_block * kBlockN + kBlockN - 1 >= m_start + warp_row0 + lo &&
            (!kExtras || n_block * kBlockN + kBlockN > warp_doc_first)) {
            const uint8_t* k_s = k_tile(stage);
            const uint8_t* v_s = v_tile(stage);
            float s[kMT][kNT][4], dp[kMT][kNT][4];
            #pragma unroll
            for (int mt = 0; mt < kMT; mt++)
                #pragma unroll
                for (int nt = 0; nt < kNT; nt++)
                    #pragma unroll
                    for (int e = 0; e < 4; e++) s[mt][nt][e] = dp[mt][nt][e] = 0.0f;
            #pragma unroll
            for (int ks = 0; ks < kKS; ks++) {
                uint32_t q_step[kFragsInRegs ? 1 : kMT][4], do_step[kFragsInRegs ? 1 : kMT][4];
                if constexpr (!kFragsInRegs) {
                    #pragma unroll
                    for (int mt = 0; mt < kMT; mt++) load_frags(q_step[kFragsInRegs ? 0 : mt], do_step[kFragsInRegs ? 0 : mt], mt, ks);
                }
                #pragma unroll
                for (int np = 0; np < kNT / 2; np++) {
                    uint32_t kb[4], vb[4];   // B fragments of key tiles 2np, 2np+1 (K, V are [key][d])
                    const int key = np * 16 + (lane % 8) + 8 * (lane / 16);
                    ldmatrix_x4(kb, smem_addr(k_s + swizzle<HS>(key, 2 * ks + (lane / 8) % 2)));
                    ldmatrix_x4(vb, smem_addr(v_s + swizzle<HS>(key, 2 * ks + (lane / 8) % 2)));
                    #pragma unroll
                    for (int mt = 0; mt < kMT; mt++) {
                        const uint32_t (&qa)[4] = kFragsInRegs ? q_frag[mt][kFragsInRegs ? ks : 0] : q_step[kFragsInRegs ? 0 : mt];
                        const uint32_t (&da)[4] = kFragsInRegs ? do_frag[mt][kFragsInRegs ? ks : 0] : do_step[kFragsInRegs ? 0 : mt];
                        mma_16816<kHalf>(s[mt][2 * np], qa, kb[0], kb[1]);
                        mma_16816<kHalf>(s[mt][2 * np + 1], qa, kb[2], kb[3]);
                        mma_16816<kHalf>(dp[mt][2 * np], da, vb[0], vb[1]);
                        mma_16816<kHalf>(dp[mt][2 * np + 1], da, vb[2], vb[3]);
                    }
                }
            }
            const ScoreMods mods = score_mods(p.x, b, h, T, Tk, NH);   // softcap, ALiBi
            if (attention_has_score_mods(p.x)) apply_score_mods<kMT, kNT>(s, mods, m_start + warp_row0, n_block * kBlockN, lane);
            if (kExtras && p.x.bias) add_bias_tile<kMT, kNT>(s, bias_tile(stage), bias_pitch, p.x.bias_fp32, warp_row0, 1.0f / p.scale, lane);
            if (kExtras && p.x.key_bias) add_key_bias<kMT, kNT>(s, key_bias_of(p.x, b, h), n_block * kBlockN, 1.0f / p.scale, lane);
            if (kExtras && p.x.doc_start) mask_before_documents<kMT, kNT>(s, doc_first, n_block * kBlockN, lane);
            // P = exp2(S * c - lse2), 0 where key > query + diag, key < query + lo or key >= Tk (only on tiles crossing
            // this warp's limits); dS = P * (dP - D)
            const bool need_mask = n_block * kBlockN + kBlockN - 1 > min(m_start + warp_row0 + diag, Tk - 1);
            if (n_block * kBlockN < warp_last_row + lo) mask_before_window<kMT, kNT>(s, m_start + warp_row0, n_block * kBlockN, lo, lane);
            if (kExtras && p.x.dropout_p > 0.0f) {   // dropout: dS = P (dP over the kept, scaled, - D) (the forward's mask)
                uint32_t keep[kMT];
                dropout_keep_bits<kMT, kNT, false>(keep, attention_dropout(p.x), b * NH + h, m_start + warp_row0, n_block * kBlockN, lane);
                dropout_apply<kMT, kNT>(dp, keep, attention_dropout(p.x).scale);
            }
            #pragma unroll
            for (int mt = 0; mt < kMT; mt++)
                #pragma unroll
                for (int nt = 0; nt < kNT; nt++)
                    #pragma unroll
                    for (int e = 0; e < 4; e++) {
                        float x = s[mt][nt][e] * scale_log2 - row_lse2[mt][e / 2];
                        const int key = n_block * kBlockN + nt * 8 + 2 * tq + (e % 2);
                        if (need_mask && (key > m_start + warp_row0 + mt * 16 + g + 8 * (e / 2) + diag || key >= Tk)) x = -INFINITY;
                        const float pr = fast_exp2(x);
                        dp[mt][nt][e] = pr * (dp[mt][nt][e] - row_dpsum[mt][e / 2]);
                    }
            if (p.x.softcap_in != 0.0f) {   // the softcap's factor 1 - t^2, t from the capped score s still holds
                const float d0 = mods.dist0(m_start + warp_row0 + g, n_block * kBlockN + 2 * tq);
                #pragma unroll
                for (int mt = 0; mt < kMT; mt++)
                    #pragma unroll
                    for (int nt = 0; nt < kNT; nt++)
                        #pragma unroll
                        for (int e = 0; e < 4; e++)
                            dp[mt][nt][e] *= mods.grad_from_score(s[mt][nt][e], d0 + (float)(mt * 16 + 8 * (e / 2) - nt * 8 - e % 2));
            }
            if (kExtras && p.dbias) {   // dS is d loss / d logit = d loss / d bias: (B, NH, T, Tk) fp32 for the dbias kernel
                #pragma unroll
                for (int mt = 0; mt < kMT; mt++)
                    #pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int row = m_start + warp_row0 + mt * 16 + g + 8 * (e / 2);
                        if (row >= T) continue;
                        float* ds_row = sc.ds + (((size_t)b * NH + h) * p.T + row) * p.Tk;
                        #pragma unroll
                        for (int nt = 0; nt < kNT; nt++) {
                            const int key = n_block * kBlockN + nt * 8 + 2 * tq + (e % 2);
                            if (key < Tk) ds_row[key] = dp[mt][nt][e];
                        }
                    }
            }
            // dQ += dS K (K is [key][d])
            mma_accum_times_tile<kHalf>(dq_acc, dp, [&](int kk, int dpair) {
                const int key = 16 * kk + (lane % 8) + 8 * ((lane / 8) % 2);
                return smem_addr(k_s + swizzle<HS>(key, 2 * dpair + lane / 16));
            });
        }
        __syncthreads();   // every warp is done with this stage before the next prefetch overwrites it
    }

    // epilogue: dQ * scale -> bf16, staged in this warp's own Q rows (only it read them) for 16-byte stores
    const float scale = p.scale;
    #pragma unroll
    for (int mt = 0; mt < kMT; mt++)
        #pragma unroll
        for (int half = 0; half < 2; half++) {
            const int row = warp_row0 + mt * 16 + g + 8 * half;
            #pragma unroll
            for (int dt = 0; dt < kDT; dt++)
                *reinterpret_cast<uint32_t*>(q_smem + swizzle<HS>(row, dt) + 4 * tq) =
                    pack_x2<kHalf>(dq_acc[mt][dt][2 * half] * scale, dq_acc[mt][dt][2 * half + 1] * scale);
        }
    __syncwarp();
    constexpr int kChunks = HS / 8;
    floatX* dq_gl = p.dq + b * p.dq_st.batch + h * p.dq_st.head + seq.q0 * p.dq_st.row;
    for (int c = lane; c < 16 * kMT * kChunks; c += 32) {
        const int row = warp_row0 + c / kChunks, ch = c % kChunks;
        if (m_start + row < T && ch < head_chunks)
            *reinterpret_cast<uint4*>(dq_gl + (m_start + row) * p.dq_st.row + ch * 8) =
                *reinterpret_cast<const uint4*>(q_smem + swizzle<HS>(row, ch));
    }
}
template <int HS, int kNWarps, int kMT, int kBlockN, bool kExtras = false, bool kHalf = false>
__global__ void __launch_bounds__(kNWarps * 32)
attention_backward_dq_kernel(const AttentionBackwardParams p) {
    if constexpr (kCompilingSm90a && !kExtras && (kHalf || (HS != 64 && HS != 128))) __trap();   // unreached (kCompilingSm90a)
    else attention_backward_dq_tiles<HS, kNWarps, kMT, kBlockN, kExtras, kHalf>(p);
}

// ----------------------------------------------------------------------------
// dbias: the dq kernel's dS (B, NH, T, Tk) summed over the bias's broadcast dimensions (its zero strides), one thread
// per dbias element, in a fixed order (deterministic). Elements a row does not see (masked, past its sequence, before
// its document) add 0: the dq kernel skips them.

inline size_t attention_dbias_elements(const AttentionBackwardParams& p, const AttentionStrides& st) {
    return (size_t)(st.batch ? p.B : 1) * (st.head ? p.NH : 1) * (st.row ? p.T : 1) * p.Tk;
}

// st, fp32, dbias: the bias's strides and dtype, and its gradient (bias or bias2)
static __global__ void attention_dbias_kernel(const AttentionBackwardParams p, const AttentionStrides st, bool fp32, void* dbias) {
    const int Bd = st.batch ? p.B : 1, Hd = st.head ? p.NH : 1, Td = st.row ? p.T : 1;
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)Bd * Hd * Td * p.Tk) return;
    const int j = idx % p.Tk, i0 = idx / p.Tk % Td, h0 = idx / ((size_t)p.Tk * Td) % Hd, b0 = idx / ((size_t)p.Tk * Td * Hd);
    const float* ds = backward_scratch(p).ds;
    float sum = 0.0f;
    for (int b = st.batch ? b0 : 0; b < (st.batch ? b0 + 1 : p.B); b++) {
        const SequenceSpan seq = attention_sequence(p, b);
        const KeyBand band = attention_band(p.x, p.causal, seq.T, seq.Tk);
        if (j >= seq.Tk) continue;
        for (int h = st.head ? h0 : 0; h < (st.head ? h0 + 1 : p.NH); h++)
            for (int i = st.row ? i0 : 0; i < (st.row ? i0 + 1 : seq.T); i++)
                if (i < seq.T && j <= i + band.hi && j >= i + band.lo && (!p.x.doc_start || j >= p.x.doc_start[(size_t)b * p.T + i]))
                    sum += ds[(((size_t)b * p.NH + h) * p.T + i) * p.Tk + j];
    }
    const long long at = b0 * st.batch + h0 * st.head + i0 * st.row + j;
    if (fp32) ((float*)dbias)[at] = sum;
    else ((__nv_bfloat16*)dbias)[at] = __float2bfloat16(sum);
}
// The dQ kernel's ordered dBias (kBias copies, a bf16 tile bias with query rows whose gradient is asked for): each warp
// adds its 16 rows x kBlockN keys of dS into an fp32 accumulator of the bias's own (non-broadcast) shape with red.add,
// in a fixed order, so the sums are the same every run, and no (B, NH, T, Tk) dS is ever stored. The items that add
// into the same rows (those that differ only in the bias's broadcast batch / head: their "order" ord) are walked
// ord-major (item w = ord * groups + grp, grp = the bias's own (b, h) and the query block), so each item's
// predecessors come before it in every CTA's walk: no deadlock. ord goes to accumulator slot ord % slots, whose
// counter per (grp, key block, warp) says how many of the slot's earlier ords have added there; a warp waits for
// its turn, adds, fences and counts itself. Enough slots keep the items in flight on different counters; a last
// kernel sums the slots in order into dbias.
struct DbiasOrder {
    float* acc;           // nullptr: off. [slots][Bd][Hd][T][row] fp32, zeroed before the kernel
    int* counters;        // [slots][groups][n_blocks][kBlockM / 16], zeroed before the kernel
    long long row;        // the accumulator's row stride (floats, even)
    int slots, groups, n_blocks, Bd, Hd;
    bool bcast_b, bcast_h;   // the bias broadcasts over batch / heads: those make up ord
};
// The ordered dBias's accumulators and counters (DbiasOrder) for the dQ kernel's kBlockM x kBlockN tiles, zeroed on the
// stream: slots enough that the items in flight (two per SM) find free counters (groups x key blocks of them a slot)
inline DbiasOrder dbias_order(const AttentionBackwardParams& k, int kBlockM, int kBlockN, cudaStream_t stream) {
    static void* buf[2] = {nullptr, nullptr};
    static size_t capacity[2] = {0, 0};
    DbiasOrder o{};
    o.bcast_b = k.x.bias_st.batch == 0, o.bcast_h = k.x.bias_st.head == 0;
    o.Bd = o.bcast_b ? 1 : k.B, o.Hd = o.bcast_h ? 1 : k.NH;
    o.groups = o.Bd * o.Hd * ceil_div(k.T, kBlockM), o.n_blocks = ceil_div(k.Tk, kBlockN);
    o.row = (k.Tk + 1) / 2 * 2;
    const long long ords = (long long)(o.bcast_b ? k.B : 1) * (o.bcast_h ? k.NH : 1), concurrent = (long long)o.groups * o.n_blocks;
    o.slots = (int)std::min(ords, std::max(1LL, ceil_div(2LL * device_props().multiProcessorCount, concurrent)));
    if (attention_tuning().dbias_slots > 0) o.slots = (int)std::min(ords, (long long)attention_tuning().dbias_slots);
    const size_t acc_bytes = (size_t)o.slots * o.Bd * o.Hd * k.T * o.row * sizeof(float);
    const size_t counter_bytes = (size_t)o.slots * o.groups * o.n_blocks * (kBlockM / 16) * sizeof(int);
    o.acc = (float*)grow_device_buffer(buf[0], capacity[0], acc_bytes);
    o.counters = (int*)grow_device_buffer(buf[1], capacity[1], counter_bytes);
    cudaCheck(cudaMemsetAsync(o.acc, 0, acc_bytes, stream));
    cudaCheck(cudaMemsetAsync(o.counters, 0, counter_bytes, stream));
    return o;
}
// dbias (its dtype and strides st) = the ordered dBias's slots summed in order
static __global__ void dbias_slots_kernel(const DbiasOrder o, int T, int Tk, AttentionStrides st, bool fp32, void* dbias) {
    const long long idx = blockIdx.x * 256LL + threadIdx.x, n = (long long)o.Bd * o.Hd * T * Tk;
    if (idx >= n) return;
    const int j = idx % Tk, i = idx / Tk % T, hd = idx / ((long long)Tk * T) % o.Hd, bd = idx / ((long long)Tk * T * o.Hd);
    const size_t slot_elems = (size_t)o.Bd * o.Hd * T * o.row, at = (((size_t)bd * o.Hd + hd) * T + i) * o.row + j;
    float sum = 0.0f;
    for (int s = 0; s < o.slots; s++) sum += o.acc[s * slot_elems + at];
    const long long to = bd * st.batch + hd * st.head + i * st.row + j;
    if (fp32) ((float*)dbias)[to] = sum;
    else ((__nv_bfloat16*)dbias)[to] = __float2bfloat16(sum);
}
inline void dbias_from_order(const DbiasOrder& o, const AttentionBackwardParams& k, const AttentionStrides& st, bool fp32, void* dbias,
                             cudaStream_t stream) {
    const long long n = (long long)o.Bd * o.Hd * k.T * k.Tk;
    dbias_slots_kernel<<<(unsigned)ceil_div(n, 256LL), 256, 0, stream>>>(o, k.T, k.Tk, st, fp32, dbias);
    cudaCheck(cudaGetLastError());
}

inline void launch_attention_dbias(const AttentionBackwardParams& p, const AttentionStrides& st, bool fp32, void* dbias, cudaStream_t stream) {
    const size_t n = attention_dbias_elements(p, st);
    attention_dbias_kernel<<<(unsigned)ceil_div(n, (size_t)256), 256, 0, stream>>>(p, st, fp32, dbias);
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------
// fused kernel: dK, dV and (kDq) dQ in one kernel, 5 GEMMs per tile pair, shaped for shared-memory traffic. Without
// dQ (kDq = false) it is the split path's dK/dV kernel: no dS^T in shared memory (register path), one barrier a stage.
// The dK/dV kernel's atomic mode is bound by shared-memory loads (0.6 ldmatrix.x4 per MMA): its 16-key warps each load
// every Q / dO fragment of a step for 16 keys, and its dQ warps own 16 x 32 outputs. Here a CTA has 8 warps and
// kBlockN = 128 keys, and walks stages of kBlockM queries in passes of 64:
//   S^T = K Q^T, dP^T = V dO^T: warp (wk, wq) owns 16 * kMT keys x 64 / kWarpsQ queries of the pass. With 4 x 2
//     warps of 32 keys x 32 queries each K / V fragment serves 2 query tiles and each Q / dO fragment 2 key tiles.
//   dV += P^T dO, dK += dS^T Q, one of two ways:
//     registers (HS 64, 128-query stages): over the warp's own queries, P^T and dS^T straight from the
//       accumulators; the two query warps of a key slice keep partial dK, dV (all HS columns of their keys),
//       summed once through shared memory at the end. Each B fragment (16 queries x 16 columns) serves kMT key tiles.
//     shared memory (kDkDvSmem, HS 128, 64-query stages; partial dK, dV of 32 keys x 128 columns would take 256
//       registers): P^T goes to shared memory beside dS^T, and after the stage's barrier warp (wk, wq) accumulates
//       its 32 keys x HS / 2 columns over all 64 queries, both A operands loaded (FlashAttention-2's way).
//   dS^T goes to shared memory; after one barrier, dQ (kBlockM x HS) += dS K with each warp owning 32 queries x
//     kDqCols columns (32 at HS 64 and at HS 128 with 64-query stages: 2 A + 2 B loads per 8 MMAs of a k step),
//     added into the fp32 accumulator with red.global.add.
// ldmatrix.x4 per MMA, HS 64: S/dP 0.5, dV/dK 0.25, dQ 0.5, about 0.42 with the dS^T stores; HS 128: 0.5 / 0.375 /
// 0.5, about 0.48 with the P^T, dS^T stores (0.62 and 0.59 in the dK/dV kernel's atomic mode).
// Barriers: two a stage (Q / dO visible; dS^T complete). The first is also the previous stage's end: a warp past
// it knows every warp has left the previous stage, so dS^T (and P^T) may be overwritten, and only then does it
// issue the load of stage + kStages - 1 into the buffer the previous stage read. A third barrier at each stage's
// end, as the dK/dV kernel has, measured slower.

template <int HS, int kMT, int kWarpsQ, bool kDkDvSmem>
struct BackwardFusedTile {
    static constexpr int kNWarps = 8, kThreads = 256;
    static constexpr int kWarpsK = kNWarps / kWarpsQ;
    static constexpr int kBlockN = 16 * kMT * kWarpsK;            // keys per CTA
    static constexpr int kBlockM = kDkDvSmem ? 64 : 128;           // queries per stage (one dQ tile)
    static constexpr int kPassM = 64;                              // queries per S^T / dP^T pass
    static constexpr int kWarpQ = kPassM / kWarpsQ;                // queries per warp per pass
    // Q / dO stage buffers, loaded kStages - 1 stages ahead: 3, or 2 where 3 do not fit (HS 128 register path)
    static constexpr int kStages = (kDkDvSmem || HS == 64) ? 3 : 2;
    static constexpr int kKVBytes = kBlockN * HS * 2;
    static constexpr int kQBytes = kBlockM * HS * 2;
    static constexpr int kStageBytes = 2 * kQBytes + 2 * kBlockM * 4;   // Q, dO, lse2, dpsum
    static constexpr int kDsBytes = kBlockN * kBlockM * 2;              // dS^T (kBlockN, kBlockM) bf16, then P^T
    static constexpr int kSmemBytes = 2 * kKVBytes + (kDkDvSmem ? 2 : 1) * kDsBytes + kStages * kStageBytes;
    // register path: the fp32 dK, dV partials of query warps 1.. go to warps 0 at the end, in dS^T's and the stages' memory
    static constexpr int kPartialBytes = kDkDvSmem ? 0 : (kWarpsQ - 1) * kBlockN * HS * 2 * 4;
    // dQ warp tiles: 32 query rows x kDqCols columns
    static constexpr int kDqWarpsM = kBlockM / 32, kDqCols = HS * kDqWarpsM / kNWarps;
    static_assert(kBlockN == 128 && kWarpQ % 16 == 0, "8 warps of 16 * kMT keys x kWarpQ queries, 128 keys");
    static_assert(!kDkDvSmem || (kMT == 2 && kWarpsQ == 2), "the shared-memory dV / dK tiling is 4 x 2 warps of 32 keys");
    static_assert(kPartialBytes <= kDsBytes + kStages * kStageBytes, "the dK, dV partials must fit in the freed memory");
    static_assert(kDqCols % 16 == 0, "dQ warp tiles are whole x4 loads wide");
    static_assert(kSmemBytes <= 227 * 1024, "more shared memory than an sm_80 / sm_90 CTA may have");
};

template <int HS, int kMT, int kWarpsQ, bool kDkDvSmem, bool kDq, bool kHalf>
__device__ __forceinline__ void attention_backward_fused_tiles(const AttentionBackwardParams& p) {
    using Tile = BackwardFusedTile<HS, kMT, kWarpsQ, kDkDvSmem>;
    constexpr int kBlockN = Tile::kBlockN, kBlockM = Tile::kBlockM, kThreads = Tile::kThreads;
    constexpr int kWarpQ = Tile::kWarpQ, kWarpsK = Tile::kWarpsK;
    constexpr int kQT = kWarpQ / 8;       // n8 tiles of the warp's S^T (queries)
    constexpr int kAccCols = kDkDvSmem ? HS / kWarpsQ : HS;   // dK, dV columns a warp accumulates
    constexpr int kDT = kAccCols / 8;     // ... in n8 tiles
    constexpr int kDqDT = Tile::kDqCols / 8;
    constexpr bool kStoreDs = kDq || kDkDvSmem;   // dS^T goes to shared memory for dQ or for the shared-memory dK
    extern __shared__ __align__(1024) uint8_t smem[];
    uint8_t* k_smem = smem;                                     // (kBlockN, HS), dK staging at the end
    uint8_t* v_smem = smem + Tile::kKVBytes;                    // (kBlockN, HS), dV staging at the end
    uint8_t* ds_smem = smem + 2 * Tile::kKVBytes;               // (kBlockN, kBlockM) dS^T
    uint8_t* pt_smem = ds_smem + Tile::kDsBytes;                // (kBlockN, kBlockM) P^T, kDkDvSmem only
    uint8_t* stage_smem = ds_smem + (kDkDvSmem ? 2 : 1) * Tile::kDsBytes;
    auto q_tile = [&](int s) { return stage_smem + s * Tile::kStageBytes; };
    auto do_tile = [&](int s) { return stage_smem + s * Tile::kStageBytes + Tile::kQBytes; };
    auto lse2_tile = [&](int s) { return reinterpret_cast<float*>(stage_smem + s * Tile::kStageBytes + 2 * Tile::kQBytes); };

    const int T = p.T, NH = p.NH, Tp = bwd_padded_T(T);
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const int n_block = blockIdx.y;                     // block 0 has the most query tiles: launched first
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, tq = lane % 4;
    const int wk = warp % kWarpsK, wq = warp / kWarpsK;  // the warp's key slice and query slice (or column half)
    const floatX* q_gl = p.q + b * p.q_st.batch + h * p.q_st.head;   // causal self-attention, NH_kv = NH (see dispatch)
    const floatX* k_gl = p.k + b * p.k_st.batch + h * p.k_st.head;
    const floatX* v_gl = p.v + b * p.v_st.batch + h * p.v_st.head;
    const floatX* do_gl = p.dout + b * p.do_st.batch + h * p.do_st.head;
    const BackwardScratch sc = backward_scratch(p);
    const float* lse2_gl = sc.lse2 + (size_t)bh * Tp;
    const float* dpsum_gl = sc.dpsum + (size_t)bh * Tp;
    const int n_start = n_block * kBlockN;
    const int warp_row0 = wk * 16 * kMT;                // this warp's first key row inside the tile
    const int warp_key0 = n_start + warp_row0;          // ... and as a key index
    const int acc_col0 = kDkDvSmem ? wq * kAccCols : 0; // its first dK / dV column
    const int m_first = n_start / kBlockM;              // first query tile with a query >= some key here
    const int m_blocks = ceil_div(T, kBlockM);

    auto load_stage = [&](int s, int m_block) {
        load_tile_rows_async<HS, kThreads, kBlockM>(q_tile(s), q_gl, p.q_st.row, m_block * kBlockM, T);
        load_tile_rows_async<HS, kThreads, kBlockM>(do_tile(s), do_gl, p.do_st.row, m_block * kBlockM, T);
        // lse2 then dpsum, kBlockM floats each; the padding keeps these in bounds and 16-byte aligned
        for (int c = threadIdx.x; c < kBlockM / 2; c += kThreads) {
            const int which = c / (kBlockM / 4), i = c % (kBlockM / 4);
            const float* src = (which ? dpsum_gl : lse2_gl) + m_block * kBlockM + 4 * i;
            cp_async_16(smem_addr(lse2_tile(s) + which * kBlockM + 4 * i), src, true);
        }
    };
    load_tile_async<HS, kThreads>(k_smem, k_gl, p.k_st.row, n_start, kBlockN, T);
    load_tile_async<HS, kThreads>(v_smem, v_gl, p.v_st.row, n_start, kBlockN, T);
    #pragma unroll
    for (int s = 0; s < Tile::kStages - 1; s++) {   // one commit group per stage, empty past the end
        if (m_first + s < m_blocks) load_stage(s, m_first + s);
        cp_async_commit();
    }

    float dk_acc[kMT][kDT][4], dv_acc[kMT][kDT][4];
    #pragma unroll
    for (int mt = 0; mt < kMT; mt++)
        #pragma unroll
        for (int dt = 0; dt < kDT; dt++)
            #pragma unroll
            for (int e = 0; e < 4; e++) dk_acc[mt][dt][e] = dv_acc[mt][dt][e] = 0.0f;
    const float scale_log2 = p.scale * kLog2e;

    for (int m_block = m_first; m_block < m_blocks; m_block++) {
        const int stage = (m_block - m_first) % Tile::kStages;
        cp_async_wait<Tile::kStages - 2>();   // the groups of later stages may still run: this stage's has landed
        __syncthreads();      // this stage's Q, dO, lse2, dpsum (and K, V on the first pass) are visible to every
                              // warp, and every warp has left the previous stage (see the header)
        constexpr int kAhead = Tile::kStages - 1;   // into the buffer the previous stage used
        if (m_block + kAhead < m_blocks) load_stage((stage + kAhead) % Tile::kStages, m_block + kAhead);
        cp_async_commit();
        const int m_start = m_block * kBlockM;
        const uint8_t* q_s = q_tile(stage);
        const uint8_t* do_s = do_tile(stage);
        const float* lse2_s = lse2_tile(stage);
        const float* dpsum_s = lse2_s + kBlockM;

        #pragma unroll 1
        for (int pass = 0; pass < kBlockM / Tile::kPassM; pass++) {
            const int q0 = pass * Tile::kPassM + wq * kWarpQ;   // the warp's first query row in the stage
            if (warp_key0 > m_start + q0 + kWarpQ - 1) {        // every key above every query (diagonal stage only)
                #pragma unroll
                for (int mt = 0; mt < kMT; mt++)
                    #pragma unroll
                    for (int nt = 0; nt < kQT; nt++)
                        #pragma unroll
                        for (int half = 0; half < 2; half++) {
                            const int off = swizzle<kBlockM>(warp_row0 + mt * 16 + g + 8 * half, q0 / 8 + nt) + 4 * tq;
                            if constexpr (kStoreDs) *reinterpret_cast<uint32_t*>(ds_smem + off) = 0u;
                            if constexpr (kDkDvSmem) *reinterpret_cast<uint32_t*>(pt_smem + off) = 0u;
                        }
                continue;
            }
            // S^T = K Q^T and dP^T = V dO^T: 16 * kMT keys x kWarpQ queries per warp
            float st[kMT][kQT][4], dpt[kMT][kQT][4];
            backward_st_dpt<kHalf, HS, kMT, kQT>(st, dpt, k_smem, v_smem, q_s, do_s, warp_row0, q0, lane);
            // P^T and dS^T, then dS^T (and P^T with kDkDvSmem) to shared memory as bf16. Only passes where some key
            // of this warp exceeds some query take the masked copy (the mask's compares and selects were 11% of a
            // pass's instructions).
            auto p_ds_to_smem = [&](bool masked) {
                backward_p_ds<kMT, kQT>(st, dpt, lse2_s, dpsum_s, q0, masked, warp_key0, m_start, scale_log2, lane);
                #pragma unroll
                for (int nt = 0; nt < kQT; nt++)
                    #pragma unroll
                    for (int mt = 0; mt < kMT; mt++)
                        #pragma unroll
                        for (int half = 0; half < 2; half++) {
                            const int off = swizzle<kBlockM>(warp_row0 + mt * 16 + g + 8 * half, q0 / 8 + nt) + 4 * tq;
                            if constexpr (kStoreDs) *reinterpret_cast<uint32_t*>(ds_smem + off) = pack_x2<kHalf>(dpt[mt][nt][2 * half], dpt[mt][nt][2 * half + 1]);
                            if constexpr (kDkDvSmem) *reinterpret_cast<uint32_t*>(pt_smem + off) = pack_x2<kHalf>(st[mt][nt][2 * half], st[mt][nt][2 * half + 1]);
                        }
            };
            if (warp_key0 + 16 * kMT - 1 > m_start + q0) p_ds_to_smem(true);
            else p_ds_to_smem(false);
            // register path: dV += P^T dO and dK += dS^T Q over the warp's queries; accumulator tiles 2kk, 2kk+1
            // are the A fragment of k step kk
            if constexpr (!kDkDvSmem) backward_dv_dk<kHalf, HS, kMT, kQT>(dv_acc, dk_acc, st, dpt, q_s, do_s, q0, lane);
        }
        if constexpr (kStoreDs) __syncthreads();   // all of dS^T (and P^T) is in shared memory before any warp reads it

        // shared-memory path: dV += P^T dO, dK += dS^T Q, warp (wk, wq) = 32 keys x columns acc_col0.., over the
        // stage's queries; A fragments (keys x 16 queries) from the [key][query] tiles, B as in the register path
        auto dv_dk_smem = [&]() {
            if constexpr (kDkDvSmem) {
                #pragma unroll 2
                for (int kk = 0; kk < kBlockM / 16; kk++) {
                    uint32_t pa[kMT][4], dsa[kMT][4];
                    #pragma unroll
                    for (int mt = 0; mt < kMT; mt++) {
                        const int key = warp_row0 + mt * 16 + (lane % 8) + 8 * ((lane / 8) % 2);
                        ldmatrix_x4(pa[mt], smem_addr(pt_smem + swizzle<kBlockM>(key, 2 * kk + lane / 16)));
                        ldmatrix_x4(dsa[mt], smem_addr(ds_smem + swizzle<kBlockM>(key, 2 * kk + lane / 16)));
                    }
                    #pragma unroll
                    for (int dp = 0; dp < kDT / 2; dp++) {
                        uint32_t dob[4], qb[4];
                        const int qrow = 16 * kk + (lane % 8) + 8 * ((lane / 8) % 2);
                        ldmatrix_x4_trans(dob, smem_addr(do_s + swizzle<HS>(qrow, acc_col0 / 8 + 2 * dp + lane / 16)));
                        ldmatrix_x4_trans(qb, smem_addr(q_s + swizzle<HS>(qrow, acc_col0 / 8 + 2 * dp + lane / 16)));
                        #pragma unroll
                        for (int mt = 0; mt < kMT; mt++) {
                            mma_16816<kHalf>(dv_acc[mt][2 * dp], pa[mt], dob[0], dob[1]);
                            mma_16816<kHalf>(dv_acc[mt][2 * dp + 1], pa[mt], dob[2], dob[3]);
                            mma_16816<kHalf>(dk_acc[mt][2 * dp], dsa[mt], qb[0], qb[1]);
                            mma_16816<kHalf>(dk_acc[mt][2 * dp + 1], dsa[mt], qb[2], qb[3]);
                        }
                    }
                }
            }
        };
        // dQ (kBlockM x HS) += dS K: warp -> 32 query rows x kDqCols columns
        auto dq_step = [&]() {
            if constexpr (kDq) {
                const int dq_row0 = 32 * (warp % Tile::kDqWarpsM), dq_col0 = Tile::kDqCols * (warp / Tile::kDqWarpsM);
                float dq[2][kDqDT][4];
                #pragma unroll
                for (int mt = 0; mt < 2; mt++)
                    #pragma unroll
                    for (int dt = 0; dt < kDqDT; dt++) dq[mt][dt][0] = dq[mt][dt][1] = dq[mt][dt][2] = dq[mt][dt][3] = 0.0f;
                // keys past this warp's last query contribute dS = 0 (diagonal stage): stop there (an even count)
                const int kk_end = min(kBlockN / 16, ceil_div(m_start + dq_row0 + 32 - n_start, 16));
                #pragma unroll 2
                for (int kk = 0; kk < kk_end; kk++) {
                    uint32_t dsa[2][4];   // A fragments of dS (queries dq_row0 + 16mt.., keys 16kk..) from dS^T: transposed load
                    const int key = 16 * kk + (lane % 8) + 8 * (lane / 16);
                    #pragma unroll
                    for (int mt = 0; mt < 2; mt++)
                        ldmatrix_x4_trans(dsa[mt], smem_addr(ds_smem + swizzle<kBlockM>(key, (dq_row0 + 16 * mt) / 8 + (lane / 8) % 2)));
                    #pragma unroll
                    for (int dp = 0; dp < kDqDT / 2; dp++) {
                        uint32_t kb[4];   // B fragments of K (k = key, n = d): transposed load
                        const int krow = 16 * kk + (lane % 8) + 8 * ((lane / 8) % 2);
                        ldmatrix_x4_trans(kb, smem_addr(k_smem + swizzle<HS>(krow, dq_col0 / 8 + 2 * dp + lane / 16)));
                        #pragma unroll
                        for (int mt = 0; mt < 2; mt++) {
                            mma_16816<kHalf>(dq[mt][2 * dp], dsa[mt], kb[0], kb[1]);
                            mma_16816<kHalf>(dq[mt][2 * dp + 1], dsa[mt], kb[2], kb[3]);
                        }
                    }
                }
                // red.global.add into dq_accum (B*NH, T, HS) from one base pointer with constant offsets: a red holds its
                // address registers until it has left for memory, and per-row address arithmetic (an if per row) made each
                // row's reds wait for the previous row's (a tenth of the HS 128 stall samples under ncu). Rows past T (last stage
                // only) take the per-row branch.
                const int row0 = m_start + dq_row0 + g;
                float* acc = sc.dq_accum + ((size_t)bh * T + row0) * HS + dq_col0 + 2 * tq;
                auto red_rows = [&](auto all_rows) {   // std::true_type: every row of the warp's tile is below T
                    #pragma unroll
                    for (int mt = 0; mt < 2; mt++)
                        #pragma unroll
                        for (int half = 0; half < 2; half++)
                            if (decltype(all_rows)::value || row0 + 16 * mt + 8 * half < T) {
                                #pragma unroll
                                for (int dt = 0; dt < kDqDT; dt++)
                                    red_add_f32x2(acc + (16 * mt + 8 * half) * HS + dt * 8, dq[mt][dt][2 * half], dq[mt][dt][2 * half + 1]);
                            }
                };
                if (m_start + dq_row0 + 32 <= T) red_rows(std::true_type{});
                else red_rows(std::false_type{});
            }
        };
        // After the dS^T barrier a warp has two independent jobs, dV/dK (shared-memory path) and dQ. The two warps of
        // each scheduler (w and w + 4) take them in opposite orders: in lockstep both would wait on the same loads and
        // MMAs.
        if (kDkDvSmem && kDq && (warp & 4)) { dq_step(); dv_dk_smem(); }
        else { dv_dk_smem(); dq_step(); }
    }
    __syncthreads();   // every warp is done with dS^T, the stages and K before the epilogue reuses them

    // epilogue. Register path with 2 query warps: query warp 1 adds its fp32 dK, dV partials into query warp 0's
    // (same fragment layout: lane l of warp (wk, 1) writes its float4 i at [wk][i][l], conflict-free). Then
    // dK *= scale; dK, dV -> bf16, staged in the warp's own rows and columns of the K/V tiles for 16-byte stores.
    if constexpr (Tile::kPartialBytes > 0) {
        static_assert(kWarpsQ == 2, "one partial per key slice");
        constexpr int kRegs4 = kMT * kDT * 2;             // float4s of dK, dV a thread
        float4* partial = reinterpret_cast<float4*>(ds_smem) + wk * kRegs4 * 32 + lane;
        if (wq == 1) {
            #pragma unroll
            for (int mt = 0; mt < kMT; mt++)
                #pragma unroll
                for (int dt = 0; dt < kDT; dt++) {
                    partial[((mt * kDT + dt) * 2) * 32] = make_float4(dk_acc[mt][dt][0], dk_acc[mt][dt][1], dk_acc[mt][dt][2], dk_acc[mt][dt][3]);
                    partial[((mt * kDT + dt) * 2 + 1) * 32] = make_float4(dv_acc[mt][dt][0], dv_acc[mt][dt][1], dv_acc[mt][dt][2], dv_acc[mt][dt][3]);
                }
        }
        __syncthreads();
        if (wq == 1) return;
        #pragma unroll
        for (int mt = 0; mt < kMT; mt++)
            #pragma unroll
            for (int dt = 0; dt < kDT; dt++) {
                const float4 a = partial[((mt * kDT + dt) * 2) * 32], c = partial[((mt * kDT + dt) * 2 + 1) * 32];
                dk_acc[mt][dt][0] += a.x; dk_acc[mt][dt][1] += a.y; dk_acc[mt][dt][2] += a.z; dk_acc[mt][dt][3] += a.w;
                dv_acc[mt][dt][0] += c.x; dv_acc[mt][dt][1] += c.y; dv_acc[mt][dt][2] += c.z; dv_acc[mt][dt][3] += c.w;
            }
    }
    backward_store_dk_dv<kHalf, HS, kMT, kDT>(dk_acc, dv_acc, k_smem, v_smem, p.dk + b * p.dk_st.batch + h * p.dk_st.head, p.dk_st.row,
                                       p.dv + b * p.dv_st.batch + h * p.dv_st.head, p.dv_st.row, p.scale, T, n_start, warp_row0,
                                       acc_col0, lane);
}
template <int HS, int kMT, int kWarpsQ, bool kDkDvSmem, bool kDq, bool kHalf = false>
__global__ void __launch_bounds__(256, 1) attention_backward_fused_kernel(const AttentionBackwardParams p) {
    if constexpr (kCompilingSm90a && kHalf) __trap();   // unreached (kCompilingSm90a)
    else attention_backward_fused_tiles<HS, kMT, kWarpsQ, kDkDvSmem, kDq, kHalf>(p);
}

// ----------------------------------------------------------------------------
// Hopper (sm_90a) backward, HS 64 and 128 (HS 256 below): the split's two kernels on wgmma, warp-specialised as the
// forward is.
// Same math, scratch and preprocess as the mma.sync path. Every GEMM is a warpgroup MMA reading its shared operands
// straight from swizzle_wgmma tiles; the GEMMs whose A operand is a softmax-shaped accumulator (P^T, dS^T, dS) take
// it from registers (the m64nN accumulator in bf16 is the A-fragment layout).
//   dkdv: item = (key block of 64 * kNCWG keys, b, h), key block 0 (most query tiles) first; a warpgroup owns 64 keys.
//         S^T = K Q^T, dP^T = V dO^T (SS), then dV += P^T dO, dK += dS^T Q (RS, dO and Q read MN-major); P^T's
//         exponentials run while dP^T is in flight. K, V load once per item; a ring of kStages stages of Q, dO
//         (tensor maps) and lse2, D (1-D bulk copies of kBlockM floats, padded rows: always in bounds).
//   dq:   item = (query block of 64 * kNCWG rows, b, h), the longest first; a warpgroup owns 64 query rows.
//         S = Q K^T, dP = dO V^T (SS), dQ += dS K (RS, K read MN-major). Q, dO load once per item; a ring of
//         kStages (K, V) stages; the row statistics come from global memory.
// Warpgroup 0 (24 registers) has one thread issue every load; the consumer warpgroups (setmaxnreg) hand each stage
// back by mbarrier arrives once their wgmmas are done (one per warp in dq; one per thread in dkdv, whose threads
// also read the stage's statistics with ordinary loads), with no CTA-wide barrier in the loop. The epilogues stage
// dK, dV, dQ in swizzle<HS> rows of their own shared memory (each warp its own 16 rows), so the producer may load
// the next item meanwhile. Deterministic: every output written once, by one warp, in a fixed order.
// The item's fixed operands stay in shared memory, read by every step's SS wgmmas: held as register A fragments
// (RS wgmmas), ptxas 13.0 miscompiles the dK/dV kernel (it packs P^T and dS^T into the registers of K's and V's
// fragments, which the next step's wgmmas still read).


#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// One step of the dK/dV kernels: this warpgroup's 64 keys (rows warp_row0.. of the K, V tiles of kBlockN rows, at
// k_desc / v_desc) against the kBlockM queries of one stage (q_s, do_s, and lse2_s / dpsum_s: its kBlockM rows of
// lse2 and D). S^T = K Q^T and dP^T = V dO^T, P^T, dS^T, then dV += P^T dO and dK += dS^T Q, in three parts that
// the atomic-dQ kernel also uses on their own.

// One warpgroup's S = A B^T and dP = A' B'^T over the head dimension (64 rows of A, N columns), zeroed first, two
// commit groups, S first: S^T = K Q^T, dP^T = V dO^T in the dK/dV kernel (kRowsA = its key block), S = Q K^T,
// dP = dO V^T in the dQ kernel (kRowsA = its query block)
template <bool kHalf, int HS, int N, int kRowsA>
__device__ __forceinline__ void issue_s_dp(float (&s)[N / 2], float (&dp)[N / 2], uint64_t a_desc, uint64_t a2_desc,
                                           const uint8_t* b_s, const uint8_t* b2_s) {
    wgmma_fence();
    wgmma_ss_over_hs<kHalf, HS, N, kRowsA, 0>(s, a_desc, b_s);
    wgmma_commit();
    wgmma_ss_over_hs<kHalf, HS, N, kRowsA, 0>(dp, a2_desc, b2_s);
    wgmma_commit();
}

// The kBias copies' bias tile of a backward step in shared memory (see HopperBiasBoxes), added to S (or S^T) as
// bias / scale before the exponentials, as the forward adds it
struct BiasTile { const uint8_t* tile; int rows; float inv_scale; const float* key_bias; };   // key_bias: nullptr if none

// bias^T at this thread's four elements of S^T's query group i (keys warp_key0 + g, + 8 of the box; queries 8i + 2tq,
// + 1). box: the bias tile's box of this warpgroup's 64 keys ([query][key], kBlockM rows, or 1 that every query
// shares). ldmatrix.trans turns its two 8 x 8 blocks (8 queries x keys warp_key0.., warp_key0 + 8..) into the
// accumulator's layout; the 8 rows of a block sit in 8 different 16-byte chunks (the swizzle): no bank conflicts.
__device__ __forceinline__ void bias_t_frag(float (&b)[4], const BiasTile& bias, int warp_key0, int i) {
    const int lane = threadIdx.x % 32;
    const int q = bias.rows > 1 ? 8 * i + lane % 8 : 0, chunk = warp_key0 / 8 + (lane / 8) % 2;
    uint32_t r[2];
    ldmatrix_x2_trans(r, smem_addr(bias.tile + q * 128 + ((chunk ^ (q % 8)) * 16)));
    const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&r[0]));
    const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&r[1]));
    b[0] = lo.x; b[1] = lo.y; b[2] = hi.x; b[3] = hi.y;
}

// P^T at this thread's four elements of S^T's query group i (keys n_start + warp_row0 + g, + 8; queries
// m_start + 8i + 2tq, + 1): exp2(S^T * c - lse2[query]), 0 where key > query (m_start carries the diagonal)
template <int N>
__device__ __forceinline__ void p_t_group(float (&st)[N], int i, float2 l2, bool need_mask, int n_start, int m_start, int warp_row0,
                                          float scale_log2) {
    const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    #pragma unroll
    for (int e = 0; e < 4; e++) {
        float x = st[4 * i + e] * scale_log2 - (e % 2 ? l2.y : l2.x);
        if (need_mask && n_start + warp_row0 + g + 8 * (e / 2) > m_start + i * 8 + 2 * tq + (e % 2)) x = -INFINITY;
        st[4 * i + e] = fast_exp2(x);
    }
}

// wait for S^T, P^T; wait for dP^T, dS^T; give P^T, dS^T as bf16 A fragments (pa, dsa). kBias: S^T += the bias first
// (kLowBound: lo_start, the first query + lo, masks the window's left side too)
// (mods: the score modifiers, q_first the tile's first query)
template <bool kHalf, int HS, int kBlockM, bool kBias = false, bool kLowBound = false>
__device__ __forceinline__ void dkdv_p_ds(float (&st)[kBlockM / 2], float (&dpt)[kBlockM / 2], uint32_t (&pa)[kBlockM / 16][4],
                                          uint32_t (&dsa)[kBlockM / 16][4], const float* lse2_s, const float* dpsum_s,
                                          int n_start, int m_start, int warp_row0, float scale_log2, BiasTile bias = {}, int lo_start = 0,
                                          const ScoreMods* mods = nullptr, int q_first = 0) {
    constexpr int kQT = kBlockM / 8;      // n8 column groups of S^T (queries)
    constexpr int kQS = kBlockM / 16;     // k16 steps of dV, dK (over queries)
    const int tq = threadIdx.x % 4;
    wgmma_wait<1>();   // S^T is ready; dP^T may still be running
    if (kBias && bias.key_bias) {   // key_bias from the item's first key: this thread's keys warp_row0 + g, + 8
        const int g = threadIdx.x % 32 / 4;
        const float lo = bias.key_bias[warp_row0 + g] * bias.inv_scale, hi = bias.key_bias[warp_row0 + g + 8] * bias.inv_scale;
        #pragma unroll
        for (int i = 0; i < kQT; i++) { st[4 * i] += lo; st[4 * i + 1] += lo; st[4 * i + 2] += hi; st[4 * i + 3] += hi; }
    }
    if (mods) apply_score_mods_frag_t(st, *mods, n_start + warp_row0, q_first);   // softcap, ALiBi (kMods)
    // the window's left side: key < query + lo (lo_start: the tile's first query + lo), only where this warp reaches it
    if (kLowBound && n_start + warp_row0 < lo_start + kBlockM - 1) mask_before_window_frag_t(st, n_start + warp_row0, lo_start, 0);
    // P^T = exp2(S^T * c - lse2[query]), 0 where key > query (only where this warp's keys cross the tile)
    const bool need_mask = n_start + warp_row0 + 15 > m_start;
    #pragma unroll 1
    for (unsigned once = 0; once < schedule_pin(); once++)   // see schedule_pin
    #pragma unroll
    for (int i = 0; i < kQT; i++) {
        const float2 l2 = *reinterpret_cast<const float2*>(lse2_s + i * 8 + 2 * tq);
        if constexpr (kBias) {   // S^T += bias^T / scale, as the forward adds it
            float b[4];
            bias_t_frag(b, bias, warp_row0 % 64, i);
            #pragma unroll
            for (int e = 0; e < 4; e++) st[4 * i + e] += b[e] * bias.inv_scale;
        }
        p_t_group(st, i, l2, need_mask, n_start, m_start, warp_row0, scale_log2);
    }
    wgmma_wait<0>();   // dP^T
    // dropout (kMods): dS^T = P^T (dP^T over the kept, scaled, - D), dV from the kept P^T, scaled (the forward's mask)
    const bool dropout = mods && mods->x.dropout_p > 0.0f;
    // the keep bits, for dP^T and again for P^T: made once where one word holds them (HS 128's 64 queries); at 128
    // queries made twice, as two words kept live through dS^T spill (72 bytes against 48 at HS 64)
    constexpr bool kKeepOnce = kQT <= 8;
    uint32_t keep[(kQT + 7) / 8];
    if (dropout) {
        dropout_keep_frag<kQT, true>(keep, attention_dropout(mods->x), mods->bh, q_first, n_start + warp_row0, threadIdx.x % 32);
        dropout_apply_frag<kQT>(dpt, keep, attention_dropout(mods->x).scale);
    }
    // dS^T = P^T * (dP^T - D[query]) (times the softcap's factor)
    #pragma unroll
    for (int i = 0; i < kQT; i++) {
        const float2 dps = *reinterpret_cast<const float2*>(dpsum_s + i * 8 + 2 * tq);
        #pragma unroll
        for (int e = 0; e < 4; e++) dpt[4 * i + e] = st[4 * i + e] * (dpt[4 * i + e] - (e % 2 ? dps.y : dps.x));
    }
    if (mods && mods->x.softcap_in != 0.0f) softcap_grad_frag_t(dpt, st, *mods, lse2_s, n_start + warp_row0, q_first);
    if (dropout) {
        if constexpr (!kKeepOnce)
            dropout_keep_frag<kQT, true>(keep, attention_dropout(mods->x), mods->bh, q_first, n_start + warp_row0, threadIdx.x % 32);
        dropout_apply_frag<kQT>(st, keep, attention_dropout(mods->x).scale);
    }
    #pragma unroll
    for (int j = 0; j < kQS; j++) { accum_to_a_frag<kHalf>(pa[j], st, j); accum_to_a_frag<kHalf>(dsa[j], dpt, j); }
}

// dV += P^T dO, dK += dS^T Q: one commit group; k step j = queries 16j..16j+15 = rows 16j.. of the (MN-major) tiles
template <bool kHalf, int HS, int kBlockM>
__device__ __forceinline__ void dkdv_issue_dv_dk(float (&dk_acc)[HS / 2], float (&dv_acc)[HS / 2], const uint32_t (&pa)[kBlockM / 16][4],
                                                 const uint32_t (&dsa)[kBlockM / 16][4], const uint8_t* q_s, const uint8_t* do_s) {
    wgmma_fence();
    #pragma unroll
    for (int j = 0; j < kBlockM / 16; j++) wgmma_rs_m64k16_trans_b<kHalf, HS, kBlockM>(dv_acc, pa[j], do_s, j);
    #pragma unroll
    for (int j = 0; j < kBlockM / 16; j++) wgmma_rs_m64k16_trans_b<kHalf, HS, kBlockM>(dk_acc, dsa[j], q_s, j);
    wgmma_commit();
}

// the whole step; returns with every wgmma complete, so the caller may hand the stage back
template <bool kHalf, int HS, int kBlockM, int kBlockN, bool kBias = false, bool kLowBound = false>
__device__ __forceinline__ void dkdv_hopper_step(float (&dk_acc)[HS / 2], float (&dv_acc)[HS / 2], uint64_t k_desc, uint64_t v_desc,
                                                 const uint8_t* q_s, const uint8_t* do_s, const float* lse2_s, const float* dpsum_s,
                                                 int n_start, int m_start, int warp_row0, float scale_log2, BiasTile bias = {},
                                                 int lo_start = 0, const ScoreMods* mods = nullptr, int q_first = 0) {
    float st[kBlockM / 2], dpt[kBlockM / 2];
    uint32_t pa[kBlockM / 16][4], dsa[kBlockM / 16][4];
    issue_s_dp<kHalf, HS, kBlockM, kBlockN>(st, dpt, k_desc, v_desc, q_s, do_s);
    dkdv_p_ds<kHalf, HS, kBlockM, kBias, kLowBound>(st, dpt, pa, dsa, lse2_s, dpsum_s, n_start, m_start, warp_row0, scale_log2, bias, lo_start,
                                             mods, q_first);
    dkdv_issue_dv_dk<kHalf, HS, kBlockM>(dk_acc, dv_acc, pa, dsa, q_s, do_s);
    wgmma_wait<0>();
}

// p.dqkv_sums: this warp's 16 rows (first row row0) of an fp32 accumulator (rows g, g + 8 a thread, columns 8 dt + 2 tq
// and + 1) times scale, summed over its rows before T, into row (b, row0 / 16) from column col0. The rows go through
// a fixed butterfly of shuffles: deterministic.
template <int HS>
__device__ __forceinline__ void store_dqkv_sums(const AttentionBackwardParams& p, const float (&acc)[HS / 2], float scale, int b,
                                                int row0, int col0) {
    const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    if (row0 >= p.T) return;   // the whole warp: rows past T belong to no group
    const bool lo = row0 + g < p.T, hi = row0 + g + 8 < p.T;
    float* dst = p.dqkv_sums + ((size_t)b * ceil_div(p.T, 16) + row0 / 16) * 3 * p.NH * HS + col0;
    #pragma unroll
    for (int dt = 0; dt < HS / 8; dt++) {
        float s0 = (lo ? acc[4 * dt] : 0.0f) + (hi ? acc[4 * dt + 2] : 0.0f);
        float s1 = (lo ? acc[4 * dt + 1] : 0.0f) + (hi ? acc[4 * dt + 3] : 0.0f);
        #pragma unroll
        for (int off = 4; off < 32; off *= 2) {
            s0 += __shfl_xor_sync(0xffffffffu, s0, off);
            s1 += __shfl_xor_sync(0xffffffffu, s1, off);
        }
        if (g == 0) *reinterpret_cast<float2*>(dst + 8 * dt + 2 * tq) = make_float2(s0 * scale, s1 * scale);
    }
}

// p.dqkv8: this warp's 16 rows of `stage` (bf16, swizzle<HS>, from row warp_row0; tokens t0 .. t0 + 15 of sequence b)
// in FP8 into columns col0 .. col0 + HS - 1 of dqkv8, row-major and transposed, and their amax. A lane takes 4 rows of
// a 16-byte chunk (8 columns): it writes the 4 rows' 8 bytes each, and, after a 4 x 4 byte transpose in registers,
// each column's 4 bytes, which the chunk's 4 lanes lay side by side (16 bytes of the column's row of the transpose).
// T % 16 == 0: the 16 rows are all before T or all past it.
template <int HS>
__device__ __forceinline__ void store_dqkv8(const AttentionBackwardParams& p, const uint8_t* stage, int warp_row0, int b, int t0, int col0) {
    if (t0 >= p.T) return;
    constexpr int kDT = HS / 8;
    const int lane = threadIdx.x % 32, quarter = lane / 8;   // rows 4 quarter .. + 3
    const Fp8Copy& f = p.dqkv8;
    const __nv_fp8_interpretation_t format = f.e5m2 ? __NV_E5M2 : __NV_E4M3;
    const float scale = *f.scale;
    const size_t columns = (size_t)3 * p.NH * HS, tokens = (size_t)p.B * p.T, n0 = (size_t)b * p.T + t0 + 4 * quarter;
    float amax = 0.0f;
    #pragma unroll
    for (int ch = lane % 8; ch < kDT; ch += 8) {
        uint32_t bytes[4][2];   // row i's 8 bytes, columns 0-3 then 4-7
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint4 v = *reinterpret_cast<const uint4*>(stage + swizzle<HS>(warp_row0 + 4 * quarter + i, ch));
            const uint32_t words[4] = {v.x, v.y, v.z, v.w};
            uint32_t pairs[4];
            #pragma unroll
            for (int k = 0; k < 4; k++) {
                pairs[k] = fp8x2_scaled(__uint_as_float(words[k] << 16), __uint_as_float(words[k] & 0xffff0000u), scale, format, amax);
            }
            bytes[i][0] = pairs[0] | pairs[1] << 16;
            bytes[i][1] = pairs[2] | pairs[3] << 16;
            *reinterpret_cast<uint2*>(f.q + (n0 + i) * columns + col0 + ch * 8) = make_uint2(bytes[i][0], bytes[i][1]);
        }
        #pragma unroll
        for (int h = 0; h < 2; h++) {   // columns 4 h .. 4 h + 3: rows' words -> columns' words
            // rows 0, 1 interleaved (columns 0, 1, then 2, 3), rows 2, 3 likewise; then each column's four
            const uint32_t r01_lo = __byte_perm(bytes[0][h], bytes[1][h], 0x5140), r01_hi = __byte_perm(bytes[0][h], bytes[1][h], 0x7362);
            const uint32_t r23_lo = __byte_perm(bytes[2][h], bytes[3][h], 0x5140), r23_hi = __byte_perm(bytes[2][h], bytes[3][h], 0x7362);
            const uint32_t column[4] = {__byte_perm(r01_lo, r23_lo, 0x5410), __byte_perm(r01_lo, r23_lo, 0x7632),
                                        __byte_perm(r01_hi, r23_hi, 0x5410), __byte_perm(r01_hi, r23_hi, 0x7632)};
            #pragma unroll
            for (int j = 0; j < 4; j++)
                *reinterpret_cast<uint32_t*>(f.q + tokens * columns + (col0 + ch * 8 + 4 * h + j) * tokens + n0) = column[j];
        }
    }
    #pragma unroll
    for (int off = 16; off > 0; off /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    if (lane == 0) atomicMax(f.amax, __float_as_uint(amax));
}

// dK *= scale; dK, dV -> bf16, staged in this warp's own 16 rows of dk_stage / dv_stage (swizzle<HS>: 256-byte rows at
// HS 128, not the column blocks; each warp reads back only what it wrote), then 16-byte stores into dk, dv
// (packed sequences: row0 = the sequence's first row of dK, dV, rows = its keys; rows 0: p.Tk)
template <bool kHalf, int HS, bool kGeneral = false>
__device__ __forceinline__ void dkdv_hopper_epilogue(const AttentionBackwardParams& p, const float (&dk_acc)[HS / 2], const float (&dv_acc)[HS / 2],
                                                     uint8_t* dk_stage, uint8_t* dv_stage, int b, int h, int n_start, int warp_row0,
                                                     int row0 = 0, int rows = 0) {
    constexpr int kDT = HS / 8;
    const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    const float scale = p.scale;
    __syncwarp();   // a persistent kernel comes back here: this warp's reads of its previous rows are done
    #pragma unroll
    for (int half = 0; half < 2; half++) {
        const int row = warp_row0 + g + 8 * half;
        #pragma unroll
        for (int dt = 0; dt < kDT; dt++) {
            *reinterpret_cast<uint32_t*>(dk_stage + swizzle<HS>(row, dt) + 4 * tq) =
                pack_x2<kHalf>(dk_acc[4 * dt + 2 * half] * scale, dk_acc[4 * dt + 2 * half + 1] * scale);
            *reinterpret_cast<uint32_t*>(dv_stage + swizzle<HS>(row, dt) + 4 * tq) =
                pack_x2<kHalf>(dv_acc[4 * dt + 2 * half], dv_acc[4 * dt + 2 * half + 1]);
        }
    }
    __syncwarp();
    floatX* dk_gl = p.dk + b * p.dk_st.batch + h * p.dk_st.head;   // h: the key/value head
    floatX* dv_gl = p.dv + b * p.dv_st.batch + h * p.dv_st.head;
    const int Tk = rows ? rows : p.Tk;
    const bool to_bf16 = kGeneral || kHalf || !p.dqkv8.q;   // else to dqkv8 (below)
    for (int c = lane; c < 16 * kDT; c += 32) {
        const int row = warp_row0 + c / kDT, ch = c % kDT, t = n_start + row;
        if (to_bf16 && t < Tk && head_chunk_stored<kGeneral>(p.HS, ch)) {
            *reinterpret_cast<uint4*>(dk_gl + (row0 + t) * p.dk_st.row + ch * 8) = *reinterpret_cast<const uint4*>(dk_stage + swizzle<HS>(row, ch));
            *reinterpret_cast<uint4*>(dv_gl + (row0 + t) * p.dv_st.row + ch * 8) = *reinterpret_cast<const uint4*>(dv_stage + swizzle<HS>(row, ch));
        }
    }
    if constexpr (!kGeneral) {
        if (p.dqkv_sums) {
            store_dqkv_sums<HS>(p, dk_acc, scale, b, n_start + warp_row0, (p.NH + h) * HS);
            store_dqkv_sums<HS>(p, dv_acc, 1.0f, b, n_start + warp_row0, (2 * p.NH + h) * HS);
        }
        if constexpr (!kHalf) {
            if (p.dqkv8.q) {
                store_dqkv8<HS>(p, dk_stage, warp_row0, b, n_start + warp_row0, (p.NH + h) * HS);
                store_dqkv8<HS>(p, dv_stage, warp_row0, b, n_start + warp_row0, (2 * p.NH + h) * HS);
            }
        }
    }
}

// One step of the dQ kernels: this warpgroup's 64 query rows (q_desc / do_desc: its rows of the (kBlockM, HS) Q and dO
// tiles) against key block n_block (k_s, v_s: (kBlockN, HS) tiles). S = Q K^T, dP = dO V^T, dS, then dQ += dS K, in
// three parts like the dK/dV step's (issue_s_dp, dq_p_ds, dq_issue_dq). row_lse2 / row_dpsum: rows g and g + 8 of this warp.

// A warp's share of the ordered dBias (DbiasOrder): its rows g, g + 8 of its accumulator slot (nullptr: past T), its
// counter for key block 0 (key block n: + n * kBlockM / 16), and its turn (how many earlier ords of the slot add first)
struct DbiasWarp { float* rows[2]; int* counter; int turn; };
// adds this warp's dS (the dq kernel's dp after dq_p_ds: rows g, g + 8, keys n_block * kBlockN + 8i + 2tq, + 1) into
// the accumulator in its turn: wait (one lane), add, fence every lane's adds, count
template <int kBlockN, int kBlockM>
__device__ __forceinline__ void dbias_ordered_add(const DbiasWarp& w, const float (&ds)[kBlockN / 2], int n_block, int Tk) {
    const int lane = threadIdx.x % 32, tq = lane % 4;
    int* counter = w.counter + n_block * (kBlockM / 16);
    if (lane == 0) {
        int seen;
        while (true) {
            asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(seen) : "l"(counter) : "memory");
            if (seen == w.turn) break;
            __nanosleep(32);
        }
    }
    __syncwarp();
    #pragma unroll
    for (int half = 0; half < 2; half++) {
        if (!w.rows[half]) continue;
        #pragma unroll
        for (int i = 0; i < kBlockN / 8; i++) {
            const int key = n_block * kBlockN + i * 8 + 2 * tq;
            if (key + 1 < Tk) red_add_f32x2(w.rows[half] + key, ds[4 * i + 2 * half], ds[4 * i + 2 * half + 1]);
            else if (key < Tk) atomicAdd(w.rows[half] + key, ds[4 * i + 2 * half]);
        }
    }
    __threadfence();   // this lane's adds are performed before the count below
    __syncwarp();
    if (lane == 0) asm volatile("st.release.gpu.global.b32 [%0], %1;\n" :: "l"(counter), "r"(w.turn + 1) : "memory");
}

// wait for S, P; wait for dP, dS; give dS as bf16 A fragments. kBias: S += the bias (kBlockM rows) first; kLowBound
// (the general copies): keys before a row's window (key < row + lo) masked too
template <bool kHalf, int HS, int kBlockN, int kBlockM = 0, bool kBias = false, bool kLowBound = false>
__device__ __forceinline__ void dq_p_ds(float (&s)[kBlockN / 2], float (&dp)[kBlockN / 2], uint32_t (&dsa)[kBlockN / 16][4],
                                        const float (&row_lse2)[2], const float (&row_dpsum)[2], int n_block, int m_start, int warp_row0,
                                        float scale_log2, int diag = 0, int Tk = 1 << 30, BiasTile bias = {}, int lo = 0,
                                        const ScoreMods* mods = nullptr) {
    constexpr int kNT = kBlockN / 8;      // n8 column groups of S (keys)
    const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    wgmma_wait<1>();   // S is ready; dP may still be running
    float lse2[2] = {row_lse2[0], row_lse2[1]};   // less the row term of one-sided ALiBi (apply_score_mods_frag)
    if (mods && mods->any()) {   // softcap, ALiBi
        float shift[2];
        apply_score_mods_frag(s, *mods, m_start + warp_row0, n_block * kBlockN, lane, diag, shift);
        lse2[0] -= shift[0] * scale_log2;
        lse2[1] -= shift[1] * scale_log2;
    }
    if constexpr (kBias) add_bias_tile_smem<kNT, kBlockM>(s, bias.tile, bias.rows, warp_row0 + g, tq, bias.inv_scale);
    if (kBias && bias.key_bias) add_key_bias_frag<kNT>(s, bias.key_bias, n_block * kBlockN, tq, bias.inv_scale);
    // the window's left side (key < row + lo), only where this warp reaches it
    if (kLowBound && n_block * kBlockN < m_start + warp_row0 + 15 + lo) mask_before_window_frag(s, m_start + warp_row0, n_block * kBlockN, lo);
    // keys past a row's limit (key > row + diag, key >= Tk) masked; causal self-attention: diag 0, no key bound
    const bool need_mask = n_block * kBlockN + kBlockN - 1 > min(m_start + warp_row0 + diag, Tk - 1);
    #pragma unroll 1
    for (unsigned once = 0; once < schedule_pin(); once++)   // see schedule_pin
    #pragma unroll
    for (int i = 0; i < kNT; i++)
        #pragma unroll
        for (int e = 0; e < 4; e++) {
            float x = s[4 * i + e] * scale_log2 - lse2[e / 2];
            const int key = n_block * kBlockN + i * 8 + 2 * tq + (e % 2);
            if (need_mask && (key > m_start + warp_row0 + g + 8 * (e / 2) + diag || key >= Tk)) x = -INFINITY;
            s[4 * i + e] = fast_exp2(x);
        }
    wgmma_wait<0>();   // dP
    if (HS <= 128 && mods && mods->x.dropout_p > 0.0f) {   // dropout (kMods, HS <= 128): dS = P (dP over the kept, scaled, - D)
        uint32_t keep[(kNT + 7) / 8];
        dropout_keep_frag<kNT, false>(keep, attention_dropout(mods->x), mods->bh, m_start + warp_row0, n_block * kBlockN, lane);
        dropout_apply_frag<kNT>(dp, keep, attention_dropout(mods->x).scale);
    }
    #pragma unroll
    for (int i = 0; i < kNT * 4; i++) dp[i] = s[i] * (dp[i] - row_dpsum[(i % 4) / 2]);
    if (mods && mods->x.softcap_in != 0.0f) {   // the softcap's factor, from P
        const float d0 = mods->dist0(m_start + warp_row0 + g, n_block * kBlockN + 2 * tq);
        #pragma unroll
        for (int i = 0; i < kNT * 4; i++)
            dp[i] *= mods->grad(s[i], row_lse2[(i % 4) / 2], d0 + (float)(8 * ((i % 4) / 2) - 8 * (i / 4) - i % 2));
    }
    #pragma unroll
    for (int j = 0; j < kBlockN / 16; j++) accum_to_a_frag<kHalf>(dsa[j], dp, j);
}

// dQ += dS K: one commit group; k step j = keys 16j..16j+15 = rows 16j.. of the (MN-major) K tile
template <bool kHalf, int HS, int kBlockN>
__device__ __forceinline__ void dq_issue_dq(float (&dq_acc)[HS / 2], const uint32_t (&dsa)[kBlockN / 16][4], const uint8_t* k_s) {
    wgmma_fence();
    #pragma unroll
    for (int j = 0; j < kBlockN / 16; j++) wgmma_rs_m64k16_trans_b<kHalf, HS, kBlockN>(dq_acc, dsa[j], k_s, j);
    wgmma_commit();
}

// the whole step; returns with every wgmma complete. kBias: with the bias tile; ds_rows (dBias): this warp's rows g,
// g + 8 of the fp32 dS scratch ((b, h, query) rows of Tk keys; nullptr: a row past T or no dBias), written while dQ runs;
// order (the ordered dBias, DbiasOrder): its rows of the accumulator slot, added in turn while dQ runs
template <bool kHalf, int HS, int kBlockM, int kBlockN, bool kBias = false, bool kLowBound = false>
__device__ __forceinline__ void dq_hopper_step(float (&dq_acc)[HS / 2], uint64_t q_desc, uint64_t do_desc, const uint8_t* k_s, const uint8_t* v_s,
                                               const float (&row_lse2)[2], const float (&row_dpsum)[2], int n_block, int m_start, int warp_row0,
                                               float scale_log2, int diag = 0, int Tk = 1 << 30, BiasTile bias = {},
                                               float* const (&ds_rows)[2] = {}, const DbiasWarp& order = {}, int lo = 0,
                                               const ScoreMods* mods = nullptr) {
    float s[kBlockN / 2], dp[kBlockN / 2];
    uint32_t dsa[kBlockN / 16][4];
    issue_s_dp<kHalf, HS, kBlockN, kBlockM>(s, dp, q_desc, do_desc, k_s, v_s);
    dq_p_ds<kHalf, HS, kBlockN, kBlockM, kBias, kLowBound>(s, dp, dsa, row_lse2, row_dpsum, n_block, m_start, warp_row0, scale_log2, diag, Tk, bias, lo,
                                                    mods);
    dq_issue_dq<kHalf, HS, kBlockN>(dq_acc, dsa, k_s);
    if constexpr (kBias) if (order.counter) dbias_ordered_add<kBlockN, kBlockM>(order, dp, n_block, Tk);
    if constexpr (kBias) {   // pairs of keys as 8-byte stores where Tk is even (the rows then 8-byte aligned)
        const int tq = threadIdx.x % 4;
        #pragma unroll
        for (int half = 0; half < 2; half++) {
            if (!ds_rows[half]) continue;
            #pragma unroll
            for (int i = 0; i < kBlockN / 8; i++) {
                const int key = n_block * kBlockN + i * 8 + 2 * tq;
                if (Tk % 2 == 0 && key < Tk) {
                    *reinterpret_cast<float2*>(ds_rows[half] + key) = make_float2(dp[4 * i + 2 * half], dp[4 * i + 2 * half + 1]);
                } else {
                    #pragma unroll
                    for (int e = 0; e < 2; e++)
                        if (key + e < Tk) ds_rows[half][key + e] = dp[4 * i + 2 * half + e];
                }
            }
        }
    }
    wgmma_wait<0>();
}

// dQ * scale -> bf16, staged in this warp's own 16 rows of `stage` (swizzle<HS>), then 16-byte stores into dq
// (packed sequences: row0 = the sequence's first row of dQ, rows = its length; rows 0: p.T)
template <bool kHalf, int HS, bool kGeneral = false>
__device__ __forceinline__ void dq_hopper_epilogue(const AttentionBackwardParams& p, const float (&dq_acc)[HS / 2], uint8_t* stage,
                                                   int b, int h, int m_start, int warp_row0, int row0 = 0, int rows = 0) {
    constexpr int kDT = HS / 8;
    const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    const int T = rows ? rows : p.T;
    const float scale = p.scale;
    __syncwarp();   // as in dkdv_hopper_epilogue
    #pragma unroll
    for (int half = 0; half < 2; half++) {
        const int row = warp_row0 + g + 8 * half;
        #pragma unroll
        for (int dt = 0; dt < kDT; dt++)
            *reinterpret_cast<uint32_t*>(stage + swizzle<HS>(row, dt) + 4 * tq) =
                pack_x2<kHalf>(dq_acc[4 * dt + 2 * half] * scale, dq_acc[4 * dt + 2 * half + 1] * scale);
    }
    __syncwarp();
    floatX* dq_gl = p.dq + b * p.dq_st.batch + h * p.dq_st.head;
    const bool to_bf16 = kGeneral || kHalf || !p.dqkv8.q;   // else to dqkv8 (below)
    for (int c = lane; c < 16 * kDT; c += 32) {
        const int row = warp_row0 + c / kDT, ch = c % kDT;
        if (to_bf16 && m_start + row < T && head_chunk_stored<kGeneral>(p.HS, ch))
            *reinterpret_cast<uint4*>(dq_gl + (row0 + m_start + row) * p.dq_st.row + ch * 8) = *reinterpret_cast<const uint4*>(stage + swizzle<HS>(row, ch));
    }
    if constexpr (!kGeneral) {
        if (p.dqkv_sums) store_dqkv_sums<HS>(p, dq_acc, scale, b, m_start + warp_row0, h * HS);
        if constexpr (!kHalf) {
            if (p.dqkv8.q) store_dqkv8<HS>(p, stage, warp_row0, b, m_start + warp_row0, h * HS);
        }
    }
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// dq_accum: the atomic path's fp32 (B * NH, T, HS) accumulator, as a 3-D tensor map for TMA reduce-adds; the kBias
// kernels' also hold the bias's
struct HopperBackwardTmaMaps { CUtensorMap q, k, v, dout, dq_accum; };
struct HopperBackwardBiasTmaMaps : HopperBackwardTmaMaps { CUtensorMap bias; DbiasOrder order; };
struct HopperBackwardPackedTmaMaps : HopperBackwardTmaMaps { const int* packed; };   // kVarlen: the kernel's block table
template <bool kBias, bool kVarlen>
using HopperBackwardMaps =
    std::conditional_t<kBias, HopperBackwardBiasTmaMaps, std::conditional_t<kVarlen, HopperBackwardPackedTmaMaps, HopperBackwardTmaMaps>>;

// kAtomicDq: the dK/dV kernel also computes dQ (see its consumer loop): 2 consumer warpgroups, 64-query stages, and
// step buffers (dS^T twice, each warpgroup's dQ half twice) in the dK/dV staging's memory, the stages' statistics
// apart from them (so two dQ buffers fit at HS 128), and the dQ writer's barriers (see the kernel)
// kBias: each stage also holds the bias tile of its kBlockM queries x kBlockN keys (HopperBiasBoxes), the statistics
// apart as with kAtomicDq (so that it fits at HS 128)
// kVarlen: packed sequences (items from the pack's key-block table)
template <int HS, int kNCWG_, int kBlockM_, int kStages_, bool kAtomicDq_ = false, bool kBias_ = false, bool kVarlen_ = false>
struct HopperBackwardKVWsTile {
    static constexpr int kHeadSize = HS, kNCWG = kNCWG_, kBlockM = kBlockM_, kStages = kStages_;
    static constexpr bool kAtomicDq = kAtomicDq_, kBias = kBias_, kVarlen = kVarlen_, kStatApart = kAtomicDq || kBias;
    static constexpr int kBlockN = 64 * kNCWG, kThreads = 128 * (kNCWG + 1);
    static constexpr int kKVBytes = kBlockN * HS * 2, kQBytes = kBlockM * HS * 2;
    static constexpr int kBiasBytes = kBias ? kBlockM * kBlockN * 2 : 0;
    static constexpr int kStatBytes = 2 * kBlockM * 4;                   // lse2, D
    // Q, dO, (bias,) statistics (<= 1 KB: kBlockM <= 128); kStatApart: the statistics of all stages in kStatRegion
    static constexpr int kStageBytes = 2 * kQBytes + kBiasBytes + (kStatApart ? 0 : 1024);
    static constexpr int kStatRegion = kStatApart ? (kStages * kStatBytes + 1023) / 1024 * 1024 : 0;
    static constexpr int kOutBytes = 2 * kKVBytes;                       // dK, dV staging
    static constexpr int kDsBytes = kBlockN * kBlockM * 2;               // dS^T (keys x queries) bf16
    static constexpr int kDqBoxBytes = kBlockM * 32 * 4;                 // one TMA box: 32 fp32 columns of dQ
    static constexpr int kDqBytes = (HS / 64) * kDqBoxBytes;             // one warpgroup's HS / 2 columns
    // mbarriers (kv_full, kv_empty, stage_full[], stage_empty[]), the item index (kDynamic); atomic dQ: dq_full[],
    // dq_empty[] and the DqStep of each dQ buffer
    static constexpr int kBarBytes = 8 * (3 + 2 * kStages) + (kAtomicDq ? (16 + 12) * 2 * kNCWG : 0);
    static constexpr int kDqBuffers =
        2 * kKVBytes + kStages * kStageBytes + kStatRegion + 2 * kDsBytes + 2 * kNCWG * kDqBytes + kBarBytes + 1024 <= 227 * 1024 ? 2 : 1;
    static constexpr int kStepBytes = kAtomicDq ? 2 * kDsBytes + kDqBuffers * kNCWG * kDqBytes : 0;
    static constexpr int kUnionBytes = kStepBytes > kOutBytes ? kStepBytes : kOutBytes;
    // K | V | stages | statistics (atomic dQ) | dK, dV staging (atomic dQ: or the step buffers) | barriers | + 1 KB align
    static constexpr int kBarOffset = 2 * kKVBytes + kStages * kStageBytes + kStatRegion + kUnionBytes;
    static constexpr int kSmemBytes = kBarOffset + kBarBytes + 1024;
    static constexpr int kProducerRegs = 24, kConsumerRegs = kNCWG == 2 ? 240 : 160;
    static_assert(kBlockM <= 128, "statistics fit 1 KB");
    static_assert(!kAtomicDq || (kNCWG == 2 && kBlockM == kDqOrderRows), "atomic dQ: 2 consumer warpgroups, 64-query stages");
    static_assert(kSmemBytes <= 227 * 1024, "shared memory");
};

// kBias: each stage also holds the bias tile of the item's kBlockM queries x the stage's kBlockN keys
template <int HS, int kNCWG, int kBlockN, int kStages, bool kBias = false>
struct HopperBackwardQWsTile {
    static constexpr int kBlockM = 64 * kNCWG, kThreads = 128 * (kNCWG + 1);
    static constexpr int kQBytes = kBlockM * HS * 2, kTileBytes = kBlockN * HS * 2;
    static constexpr int kStageBytes = 2 * kTileBytes + (kBias ? kBlockM * kBlockN * 2 : 0);
    // Q | dO | stages of (K, V, bias) | dQ staging | mbarriers (qo_full, qo_empty, kv_full[], kv_empty[]), the item
    // index (kDynamic) | + 1 KB align
    static constexpr int kBarOffset = 2 * kQBytes + kStages * kStageBytes + kQBytes;
    static constexpr int kSmemBytes = kBarOffset + 8 * (3 + 2 * kStages) + 1024;
    // HS 256: one consumer warpgroup (its 64 x 256 dQ accumulator alone takes 128 registers a thread)
    static constexpr int kProducerRegs = 24, kConsumerRegs = kNCWG == 2 || HS == 256 ? 240 : 160;
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// atomic dQ: this warpgroup's dS^T A fragments (j: queries 16j.., register r: key warp_row0 + g + 8 (r % 2), queries
// 16j + 8 (r / 2) + 2tq, +1) into its key rows of the (keys, kBlockM queries) bf16 dS^T tile, 128-byte swizzle
template <int kBlockM>
__device__ __forceinline__ void store_ds_t(uint8_t* ds, const uint32_t (&dsa)[kBlockM / 16][4], int warp_row0) {
    const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    #pragma unroll
    for (int j = 0; j < kBlockM / 16; j++)
        #pragma unroll
        for (int r = 0; r < 4; r++)
            *reinterpret_cast<uint32_t*>(ds + swizzle<64>(warp_row0 + g + 8 * (r % 2), 2 * j + r / 2) + 4 * tq) = dsa[j][r];
}
// dq (64 queries x HS / 2 columns) = dS K over the kBlockN keys: A = dS read transposed from the dS^T tile, B = the
// warpgroup's columns of K (k_cols) read transposed; one commit group
template <bool kHalf, int HS, int kBlockN>
__device__ __forceinline__ void issue_dq_from_ds(float (&dq)[HS / 4], const uint8_t* ds, const uint8_t* k_cols) {
    wgmma_fence();
    #pragma unroll
    for (int j = 0; j < kBlockN / 16; j++)
        wgmma_ss_m64k16_trans_ab<kHalf, HS / 2>(dq, wgmma_desc(ds + j * 16 * 128), wgmma_desc(k_cols + j * 16 * 128), j);
    wgmma_commit();
}
// kDynamic: the producer's last hand-over (round `round` of the item's full / empty pair): the stop index w, then its
// CTA's count for the counter's reset
__device__ __forceinline__ void persistent_stop(uint64_t* full, uint64_t* empty, int* item_w, int round, int w, PersistentKernel k) {
    mbar_wait(empty, (round & 1) ^ 1);
    *item_w = w;
    mbar_arrive(full);
    persistent_claims_done(k);
}
// the consumers' item of round `round` (every lane of the warp calls it): kDynamic, the producer's index, there once
// the item's full barrier completes. Lane 0 reads it and hands it to its warp: where one lane per warp arrives on the
// empty barrier (the dQ kernel), that arrive orders only lane 0's own read before the producer's next write
// (compute-sanitizer racecheck flags the other lanes' reads if they read it themselves)
template <bool kDynamic>
__device__ __forceinline__ int persistent_item_index(uint64_t* full, const int* item_w, int round, bool snake) {
    if constexpr (kDynamic) {
        mbar_wait(full, round & 1);
        int w = 0;
        if (threadIdx.x % 32 == 0) w = *item_w;
        return __shfl_sync(0xffffffffu, w, 0);
    }
    else return persistent_work(round, snake);
}
#endif

// atomic dQ: where a staged dQ buffer goes (query block, head) and the key block it comes from; m_block < 0: stop
struct DqStep { int m_block, bh, n_block; };

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// ordered dQ: how many key blocks have added into this query block (acquire: their adds are visible) ...
__device__ __forceinline__ int dq_order_load(const int* order) {
    int seen;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(seen) : "l"(order) : "memory");
    return seen;
}
// ... and once this thread's reduce-adds into it have completed (bulk_wait), one more
__device__ __forceinline__ void dq_order_release(int* order) {
    fence_proxy_async_global();
    asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" :: "l"(order) : "memory");
}
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The warp-specialised dK/dV kernel's shared memory, carved once: K, V, the stages (Q, dO and their rows' lse2, D),
// the dK/dV staging (atomic dQ: overlaid by the dS^T and dQ step buffers), then the mbarriers, the item index and the
// dQ buffers' destinations
template <class Tile>
struct DkdvWsSmem {
    static constexpr int kStages = Tile::kStages, kNCWG = Tile::kNCWG, kBlockM = Tile::kBlockM;
    uint8_t *k, *v, *stage;   // (kBlockN, HS) twice, [kStages] Q, dO, lse2, D: swizzle_wgmma
    float* stat;              // atomic dQ: [kStages] lse2, D
    uint8_t *dk_stage, *dv_stage, *ds, *dq;   // swizzle<HS>; atomic dQ: [2] dS^T, then [kDqBuffers][kNCWG] dQ
    uint64_t *bars, *kv_full, *kv_empty;      // pairs (full, empty): K/V, then the stages
    int* item_w;                              // kDynamic: the item's index, with its K/V
    // atomic dQ: dQ buffer (buffer, warpgroup) = slot buffer * kNCWG + cwg; full: its 128 threads have staged it,
    // empty: the writer's reduce-add has read it; dq_at: where it goes
    uint64_t *dq_full, *dq_empty;
    DqStep* dq_at;
    __device__ __forceinline__ explicit DkdvWsSmem(uint8_t* smem) {
        k = smem;
        v = k + Tile::kKVBytes;
        stage = v + Tile::kKVBytes;
        stat = reinterpret_cast<float*>(stage + kStages * Tile::kStageBytes);
        dk_stage = stage + kStages * Tile::kStageBytes + Tile::kStatRegion;
        dv_stage = dk_stage + Tile::kKVBytes;
        ds = dk_stage;
        dq = ds + 2 * Tile::kDsBytes;
        bars = reinterpret_cast<uint64_t*>(smem + Tile::kBarOffset);
        kv_full = bars;
        kv_empty = bars + 1;
        item_w = reinterpret_cast<int*>(bars + 2 + 2 * kStages);
        dq_full = bars + 3 + 2 * kStages;
        dq_empty = dq_full + Tile::kDqBuffers * kNCWG;
        dq_at = reinterpret_cast<DqStep*>(dq_empty + Tile::kDqBuffers * kNCWG);
    }
    __device__ __forceinline__ uint64_t* stage_full(int s) const { return bars + 2 + 2 * s; }
    __device__ __forceinline__ uint64_t* stage_empty(int s) const { return bars + 3 + 2 * s; }
    __device__ __forceinline__ uint8_t* q_tile(int s) const { return stage + s * Tile::kStageBytes; }
    __device__ __forceinline__ uint8_t* do_tile(int s) const { return stage + s * Tile::kStageBytes + Tile::kQBytes; }
    __device__ __forceinline__ uint8_t* bias_tile(int s) const { return stage + s * Tile::kStageBytes + 2 * Tile::kQBytes; }
    __device__ __forceinline__ float* lse2_tile(int s) const {
        if constexpr (Tile::kStatApart) return stat + s * 2 * kBlockM;
        else return reinterpret_cast<float*>(stage + s * Tile::kStageBytes + 2 * Tile::kQBytes);
    }
};
// The work items of the dK/dV kernels: (key block, head), rank 0 = key block 0, the longest item; ordered_dq: the
// shortest first (see the dQ writer)
// An item's heads are (b, key/value head): with GQA its steps walk the query blocks of each query head of the group in
// turn, so dK and dV sum the group in registers. kGeneral false: causal self-attention, no GQA (the group, the
// diagonal and Tk = T constants to the compiler).
template <class Tile>
struct DkdvWsWalk {
    int T, Tk, NH, NH_kv, group, diag, lo, Tp, num_bh, num_n_blocks, num_items, m_blocks, section_heads;
    bool snake, ordered_dq;
    HopperBiasBoxes bias;   // kBias
    const int* packed;      // kVarlen: the pack's key-block table (see packed_block: its heads are the key/value heads)
    AttentionExtras x;
    bool causal;
    template <bool kGeneral>
    __device__ __forceinline__ DkdvWsWalk(const AttentionBackwardParams& p, int section_heads_, bool ordered_dq_, std::bool_constant<kGeneral>,
                                          const int* packed_ = nullptr)
        : T(p.T), Tk(kGeneral ? p.Tk : p.T), NH(p.NH), NH_kv(kGeneral ? p.NH_kv : p.NH), group(kGeneral ? p.NH / p.NH_kv : 1),
          diag(kGeneral ? attention_band(p).hi : 0), lo(kGeneral ? attention_band(p).lo : -kBandFar), Tp(bwd_padded_T(p.T)), num_bh(p.B * NH_kv), num_n_blocks(ceil_div(Tk, Tile::kBlockN)),
          num_items(packed_ ? packed_[0] * NH_kv : num_n_blocks * num_bh), m_blocks(ceil_div(p.T, Tile::kBlockM)),
          section_heads(section_heads_), snake(packed_ || section_heads_ >= num_bh), ordered_dq(ordered_dq_), bias(p.x, Tile::kBlockM),
          packed(packed_), x(p.x), causal(p.causal) {}
    __device__ __forceinline__ int key_block_of(int rank) const { return Tile::kAtomicDq && ordered_dq ? num_n_blocks - 1 - rank : rank; }
    // item w: its key block, head, query blocks (m_first .. m_end - 1: those with a query that sees one of its keys,
    // attention_query_blocks) and band (diag, lo); packed: its sequence's lengths and where its rows lie in the tensor
    // maps (rows q0.., k0.. of one batch)
    struct Item { int n_start, b, h_kv, m_first, m_end, diag, lo, T, Tk, q_row0, k_row0, map_b; };
    __device__ __forceinline__ Item locate(int w) const {
        if constexpr (Tile::kVarlen) {
            const PackedBlock pb = packed_block(packed, w, x, causal);
            const int n_start = pb.block * Tile::kBlockN;
            const QueryBlocks qb = attention_query_blocks(n_start, Tile::kBlockN, Tile::kBlockM, {pb.lo, pb.diag}, ceil_div(pb.T, Tile::kBlockM));
            return {n_start, pb.b, pb.h, qb.first, qb.end, pb.diag, pb.lo, pb.T, pb.Tk, pb.q0, pb.k0, 0};
        } else {
            const PersistentItem item = persistent_item(w, num_n_blocks, num_bh, section_heads);
            const int n_start = key_block_of(item.rank) * Tile::kBlockN, b = item.bh / NH_kv;
            const QueryBlocks qb = attention_query_blocks(n_start, Tile::kBlockN, Tile::kBlockM, {lo, diag}, m_blocks);
            return {n_start, b, item.bh % NH_kv, qb.first, qb.end, diag, lo, T, Tk, 0, 0, b};
        }
    }
};

// The dK/dV kernel's producer (one thread): per item its K, V once, then a ring of stages of Q, dO (TMA) and their
// rows' lse2, D (1-D bulk copies of kBlockM floats: rows padded to kBwdRowPad, always in bounds)
template <class Tile, bool kDynamic, class Maps>
__device__ __forceinline__ void dkdv_ws_producer(const DkdvWsSmem<Tile>& sm, const Maps& maps, const DkdvWsWalk<Tile>& walk,
                                                 const BackwardScratch& sc) {
    constexpr int HS = Tile::kHeadSize, kBlockM = Tile::kBlockM, kBlockN = Tile::kBlockN, kStages = Tile::kStages;
    const int NH = walk.NH, Tp = walk.Tp, num_items = walk.num_items;
    const bool snake = walk.snake;
    uint8_t *k_smem = sm.k, *v_smem = sm.v;
    uint64_t *kv_full = sm.kv_full, *kv_empty = sm.kv_empty;
    int* item_w = sm.item_w;
    auto stage_full = [&](int s) { return sm.stage_full(s); };
    auto stage_empty = [&](int s) { return sm.stage_empty(s); };
    int stage_iter = 0, item_iter = 0;
    auto next_item = [&](int round) { return kDynamic ? persistent_claim(kCounterDkdv) : persistent_work(round, snake); };
    int w = persistent_work(0, snake);
    for (; w < num_items; w = next_item(++item_iter)) {
        const auto it = walk.locate(w);
        const int b = it.b, h_kv = it.h_kv, n_start = it.n_start;
        mbar_wait(kv_empty, (item_iter & 1) ^ 1);
        if constexpr (kDynamic) *item_w = w;   // the consumers read it once kv_full completes
        mbar_arrive_expect_tx(kv_full, 2 * Tile::kKVBytes);
        tma_load_tile<HS, kBlockN>(k_smem, &maps.k, kv_full, h_kv, it.k_row0 + n_start, it.map_b);
        tma_load_tile<HS, kBlockN>(v_smem, &maps.v, kv_full, h_kv, it.k_row0 + n_start, it.map_b);
        for (int h = h_kv * walk.group; h < (h_kv + 1) * walk.group; h++)
        for (int m_block = it.m_first; m_block < it.m_end; m_block++, stage_iter++) {
            const int s = stage_iter % kStages, phase = (stage_iter / kStages) & 1;
            const size_t bh = (size_t)b * NH + h;
            mbar_wait(stage_empty(s), phase ^ 1);
            mbar_arrive_expect_tx(stage_full(s), 2 * Tile::kQBytes + Tile::kStatBytes + (Tile::kBias ? walk.bias.tile_bytes(kBlockN) : 0));
            tma_load_tile<HS, kBlockM>(sm.q_tile(s), &maps.q, stage_full(s), h, it.q_row0 + m_block * kBlockM, it.map_b);
            tma_load_tile<HS, kBlockM>(sm.do_tile(s), &maps.dout, stage_full(s), h, it.q_row0 + m_block * kBlockM, it.map_b);
            if constexpr (Tile::kBias)
                tma_load_bias_tile<kBlockN>(sm.bias_tile(s), &maps.bias, stage_full(s), walk.bias, m_block * kBlockM, n_start, h, b);
            bulk_load(sm.lse2_tile(s), sc.lse2 + bh * Tp + m_block * kBlockM, kBlockM * 4, stage_full(s));
            bulk_load(sm.lse2_tile(s) + kBlockM, sc.dpsum + bh * Tp + m_block * kBlockM, kBlockM * 4, stage_full(s));
        }
    }
    if constexpr (kDynamic) persistent_stop(kv_full, kv_empty, item_w, item_iter, w, kCounterDkdv);
}

// The dK/dV kernel's dQ writer (atomic dQ; one thread of the producer warpgroup): reduce-adds each round's dQ buffers
// (one per consumer warpgroup, both halves of one step's dQ) into dq_accum and hands them back once the TMA has read
// them, so the consumers never wait for a reduce; a query block < 0 is the consumers' stop.
// ordered_dq: the adds into a query block go in a fixed order, so the fp32 sums are the same every run: from the
// diagonal key block down. Query block m has key blocks 0 .. n_max(m) = the one holding its last row; key block n
// waits until dq_order (head, query block) = n_max - n and counts itself once its adds have completed. The items go
// shortest first (key_block_of), so key block n + 1 of the head was taken before n, by a running CTA whose writer goes
// through its steps in order: no deadlock. And it started at query block 2n + 2, two steps ahead of n on every query
// block, so n rarely waits (in key order from block 0, the items of a head that start together wait for each other in
// a chain). The cost is the tail of shortest-first: the last items are the longest.
template <class Tile>
__device__ __forceinline__ void dkdv_ws_dq_writer(const DkdvWsSmem<Tile>& sm, const HopperBackwardTmaMaps& maps,
                                                  const DkdvWsWalk<Tile>& walk, const BackwardScratch& sc, bool ordered_dq) {
    constexpr int HS = Tile::kHeadSize, kNCWG = Tile::kNCWG, kBlockM = Tile::kBlockM, kBlockN = Tile::kBlockN;
    const int T = walk.T;
    uint8_t* dq_smem = sm.dq;
    uint64_t *dq_full = sm.dq_full, *dq_empty = sm.dq_empty;
    const DqStep* dq_at = sm.dq_at;
    for (int round = 0; ; round++) {
        const int buf = round % Tile::kDqBuffers;
        for (int c = 0; c < kNCWG; c++) mbar_wait(&dq_full[buf * kNCWG + c], (round / Tile::kDqBuffers) & 1);
        const DqStep at = dq_at[buf * kNCWG];   // the same step in every warpgroup's buffer
        if (at.m_block < 0) break;
        int* order = sc.dq_order + (size_t)at.bh * ceil_div(T, kDqOrderRows) + at.m_block;
        if (ordered_dq) {
            const int turn = (at.m_block * kBlockM + kBlockM - 1) / kBlockN - at.n_block;
            while (dq_order_load(order) != turn) {}
            fence_proxy_async_global();   // the TMA's adds come after those the acquire saw
        }
        for (int c = 0; c < kNCWG; c++)
            #pragma unroll
            for (int box = 0; box < HS / 64; box++)
                tma_reduce_add_3d(&maps.dq_accum, dq_smem + (buf * kNCWG + c) * Tile::kDqBytes + box * Tile::kDqBoxBytes,
                                  c * HS / 2 + 32 * box, at.m_block * kBlockM, at.bh);
        bulk_commit();
        bulk_wait_read<0>();
        for (int c = 0; c < kNCWG; c++) mbar_arrive(&dq_empty[buf * kNCWG + c]);
        if (ordered_dq) { bulk_wait<0>(); dq_order_release(order); }
    }
    bulk_wait<0>();   // every reduce has landed before the CTA exits
}
#endif

// ordered_dq (atomic dQ): the key blocks of a head add into each query block's dQ in a fixed order (deterministic)
// kBias: a general copy that adds the kernels' tile bias and key bias (attention_hopper_bias_fits)
// kVarlen: a general copy for packed sequences (attention_hopper_packed_fits), its items from the key-block table
template <int HS, int kNCWG, int kBlockM, int kStages, bool kAtomicDq = false, bool kDynamic = false, bool kGeneral = false,
          bool kBias = false, bool kVarlen = false, bool kMods = false, bool kHalf = false>
__global__ void __launch_bounds__(HopperBackwardKVWsTile<HS, kNCWG, kBlockM, kStages, kAtomicDq>::kThreads, 1)
attention_backward_dkdv_hopper_ws_kernel(const AttentionBackwardParams p, const __grid_constant__ HopperBackwardMaps<kBias, kVarlen> maps,
                                         int section_heads, bool ordered_dq) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(HS == 64 || HS == 128, "head size 64 or 128");
    static_assert(!kBias || (kGeneral && !kAtomicDq), "the bias runs on the general copies of the split");
    static_assert(!kVarlen || (kGeneral && !kAtomicDq && !kDynamic && !kBias), "packed sequences run on the general copies of the split");
    using Tile = HopperBackwardKVWsTile<HS, kNCWG, kBlockM, kStages, kAtomicDq, kBias, kVarlen>;
    constexpr int kBlockN = Tile::kBlockN;
    constexpr int kDT = HS / 8;
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    const DkdvWsSmem<Tile> sm(smem);
    uint8_t *k_smem = sm.k, *v_smem = sm.v, *dk_stage = sm.dk_stage, *dv_stage = sm.dv_stage, *ds_smem = sm.ds, *dq_smem = sm.dq;
    uint64_t *bars = sm.bars, *kv_full = sm.kv_full, *kv_empty = sm.kv_empty, *dq_full = sm.dq_full, *dq_empty = sm.dq_empty;
    int* item_w = sm.item_w;
    DqStep* dq_at = sm.dq_at;
    auto stage_full = [&](int s) { return sm.stage_full(s); };
    auto stage_empty = [&](int s) { return sm.stage_empty(s); };
    auto q_tile = [&](int s) { return sm.q_tile(s); };
    auto do_tile = [&](int s) { return sm.do_tile(s); };
    auto lse2_tile = [&](int s) { return sm.lse2_tile(s); };
    // every consumer thread arrives on an empty barrier: the threads read lse2 and D with ordinary loads, and each
    // thread's own release-arrive is what orders its reads before the producer's next bulk copy into the stage
    if (threadIdx.x == 0) {
        if constexpr (kAtomicDq)
            for (int i = 0; i < Tile::kDqBuffers * kNCWG; i++) { mbar_init(&dq_full[i], 128); mbar_init(&dq_empty[i], 1); }
        init_mbarriers(bars, 2 + 2 * kStages, 128 * kNCWG);
    }
    __syncthreads();
    // early_start: set up while the preprocess finishes, then wait for its statistics. The split's dQ kernel needs
    // nothing of this one but those statistics: past the wait it may fill the SMs this one leaves
    pdl_wait_prerequisites();
    pdl_launch_dependents();

    static_assert(!(kGeneral && kAtomicDq), "the atomic dQ runs causal self-attention only");
    const int* packed = nullptr;
    if constexpr (kVarlen) packed = maps.packed;
    const DkdvWsWalk<Tile> walk(p, section_heads, ordered_dq, std::bool_constant<kGeneral>{}, packed);
    if (kVarlen && (int)blockIdx.x >= walk.num_items) return;   // the grid was sized for the longest sequences
    const int T = walk.T, NH = walk.NH, num_items = walk.num_items;
    const int m_blocks = walk.m_blocks;
    const bool snake = walk.snake;
    const int wg = threadIdx.x / 128;
    const BackwardScratch sc = backward_scratch(p);

    if (wg == 0) {   // ---- producer
        setmaxnreg_dec<Tile::kProducerRegs>();
        if (threadIdx.x == 0) dkdv_ws_producer<Tile, kDynamic>(sm, maps, walk, sc);
        else if (kAtomicDq && threadIdx.x == 32) dkdv_ws_dq_writer<Tile>(sm, maps, walk, sc, ordered_dq);
        return;
    }

    // ---- consumers: warpgroup cwg owns keys 64 cwg .. 64 cwg + 63 of the item's key block
    setmaxnreg_inc<Tile::kConsumerRegs>();
    const int cwg = wg - 1, warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    const int warp_row0 = cwg * 64 + (warp % 4) * 16;
    const bool wg_leader = threadIdx.x % 128 == 0;
    const uint64_t k_desc = wgmma_desc(k_smem + cwg * 64 * 128);
    const uint64_t v_desc = wgmma_desc(v_smem + cwg * 64 * 128);
    // atomic dQ: this warpgroup's HS / 2 columns of K, the B operand of its dQ = dS K
    const uint8_t* k_cols = k_smem + (cwg * HS / 2 / 64) * kBlockN * 128 + (cwg * HS / 2 % 64) * 2;
    float dk_acc[kDT * 4], dv_acc[kDT * 4];
    int stage_iter = 0, item_iter = 0;
    auto item_of = [&](int round) { return persistent_item_index<kDynamic>(kv_full, item_w, round, snake); };
    for (int w = item_of(item_iter); w < num_items; w = item_of(++item_iter)) {
        const auto it = walk.locate(w);
        const int n_start = it.n_start, n_block = n_start / kBlockN, b = it.b, h_kv = it.h_kv;
        const int bh = b * NH + h_kv;   // the atomic dQ's query head (kAtomicDq: no GQA)
        #pragma unroll
        for (int i = 0; i < kDT * 4; i++) dk_acc[i] = dv_acc[i] = 0.0f;
        // atomic dQ: step i's dS^T (both warpgroups' keys) and this warpgroup's dQ staging buffer for it
        auto ds_buf = [&](int i) { return ds_smem + (i & 1) * Tile::kDsBytes; };
        // dQ of step i (query block m_blk) -> fp32 TMA boxes of 32 columns, 128-byte rows, swizzled (n8 group c =
        // columns 8c + 2tq, +1 of rows g, g + 8) in dQ buffer i % kDqBuffers, once the writer has read its last use;
        // the writer reduce-adds it into dq_accum
        auto reduce_add_dq = [&](const float (&dq)[HS / 4], int i, int m_blk) {
            const int slot = (i % Tile::kDqBuffers) * kNCWG + cwg;
            mbar_wait(&dq_empty[slot], ((i / Tile::kDqBuffers) & 1) ^ 1);
            uint8_t* dq_s = dq_smem + slot * Tile::kDqBytes;
            #pragma unroll
            for (int c = 0; c < HS / 16; c++)
                #pragma unroll
                for (int half = 0; half < 2; half++) {
                    const int row = (warp % 4) * 16 + g + 8 * half, col = 8 * c + 2 * tq;
                    *reinterpret_cast<float2*>(dq_s + (col / 32) * Tile::kDqBoxBytes + row * 128 + ((col % 32 / 4) ^ (row % 8)) * 16 + (col % 4) * 4) =
                        make_float2(dq[4 * c + 2 * half], dq[4 * c + 2 * half + 1]);
                }
            if (wg_leader) dq_at[slot] = {m_blk, bh, n_block};
            fence_proxy_async();          // the staged dQ is visible to the TMA (async proxy) ...
            mbar_arrive(&dq_full[slot]);  // ... once the writer has seen all 128 arrivals
        };
        mbar_wait(kv_full, item_iter & 1);
        if constexpr (!kAtomicDq) {
            for (int hq = 0; hq < walk.group; hq++)   // the group's query heads, as the producer loads them
            for (int m_block = it.m_first; m_block < it.m_end; m_block++, stage_iter++) {
                const int s = stage_iter % kStages;
                mbar_wait(stage_full(s), (stage_iter / kStages) & 1);
                // the mask compares key > query + diag: queries offset by the diagonal
                const float* kb = key_bias_of(p.x, b, h_kv * walk.group + hq);
                const BiasTile bias{sm.bias_tile(s) + cwg * max(walk.bias.rows, 8) * 128, walk.bias.rows,   // this warpgroup's box
                                    1.0f / p.scale, kb ? kb + n_start : nullptr};
                // the score modifiers of this query head (kGeneral; the sequence's lengths: packed, its own)
                const ScoreMods mods = score_mods(p.x, b, h_kv * walk.group + hq, it.T, it.Tk, p.NH);
                dkdv_hopper_step<kHalf, HS, kBlockM, kBlockN, kBias, kGeneral>(dk_acc, dv_acc, k_desc, v_desc, q_tile(s), do_tile(s), lse2_tile(s),
                                                                        lse2_tile(s) + kBlockM, n_start, m_block * kBlockM + it.diag, warp_row0,
                                                                        p.scale * kLog2e, bias, m_block * kBlockM + it.lo,
                                                                        kMods ? &mods : nullptr, m_block * kBlockM);
                mbar_arrive(stage_empty(s));
            }
        } else {
            // atomic dQ: dQ (64 queries x HS) += dS (64 x 128 keys) K (128 keys x HS) each step. dS^T of both
            // warpgroups goes to shared memory (double-buffered: one barrier a step) while dV, dK run; each warpgroup
            // computes HS / 2 columns of dQ with both operands read transposed, stages them as fp32 TMA boxes, and one
            // thread reduce-adds them into dq_accum (in L2; rows past T skipped by the tensor map).
            for (int m_block = n_start / kBlockM; m_block < m_blocks; m_block++, stage_iter++) {
                const int s = stage_iter % kStages;
                mbar_wait(stage_full(s), (stage_iter / kStages) & 1);
                float st[kBlockM / 2], dpt[kBlockM / 2];
                uint32_t pa[kBlockM / 16][4], dsa[kBlockM / 16][4];
                issue_s_dp<kHalf, HS, kBlockM, kBlockN>(st, dpt, k_desc, v_desc, q_tile(s), do_tile(s));
                dkdv_p_ds<kHalf, HS, kBlockM>(st, dpt, pa, dsa, lse2_tile(s), lse2_tile(s) + kBlockM, n_start, m_block * kBlockM, warp_row0,
                                       p.scale * kLog2e);
                dkdv_issue_dv_dk<kHalf, HS, kBlockM>(dk_acc, dv_acc, pa, dsa, q_tile(s), do_tile(s));
                uint8_t* ds = ds_buf(stage_iter);
                store_ds_t<kBlockM>(ds, dsa, warp_row0);
                fence_proxy_async();
                named_barrier_sync(1, 128 * kNCWG);                     // both halves of dS^T are written
                float dq[HS / 4];
                issue_dq_from_ds<kHalf, HS, kBlockN>(dq, ds, k_cols);
                wgmma_wait<0>();
                mbar_arrive(stage_empty(s));
                reduce_add_dq(dq, stage_iter, m_block);
            }
        }
        mbar_arrive(kv_empty);
        if constexpr (kAtomicDq) {   // the dK/dV staging overlays the step buffers: the writer has read this
            // warpgroup's last dQ buffers, and both warpgroups are past them
            for (int i = max(stage_iter - Tile::kDqBuffers, 0); i < stage_iter; i++)
                mbar_wait(&dq_empty[(i % Tile::kDqBuffers) * kNCWG + cwg], (i / Tile::kDqBuffers) & 1);
            named_barrier_sync(1, 128 * kNCWG);
        }
        dkdv_hopper_epilogue<kHalf, HS, kGeneral>(p, dk_acc, dv_acc, dk_stage, dv_stage, b, h_kv, n_start, warp_row0, it.k_row0, kVarlen ? it.Tk : 0);
        if constexpr (kAtomicDq) named_barrier_sync(1, 128 * kNCWG);   // ... and both have read it back
    }
    if constexpr (kAtomicDq) {   // the writer's stop, in the next dQ buffer
        const int slot = (stage_iter % Tile::kDqBuffers) * kNCWG + cwg;
        mbar_wait(&dq_empty[slot], ((stage_iter / Tile::kDqBuffers) & 1) ^ 1);
        if (wg_leader) dq_at[slot] = {-1, 0, 0};
        mbar_arrive(&dq_full[slot]);
    }
    (void)g; (void)tq; (void)wg_leader;
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

// kGeneral false: causal self-attention without GQA (the diagonal a constant, no key bound)
// kBias: a general copy that adds the tile bias and key bias, and sums dBias in order (DbiasOrder) or writes dS for it
// kVarlen: a general copy for packed sequences (attention_hopper_packed_fits), its items from the query-block table
template <int HS, int kNCWG, int kBlockN, int kStages, bool kDynamic = false, bool kGeneral = false, bool kBias = false,
          bool kVarlen = false, bool kMods = false, bool kHalf = false>
__global__ void __launch_bounds__(HopperBackwardQWsTile<HS, kNCWG, kBlockN, kStages>::kThreads, 1)
attention_backward_dq_hopper_ws_kernel(const AttentionBackwardParams p, const __grid_constant__ HopperBackwardMaps<kBias, kVarlen> maps,
                                       int section_heads) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(HS == 64 || HS == 128 || (HS == 256 && kNCWG == 1 && kGeneral && !kBias && !kVarlen),
                  "head size 64 or 128; 256 with one consumer warpgroup, general");
    static_assert(!kBias || kGeneral, "the bias runs on the general copies");
    static_assert(!kVarlen || (kGeneral && !kDynamic && !kBias), "packed sequences run on the general copies");
    using Tile = HopperBackwardQWsTile<HS, kNCWG, kBlockN, kStages, kBias>;
    constexpr int kBlockM = Tile::kBlockM;
    constexpr int kDT = HS / 8;
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    uint8_t* q_smem = smem;
    uint8_t* do_smem = q_smem + Tile::kQBytes;
    uint8_t* kv_smem = do_smem + Tile::kQBytes;                          // [kStages][K, V (, bias)]
    uint8_t* dq_stage = kv_smem + kStages * Tile::kStageBytes;           // swizzle<HS>
    uint64_t* bars = reinterpret_cast<uint64_t*>(smem + Tile::kBarOffset);   // pairs (full, empty): Q/dO, then stages
    uint64_t* qo_full = bars;
    uint64_t* qo_empty = bars + 1;
    auto kv_full = [&](int s) { return bars + 2 + 2 * s; };
    auto kv_empty = [&](int s) { return bars + 3 + 2 * s; };
    int* item_w = reinterpret_cast<int*>(bars + 2 + 2 * kStages);   // kDynamic: the item's index, with its Q/dO
    auto k_tile = [&](int s) { return kv_smem + s * Tile::kStageBytes; };
    auto v_tile = [&](int s) { return kv_smem + s * Tile::kStageBytes + Tile::kTileBytes; };
    auto bias_tile = [&](int s) { return kv_smem + s * Tile::kStageBytes + 2 * Tile::kTileBytes; };
    const HopperBiasBoxes bias_boxes(p.x, kBlockM);   // kBias
    if (threadIdx.x == 0) init_mbarriers(bars, 2 + 2 * kStages, 4 * kNCWG);
    __syncthreads();

    const int T = p.T, NH = p.NH, Tp = bwd_padded_T(T), num_bh = p.B * p.NH;
    const int Tk = kGeneral ? p.Tk : T, group = kGeneral ? p.NH / p.NH_kv : 1;
    const KeyBand band = kGeneral ? attention_band(p) : KeyBand{-kBandFar, 0};
    const int diag = band.hi, lo = band.lo;
    const int num_m_blocks = ceil_div(T, kBlockM);
    int num_items = num_m_blocks * num_bh;
    bool snake = section_heads >= num_bh;   // see persistent_work
    auto key_blocks = [&](int m_start) {   // the K/V tiles a query block walks
        if constexpr (kGeneral) return attention_key_blocks(m_start + kBlockM - 1, diag, Tk, kBlockN);
        else return min(ceil_div(m_start + kBlockM, kBlockN), ceil_div(T, kBlockN));
    };
    // item w: its query block, head and key tiles (n_blocks of them from n_top down: the band's, at least one);
    // packed: its sequence's lengths, band and where its rows lie in the tensor maps (rows q0.., k0.. of one batch)
    struct Item { int b, h, m_start, n_top, n_blocks, diag, lo, Tk, T, q_row0, k_row0, map_b; };
    auto item = [&](int b, int h, int m_start, int key_blocks_, int diag_, int lo_, int Tk_, int T_, int q_row0, int k_row0, int map_b) {
        const int n_first = kGeneral ? min(attention_first_key_block(m_start, lo_, kBlockN), key_blocks_ - 1) : 0;
        return Item{b, h, m_start, key_blocks_ - 1, key_blocks_ - n_first, diag_, lo_, Tk_, T_, q_row0, k_row0, map_b};
    };
    auto locate = [&](int w) {
        if constexpr (kVarlen) {
            const PackedBlock pb = packed_block(maps.packed, w, p.x, p.causal);
            const int m_start = pb.block * kBlockM;
            return item(pb.b, pb.h, m_start, attention_key_blocks(min(m_start + kBlockM, pb.T) - 1, pb.diag, pb.Tk, kBlockN), pb.diag, pb.lo,
                        pb.Tk, pb.T, pb.q0, pb.k0, 0);
        } else {
            if constexpr (kBias) {
                if (maps.order.acc) {   // ordered dBias: ord-major (see DbiasOrder)
                    const DbiasOrder& o = maps.order;
                    const int ord = w / o.groups, grp = w % o.groups, own = grp / num_m_blocks;
                    const int b = o.bcast_b ? ord / (o.bcast_h ? NH : 1) : own / o.Hd, h = o.bcast_h ? ord % NH : own % o.Hd;
                    const int m_start = (num_m_blocks - 1 - grp % num_m_blocks) * kBlockM;
                    return item(b, h, m_start, key_blocks(m_start), diag, lo, Tk, T, 0, 0, b);
                }
            }
            const PersistentItem pi = persistent_item(w, num_m_blocks, num_bh, section_heads);
            const int m_start = (num_m_blocks - 1 - pi.rank) * kBlockM, b = pi.bh / NH;
            return item(b, pi.bh % NH, m_start, key_blocks(m_start), diag, lo, Tk, T, 0, 0, b);
        }
    };
    if constexpr (kVarlen) {
        num_items = maps.packed[0] * NH, snake = true;
        if ((int)blockIdx.x >= num_items) { pdl_wait_prerequisites(); return; }   // the grid was sized for the longest sequences
    }
    const int wg = threadIdx.x / 128;

    if (wg == 0) {   // ---- producer
        setmaxnreg_dec<Tile::kProducerRegs>();
        if (threadIdx.x == 0) {
            int kv_iter = 0, item_iter = 0;
            auto next_item = [&](int round) { return kDynamic ? persistent_claim(kCounterDq) : persistent_work(round, snake); };
            int w = persistent_work(0, snake);
            for (; w < num_items; w = next_item(++item_iter)) {
                const Item it = locate(w);
                const int b = it.b, h = it.h, h_kv = h / group, m_start = it.m_start, n_blocks = it.n_blocks;
                mbar_wait(qo_empty, (item_iter & 1) ^ 1);
                if constexpr (kDynamic) *item_w = w;   // the consumers read it once qo_full completes
                mbar_arrive_expect_tx(qo_full, 2 * Tile::kQBytes);
                tma_load_tile<HS, kBlockM>(q_smem, &maps.q, qo_full, h, it.q_row0 + m_start, it.map_b);
                tma_load_tile<HS, kBlockM>(do_smem, &maps.dout, qo_full, h, it.q_row0 + m_start, it.map_b);
                for (int i = 0; i < n_blocks; i++, kv_iter++) {   // the diagonal tile first
                    const int s = kv_iter % kStages, phase = (kv_iter / kStages) & 1;
                    const int key0 = (it.n_top - i) * kBlockN;
                    mbar_wait(kv_empty(s), phase ^ 1);
                    mbar_arrive_expect_tx(kv_full(s), 2 * Tile::kTileBytes + (kBias ? bias_boxes.tile_bytes(kBlockN) : 0));
                    tma_load_tile<HS, kBlockN>(k_tile(s), &maps.k, kv_full(s), h_kv, it.k_row0 + key0, it.map_b);
                    tma_load_tile<HS, kBlockN>(v_tile(s), &maps.v, kv_full(s), h_kv, it.k_row0 + key0, it.map_b);
                    if constexpr (kBias) tma_load_bias_tile<kBlockN>(bias_tile(s), &maps.bias, kv_full(s), bias_boxes, m_start, key0, h, b);
                }
            }
            if constexpr (kDynamic) persistent_stop(qo_full, qo_empty, item_w, item_iter, w, kCounterDq);
        }
        return;
    }

    // ---- consumers: warpgroup cwg owns query rows 64 cwg .. 64 cwg + 63 of the item's query block
    setmaxnreg_inc<Tile::kConsumerRegs>();
    const int cwg = wg - 1, warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4;
    const int warp_row0 = cwg * 64 + (warp % 4) * 16;
    const uint64_t q_desc = wgmma_desc(q_smem + cwg * 64 * 128);
    const uint64_t do_desc = wgmma_desc(do_smem + cwg * 64 * 128);
    const BackwardScratch sc = backward_scratch(p);
    auto release = [&](uint64_t* bar) { if (lane == 0) mbar_arrive(bar); };
    float dq_acc[kDT * 4];
    int kv_iter = 0, item_iter = 0;
    // (kDynamic: the row statistics below are read after the wait for the item's Q/dO, not before it)
    auto item_of = [&](int round) { return persistent_item_index<kDynamic>(qo_full, item_w, round, snake); };
    for (int w = item_of(item_iter); w < num_items; w = item_of(++item_iter)) {
        const Item it = locate(w);
        const int b = it.b, h = it.h, bh = b * NH + h, m_start = it.m_start, n_blocks = it.n_blocks;
        float row_lse2[2], row_dpsum[2];   // rows g, g + 8 of this warp (padded: in bounds)
        #pragma unroll
        for (int half = 0; half < 2; half++) {
            const size_t r = (size_t)bh * Tp + m_start + warp_row0 + g + 8 * half;
            row_lse2[half] = sc.lse2[r];
            row_dpsum[half] = sc.dpsum[r];
        }
        #pragma unroll
        for (int i = 0; i < kDT * 4; i++) dq_acc[i] = 0.0f;
        float* ds_rows[2] = {nullptr, nullptr};   // kBias with dBias: this thread's rows of the dS scratch (rows < T)
        DbiasWarp order{};                        // ... or of the ordered dBias's accumulator (DbiasOrder)
        if constexpr (kBias) {
            if (maps.order.acc) {
                const DbiasOrder& o = maps.order;
                const int bd = o.bcast_b ? 0 : b, hd = o.bcast_h ? 0 : h, m_block = m_start / kBlockM;
                const int ord = (o.bcast_b ? b : 0) * (o.bcast_h ? NH : 1) + (o.bcast_h ? h : 0), slot = ord % o.slots;
                const int grp = (bd * o.Hd + hd) * num_m_blocks + m_block;
                float* acc = o.acc + (((size_t)slot * o.Bd + bd) * o.Hd + hd) * T * o.row;
                #pragma unroll
                for (int half = 0; half < 2; half++) {
                    const int row = m_start + warp_row0 + g + 8 * half;
                    order.rows[half] = row < T ? acc + (size_t)row * o.row : nullptr;
                }
                order.counter = o.counters + ((size_t)slot * o.groups + grp) * o.n_blocks * (kBlockM / 16) + warp_row0 / 16;
                order.turn = ord / o.slots;
            } else if (p.dbias) {
                #pragma unroll
                for (int half = 0; half < 2; half++) {
                    const int row = m_start + warp_row0 + g + 8 * half;
                    if (row < T) ds_rows[half] = sc.ds + ((size_t)bh * T + row) * Tk;
                }
            }
        }
        const ScoreMods mods = score_mods(p.x, b, h, it.T, it.Tk, p.NH);   // kMods: softcap, ALiBi, the slope read once an item
        mbar_wait(qo_full, item_iter & 1);
        for (int i = 0; i < n_blocks; i++, kv_iter++) {
            const int s = kv_iter % kStages;
            mbar_wait(kv_full(s), (kv_iter / kStages) & 1);
            const BiasTile bias{bias_tile(s), bias_boxes.rows, 1.0f / p.scale, key_bias_of(p.x, b, h)};
            dq_hopper_step<kHalf, HS, kBlockM, kBlockN, kBias, kGeneral>(dq_acc, q_desc, do_desc, k_tile(s), v_tile(s), row_lse2, row_dpsum,
                                                                  it.n_top - i, m_start, warp_row0, p.scale * kLog2e, it.diag,
                                                                  kGeneral ? it.Tk : 1 << 30, bias, ds_rows, order, it.lo,
                                                                  kMods ? &mods : nullptr);
            release(kv_empty(s));
        }
        release(qo_empty);
        dq_hopper_epilogue<kHalf, HS, kGeneral>(p, dq_acc, dq_stage, b, h, m_start, warp_row0, it.q_row0, kVarlen ? it.T : 0);
    }
    // early_start: this grid ends after the dK/dV kernel it overlapped, so what follows in the stream sees both
    pdl_wait_prerequisites();
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

// ----------------------------------------------------------------------------
// Hopper backward, HS 256. The dK and dV accumulators of 64 keys x 256 take 128 registers a thread each, so one
// warpgroup cannot hold both. Both consumer warpgroups work on the same 64 keys and split each step's four GEMMs by
// role: warpgroup 0 computes S^T = K Q^T, P^T and dV += P^T dO; warpgroup 1 computes dP^T = V dO^T, takes P^T from
// warpgroup 0 through shared memory (fp32, each thread the elements it holds: the two accumulators share a layout;
// a full / empty mbarrier pair hands the buffer over) and computes dS^T and dK += dS^T Q. dV and dK are RS wgmmas
// from each warpgroup's own registers. The producer, stages and walk are the HS 64 / 128 dK/dV kernel's
// (dkdv_ws_producer, DkdvWsSmem, DkdvWsWalk); dQ comes from the split's dQ kernel with one consumer warpgroup (its
// 64 x 256 accumulator likewise takes 128 registers). Every output is written once, in a fixed order: deterministic.
template <int kStages_>
struct HopperBackwardKV256Tile {
    static constexpr int kHeadSize = 256, kNCWG = 2, kBlockM = 64, kBlockN = 64, kStages = kStages_, kThreads = 384;
    static constexpr bool kAtomicDq = false, kBias = false, kVarlen = false, kStatApart = false;
    static constexpr int kKVBytes = kBlockN * 256 * 2, kQBytes = kBlockM * 256 * 2, kStatBytes = 2 * kBlockM * 4;
    static constexpr int kStageBytes = 2 * kQBytes + 1024;               // Q, dO, lse2 and D
    static constexpr int kStatRegion = 0, kDsBytes = 0, kDqBuffers = 0;
    static constexpr int kPtBytes = kBlockN * kBlockM * 4;               // P^T (fp32), warpgroup 0 -> 1
    // K | V | stages | P^T (in DkdvWsSmem's dk_stage) | mbarriers, the item index, P^T's full / empty | + 1 KB align
    static constexpr int kBarOffset = 2 * kKVBytes + kStages * kStageBytes + kPtBytes;
    static constexpr int kSmemBytes = kBarOffset + 8 * (5 + 2 * kStages) + 1024;
    static constexpr int kProducerRegs = 24, kConsumerRegs = 240;
    static_assert(kSmemBytes <= 227 * 1024, "shared memory");
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// P^T's full / empty mbarriers: past the item index (where DkdvWsSmem puts the atomic dQ's barriers)
template <class Tile>
__device__ __forceinline__ uint64_t* dkdv256_pt_bars(const DkdvWsSmem<Tile>& sm) { return sm.bars + 3 + 2 * Tile::kStages; }

// One role's whole consumer loop (kRole 0: S^T, P^T, dV; 1: dP^T, dS^T, dK), each in its own copy of the code: a
// wgmma under a runtime branch would serialise the kernel's wgmmas
template <int kRole, class Tile, bool kDynamic, bool kMods, bool kHalf>
__device__ __forceinline__ void dkdv256_consumer(const AttentionBackwardParams& p, const DkdvWsSmem<Tile>& sm, const DkdvWsWalk<Tile>& walk) {
    constexpr int HS = 256, kBlockM = Tile::kBlockM, kBlockN = Tile::kBlockN, kStages = Tile::kStages;
    constexpr int kQT = kBlockM / 8;   // n8 column groups of S^T, dP^T (queries)
    const int tid = threadIdx.x % 128, lane = tid % 32, g = lane / 4, tq = lane % 4;
    const int warp_row0 = (tid / 32) * 16;   // this warp's 16 of the 64 keys
    const uint64_t a_desc = wgmma_desc(kRole == 0 ? sm.k : sm.v);
    float4* pt = reinterpret_cast<float4*>(sm.dk_stage);   // P^T: float4 i of thread tid at [i][tid], no bank conflicts
    uint64_t *pt_full = dkdv256_pt_bars(sm), *pt_empty = pt_full + 1;   // 128 arrivals each, one a thread
    const float scale_log2 = p.scale * kLog2e;
    float acc[HS / 2];
    int stage_iter = 0, item_iter = 0;
    auto item_of = [&](int round) { return persistent_item_index<kDynamic>(sm.kv_full, sm.item_w, round, walk.snake); };
    for (int w = item_of(item_iter); w < walk.num_items; w = item_of(++item_iter)) {
        const auto it = walk.locate(w);
        #pragma unroll
        for (int i = 0; i < HS / 2; i++) acc[i] = 0.0f;
        mbar_wait(sm.kv_full, item_iter & 1);
        for (int hq = 0; hq < walk.group; hq++)   // the group's query heads, as the producer loads them
        for (int m_block = it.m_first; m_block < it.m_end; m_block++, stage_iter++) {
            const int s = stage_iter % kStages;
            mbar_wait(sm.stage_full(s), (stage_iter / kStages) & 1);
            const float* lse2_s = sm.lse2_tile(s);
            const float* dpsum_s = lse2_s + kBlockM;
            const int m_start = m_block * kBlockM + it.diag;   // the mask compares key > query + diag
            // the score modifiers of this query head
            const ScoreMods mods = score_mods(p.x, it.b, it.h_kv * walk.group + hq, it.T, it.Tk, p.NH);
            float x[kBlockM / 2];   // S^T, then P^T (role 0); dP^T, then dS^T (role 1)
            uint32_t frag[kBlockM / 16][4];   // x as the A fragments of dV (role 0) or dK (role 1)
            wgmma_fence();
            wgmma_ss_over_hs<kHalf, HS, kBlockM, kBlockN, 0>(x, a_desc, kRole == 0 ? sm.q_tile(s) : sm.do_tile(s));
            wgmma_commit();
            wgmma_wait<0>();
            if constexpr (kRole == 0) {
                // P^T = exp2(S^T * c - lse2[query]), 0 where key > query + diag or key < query + lo (only where this
                // warp's keys cross the tile's limits)
                const int lo_start = m_block * kBlockM + it.lo;
                const bool need_mask = it.n_start + warp_row0 + 15 > m_start;
                if constexpr (kMods) apply_score_mods_frag_t(x, mods, it.n_start + warp_row0, m_block * kBlockM);   // softcap, ALiBi
                if (it.n_start + warp_row0 < lo_start + kBlockM - 1) mask_before_window_frag_t(x, it.n_start + warp_row0, lo_start, 0);
                #pragma unroll
                for (int i = 0; i < kQT; i++)
                    p_t_group(x, i, *reinterpret_cast<const float2*>(lse2_s + i * 8 + 2 * tq), need_mask, it.n_start, m_start, warp_row0,
                              scale_log2);
                mbar_wait(pt_empty, (stage_iter & 1) ^ 1);   // warpgroup 1 has read the last step's
                #pragma unroll
                for (int i = 0; i < kQT; i++) pt[i * 128 + tid] = make_float4(x[4 * i], x[4 * i + 1], x[4 * i + 2], x[4 * i + 3]);
                mbar_arrive(pt_full);
            } else {
                // dS^T = P^T * (dP^T - D[query])
                mbar_wait(pt_full, stage_iter & 1);
                #pragma unroll
                for (int i = 0; i < kQT; i++) {
                    const float4 pv = pt[i * 128 + tid];
                    const float2 dps = *reinterpret_cast<const float2*>(dpsum_s + i * 8 + 2 * tq);
                    x[4 * i] = pv.x * (x[4 * i] - dps.x);
                    x[4 * i + 1] = pv.y * (x[4 * i + 1] - dps.y);
                    x[4 * i + 2] = pv.z * (x[4 * i + 2] - dps.x);
                    x[4 * i + 3] = pv.w * (x[4 * i + 3] - dps.y);
                    if (kMods && p.x.softcap_in != 0.0f) {   // the softcap's factor, from P^T
                        const float2 l2 = *reinterpret_cast<const float2*>(lse2_s + i * 8 + 2 * tq);
                        const int q = m_block * kBlockM + i * 8 + 2 * tq, key = it.n_start + warp_row0 + g;
                        const float d = mods.dist0(q, key);
                        x[4 * i] *= mods.grad(pv.x, l2.x, d);
                        x[4 * i + 1] *= mods.grad(pv.y, l2.y, d + 1.0f);
                        x[4 * i + 2] *= mods.grad(pv.z, l2.x, d - 8.0f);
                        x[4 * i + 3] *= mods.grad(pv.w, l2.y, d - 7.0f);
                    }
                }
                mbar_arrive(pt_empty);
            }
            // dV += P^T dO (role 0), dK += dS^T Q (role 1)
            #pragma unroll
            for (int j = 0; j < kBlockM / 16; j++) accum_to_a_frag<kHalf>(frag[j], x, j);
            wgmma_fence();
            #pragma unroll
            for (int j = 0; j < kBlockM / 16; j++) wgmma_rs_m64k16_trans_b<kHalf, HS, kBlockM>(acc, frag[j], kRole == 0 ? sm.do_tile(s) : sm.q_tile(s), j);
            wgmma_commit();
            wgmma_wait<0>();
            mbar_arrive(sm.stage_empty(s));
        }
        mbar_arrive(sm.kv_empty);
        // dV, or dK * scale, as bf16 pairs straight from the accumulator (each quad writes 16 contiguous bytes of a row)
        const float out_scale = kRole == 0 ? 1.0f : p.scale;
        floatX* out = kRole == 0 ? p.dv + it.b * p.dv_st.batch + it.h_kv * p.dv_st.head : p.dk + it.b * p.dk_st.batch + it.h_kv * p.dk_st.head;
        const long long row_st = kRole == 0 ? p.dv_st.row : p.dk_st.row;
        #pragma unroll
        for (int half = 0; half < 2; half++) {
            const int t = it.n_start + warp_row0 + g + 8 * half;
            if (t >= it.Tk) continue;
            floatX* row = out + (it.k_row0 + t) * row_st + 2 * tq;
            #pragma unroll
            for (int dt = 0; dt < HS / 8; dt++)
                if (head_chunk_stored<true>(p.HS, dt))   // head dims 136-248, zero-padded
                    *reinterpret_cast<uint32_t*>(row + dt * 8) = pack_x2<kHalf>(acc[4 * dt + 2 * half] * out_scale, acc[4 * dt + 2 * half + 1] * out_scale);
        }
    }
}
#endif

template <int kStages, bool kDynamic = false, bool kMods = false, bool kHalf = false>
__global__ void __launch_bounds__(384, 1)
attention_backward_dkdv256_hopper_ws_kernel(const AttentionBackwardParams p, const __grid_constant__ HopperBackwardTmaMaps maps, int section_heads) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using Tile = HopperBackwardKV256Tile<kStages>;
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    const DkdvWsSmem<Tile> sm(smem);
    if (threadIdx.x == 0) {   // every consumer thread arrives on the empties; each role's 128 threads on P^T's
        mbar_init(dkdv256_pt_bars(sm), 128);
        mbar_init(dkdv256_pt_bars(sm) + 1, 128);
        init_mbarriers(sm.bars, 2 + 2 * kStages, 256);
    }
    __syncthreads();
    pdl_wait_prerequisites();   // early_start: as the HS 64 / 128 kernel
    pdl_launch_dependents();
    const DkdvWsWalk<Tile> walk(p, section_heads, false, std::true_type{});
    const int wg = threadIdx.x / 128;
    if (wg == 0) {   // ---- producer
        setmaxnreg_dec<Tile::kProducerRegs>();
        if (threadIdx.x == 0) dkdv_ws_producer<Tile, kDynamic>(sm, maps, walk, backward_scratch(p));
        return;
    }
    setmaxnreg_inc<Tile::kConsumerRegs>();
    if (wg == 1) dkdv256_consumer<0, Tile, kDynamic, kMods, kHalf>(p, sm, walk);
    else dkdv256_consumer<1, Tile, kDynamic, kMods, kHalf>(p, sm, walk);
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

// ----------------------------------------------------------------------------
// launchers

template <int HS, bool kExtras = false, bool kHalf = false>
void launch_attention_backward_preprocess(const AttentionBackwardParams& p, bool zero_dq, cudaStream_t stream) {
    const size_t threads = (size_t)p.B * p.NH * bwd_padded_T(p.T) * preprocess_lanes<HS>();
    attention_backward_preprocess_kernel<HS, kExtras, kHalf><<<(unsigned)ceil_div(threads, (size_t)256), 256, 0, stream>>>(p, zero_dq);
    cudaCheck(cudaGetLastError());
}

template <int HS, bool kHalf = false>
void launch_attention_backward_postprocess(const AttentionBackwardParams& p, cudaStream_t stream) {
    const size_t threads = (size_t)p.B * p.NH * p.T * (HS / 8);
    attention_backward_postprocess_kernel<HS, kHalf><<<(unsigned)ceil_div(threads, (size_t)256), 256, 0, stream>>>(p);
    cudaCheck(cudaGetLastError());
}

template <int HS, int kNWarps, int kMT, int kBlockM, bool kAtomicDq, bool kExtras = false, bool kHalf = false>
void launch_attention_backward_dkdv(const AttentionBackwardParams& p, cudaStream_t stream) {
    using Tile = BackwardKVTile<HS, kNWarps, kMT, kBlockM, kAtomicDq>;
    constexpr auto kernel = attention_backward_dkdv_kernel<HS, kNWarps, kMT, kBlockM, kAtomicDq, kExtras, kHalf>;
    const int smem = Tile::kSmemBytes + (kExtras && p.x.bias ? 2 * kBlockM * bias_tile_pitch(Tile::kBlockN, p.x.bias_fp32) : 0);
    launch_with_smem<kernel>(dim3(p.B * p.NH_kv, ceil_div(p.Tk, Tile::kBlockN), HS > 128 ? 2 : 1), Tile::kThreads, smem, stream, p);
}

template <int HS, int kNWarps, int kMT, int kBlockN, bool kExtras = false, bool kHalf = false>
void launch_attention_backward_dq(const AttentionBackwardParams& p, cudaStream_t stream) {
    using Tile = BackwardQTile<HS, kNWarps, kMT, kBlockN>;
    constexpr auto kernel = attention_backward_dq_kernel<HS, kNWarps, kMT, kBlockN, kExtras, kHalf>;
    const int smem = Tile::kSmemBytes + (kExtras && p.x.bias ? 2 * Tile::kBlockM * bias_tile_pitch(kBlockN, p.x.bias_fp32) : 0);
    launch_with_smem<kernel>(dim3(p.B * p.NH, ceil_div(p.T, Tile::kBlockM)), Tile::kThreads, smem, stream, p);
}

// Q, dO with boxes of q_rows rows, K, V with boxes of kv_rows rows (packed: all the pack's rows, as one batch)
inline HopperBackwardTmaMaps backward_tma_maps(const AttentionBackwardParams& p, int q_rows, int kv_rows, bool packed = false) {
    if (packed)
        return {packed_tensor_map(p.q, p.q_st, p.x.total_q, p.NH, p.HS, q_rows), packed_tensor_map(p.k, p.k_st, p.x.total_k, p.NH_kv, p.HS, kv_rows),
                packed_tensor_map(p.v, p.v_st, p.x.total_k, p.NH_kv, p.HS, kv_rows),
                packed_tensor_map(p.dout, p.do_st, p.x.total_q, p.NH, p.HS, q_rows)};
    return {attention_tensor_map(p.q, p.q_st, p.B, p.T, p.NH, p.HS, q_rows), attention_tensor_map(p.k, p.k_st, p.B, p.Tk, p.NH_kv, p.HS, kv_rows),
            attention_tensor_map(p.v, p.v_st, p.B, p.Tk, p.NH_kv, p.HS, kv_rows),
            attention_tensor_map(p.dout, p.do_st, p.B, p.T, p.NH, p.HS, q_rows)};
}

// early_start: launched to overlap the preprocess's tail (programmatic dependent launch)
// kGeneral false: causal self-attention without GQA only (checked here); kBias: a bf16 bias (attention_hopper_bias_fits);
// kVarlen: packed sequences (attention_hopper_packed_fits), packed their key-block table
template <int HS, int kNCWG, int kBlockM, int kStages, bool kAtomicDq = false, bool kDynamic = false, bool kGeneral = false,
          bool kBias = false, bool kVarlen = false, bool kMods = false, bool kHalf = false>
void launch_attention_backward_dkdv_hopper_ws(const AttentionBackwardParams& p, cudaStream_t stream, bool early_start = false,
                                              bool ordered_dq = false, const int* packed = nullptr) {
    using Tile = HopperBackwardKVWsTile<HS, kNCWG, kBlockM, kStages, kAtomicDq, kBias, kVarlen>;
    if (!kGeneral) attention_check_self_causal(p);
    const int num_items = p.B * p.NH_kv * ceil_div(p.Tk, Tile::kBlockN);
    HopperBackwardMaps<kBias, kVarlen> maps;
    static_cast<HopperBackwardTmaMaps&>(maps) = backward_tma_maps(p, kBlockM, Tile::kBlockN, kVarlen);
    if constexpr (kBias) maps.bias = bias_tensor_map(p.x, p.B, p.T, p.Tk, p.NH, kBlockM);
    if constexpr (kVarlen) maps.packed = packed;
    if (kAtomicDq) {   // dq_accum (B * NH, T, HS) fp32 as (HS, T, B * NH), boxes of 32 columns x kBlockM rows
        const cuuint64_t dims[3] = {(cuuint64_t)HS, (cuuint64_t)p.T, (cuuint64_t)p.B * p.NH};
        const cuuint64_t strides[2] = {(cuuint64_t)HS * 4, (cuuint64_t)p.T * HS * 4};
        const cuuint32_t box[3] = {32, (cuuint32_t)kBlockM, 1};
        maps.dq_accum = swizzled_tensor_map(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, backward_scratch(p).dq_accum, dims, strides, box);
    }
    launch_with_smem_ex<attention_backward_dkdv_hopper_ws_kernel<HS, kNCWG, kBlockM, kStages, kAtomicDq, kDynamic, kGeneral, kBias, kVarlen, kMods, kHalf>>(
        dim3(std::min(num_items, device_props().multiProcessorCount)), Tile::kThreads, Tile::kSmemBytes, stream, early_start, p, maps,
        persistent_section_heads(p.B * p.NH_kv, p.T * (p.NH / p.NH_kv), HS), ordered_dq);
}

// early_start: launched to overlap the dK/dV kernel before it (programmatic dependent launch); packed (kVarlen): the
// query-block table
template <int HS, int kNCWG, int kBlockN, int kStages, bool kDynamic = false, bool kGeneral = false, bool kBias = false,
          bool kVarlen = false, bool kMods = false, bool kHalf = false>
void launch_attention_backward_dq_hopper_ws(const AttentionBackwardParams& p, cudaStream_t stream, bool early_start = false,
                                            const int* packed = nullptr, const DbiasOrder& order = {}) {
    using Tile = HopperBackwardQWsTile<HS, kNCWG, kBlockN, kStages, kBias>;
    if (!kGeneral) attention_check_self_causal(p);
    const int num_items = p.B * p.NH * ceil_div(p.T, Tile::kBlockM);
    HopperBackwardMaps<kBias, kVarlen> maps;
    static_cast<HopperBackwardTmaMaps&>(maps) = backward_tma_maps(p, Tile::kBlockM, kBlockN, kVarlen);
    if constexpr (kBias) maps.bias = bias_tensor_map(p.x, p.B, p.T, p.Tk, p.NH, Tile::kBlockM), maps.order = order;
    if constexpr (kVarlen) maps.packed = packed;
    static_assert(Tile::kSmemBytes <= 227 * 1024, "shared memory");
    launch_with_smem_ex<attention_backward_dq_hopper_ws_kernel<HS, kNCWG, kBlockN, kStages, kDynamic, kGeneral, kBias, kVarlen, kMods, kHalf>>(
        dim3(std::min(num_items, device_props().multiProcessorCount)), Tile::kThreads, Tile::kSmemBytes, stream, early_start, p, maps,
        persistent_section_heads(p.B * p.NH, p.Tk, HS));
}

// atomic path: preprocess (+ zero dq_accum), dK/dV with red.global.add of dQ, dQ convert. Non-deterministic.
template <int HS, int kNWarps, int kBlockM, bool kHalf = false>
void attention_backward_atomic(const AttentionBackwardParams& p, cudaStream_t stream) {
    launch_attention_backward_preprocess<HS, false, kHalf>(p, /*zero_dq=*/true, stream);
    launch_attention_backward_dkdv<HS, kNWarps, 1, kBlockM, /*kAtomicDq=*/true, false, kHalf>(p, stream);
    launch_attention_backward_postprocess<HS, kHalf>(p, stream);
}

// the fused kernel over (B * NH, key blocks); kDq: with the atomic dQ
template <int HS, int kMT, int kWarpsQ, bool kDkDvSmem, bool kDq, bool kHalf = false>
void launch_attention_backward_fused(const AttentionBackwardParams& p, cudaStream_t stream) {
    using Tile = BackwardFusedTile<HS, kMT, kWarpsQ, kDkDvSmem>;
    launch_with_smem<attention_backward_fused_kernel<HS, kMT, kWarpsQ, kDkDvSmem, kDq, kHalf>>(dim3(p.B * p.NH, ceil_div(p.T, Tile::kBlockN)),
                         Tile::kThreads, Tile::kSmemBytes, stream, p);
}

// fused path (portable, non-deterministic): preprocess (+ zero dq_accum), the fused kernel, dQ convert
template <int HS, int kMT, int kWarpsQ, bool kDkDvSmem, bool kHalf = false>
void attention_backward_fused(const AttentionBackwardParams& p, cudaStream_t stream) {
    launch_attention_backward_preprocess<HS, false, kHalf>(p, /*zero_dq=*/true, stream);
    launch_attention_backward_fused<HS, kMT, kWarpsQ, kDkDvSmem, /*kDq=*/true, kHalf>(p, stream);
    launch_attention_backward_postprocess<HS, kHalf>(p, stream);
}

// split path with the fused kernel's dK/dV (kDq = false: no dQ, no atomics) and the mma.sync dQ kernel (kQWarps
// warps of 16 * kQMT query rows, kQBlockN-key steps). Deterministic.
template <int HS, int kMT, int kWarpsQ, bool kDkDvSmem, int kQWarps, int kQMT, int kQBlockN, bool kHalf = false>
void attention_backward_split_wide(const AttentionBackwardParams& p, cudaStream_t stream) {
    launch_attention_backward_preprocess<HS, false, kHalf>(p, /*zero_dq=*/false, stream);
    launch_attention_backward_fused<HS, kMT, kWarpsQ, kDkDvSmem, /*kDq=*/false, kHalf>(p, stream);
    launch_attention_backward_dq<HS, kQWarps, kQMT, kQBlockN, false, kHalf>(p, stream);
}

// split path: preprocess, dK/dV kernel (kKVWarps warps of 16 * kKVMT keys, kKVBlockM-query steps), dQ kernel
// (kQWarps warps of 16 * kQMT query rows, kQBlockN-key steps). Deterministic: every output written once, fixed order.
template <int HS, int kKVWarps, int kKVMT, int kKVBlockM, int kQWarps, int kQMT, int kQBlockN, bool kExtras = false, bool kHalf = false>
void attention_backward_split(const AttentionBackwardParams& p, cudaStream_t stream) {
    launch_attention_backward_preprocess<HS, kExtras, kHalf>(p, /*zero_dq=*/false, stream);
    AttentionBackwardParams q = p;   // with gating the kernels take dO = dout * gate from the scratch
    if (kExtras && p.x.gate) { q.dout = backward_scratch(p).gated_dout; q.do_st = gated_dout_strides(p); }
    launch_attention_backward_dkdv<HS, kKVWarps, kKVMT, kKVBlockM, /*kAtomicDq=*/false, kExtras, kHalf>(q, stream);
    launch_attention_backward_dq<HS, kQWarps, kQMT, kQBlockN, kExtras, kHalf>(q, stream);
}

// the same split, warp-specialised: dK/dV with kKVWG consumer warpgroups (64 keys each) and kKVBlockM-query
// stages, dQ with kQWG consumer warpgroups (64 query rows each) and kQBlockN-key stages; kStages-deep rings
// kGeneral: any call (non-causal, T != Tk, GQA); otherwise causal self-attention without GQA
// kBias (general): with a bf16 bias (attention_hopper_bias_fits), and dBias from the dQ kernel's dS where p.dbias is set
// kVarlen (general): packed sequences with their totals (attention_hopper_packed_fits), on the round-robin schedule
// order (kBias): the dQ kernel's ordered dBias (DbiasOrder), its accumulators zeroed
// kMods (general, no bias tiles or packs): with the score modifiers (softcap, ALiBi), claimed at HS 96 / 128
template <int HS, int kKVWG, int kKVBlockM, int kQWG, int kQBlockN, int kStages, bool kGeneral = false, bool kBias = false,
          bool kVarlen = false, bool kMods = false, bool kHalf = false>
void attention_backward_split_hopper_ws(const AttentionBackwardParams& p, cudaStream_t stream, const DbiasOrder& order = {}) {
    static_assert(!kMods || (kGeneral && !kBias && !kVarlen), "the score modifiers' copies are general, without bias tiles or packs");
    PackedTables t{};   // kVarlen: built before the preprocess, which the dK/dV kernel's early start overlaps
    if constexpr (kVarlen) t = packed_blocks_tables(p.x, p.B, p.T, p.Tk, 64 * kQWG, 64 * kKVWG, stream);
    // the preprocess at the caller's head dim (HS 8-32 on the HS 64 copies, 96 on the HS 128 ones, the other padded ones
    // on the kExtras copy of the kernels' HS); with gating (kExtras) it also writes dgate and dO * gate into the
    // scratch, which the kernels then take as dO
    if constexpr (kGeneral) {
        const bool extras = kVarlen || p.x.gate;
        if (HS == 64 && p.HS == 32) launch_attention_backward_preprocess<32, true, kHalf>(p, /*zero_dq=*/false, stream);
        else if (HS == 64 && p.HS < 32) launch_attention_backward_preprocess<16, true, kHalf>(p, /*zero_dq=*/false, stream);
        else if (HS == 128 && p.HS == 96 && extras) launch_attention_backward_preprocess<96, true, kHalf>(p, /*zero_dq=*/false, stream);
        else if (HS == 128 && p.HS == 96) launch_attention_backward_preprocess<96, false, kHalf>(p, /*zero_dq=*/false, stream);
        else if (extras || p.HS != HS) launch_attention_backward_preprocess<HS, true, kHalf>(p, /*zero_dq=*/false, stream);
        else launch_attention_backward_preprocess<HS, false, kHalf>(p, /*zero_dq=*/false, stream);
    } else {
        launch_attention_backward_preprocess<HS, false, kHalf>(p, /*zero_dq=*/false, stream);
    }
    AttentionBackwardParams q = p;   // with gating the kernels take dO = dout * gate from the scratch
    if (kGeneral && p.x.gate) { q.dout = backward_scratch(p).gated_dout; q.do_st = gated_dout_strides(p); }
    const bool early = backward_early_start();
    if constexpr (kVarlen) {
        launch_attention_backward_dkdv_hopper_ws<HS, kKVWG, kKVBlockM, kStages, false, false, true, false, true, false, kHalf>(q, stream, early, false, t.keys);
        launch_attention_backward_dq_hopper_ws<HS, kQWG, kQBlockN, kStages, false, true, false, true, false, kHalf>(q, stream, early, t.queries);
    } else if constexpr (kMods) {
        // one copy each: claimed at HS 96 / 128, where long causal calls balance only so; round-robin at HS 64, whose
        // small calls (nanoGPT's, with dropout) lose more to the claims than they gain
        constexpr bool kClaimed = HS > 64;
        launch_attention_backward_dkdv_hopper_ws<HS, kKVWG, kKVBlockM, kStages, false, kClaimed, kGeneral, kBias, false, true, kHalf>(q, stream, early);
        launch_attention_backward_dq_hopper_ws<HS, kQWG, kQBlockN, kStages, kClaimed, kGeneral, kBias, false, true, kHalf>(q, stream, early, nullptr, order);
    } else if (claimed_schedule(p.T, 4096, /*even_items=*/!p.causal)) {
        launch_attention_backward_dkdv_hopper_ws<HS, kKVWG, kKVBlockM, kStages, false, true, kGeneral, kBias, false, false, kHalf>(q, stream, early);
        launch_attention_backward_dq_hopper_ws<HS, kQWG, kQBlockN, kStages, true, kGeneral, kBias, false, false, kHalf>(q, stream, early, nullptr, order);
    } else {
        launch_attention_backward_dkdv_hopper_ws<HS, kKVWG, kKVBlockM, kStages, false, false, kGeneral, kBias, false, false, kHalf>(q, stream, early);
        launch_attention_backward_dq_hopper_ws<HS, kQWG, kQBlockN, kStages, false, kGeneral, kBias, false, false, kHalf>(q, stream, early, nullptr, order);
    }
}

// HS 256 on Hopper (general): preprocess, the role-split dK/dV kernel (64 keys, 64-query stages), the dQ kernel with
// one consumer warpgroup (64 rows, 64-key stages); kStages-deep rings. Deterministic.
template <int kStages, bool kDynamic, bool kMods = false, bool kHalf = false>
void launch_attention_backward_dkdv256_hopper_ws(const AttentionBackwardParams& p, cudaStream_t stream, bool early_start) {
    using Tile = HopperBackwardKV256Tile<kStages>;
    const int num_items = p.B * p.NH_kv * ceil_div(p.Tk, Tile::kBlockN);
    const HopperBackwardTmaMaps maps = backward_tma_maps(p, Tile::kBlockM, Tile::kBlockN);
    launch_with_smem_ex<attention_backward_dkdv256_hopper_ws_kernel<kStages, kDynamic, kMods, kHalf>>(
        dim3(std::min(num_items, device_props().multiProcessorCount)), Tile::kThreads, Tile::kSmemBytes, stream, early_start, p, maps,
        persistent_section_heads(p.B * p.NH_kv, p.T * (p.NH / p.NH_kv), 256));
}
// kMods: with the score modifiers (softcap, ALiBi), on the claimed schedule
template <int kStages, bool kMods = false, bool kHalf = false>
void attention_backward_split_hopper_ws_256(const AttentionBackwardParams& p, cudaStream_t stream) {
    if (p.HS != 256) launch_attention_backward_preprocess<256, true, kHalf>(p, /*zero_dq=*/false, stream);   // zero-padded
    else launch_attention_backward_preprocess<256, false, kHalf>(p, /*zero_dq=*/false, stream);
    const bool early = backward_early_start();
    if constexpr (kMods) {   // one copy, claimed
        launch_attention_backward_dkdv256_hopper_ws<kStages, true, true, kHalf>(p, stream, early);
        launch_attention_backward_dq_hopper_ws<256, 1, 64, kStages, true, true, false, false, true, kHalf>(p, stream, early);
    } else if (claimed_schedule(p.T, 1024, /*even_items=*/!p.causal)) {
        launch_attention_backward_dkdv256_hopper_ws<kStages, true, false, kHalf>(p, stream, early);
        launch_attention_backward_dq_hopper_ws<256, 1, 64, kStages, true, true, false, false, false, kHalf>(p, stream, early);
    } else {
        launch_attention_backward_dkdv256_hopper_ws<kStages, false, false, kHalf>(p, stream, early);
        launch_attention_backward_dq_hopper_ws<256, 1, 64, kStages, false, true, false, false, false, kHalf>(p, stream, early);
    }
}

// Hopper atomic path (HS 64 or 128, sm_90a; dev variant 7): preprocess (+ zero dq_accum and dq_order), the
// warp-specialised dK/dV kernel that also reduce-adds dQ into dq_accum (5 GEMMs a tile pair instead of the split's
// 7), dQ convert. ordered_dq: the adds into each query block in a fixed order (from the diagonal key block down),
// deterministic; without it the order varies
template <int HS, int kStages, bool kHalf = false>
void attention_backward_atomic_hopper_ws(const AttentionBackwardParams& p, cudaStream_t stream, bool ordered_dq) {
    launch_attention_backward_preprocess<HS, false, kHalf>(p, /*zero_dq=*/true, stream);
    if (claimed_schedule(p.T))
        launch_attention_backward_dkdv_hopper_ws<HS, 2, 64, kStages, /*kAtomicDq=*/true, /*kDynamic=*/true, false, false, false, false, kHalf>(p, stream, backward_early_start(), ordered_dq);
    else
        launch_attention_backward_dkdv_hopper_ws<HS, 2, 64, kStages, /*kAtomicDq=*/true, false, false, false, false, false, kHalf>(p, stream, backward_early_start(), ordered_dq);
    launch_attention_backward_postprocess<HS, kHalf>(p, stream);
}

// ----------------------------------------------------------------------------
// the dispatch's rules, shared with the dev variants

// the backward runs on wgmma on Hopper, both head sizes (when the binary carries sm_90a code)
inline bool attention_backward_uses_hopper(int /*HS*/) { return hopper_path_available(); }

// Hopper, HS 128, T >= 8192: the 5-GEMM kernel (dev variant 7) with its dQ adds in a fixed order, deterministic,
// beats the split there but not below, where the shortest-first order's tail and the short items cost more than the
// 2 GEMMs it saves
inline bool attention_backward_ordered_dq(int T, int HS) { return HS == 128 && T >= 8192 && attention_backward_uses_hopper(HS); }

// Whether the backward sums dBias in the dQ kernel (DbiasOrder) instead of through a (B, NH, T, Tk) fp32 dS in the
// scratch: on the Hopper kBias copies, where the one bias whose gradient is asked for is bf16 with query rows and is
// not summed with another (the other, if any, has no rows: it becomes the key bias)
inline bool attention_backward_dbias_ordered(const AttentionBackwardParams& p) {
    const AttentionExtras& x = p.x;
    // (the score modifiers and dropout run the mma.sync copies beside a bias: attention_backward's dispatch)
    if (!p.dbias == !p.dbias2 || p.HS == 256 || !hopper_path_available() || x.seqlens_k || x.cu_seqlens_q || x.cu_seqlens_k || x.doc_start ||
        attention_has_score_mods(x) || x.dropout_p > 0.0f)
        return false;
    const KernelBiases kb = kernel_biases(x);   // the bias with the gradient must be the tile bias, alone, with rows, bf16
    return kb.rows.source == (p.dbias ? 1 : 2) && !kb.rows2.ptr && kb.rows.st.row != 0 && !kb.rows.fp32;
}

// The fused kernel's shared memory (163 KB at HS 64, 193.5 KB at HS 128) against this GPU's per-block limit (H100
// 227 KB, A100 163 KB, sm_86 / sm_89 99 KB): where it does not fit, the dK/dV kernel's paths run instead.
template <int HS, int kMT, int kWarpsQ, bool kDkDvSmem>
inline bool attention_backward_fused_fits() {
    return (size_t)BackwardFusedTile<HS, kMT, kWarpsQ, kDkDvSmem>::kSmemBytes <= device_props().sharedMemPerBlockOptin;
}

// ----------------------------------------------------------------------------
// The shipped launchers the dev harnesses also run (dev/cuda/attention_backward's variants 3, 4, 6, 7 and 8 at src's
// tiles, bf16), and the kernels' launchers that the harness's other tiles share with them (a split whose dK/dV or dQ
// half is src's): compiled once, by src/attention_backward.cu's bf16 object, and linked from build/attention.a
// elsewhere (as the forward's, ATTENTION_FORWARD_SHARED_LAUNCHERS)
#define ATTENTION_BACKWARD_SHARED_LAUNCHERS(X) \
    X((const AttentionBackwardParams&, bool, cudaStream_t), launch_attention_backward_preprocess<64>) \
    X((const AttentionBackwardParams&, bool, cudaStream_t), launch_attention_backward_preprocess<128>) \
    X((const AttentionBackwardParams&, cudaStream_t), launch_attention_backward_postprocess<64>) \
    X((const AttentionBackwardParams&, cudaStream_t), launch_attention_backward_postprocess<128>) \
    X((const AttentionBackwardParams&, cudaStream_t), launch_attention_backward_dq<64, 4, 1, 64>) \
    X((const AttentionBackwardParams&, cudaStream_t), launch_attention_backward_dq<128, 4, 1, 32>) \
    X((const AttentionBackwardParams&, cudaStream_t, bool, bool, const int*), launch_attention_backward_dkdv_hopper_ws<128, 2, 64, 2>) \
    X((const AttentionBackwardParams&, cudaStream_t, bool, bool, const int*), launch_attention_backward_dkdv_hopper_ws<128, 2, 64, 2, false, true>) \
    X((const AttentionBackwardParams&, cudaStream_t, bool, const int*, const DbiasOrder&), launch_attention_backward_dq_hopper_ws<64, 2, 128, 2>) \
    X((const AttentionBackwardParams&, cudaStream_t, bool, const int*, const DbiasOrder&), launch_attention_backward_dq_hopper_ws<64, 2, 128, 2, true>) \
    X((const AttentionBackwardParams&, cudaStream_t), attention_backward_atomic<64, 4, 64>) \
    X((const AttentionBackwardParams&, cudaStream_t), attention_backward_atomic<128, 4, 64>) \
    X((const AttentionBackwardParams&, cudaStream_t), attention_backward_fused<64, 2, 2, false>) \
    X((const AttentionBackwardParams&, cudaStream_t), attention_backward_fused<128, 2, 2, true>) \
    X((const AttentionBackwardParams&, cudaStream_t), attention_backward_split_wide<64, 2, 2, false, 4, 1, 64>) \
    X((const AttentionBackwardParams&, cudaStream_t), attention_backward_split_wide<128, 2, 2, true, 4, 1, 32>) \
    X((const AttentionBackwardParams&, cudaStream_t), attention_backward_split<64, 4, 1, 32, 4, 1, 64>) \
    X((const AttentionBackwardParams&, cudaStream_t), attention_backward_split<128, 4, 1, 32, 4, 1, 32>) \
    X((const AttentionBackwardParams&, cudaStream_t, const DbiasOrder&), attention_backward_split_hopper_ws<64, 2, 128, 2, 128, 2>) \
    X((const AttentionBackwardParams&, cudaStream_t, const DbiasOrder&), attention_backward_split_hopper_ws<128, 2, 64, 2, 96, 2>) \
    X((const AttentionBackwardParams&, cudaStream_t, bool), attention_backward_atomic_hopper_ws<128, 2>)
ATTENTION_BACKWARD_SHARED_LAUNCHERS(ATTENTION_EXTERN_LAUNCHER)
