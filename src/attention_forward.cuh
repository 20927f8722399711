/*
flashgpt attention, the forward's kernels: the mma.sync kernel (sm_80+), the warp-specialised wgmma/TMA kernel (sm_90a)
with its bias, packed-sequence and persistent-schedule machinery, the decoding (split-key) kernel, and their launchers.
src/attention_forward.cu instantiates what its dispatch reaches; src/attention.cuh is the interface a program includes.
dev/cuda/attention_forward.cu's variants include this header to run the same kernels with other tiles.
*/
#pragma once
#include <cmath>
#include <type_traits>      // std::true_type: the forward's per-warpgroup consumer copies
#include "attention.cuh"
#include "ptx.cuh"          // the PTX wrappers (mma.sync, wgmma, TMA, mbarriers, ...) and tensor maps
#include "attention_modifiers.cuh"   // the mask and score modifiers

// Sequence b's lengths and first rows (AttentionExtras): T_b and Tk_b, and the packed row offsets (0 if not packed)
struct SequenceSpan { int T, Tk, q0, k0; };
template <class Params>
__device__ __forceinline__ SequenceSpan attention_sequence(const Params& p, int b) {
    SequenceSpan sp{p.T, p.Tk, 0, 0};
    if (p.x.cu_seqlens_q) { sp.q0 = p.x.cu_seqlens_q[b]; sp.T = p.x.cu_seqlens_q[b + 1] - sp.q0; }
    if (p.x.cu_seqlens_k) { sp.k0 = p.x.cu_seqlens_k[b]; sp.Tk = p.x.cu_seqlens_k[b + 1] - sp.k0; }
    else if (p.x.seqlens_k) sp.Tk = p.x.seqlens_k[b];
    return sp;
}

// The bias rows of one (b, h): element (i, j) for query i, key j of the sequence at base + (i * row + j) * elem size
struct BiasRows { const uint8_t* base; long long row; bool fp32; };
__device__ __forceinline__ BiasRows bias_rows(const AttentionExtras& x, int b, int h) {
    const size_t elem = x.bias_fp32 ? 4 : 2;
    return {(const uint8_t*)x.bias + (b * x.bias_st.batch + h * x.bias_st.head) * elem, x.bias_st.row, x.bias_fp32};
}
// A bias tile in shared memory: kKeys keys a row in the bias's dtype, rows 16 bytes longer than that (a quad's rows g,
// g + 1, ... then start 4 banks apart: conflict-free 4-byte reads)
__host__ __device__ constexpr int bias_tile_pitch(int keys, bool fp32) { return keys * (fp32 ? 4 : 2) + 16; }

// Loads the bias tile of kRows rows from row0 x kKeys keys from key0 (16-byte cp.async chunks where a chunk lies inside
// the sequence, row < T and keys < Tk, and the rows are 16-byte aligned; elsewhere element by element, 0 outside the
// sequence, so that the tile needs no bounds checks when read)
template <int kRows, int kKeys, int kThreads>
__device__ __forceinline__ void load_bias_tile(uint8_t* dst, const BiasRows& bias, int row0, int key0, int T, int Tk) {
    const int elem = bias.fp32 ? 4 : 2, per_chunk = 16 / elem, chunks = kKeys / per_chunk, pitch = bias_tile_pitch(kKeys, bias.fp32);
    const bool vec = (uintptr_t)bias.base % 16 == 0 && (bias.row * elem) % 16 == 0;
    for (int c = threadIdx.x; c < kRows * chunks; c += kThreads) {
        const int r = c / chunks, k = (c % chunks) * per_chunk, row = row0 + r, key = key0 + k;
        uint8_t* d = dst + r * pitch + k * elem;
        const uint8_t* src = bias.base + ((long long)row * bias.row + key) * elem;
        if (vec && row < T && key + per_chunk <= Tk) { cp_async_16(smem_addr(d), src, true); continue; }
        for (int e = 0; e < per_chunk; e++) {
            const bool in = row < T && key + e < Tk;
            if (bias.fp32) reinterpret_cast<float*>(d)[e] = in ? reinterpret_cast<const float*>(src)[e] : 0.0f;
            else reinterpret_cast<uint16_t*>(d)[e] = in ? reinterpret_cast<const uint16_t*>(src)[e] : 0;
        }
    }
}
__device__ __forceinline__ float bias_tile_at(const uint8_t* tile, int pitch, bool fp32, int r, int k) {
    return fp32 ? *reinterpret_cast<const float*>(tile + r * pitch + k * 4)
                : __bfloat162float(*reinterpret_cast<const __nv_bfloat16*>(tile + r * pitch + k * 2));
}

// Key tiles of kBlockN a query block whose last row is last_row walks: up to its last visible key, at least one (a
// block that sees no key walks one tile, fully masked, and writes O = 0, LSE = -inf)
__host__ __device__ inline int attention_key_blocks(int last_row, int diag, int Tk, int kBlockN) {
    const long long last_key = (long long)last_row + diag < Tk - 1 ? (long long)last_row + diag : Tk - 1;
    return last_key < 0 ? 1 : (int)(last_key / kBlockN) + 1;
}

// s += bias * inv_scale over a warp's kMT m16 x kNT n8 accumulator tiles (rows row0 + 16mt + g (+8), keys 8nt + 2tq
// (+1) of the shared-memory bias tile)
template <int kMT, int kNT>
__device__ __forceinline__ void add_bias_tile(float (&s)[kMT][kNT][4], const uint8_t* tile, int pitch, bool fp32, int row0,
                                              float inv_scale, int lane) {
    const int g = lane / 4, tq = lane % 4;
    #pragma unroll
    for (int mt = 0; mt < kMT; mt++)
        #pragma unroll
        for (int nt = 0; nt < kNT; nt++)
            #pragma unroll
            for (int e = 0; e < 4; e++)
                s[mt][nt][e] += bias_tile_at(tile, pitch, fp32, row0 + mt * 16 + g + 8 * (e / 2), nt * 8 + 2 * tq + (e % 2)) * inv_scale;
}

// the same on S^T (the backward's dK/dV tiles: keys key0 + 16mt + g (+8) as rows, queries 8nt + 2tq (+1); the tile is
// [query][key])
template <int kMT, int kQT>
__device__ __forceinline__ void add_bias_tile_t(float (&st)[kMT][kQT][4], const uint8_t* tile, int pitch, bool fp32, int key0,
                                                float inv_scale, int lane) {
    const int g = lane / 4, tq = lane % 4;
    #pragma unroll
    for (int mt = 0; mt < kMT; mt++)
        #pragma unroll
        for (int nt = 0; nt < kQT; nt++)
            #pragma unroll
            for (int e = 0; e < 4; e++)
                st[mt][nt][e] += bias_tile_at(tile, pitch, fp32, nt * 8 + 2 * tq + (e % 2), key0 + mt * 16 + g + 8 * (e / 2)) * inv_scale;
}

// s += key_bias[key] * inv_scale over a warp's kMT m16 x kNT n8 accumulator tiles (keys key0 + 8nt + 2tq (+1); kb: the
// (b, h) row of AttentionExtras::key_bias, padded, so no bounds check)
template <int kMT, int kNT>
__device__ __forceinline__ void add_key_bias(float (&s)[kMT][kNT][4], const float* kb, int key0, float inv_scale, int lane) {
    #pragma unroll
    for (int nt = 0; nt < kNT; nt++) {
        const float2 v = *reinterpret_cast<const float2*>(kb + key0 + nt * 8 + 2 * (lane % 4));
        #pragma unroll
        for (int mt = 0; mt < kMT; mt++) {
            s[mt][nt][0] += v.x * inv_scale; s[mt][nt][1] += v.y * inv_scale;
            s[mt][nt][2] += v.x * inv_scale; s[mt][nt][3] += v.y * inv_scale;
        }
    }
}
// the same on S^T (keys key0 + 16mt + g (+8) as rows)
template <int kMT, int kQT>
__device__ __forceinline__ void add_key_bias_t(float (&st)[kMT][kQT][4], const float* kb, int key0, float inv_scale, int lane) {
    #pragma unroll
    for (int mt = 0; mt < kMT; mt++) {
        const float lo = kb[key0 + mt * 16 + lane / 4] * inv_scale, hi = kb[key0 + mt * 16 + lane / 4 + 8] * inv_scale;
        #pragma unroll
        for (int nt = 0; nt < kQT; nt++) { st[mt][nt][0] += lo; st[mt][nt][1] += lo; st[mt][nt][2] += hi; st[mt][nt][3] += hi; }
    }
}

// eight 16-bit products (fp32 math, one rounding)
template <bool kHalf>
__device__ __forceinline__ uint4 mul_x8(const uint4& a, const uint4& b) {
    const uint32_t* a2 = reinterpret_cast<const uint32_t*>(&a);
    const uint32_t* b2 = reinterpret_cast<const uint32_t*>(&b);
    uint4 out;
    uint32_t* o = reinterpret_cast<uint32_t*>(&out);
    #pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 x = unpack_x2<kHalf>(a2[i]), y = unpack_x2<kHalf>(b2[i]);
        o[i] = pack_x2<kHalf>(x.x * y.x, x.y * y.y);
    }
    return out;
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

// kCompilingSm90a: true in the sm_90a device pass only. Where sm_90a code runs, the dispatch sends every call without
// extras to the wgmma kernels, so no call reaches the mma.sync copies without extras there in fp16, nor the general
// ones (the forward's kGeneral; the backward's head dims other than 64 and 128), and the dev harnesses run only bf16
// copies of GPT-2's family there. Those copies' sm_90a bodies are a trap, so that the build does not compile them for
// sm_90a (a call that reached one would fail loudly, not run wrong).
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
constexpr bool kCompilingSm90a = true;
#else
constexpr bool kCompilingSm90a = false;
#endif

// kGeneral false: causal self-attention without GQA only (Tk = T, the diagonal 0: constants to the compiler);
// kExtras (general only): the AttentionExtras (bias, per-sequence lengths, packed rows, gating, document masking) and
// head dims 8 / 16, in their own copy so that the calls without them keep their registers
template <int HS, int kWarpTilesM, int kNWarps, int kBlockN, bool kGeneral, bool kExtras, bool kHalf>
__device__ __forceinline__ void attention_forward_tiles(const AttentionForwardParams& p) {
    using Tile = ForwardTile<HS, kWarpTilesM, kNWarps, kBlockN>;
    constexpr int kBlockM = Tile::kBlockM, kThreads = Tile::kThreads;
    constexpr int kMT = kWarpTilesM;      // m16 tiles per warp
    constexpr int kNT = kBlockN / 8;      // n8 tiles of S per warp
    constexpr int kKS = HS / 16;          // k16 steps of Q K^T
    constexpr int kDT = HS / 8;           // n8 tiles of O
    // Q fragments stay in registers when they cost <= 32 of them; at HS 128 with 32 rows per warp
    // they would push O (128 regs) + S (64) past the 255 limit, so they are re-read from smem.
    constexpr bool kQInRegs = kMT * HS <= 128;
    extern __shared__ __align__(1024) uint8_t smem[];
    uint8_t* q_smem = smem;                              // (kBlockM, HS), later O staging
    uint8_t* kv_smem = smem + kBlockM * HS * 2;          // [stage][K, V] (kBlockN, HS) each

    const int NH = p.NH, b = blockIdx.x / NH, h = blockIdx.x % NH, h_kv = kGeneral ? h / (NH / p.NH_kv) : h;
    // general: sequence b's own lengths and rows (AttentionExtras); GPT-2's family: T = Tk, diagonal 0
    static_assert(kGeneral || !kExtras, "the extras run on the general copies");
    const SequenceSpan seq = kExtras ? attention_sequence(p, b) : SequenceSpan{p.T, kGeneral ? p.Tk : p.T, 0, 0};
    // the band (causal, window): GPT-2's family keys 0 .. row
    const KeyBand band = kGeneral ? attention_band(p.x, p.causal, seq.T, seq.Tk) : KeyBand{-kBandFar, 0};
    const int T = seq.T, Tk = seq.Tk, diag = band.hi, lo = band.lo;
    const int m_block = gridDim.y - 1 - blockIdx.y;      // longest (last) Q tiles first
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, tq = lane % 4;
    const floatX* q_gl = p.q + b * p.q_st.batch + h * p.q_st.head;
    const floatX* k_gl = p.k + b * p.k_st.batch + h_kv * p.k_st.head;
    const floatX* v_gl = p.v + b * p.v_st.batch + h_kv * p.v_st.head;
    const int m_start = m_block * kBlockM;
    // head dims 8 and 16 run the HS 16 kernels: a head dim of 8 is zero-padded to 16 in the tiles and stored unpadded
    const int head_chunks = HS == 16 ? p.HS / 8 : HS / 8;
    if constexpr (kExtras) {
        if (m_start >= T) return;                         // a packed sequence shorter than the longest
        q_gl += seq.q0 * p.q_st.row; k_gl += seq.k0 * p.k_st.row; v_gl += seq.k0 * p.v_st.row;
    }
    const int warp_row0 = warp * 16 * kMT;               // first row of this warp inside the tile
    const int n_blocks = kGeneral ? attention_key_blocks(m_start + kBlockM - 1, diag, Tk, kBlockN)
                                  : min(ceil_div(m_start + kBlockM, kBlockN), ceil_div(T, kBlockN));
    // the key tiles before the block's first row's window, and (document masking) before the block's first row's
    // document, are skipped; a block that sees no key still walks one tile
    int n_first = kGeneral ? min(attention_first_key_block(m_start, lo, kBlockN), n_blocks - 1) : 0;
    int doc_first[kMT][2] = {}, warp_doc_first = 0;
    if constexpr (kExtras) {
        if (p.x.doc_start)
            query_block_documents<kMT, kBlockN>(n_first, doc_first, warp_doc_first, p.x.doc_start + (size_t)b * p.T, m_start,
                                                warp_row0, T, lane);
    }
    auto k_tile = [&](int stage) { return kv_smem + stage * 2 * Tile::kTileBytes; };
    auto v_tile = [&](int stage) { return kv_smem + stage * 2 * Tile::kTileBytes + Tile::kTileBytes; };

    // one K or V tile; HS 128 needs the lean loader to fit 32 rows per warp in 255 registers
    auto load_kv_tile = [&](uint8_t* tile, const floatX* src, int row_stride, int row0) {
        if constexpr (HS == 128) load_tile_rows_async<HS, kThreads, kBlockN>(tile, src, row_stride, row0, Tk);
        else load_tile_async<HS, kThreads>(tile, src, row_stride, row0, kBlockN, Tk, head_chunks);
    };
    load_tile_async<HS, kThreads>(q_smem, q_gl, p.q_st.row, m_start, kBlockM, T, head_chunks);
    const int k_row = (int)p.k_st.row, v_row = (int)p.v_st.row;   // < 2^31 (attention_unsupported_reason): one register each
    // kExtras with a bias: its (kBlockM, kBlockN) tiles ride in the K/V pipeline, double buffered after the K/V stages
    const int bias_pitch = kExtras ? bias_tile_pitch(kBlockN, p.x.bias_fp32) : 0;
    auto bias_tile = [&](int stage) { return kv_smem + 4 * Tile::kTileBytes + stage * kBlockM * bias_pitch; };
    auto load_bias = [&](int stage, int n_block) {
        if constexpr (kExtras) {
            if (p.x.bias) load_bias_tile<kBlockM, kBlockN, kThreads>(bias_tile(stage), bias_rows(p.x, b, h), m_start, n_block * kBlockN, T, Tk);
        }
    };
    load_kv_tile(k_tile(0), k_gl, k_row, (n_blocks - 1) * kBlockN);
    load_kv_tile(v_tile(0), v_gl, v_row, (n_blocks - 1) * kBlockN);
    load_bias(0, n_blocks - 1);
    cp_async_commit();

    // ldmatrix row addresses. For Q (A operand) and V (transposed B), lane l points at row
    // l % 8 + 8 * ((l / 8) % 2) of a 16-row block, chunk 2 * step + l / 16; for K (B operand) at row
    // l % 8 + 8 * (l / 16), chunk 2 * step + (l / 8) % 2. At HS 128 these are computed from one per-lane
    // address: every row is a multiple of 8 plus l % 8, so the swizzle XORs the chunk with l % 8, and as
    // 2 * step is even, (2 * step + c) ^ (l % 8) = (c ^ (l % 8)) ^ (2 * step): the step only flips address
    // bits 5-7 (tiles are 256-byte aligned, so the tile base leaves those bits alone). One LOP3 per step
    // instead of a register per (row, chunk) pair kept live across the K/V loop; HS 64 keeps the plain form.
    const uint32_t q_lane = smem_addr(q_smem + swizzle<HS>(warp_row0 + lane % 8 + 8 * ((lane / 8) % 2), lane / 16));
    const int k_lane_off = swizzle<HS>(lane % 8 + 8 * (lane / 16), (lane / 8) % 2);
    const int v_lane_off = swizzle<HS>(lane % 8 + 8 * ((lane / 8) % 2), lane / 16);
    auto q_frag_addr = [&](int mt, int ks) -> uint32_t {
        if constexpr (HS == 128) return (q_lane ^ (ks << 5)) + mt * 16 * HS * 2;
        int row = warp_row0 + mt * 16 + (lane % 8) + 8 * ((lane / 8) % 2);
        return smem_addr(q_smem + swizzle<HS>(row, 2 * ks + lane / 16));
    };
    auto k_frag_addr = [&](const uint8_t* k_s, int np, int ks) -> uint32_t {   // key tiles 2np, 2np+1
        if constexpr (HS == 128) return ((smem_addr(k_s) + k_lane_off) ^ (ks << 5)) + np * 16 * HS * 2;
        int key = np * 16 + (lane % 8) + 8 * (lane / 16);
        return smem_addr(k_s + swizzle<HS>(key, 2 * ks + (lane / 8) % 2));
    };
    auto v_frag_addr = [&](const uint8_t* v_s, int kk, int dp) -> uint32_t {   // keys 16kk.., d tiles 2dp, 2dp+1
        if constexpr (HS == 128) return ((smem_addr(v_s) + v_lane_off) ^ (dp << 5)) + kk * 16 * HS * 2;
        int key = 16 * kk + (lane % 8) + 8 * ((lane / 8) % 2);
        return smem_addr(v_s + swizzle<HS>(key, 2 * dp + lane / 16));
    };
    uint32_t q_frag[kQInRegs ? kMT : 1][kQInRegs ? kKS : 1][4];
    auto load_q_frag = [&](uint32_t (&frag)[4], int mt, int ks) { ldmatrix_x4(frag, q_frag_addr(mt, ks)); };
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
    const float scale_log2 = p.scale * kLog2e;

    for (int it = 0; it < n_blocks - n_first; it++) {
        const int n_block = n_blocks - 1 - it;     // diagonal (masked) tiles first
        const int stage = it & 1;
        if (it + 1 < n_blocks - n_first) {         // prefetch the next K/V tile into the other stage
            load_kv_tile(k_tile(stage ^ 1), k_gl, k_row, (n_block - 1) * kBlockN);
            load_kv_tile(v_tile(stage ^ 1), v_gl, v_row, (n_block - 1) * kBlockN);
            load_bias(stage ^ 1, n_block - 1);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();   // this stage's K/V (and Q on the first pass) are visible to every warp

        if (kQInRegs && it == 0) {   // Q fragments stay in registers for the whole loop
            #pragma unroll
            for (int mt = 0; mt < kMT; mt++)
                #pragma unroll
                for (int ks = 0; ks < kKS; ks++) load_q_frag(q_frag[kQInRegs ? mt : 0][kQInRegs ? ks : 0], mt, ks);
        }
        // a warp whose rows all lie above this K tile, or whose windows all begin past it, has nothing to do here
        const int warp_last_row = m_start + warp_row0 + 16 * kMT - 1;
        const bool warp_active = n_block * kBlockN <= warp_last_row + diag && n_block * kBlockN + kBlockN - 1 >= m_start + warp_row0 + lo &&
                                 (!kExtras || n_block * kBlockN + kBlockN > warp_doc_first);
        if (warp_active) {
            // S = Q K^T  (kMT*16 x kBlockN per warp)
            float s[kMT][kNT][4];
            #pragma unroll
            for (int mt = 0; mt < kMT; mt++)
                #pragma unroll
                for (int nt = 0; nt < kNT; nt++) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.0f;
            const uint8_t* k_s = k_tile(stage);
            #pragma unroll
            for (int ks = 0; ks < kKS; ks++) {
                uint32_t q_smem_frag[kQInRegs ? 1 : kMT][4];
                if constexpr (!kQInRegs) {
                    #pragma unroll
                    for (int mt = 0; mt < kMT; mt++) load_q_frag(q_smem_frag[mt], mt, ks);
                }
                #pragma unroll
                for (int np = 0; np < kNT / 2; np++) {
                    uint32_t kb[4];   // B fragments of key tiles 2np and 2np+1 for this k step
                    ldmatrix_x4(kb, k_frag_addr(k_s, np, ks));
                    #pragma unroll
                    for (int mt = 0; mt < kMT; mt++) {
                        const uint32_t (&qa)[4] = kQInRegs ? q_frag[kQInRegs ? mt : 0][kQInRegs ? ks : 0] : q_smem_frag[kQInRegs ? 0 : mt];
                        mma_16816<kHalf>(s[mt][2 * np], qa, kb[0], kb[1]);
                        mma_16816<kHalf>(s[mt][2 * np + 1], qa, kb[2], kb[3]);
                    }
                }
            }
            if constexpr (kGeneral) {   // the score modifiers (softcap, ALiBi), read from the parameters where present
                if (attention_has_score_mods(p.x))
                    apply_score_mods<kMT, kNT>(s, score_mods(p.x, b, h, T, Tk, NH), m_start + warp_row0, n_block * kBlockN, lane);
            }
            if constexpr (kExtras) {   // the additive bias, in units of S (scale multiplies it back); document masking
                if (p.x.bias) add_bias_tile<kMT, kNT>(s, bias_tile(stage), bias_pitch, p.x.bias_fp32, warp_row0, 1.0f / p.scale, lane);
                if (p.x.key_bias) add_key_bias<kMT, kNT>(s, key_bias_of(p.x, b, h), n_block * kBlockN, 1.0f / p.scale, lane);
                if (p.x.doc_start) mask_before_documents<kMT, kNT>(s, doc_first, n_block * kBlockN, lane);
            }
            // mask (the band's diagonals, keys past Tk), only on tiles that cross this warp's limits
            if (n_block * kBlockN + kBlockN - 1 > (kGeneral ? min(m_start + warp_row0 + diag, Tk - 1) : m_start + warp_row0) ||
                (kGeneral && n_block * kBlockN < warp_last_row + lo)) {
                #pragma unroll
                for (int mt = 0; mt < kMT; mt++)
                    #pragma unroll
                    for (int nt = 0; nt < kNT; nt++)
                        #pragma unroll
                        for (int e = 0; e < 4; e++) {
                            int row = m_start + warp_row0 + mt * 16 + g + 8 * (e / 2);
                            int key = n_block * kBlockN + nt * 8 + 2 * tq + (e % 2);
                            if (key > row + diag || (kGeneral && (key >= Tk || key < row + lo))) s[mt][nt][e] = -INFINITY;
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
            if constexpr (kExtras) {   // dropout: P V over the kept probabilities (the sums above keep them all)
                if (p.x.dropout_p > 0.0f) {
                    uint32_t keep[kMT];
                    dropout_keep_bits<kMT, kNT, false>(keep, attention_dropout(p.x), b * NH + h, m_start + warp_row0, n_block * kBlockN, lane);
                    dropout_apply<kMT, kNT>(s, keep, 1.0f);
                }
            }
            // O += P V (V is [key][d])
            const uint8_t* v_s = v_tile(stage);
            mma_accum_times_tile<kHalf>(o_acc, s, [&](int kk, int dp) { return v_frag_addr(v_s, kk, dp); });
        }
        __syncthreads();   // every warp is done with this stage before the next prefetch overwrites it
    }

    // epilogue: O /= l, LSE = m * scale + log(l); O goes through shared memory for 16-byte stores.
    // Each warp stages only its own rows (whose Q it alone read), so a __syncwarp suffices.
    const float scale = p.scale;
    #pragma unroll
    for (int mt = 0; mt < kMT; mt++)
        #pragma unroll
        for (int half = 0; half < 2; half++) {
            float l = row_sum[mt][half];
            l += __shfl_xor_sync(0xffffffff, l, 1);
            l += __shfl_xor_sync(0xffffffff, l, 2);
            // (dropout: the kept probabilities scaled by 1 / (1 - dropout_p))
            const float inv_l = l > 0.0f ? (kExtras && p.x.dropout_p > 0.0f ? attention_dropout(p.x).scale : 1.0f) / l : 0.0f;
            const int row = warp_row0 + mt * 16 + g + 8 * half;
            if (tq == 0 && m_start + row < T)
                p.lse[((size_t)b * NH + h) * p.T + m_start + row] = l > 0.0f ? row_max[mt][half] * scale + logf(l) : -INFINITY;
            #pragma unroll
            for (int dt = 0; dt < kDT; dt++) {
                uint32_t packed = pack_x2<kHalf>(o_acc[mt][dt][2 * half] * inv_l, o_acc[mt][dt][2 * half + 1] * inv_l);
                *reinterpret_cast<uint32_t*>(q_smem + swizzle<HS>(row, dt) + 4 * tq) = packed;
            }
        }
    __syncwarp();
    constexpr int kChunks = HS / 8;
    floatX* out_gl = p.out + b * p.o_st.batch + h * p.o_st.head + seq.q0 * p.o_st.row;
    for (int c = lane; c < 16 * kMT * kChunks; c += 32) {
        int row = warp_row0 + c / kChunks, ch = c % kChunks;
        if (m_start + row < T && ch < head_chunks) {
            const uint4 o = *reinterpret_cast<const uint4*>(q_smem + swizzle<HS>(row, ch));
            *reinterpret_cast<uint4*>(out_gl + (m_start + row) * p.o_st.row + ch * 8) = o;
            if constexpr (kExtras) {   // gating: gated_out = O * gate, from the same bf16 O the backward reads
                if (p.x.gate) {
                    const long long r = seq.q0 + m_start + row;
                    const uint4 gv = *reinterpret_cast<const uint4*>(p.x.gate + b * p.x.gate_st.batch + r * p.x.gate_st.row +
                                                                     h * p.x.gate_st.head + ch * 8);
                    *reinterpret_cast<uint4*>(p.x.gated_out + b * p.o_st.batch + r * p.o_st.row + h * p.o_st.head + ch * 8) = mul_x8<kHalf>(o, gv);
                }
            }
        }
    }
}
template <int HS, int kWarpTilesM, int kNWarps, int kBlockN, bool kGeneral = false, bool kExtras = false, bool kHalf = false>
__global__ void __launch_bounds__(kNWarps * 32)
attention_forward_kernel(const AttentionForwardParams p) {
    if constexpr (kCompilingSm90a && !kExtras && (kHalf || kGeneral)) __trap();   // unreached (kCompilingSm90a)
    else attention_forward_tiles<HS, kWarpTilesM, kNWarps, kBlockN, kGeneral, kExtras, kHalf>(p);
}

template <int HS, int kWarpTilesM, int kNWarps, int kBlockN, bool kGeneral = false, bool kExtras = false, bool kHalf = false>
void launch_attention_forward(const AttentionForwardParams& p, cudaStream_t stream) {
    using Tile = ForwardTile<HS, kWarpTilesM, kNWarps, kBlockN>;
    constexpr auto kernel = attention_forward_kernel<HS, kWarpTilesM, kNWarps, kBlockN, kGeneral, kExtras, kHalf>;
    if (!kGeneral) attention_check_self_causal(p);
    const int smem = Tile::kSmemBytes + (kExtras && p.x.bias ? 2 * Tile::kBlockM * bias_tile_pitch(kBlockN, p.x.bias_fp32) : 0);
    launch_with_smem<kernel>(dim3(p.B * p.NH, ceil_div(p.T, Tile::kBlockM)), Tile::kThreads, smem, stream, p);
}

// ----------------------------------------------------------------------------
// Hopper (sm_90a) forward helpers: one thread's rows g and g + 8 of a warpgroup's m64 x kBlockN S tile
// (s[4 * i + e]: key column 8i + 2tq + e % 2, row g + 8 (e / 2), the wgmma accumulator layout).

// mask on a tile that crosses this warp's limits: key > row + diag or (kKeyBound: the general copies) key >= Tk or
// key < row + lo (the window's left side); lim0 = the warp's first query row + diag, lo0 = that row + lo, key0 = the
// tile's first key. Causal self-attention needs neither: row + 0 < T = Tk, no window. kLeftApart (HS 64, whose softmax
// is issue-bound): each score compared once against its row's last key (the smaller of row + diag and Tk - 1), and
// against its row's first only on tiles the window's left side crosses (a branch uniform over the warp), so that a
// causal diagonal tile costs what it does in the self-attention kernels; at HS 128 the second loop's code costs more
// than the compares it saves
template <int kNT, bool kKeyBound = true, bool kLeftApart = false>
__device__ __forceinline__ void mask_tile(float (&s)[kNT * 4], int lim0, int key0, int Tk, int g, int tq, int lo0 = -kBandFar) {
    if constexpr (!kKeyBound || !kLeftApart) {
        #pragma unroll
        for (int i = 0; i < kNT; i++)
            #pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = key0 + i * 8 + 2 * tq + (e % 2);
                if (key > lim0 + g + 8 * (e / 2) || (kKeyBound && (key >= Tk || key < lo0 + g + 8 * (e / 2)))) s[4 * i + e] = -INFINITY;
            }
    } else {
        const int last[2] = {min(lim0 + g, Tk - 1), min(lim0 + g + 8, Tk - 1)};
        if (key0 < lo0 + 15) {
            #pragma unroll
            for (int i = 0; i < kNT; i++)
                #pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = key0 + i * 8 + 2 * tq + (e % 2);
                    if (key > last[e / 2] || key < lo0 + g + 8 * (e / 2)) s[4 * i + e] = -INFINITY;
                }
        } else {
            #pragma unroll
            for (int i = 0; i < kNT; i++)
                #pragma unroll
                for (int e = 0; e < 4; e++)
                    if (key0 + i * 8 + 2 * tq + (e % 2) > last[e / 2]) s[4 * i + e] = -INFINITY;
        }
    }
}

// online softmax, as in the mma.sync kernel: new row max (quad shuffles), P = exp2(s * c - m * c) in place,
// row_sum rescaled by alpha[half] = exp2((m_old - m_new) * c) plus this tile's sum; the caller rescales O by alpha.
// kShift: the scores of row half are s + shift[half], a row term the score modifiers left out (one-sided ALiBi)
template <int kNT, bool kShift = false>
__device__ __forceinline__ void online_softmax_tile(float (&s)[kNT * 4], float (&row_max)[2], float (&row_sum)[2],
                                                    float (&alpha)[2], float scale_log2, const float* shift = nullptr) {
    #pragma unroll
    for (int half = 0; half < 2; half++) {
        float mx = kShift ? -INFINITY : row_max[half];
        #pragma unroll
        for (int i = 0; i < kNT; i++) mx = fmaxf(mx, fmaxf(s[4 * i + 2 * half], s[4 * i + 2 * half + 1]));
        if constexpr (kShift) mx = fmaxf(row_max[half], mx + shift[half]);   // this thread's part of the row, shifted
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
        // a row with no visible key yet keeps max -inf: use 0 so exp2 sees -inf - 0, not -inf - -inf = NaN
        const float m_scaled = mx == -INFINITY ? 0.0f : mx * scale_log2;
        alpha[half] = fast_exp2(row_max[half] * scale_log2 - m_scaled);
        row_max[half] = mx;
        const float offset = kShift ? shift[half] * scale_log2 - m_scaled : 0.0f;
        float sum = 0.0f;
        #pragma unroll
        for (int i = 0; i < kNT; i++)
            #pragma unroll
            for (int e = 2 * half; e < 2 * half + 2; e++) {
                if constexpr (kShift) s[4 * i + e] = fast_exp2(s[4 * i + e] * scale_log2 + offset);
                else s[4 * i + e] = fast_exp2(s[4 * i + e] * scale_log2 - m_scaled);
                sum += s[4 * i + e];
            }
        row_sum[half] = row_sum[half] * alpha[half] + sum;
    }
}

// S += bias / scale on one thread's rows r and r + 8 of a bias tile in shared memory (TMA-loaded: kNT * 8 / 64 boxes
// of 64 keys x rows, 128-byte swizzle; rows = 1 where the bias broadcasts over queries: row 0 for every row, each box
// 1024 bytes apart, so that its one row is unswizzled). A quad reads 16 contiguous bytes of a row, and the swizzle
// puts a warp's 8 rows in 8 different chunks: no bank conflicts.
template <int kNT, int kBlockM>
__device__ __forceinline__ void add_bias_tile_smem(float (&s)[kNT * 4], const uint8_t* tile, int rows, int r, int tq, float inv_scale) {
    #pragma unroll
    for (int half = 0; half < 2; half++) {
        #pragma unroll
        for (int i = 0; i < kNT; i++) {
            const int offset = rows == 1 ? (i / 8) * 1024 + (i % 8) * 16 + 4 * tq
                                         : swizzle_wgmma<kBlockM>(r + 8 * half, i) + 4 * tq;
            const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(tile + offset));
            s[4 * i + 2 * half] += b.x * inv_scale;
            s[4 * i + 2 * half + 1] += b.y * inv_scale;
        }
    }
}

// s += key_bias[key] * inv_scale on a wgmma accumulator of S (keys key0 + 8i + 2tq (+1); kb: the (b, h) row of
// AttentionExtras::key_bias, padded, so no bounds check)
template <int kNT>
__device__ __forceinline__ void add_key_bias_frag(float (&s)[kNT * 4], const float* kb, int key0, int tq, float inv_scale) {
    #pragma unroll
    for (int i = 0; i < kNT; i++) {
        const float2 v = *reinterpret_cast<const float2*>(kb + key0 + i * 8 + 2 * tq);
        s[4 * i] += v.x * inv_scale; s[4 * i + 1] += v.y * inv_scale;
        s[4 * i + 2] += v.x * inv_scale; s[4 * i + 3] += v.y * inv_scale;
    }
}

// Head dims below a Hopper copy's run it zero-padded (8-56 HS 64's, 72-120 HS 128's, 136-248 HS 256's): TMA reads the
// head dims past the caller's as zeros (past the tensor map's inner dimension; a 64-column box wholly past it too),
// so S and dP are exact and the padded columns of O, dQ, dK and dV come out zero and are not stored. Whether the 8
// head dims of chunk ch are the caller's (kGeneral: the general copies, the only ones the padded head dims reach):
template <bool kGeneral>
__device__ __forceinline__ bool head_chunk_stored(int head_dim, int ch) { return !kGeneral || ch * 8 < head_dim; }

// gating (the kBias copies): gated_out = O * gate over this warp's 16 rows of the tile, 16 bytes a lane, O read back
// from the staging (o_staged, swizzle<HS>) or, unstaged, from out where this warp has just written it
template <int HS, bool kHalf>
__device__ __forceinline__ void hopper_forward_gate(const AttentionForwardParams& p, const uint8_t* o_staged, int b, int h, int m_start,
                                                    int warp_row0, int out_row0, int T) {
    const AttentionStrides& gs = p.x.gate_st;
    if (!o_staged) __syncwarp();   // this warp's stores of O are visible to its lanes
    for (int c = threadIdx.x % 32; c < 16 * (HS / 8); c += 32) {
        const int row = warp_row0 + c / (HS / 8), ch = c % (HS / 8);
        const long long r = out_row0 + m_start + row;
        if ((unsigned)(m_start + row) >= (unsigned)T || !head_chunk_stored<true>(p.HS, ch)) continue;
        const uint4 o = o_staged ? *reinterpret_cast<const uint4*>(o_staged + swizzle<HS>(row, ch))
                                 : *reinterpret_cast<const uint4*>(p.out + b * p.o_st.batch + r * p.o_st.row + h * p.o_st.head + ch * 8);
        const uint4 g = *reinterpret_cast<const uint4*>(p.x.gate + b * gs.batch + r * gs.row + h * gs.head + ch * 8);
        *reinterpret_cast<uint4*>(p.x.gated_out + b * p.o_st.batch + r * p.o_st.row + h * p.o_st.head + ch * 8) = mul_x8<kHalf>(o, g);
    }
}

// epilogue, as in the mma.sync kernel: O /= l, LSE = m * scale + log(l); each warp stages only its own 16 rows
// of O (swizzle<HS>, in Q's shared memory: the caller ordered every wgmma read of Q before this) for 16-byte stores;
// kStaged false: no staging (q_smem unused), each thread stores its own bf16 pairs
// Packed sequences: out_row0 = the sequence's first row of O, rows = its length (0: p.T); the LSE rows stay (B, NH, T)
// kGate (the kBias copies, which the gated calls run): gated_out = O * gate too, where the call gates
template <int HS, bool kHalf, bool kStaged = true, bool kGeneral = false, bool kGate = false>
__device__ __forceinline__ void hopper_forward_epilogue(const AttentionForwardParams& p, float (&o_acc)[HS / 2],
                                                        const float (&row_max)[2], const float (&row_sum)[2],
                                                        uint8_t* q_smem, int b, int h, int m_start, int warp_row0,
                                                        int out_row0 = 0, int rows = 0, float o_scale = 1.0f) {
    const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    const int T = rows ? rows : p.T, NH = p.NH;
    const float scale = p.scale;
    __syncwarp();   // a persistent kernel comes back here: this warp's reads of its previous O rows are done
    #pragma unroll
    for (int half = 0; half < 2; half++) {
        float l = row_sum[half];
        l += __shfl_xor_sync(0xffffffff, l, 1);
        l += __shfl_xor_sync(0xffffffff, l, 2);
        const float inv_l = l > 0.0f ? o_scale * (1.0f / l) : 0.0f;   // 1 / l as before where o_scale is 1
        const int row = warp_row0 + g + 8 * half;
        if (tq == 0 && (unsigned)(m_start + row) < (unsigned)T)   // m_start < 0: see block_start
            p.lse[((size_t)b * NH + h) * p.T + m_start + row] = l > 0.0f ? row_max[half] * scale + logf(l) : -INFINITY;
        #pragma unroll
        for (int dt = 0; dt < HS / 8; dt++) {
            const uint32_t o2 = pack_x2<kHalf>(o_acc[4 * dt + 2 * half] * inv_l, o_acc[4 * dt + 2 * half + 1] * inv_l);
            if constexpr (kStaged) *reinterpret_cast<uint32_t*>(q_smem + swizzle<HS>(row, dt) + 4 * tq) = o2;
            else if ((unsigned)(m_start + row) < (unsigned)T && head_chunk_stored<kGeneral>(p.HS, dt))
                *reinterpret_cast<uint32_t*>(p.out + b * p.o_st.batch + (out_row0 + m_start + row) * p.o_st.row + h * p.o_st.head + dt * 8 + 2 * tq) = o2;
        }
    }
    if constexpr (!kStaged) {
        if (kGate && p.x.gate) hopper_forward_gate<HS, kHalf>(p, nullptr, b, h, m_start, warp_row0, out_row0, T);
        return;
    }
    __syncwarp();
    floatX* out_gl = p.out + b * p.o_st.batch + h * p.o_st.head;
    for (int c = lane; c < 16 * (HS / 8); c += 32) {
        int row = warp_row0 + c / (HS / 8), ch = c % (HS / 8);
        if ((unsigned)(m_start + row) < (unsigned)T && head_chunk_stored<kGeneral>(p.HS, ch))
            *reinterpret_cast<uint4*>(out_gl + (out_row0 + m_start + row) * p.o_st.row + ch * 8) =
                *reinterpret_cast<const uint4*>(q_smem + swizzle<HS>(row, ch));
    }
    if (kGate && p.x.gate) hopper_forward_gate<HS, kHalf>(p, q_smem, b, h, m_start, warp_row0, out_row0, T);
}

// ----------------------------------------------------------------------------
// forward kernel, Hopper (sm_90a): TMA producer, consumer warpgroups, ping-pong, persistent
//
// The two kernels above load with cp.async from every thread and meet at __syncthreads twice per K/V tile,
// so loads, softmax and MMAs of one CTA take turns, and only a second CTA per SM fills the gaps. Here the
// roles are split (FA3, sections 3.1-3.2):
//   warpgroup 0, the producer: drops to 24 registers (setmaxnreg.dec); one thread issues TMA loads of Q and of
//     the K and V tiles into a ring of kStages slots. Each load completes on an mbarrier ("full": the
//     transaction bytes arrived); before refilling a slot it waits on that slot's "empty" barrier.
//   warpgroups 1 .. kNCWG, the consumers: raise their register limit (setmaxnreg.inc), own 64 query rows each
//     (kBlockM = 64 * kNCWG) and run the intra-warpgroup overlap loop of the kernel above: S_j = Q K_j^T and
//     O += P_{j-1} V_{j-1} are issued together, the softmax of tile j runs while P V does. Each warp arrives
//     on a slot's empty barrier once its wgmma reading that slot has completed (wgmma.wait_group).
//   ping-pong (kPingPong): the consumers issue their GEMMs in turn, ordered by named barriers (bar.sync on
//     their own, bar.arrive on the next one's), so one warpgroup's softmax runs while the others' GEMMs keep
//     the tensor cores busy.
//   persistent: one CTA per SM walks work items, one a round, in snake order (persistent_work below);
//     persistent_item maps them to (Q tile, head), the longest (causal) tiles first. The producer loads the next
//     tile's Q (into the second Q slot, where two fit: every shipped config, HS 128's 2-stage pairs included; not
//     the 3-stage pairs) and K/V while the consumers finish the current one.
// Q, K, V are read in place through 4-D tensor maps (HS, heads, rows, B) with the tensors' own strides (GPT-2's
// fused (B, T, 3, NH, HS) buffer: head stride HS, row stride 3 * NH * HS), boxes of 64 head dims x 1 head x rows x
// 1 batch with the 128-byte swizzle: exactly one swizzle_wgmma column block, so the descriptors of the kernels above
// apply unchanged. Rows past T (Tk) come back as zeros (the tensor map's bounds); the mask hides those keys from
// every real query row. With GQA the producer loads key/value head h / (NH / NH_kv).
// Ring bookkeeping: both roles count K/V tiles over the whole persistent walk (kv_iter); tile kv_iter uses slot
// kv_iter % kStages with phase parity (kv_iter / kStages) & 1. A fresh mbarrier is in phase 0, so waiting for
// parity 1 passes at once: the producer's first pass over the empty barriers does not block.

// passed as a __grid_constant__ kernel argument; the kBias kernels' also holds the (B, NH, T, Tk) bf16 bias
struct HopperTmaMaps { CUtensorMap q, k, v; };
struct HopperBiasTmaMaps : HopperTmaMaps { CUtensorMap bias; };
struct HopperPackedTmaMaps : HopperTmaMaps { const int* packed; };   // kVarlen: the pack's block table (below)
template <bool kBias, bool kVarlen>
using HopperForwardMaps = std::conditional_t<kBias, HopperBiasTmaMaps, std::conditional_t<kVarlen, HopperPackedTmaMaps, HopperTmaMaps>>;

// Packed sequences on the Hopper kernels (kVarlen copies; AttentionExtras total_q / total_k): Q, K, V are read through
// tensor maps of all the pack's rows, and the kernels walk a table of its blocks of block_rows rows: the count, then
// (b, block) pairs, sequence by sequence, each one's last block first (its longest item where causal). Item w is head
// w / count of entry w % count: the items in flight are then neighbouring blocks of one head, which share its streamed
// operands in L2 (as the unpadded walk's sections do). One CTA builds the table on the device from cu_seqlens before
// the kernels: a scan of the sequences' block counts.
struct PackedTableSpec { const int* cu_seqlens; int block_rows; int* table; };
static __global__ void __launch_bounds__(1024) packed_blocks_kernel(PackedTableSpec queries, PackedTableSpec keys, int B) {
    const PackedTableSpec t = blockIdx.x ? keys : queries;   // CTA 1: the keys' table
    auto blocks_of = [&](int b) { return ceil_div(t.cu_seqlens[b + 1] - t.cu_seqlens[b], t.block_rows); };
    const int per = ceil_div(B, 1024), b0 = threadIdx.x * per, b1 = min(b0 + per, B);   // this thread's sequences
    int mine = 0;
    for (int b = b0; b < b1; b++) mine += blocks_of(b);
    // the threads' exclusive prefix: warp scans, then a scan of the warps' totals
    __shared__ int warp_total[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int incl = mine;
    for (int o = 1; o < 32; o *= 2) { const int v = __shfl_up_sync(0xffffffffu, incl, o); if (lane >= o) incl += v; }
    if (lane == 31) warp_total[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        int w = warp_total[lane];
        for (int o = 1; o < 32; o *= 2) { const int v = __shfl_up_sync(0xffffffffu, w, o); if (lane >= o) w += v; }
        warp_total[lane] = w;
    }
    __syncthreads();
    int pos = incl - mine + (warp ? warp_total[warp - 1] : 0);
    for (int b = b0; b < b1; b++)
        for (int m = blocks_of(b) - 1; m >= 0; m--, pos++) { t.table[1 + 2 * pos] = b; t.table[2 + 2 * pos] = m; }
    if (threadIdx.x == 1023) t.table[0] = pos;
}
// The tables of a call's query blocks of q_rows rows and (k_rows > 0: the backward, which walks both) key blocks of
// k_rows rows, built by one launch
struct PackedTables { const int *queries, *keys; };
inline PackedTables packed_blocks_tables(const AttentionExtras& x, int B, int T, int Tk, int q_rows, int k_rows,
                                         cudaStream_t stream) {
    static void* buf[2] = {nullptr, nullptr};
    static size_t capacity[2] = {0, 0};
    auto spec = [&](int slot, const int* cu, int len, int rows) {
        int* table = (int*)grow_device_buffer(buf[slot], capacity[slot], (1 + 2 * (size_t)B * ceil_div(len, rows)) * sizeof(int));
        return PackedTableSpec{cu, rows, table};
    };
    const PackedTableSpec q = spec(0, x.cu_seqlens_q, T, q_rows), k = k_rows ? spec(1, x.cu_seqlens_k, Tk, k_rows) : q;
    packed_blocks_kernel<<<k_rows ? 2 : 1, 1024, 0, stream>>>(q, k, B);
    cudaCheck(cudaGetLastError());
    return {q.table, k.table};
}
// item w of a table: head h of sequence b's block `block`, the sequence's first rows and lengths, its band's diagonals
// (attention_band: diag = hi)
struct PackedBlock { int b, h, block, q0, T, k0, Tk, diag, lo; };
__device__ __forceinline__ PackedBlock packed_block(const int* table, int w, const AttentionExtras& x, bool causal) {
    const int count = table[0], pair = w % count;
    const int b = table[1 + 2 * pair], block = table[2 + 2 * pair];
    const int q0 = x.cu_seqlens_q[b], k0 = x.cu_seqlens_k[b];
    const int T = x.cu_seqlens_q[b + 1] - q0, Tk = x.cu_seqlens_k[b + 1] - k0;
    const KeyBand band = attention_band(x, causal, T, Tk);
    return {b, w / count, block, q0, T, k0, Tk, band.hi, band.lo};
}

// The kBias copies' bias tiles (the forward's and the backward's): kRows queries x kKeys keys, bf16, loaded by TMA as
// kKeys / 64 boxes of 64 keys x rows with the 128-byte swizzle (the layout of a wgmma tile of kKeys "head dims").
// rows = kRows, or 1 where the bias broadcasts over queries; head and batch: whether it has those dimensions.
struct HopperBiasBoxes {
    int rows;
    bool head, batch;
    __host__ __device__ HopperBiasBoxes(const AttentionExtras& x, int tile_rows)
        : rows(x.bias_st.row ? tile_rows : 1), head(x.bias_st.head != 0), batch(x.bias_st.batch != 0) {}
    __device__ __forceinline__ int tile_bytes(int keys) const { return rows * keys * 2; }
};
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// the bias tile of query rows row0.. and keys key0.. of head h, batch b; boxes 1024 bytes apart even of one row (the
// swizzle follows address bits 7-9, so a one-row box stays unswizzled only there)
template <int kKeys>
__device__ __forceinline__ void tma_load_bias_tile(uint8_t* dst, const CUtensorMap* map, uint64_t* bar, const HopperBiasBoxes& bb,
                                                   int row0, int key0, int h, int b) {
    for (int c = 0; c < kKeys / 64; c++)
        tma_load_4d(dst + c * max(bb.rows, 8) * 128, map, bar, key0 + 64 * c, bb.rows > 1 ? row0 : 0, bb.head ? h : 0, bb.batch ? b : 0);
}
#endif

// kBias: a ring of kBiasStages bias tiles (kBlockM queries x kBlockN keys, bf16, the layout of a wgmma tile of kBlockN
// "head dims": kBlockN / 64 TMA boxes of 64 keys), loaded with each K tile
// kVarlen: packed sequences (the table above)
// kHalf: fp16 operands (else bf16)
template <int HS, int kNCWG_, int kBlockN_, int kStages_, bool kBias_ = false, bool kVarlen_ = false, bool kMods_ = false, bool kHalf_ = false>
struct HopperWsTile {
    static constexpr int kHeadSize = HS, kNCWG = kNCWG_, kBlockN = kBlockN_, kStages = kStages_;
    static constexpr bool kHalf = kHalf_;
    static constexpr int kBlockM = 64 * kNCWG, kThreads = 128 * (kNCWG + 1);
    static constexpr int kQBytes = kBlockM * HS * 2, kTileBytes = kBlockN * HS * 2;
    static constexpr bool kBias = kBias_, kVarlen = kVarlen_, kMods = kMods_;   // kMods: the score modifiers (softcap, ALiBi)
    static constexpr int kBiasStages = kBias ? 2 : 0, kBiasBytes = kBlockM * kBlockN * 2;
    static constexpr int kKeyBiasBytes = kBlockN * 4;   // a bias stage's key bias (AttentionExtras::key_bias), fp32
    static constexpr int kRingBytes = 2 * kStages * kTileBytes + kBiasStages * (kBiasBytes + kKeyBiasBytes);   // K, V (and bias) rings
    // two Q slots where they fit (not HS 128 with 128-key tiles and a 3-deep ring), so the next work item's Q
    // loads while this one finishes
    static constexpr int kQSlots = 3 * kQBytes + kRingBytes + 8 * (4 + 4 * kStages + 2 * kBiasStages) + 1024 <= 227 * 1024 ? 2 : 1;
    // q_full[], q_empty[], k_full[], k_empty[], v_full[], v_empty[], bias_full[], bias_empty[]
    static constexpr int kNumBars = 2 * kQSlots + 4 * kStages + 2 * kBiasStages;
    // O is staged in shared memory for 16-byte stores where that fits; otherwise (HS 128 with a 3-deep ring) each
    // thread stores its own bf16 pairs, 4-byte stores once per work item
    static constexpr bool kStageO = (kQSlots + 1) * kQBytes + kRingBytes + 8 * kNumBars + 1024 <= 227 * 1024;
    // Q slots | K ring | V ring | O staging (kBlockM rows, swizzle<HS>) | bias ring | key-bias ring | mbarriers; + 1 KB
    // to align to the swizzle atom
    static constexpr int kBiasOffset = (kQSlots + kStageO) * kQBytes + 2 * kStages * kTileBytes;
    static constexpr int kKeyBiasOffset = kBiasOffset + kBiasStages * kBiasBytes;
    static constexpr int kBarOffset = kKeyBiasOffset + kBiasStages * kKeyBiasBytes;
    static constexpr int kSmemBytes = kBarOffset + 8 * kNumBars + 1024;
    // the claimed schedule (kDynamic) adds, after the mbarriers: hand_full[], hand_empty[] (CTA pairs: rank 0 hands
    // rank 1 each item), item_w[] (each Q slot's item, for the consumers), hand_w[] (written by the peer)
    static constexpr int kDynamicBytes = 24 * kQSlots;
    // 65536 registers per SM, one CTA: the producer keeps 24 a thread, the consumers share the rest (multiples of 8)
    static constexpr int kProducerRegs = 24, kConsumerRegs = kNCWG == 2 ? 240 : 160;
    static_assert(128 * kProducerRegs + 128 * kNCWG * kConsumerRegs <= 65536, "register budget");
};

// Persistent schedule of the warp-specialised kernels: work item w -> (rank, bh), rank 0 = the block with the most
// work (the caller maps it to the last query block, or key block 0). Rank-major over all B * NH heads, the ~132 items
// in flight come from ~132 different heads; when the heads' streamed operands (K/V in the forward, Q/dO or K/V in the
// backward: T * HS * 4 bytes a head) are far larger than L2, every item fetches its head's from DRAM again. So above
// 64 MB of operands the heads are cut into sections whose operands fit in 16 MB, and a section's items (rank-major,
// longest first) run together. One section = the plain order, which is faster below 64 MB.
inline int persistent_section_heads(int num_bh, int T, int HS) {
    if (attention_tuning().section_heads > 0) return std::min(attention_tuning().section_heads, num_bh);
    const long head_bytes = (long)T * HS * 4;
    return num_bh * head_bytes > (64l << 20) ? (int)std::max(1l, (16l << 20) / head_bytes) : num_bh;
}
// The CTA's work item in round r of its walk (one item a round). Plain round-robin (w = blockIdx.x + r * gridDim.x)
// gives CTA 0 the longest item of every round when a round holds few heads (items come longest first), leaving a
// ragged tail. Snake order (rounds alternate direction) evens that out where the heads run unsectioned; with sections
// it is slower, so snake = one section (section_heads >= B * NH).
__device__ __forceinline__ int persistent_work(int round, bool snake, int unit, int units) {
    const bool reverse = snake && (round & 1);
    return round * units + (reverse ? units - 1 - unit : unit);
}
__device__ __forceinline__ int persistent_work(int round, bool snake) {   // one work item per CTA
    return persistent_work(round, snake, (int)blockIdx.x, (int)gridDim.x);
}
struct PersistentItem { int rank, bh; };
__device__ __forceinline__ PersistentItem persistent_item(int w, int num_ranks, int num_bh, int section_heads) {
    const int section = w / (section_heads * num_ranks), first_bh = section * section_heads;
    const int heads_here = min(section_heads, num_bh - first_bh);   // the last section may be short
    const int r = w - first_bh * num_ranks;
    return {r / heads_here, first_bh + r % heads_here};
}
// Claimed schedule (kDynamic: the backward kernels and the forward's CTA pairs). With sections, round-robin leaves the
// SMs unevenly loaded: a CTA's items alternate between one section's long first ranks and another's short last ones.
// With kDynamic, each producer's first item is its CTA's index and every later one the next unclaimed index of a
// global counter (the items in flight stay a window of consecutive items, longest first within a section); the
// producer hands the index to its consumers in shared memory, and past the last item an index >= the item count
// tells them to stop. The last CTA to finish claiming resets the counter for the next launch, so one kernel must not
// run on two streams at once (each kernel has its own counter).
struct PersistentCounter { int claimed, finished; };
static __device__ PersistentCounter g_persistent_counters[3];   // the backward's dK/dV and dQ kernels, the forward
enum PersistentKernel { kCounterDkdv = 0, kCounterDq = 1, kCounterForward = 2 };
// the next item past the first round; units: the claiming CTAs (clusters), each with its first item its own index
__device__ __forceinline__ int persistent_claim(PersistentKernel k, int units) {
    return units + atomicAdd(&g_persistent_counters[k].claimed, 1);
}
__device__ __forceinline__ int persistent_claim(PersistentKernel k) { return persistent_claim(k, (int)gridDim.x); }
// once per claiming unit, after its last claim (an index past the items)
__device__ __forceinline__ void persistent_claims_done(PersistentKernel k, int units) {
    PersistentCounter* c = &g_persistent_counters[k];
    __threadfence();   // this unit's claims land before its count
    if (atomicAdd(&c->finished, 1) == units - 1) { atomicExch(&c->claimed, 0); atomicExch(&c->finished, 0); }
}
__device__ __forceinline__ void persistent_claims_done(PersistentKernel k) { persistent_claims_done(k, (int)gridDim.x); }

// Where the persistent Hopper kernels claim their items (kDynamic: both backward kernels, the forward's HS 128 CTA
// pairs): at T >= 4096 (from_T), where causal items differ in length. Below that the items are short and a claim
// costs what the balance gains, so the round-robin walk runs; it also runs where every item has the same length
// (even_items: non-causal), which round-robin balances by itself. HS 256 claims from T = 1024: its heads are cut into
// sections beyond 64 heads of 1024 rows (persistent_section_heads), and round-robin over sections loads the SMs
// unevenly (dev/cuda/RESULTS.md has the A/B runs).
inline bool claimed_schedule(int T, int from_T = 4096, bool even_items = false) {
    const int forced = attention_tuning().schedule;
    return forced == AttentionTuning::kByShape ? !even_items && T >= from_T : forced == AttentionTuning::kClaimed;
}
// The split's two kernels are independent (both read only the inputs and the preprocess's statistics), so the dQ
// kernel is launched to start on the SMs the dK/dV kernel's tail leaves idle, and the dK/dV kernel to get ready
// during the preprocess's tail (programmatic dependent launch: the dK/dV kernel waits for the preprocess before
// it lets the dQ kernel start, and the dQ kernel's last step waits for the dK/dV grid, so the backward still ends
// after all three).
inline bool backward_early_start() { return attention_tuning().pdl; }

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The warp-specialised forward's shared memory, carved once: Q slots, K and V rings, O staging, then the mbarriers
// and the claimed schedule's hand-over slots
template <class Tile>
struct ForwardWsSmem {
    uint8_t *q, *k, *v, *o;   // [kQSlots] (kBlockM, HS), [kStages] (kBlockN, HS) twice: swizzle_wgmma; O: swizzle<HS>
    uint8_t* bias;            // kBias: [kBiasStages] (kBlockM, kBlockN)
    float* key_bias;          // kBias: [kBiasStages] (kBlockN), with the bias tile where the call has a key bias
    uint64_t *q_full, *q_empty, *k_full, *k_empty, *v_full, *v_empty, *bias_full, *bias_empty;
    uint64_t *hand_full, *hand_empty;   // kDynamic (Tile::kDynamicBytes): rank 0 of a pair hands rank 1 each item
    int *item_w, *hand_w;               // each Q slot's item, for the consumers; the index the peer wrote
    __device__ __forceinline__ explicit ForwardWsSmem(uint8_t* smem) {
        q = smem;
        k = q + Tile::kQSlots * Tile::kQBytes;
        v = k + Tile::kStages * Tile::kTileBytes;
        o = v + Tile::kStages * Tile::kTileBytes;   // kStageO: each warp stages its 16 rows
        bias = smem + Tile::kBiasOffset;
        key_bias = reinterpret_cast<float*>(smem + Tile::kKeyBiasOffset);
        uint64_t* bars = reinterpret_cast<uint64_t*>(smem + Tile::kBarOffset);
        q_full = bars;
        q_empty = bars + Tile::kQSlots;
        k_full = bars + 2 * Tile::kQSlots;
        k_empty = k_full + Tile::kStages;
        v_full = k_empty + Tile::kStages;
        v_empty = v_full + Tile::kStages;
        bias_full = v_empty + Tile::kStages;
        bias_empty = bias_full + Tile::kBiasStages;
        hand_full = bars + Tile::kNumBars;
        hand_empty = hand_full + Tile::kQSlots;
        item_w = reinterpret_cast<int*>(hand_empty + Tile::kQSlots);
        hand_w = item_w + Tile::kQSlots;
    }
};

// The work items both roles walk. An item is kCluster neighbouring query blocks of one head, one per CTA of the
// cluster. Query block m holds rows block_start(m) .. + kBlockM - 1. Where the blocks are not the key tiles (192 rows,
// 3 consumer warpgroups) they are counted back from T: a ragged block is then the first (rows below 0 load as zeros,
// see nothing and are not stored), a one-tile item, instead of the last, the longest, whose every tile two of the
// three warpgroups would compute for nothing.
template <int kBlockM, int kBlockN, int kCluster, bool kGeneral>
struct ForwardWsWalk {
    int T, Tk, NH, group, diag, lo, num_bh, num_m_blocks, num_ranks, num_items, section_heads, cta_rank;
    HopperBiasBoxes bias;   // kBias
    bool snake;   // see persistent_work
    const int* packed;      // kVarlen: the pack's query-block table (see packed_block); else nullptr
    AttentionExtras x;
    bool causal;
    // !kGeneral (CTA pairs are never general): attention_self_causal, so Tk, the diagonal and the GQA group are
    // constants to the compiler
    static constexpr bool kSelfCausal = !kGeneral || kCluster > 1;
    __device__ __forceinline__ ForwardWsWalk(const AttentionForwardParams& p, int section_heads_, const int* packed_ = nullptr)
        : T(p.T), Tk(kSelfCausal ? p.T : p.Tk), NH(p.NH), group(kSelfCausal ? 1 : p.NH / p.NH_kv),
          diag(kSelfCausal ? 0 : attention_band(p).hi), lo(kSelfCausal ? -kBandFar : attention_band(p).lo), num_bh(p.B * p.NH),
          num_m_blocks(ceil_div(p.T, kBlockM)), num_ranks(num_m_blocks / kCluster),
          num_items(packed_ ? packed_[0] * p.NH : num_ranks * num_bh), section_heads(section_heads_),
          cta_rank(kCluster > 1 ? cluster_cta_rank() : 0), bias(p.x, kBlockM), snake(packed_ || section_heads_ >= num_bh),
          packed(packed_), x(p.x), causal(p.causal) {}
    __device__ __forceinline__ PackedBlock packed_item(int w) const { return packed_block(packed, w, x, causal); }
    // a packed item's key tiles: up to its sequence's last visible key from its block's last row in the sequence
    __device__ __forceinline__ int packed_key_blocks(const PackedBlock& pb) const {
        return attention_key_blocks(min(pb.block * kBlockM + kBlockM, pb.T) - 1, pb.diag, pb.Tk, kBlockN);
    }
    __device__ __forceinline__ int block_start(int m_block) const {
        return kBlockM != kBlockN ? T - (num_m_blocks - m_block) * kBlockM : m_block * kBlockM;
    }
    // the K/V tiles of the item whose upper query block starts at m_start (see attention_key_blocks)
    __device__ __forceinline__ int key_blocks(int m_start) const {
        if constexpr (kSelfCausal) return min(ceil_div(m_start + kBlockM, kBlockN), ceil_div(T, kBlockN));
        else return attention_key_blocks(m_start + kBlockM - 1, diag, Tk, kBlockN);
    }
    // the first of them (the window's left side; at most the last, so that an item walks at least one tile)
    __device__ __forceinline__ int first_key_block(int m_start, int n_blocks) const {
        if constexpr (kSelfCausal) return 0;
        else return min(attention_first_key_block(m_start, lo, kBlockN), n_blocks - 1);
    }
    __device__ __forceinline__ int packed_first_key_block(const PackedBlock& pb, int n_blocks) const {
        return min(attention_first_key_block(pb.block * kBlockM, pb.lo, kBlockN), n_blocks - 1);
    }
    __device__ __forceinline__ int work(int round) const {   // the round-robin walk's item of round `round`
        return persistent_work(round, snake, (int)blockIdx.x / kCluster, (int)gridDim.x / kCluster);
    }
};

// The producer (one thread): per work item, its Q into the next Q slot, then its K/V walk into the ring, the diagonal
// tile first; with kDynamic the items past the first round are claimed (by rank 0 of a pair, which hands each index
// to rank 1), and an index past the items tells the consumers to stop.
template <class Tile, int kCluster, bool kDynamic, bool kGeneral, class Maps>
__device__ __forceinline__ void forward_ws_producer(const ForwardWsSmem<Tile>& sm, const Maps& maps,
                                                    const ForwardWsWalk<Tile::kBlockM, Tile::kBlockN, kCluster, kGeneral>& walk) {
    constexpr int kBlockM = Tile::kBlockM, kBlockN = Tile::kBlockN, kStages = Tile::kStages;
    constexpr int kCB = Tile::kHeadSize / 64;   // 64-column blocks of a tile (swizzle_wgmma): one TMA box each
    const int NH = walk.NH, cta_rank = walk.cta_rank, num_items = walk.num_items;
    uint8_t *q_smem = sm.q, *k_smem = sm.k, *v_smem = sm.v;
    uint64_t *q_full = sm.q_full, *q_empty = sm.q_empty, *k_full = sm.k_full, *k_empty = sm.k_empty;
    uint64_t *v_full = sm.v_full, *v_empty = sm.v_empty, *hand_full = sm.hand_full, *hand_empty = sm.hand_empty;
    int *item_w = sm.item_w, *hand_w = sm.hand_w;
    const int num_m_blocks = walk.num_m_blocks, num_ranks = walk.num_ranks, num_bh = walk.num_bh, section_heads = walk.section_heads;
        int kv_iter = 0;
        auto load_item = [&](int w, int tile_iter) {   // its Q into slot tile_iter % kQSlots, then its K/V walk
            // the item's block, its key tiles, and where its rows lie in the tensor maps (packed: rows q0.., k0.. of
            // one batch)
            int m_start, b, h, n_blocks, n_first, q_row0 = 0, k_row0 = 0, map_b;
            if constexpr (Tile::kVarlen) {
                const PackedBlock pb = walk.packed_item(w);
                m_start = pb.block * kBlockM, b = pb.b, h = pb.h, n_blocks = walk.packed_key_blocks(pb);
                n_first = walk.packed_first_key_block(pb, n_blocks);
                q_row0 = pb.q0, k_row0 = pb.k0, map_b = 0;
            } else {
                const PersistentItem item = persistent_item(w, num_ranks, num_bh, section_heads);
                const int m_top = num_m_blocks - 1 - kCluster * item.rank;   // the item's upper block: its walk is the ring's
                b = item.bh / NH, h = item.bh % NH, map_b = b;
                m_start = walk.block_start(m_top - cta_rank);
                n_blocks = walk.key_blocks(walk.block_start(m_top));
                n_first = walk.first_key_block(m_start, n_blocks);   // 0 for CTA pairs (self-attention)
            }
            const int h_kv = h / walk.group;
            const int qslot = tile_iter % Tile::kQSlots;
            mbar_wait(&q_empty[qslot], ((tile_iter / Tile::kQSlots) & 1) ^ 1);   // the slot's last S has read Q
            mbar_arrive_expect_tx(&q_full[qslot], Tile::kQBytes);
            for (int c = 0; c < kCB; c++)
                tma_load_4d(q_smem + qslot * Tile::kQBytes + c * kBlockM * 128, &maps.q, &q_full[qslot], 64 * c, h, q_row0 + m_start, map_b);
            for (int i = 0; i < n_blocks - n_first; i++, kv_iter++) {   // the diagonal tile first, as the consumers walk
                const int slot = kv_iter % kStages, phase = (kv_iter / kStages) & 1;
                const int key0 = (n_blocks - 1 - i) * kBlockN;
                mbar_wait(&k_empty[slot], phase ^ 1);
                mbar_arrive_expect_tx(&k_full[slot], Tile::kTileBytes);   // with kCluster 2: half from the peer
                for (int c = 0; c < kCB; c++) {
                    uint8_t* dst = k_smem + slot * Tile::kTileBytes + c * kBlockN * 128;
                    if constexpr (kCluster == 1) tma_load_4d(dst, &maps.k, &k_full[slot], 64 * c, h_kv, k_row0 + key0, map_b);
                    else if (c == cta_rank) tma_load_4d_multicast(dst, &maps.k, &k_full[slot], 0x3, 64 * c, h_kv, key0, b);
                }
                if constexpr (Tile::kBias) {   // this K tile's bias tile: kBlockM rows (one if they broadcast) x kBlockN keys
                    const int bslot = kv_iter % Tile::kBiasStages, bphase = (kv_iter / Tile::kBiasStages) & 1;
                    const float* kb = key_bias_of(walk.x, b, h);   // and its key bias, a 1-D bulk copy
                    mbar_wait(&sm.bias_empty[bslot], bphase ^ 1);
                    mbar_arrive_expect_tx(&sm.bias_full[bslot], walk.bias.tile_bytes(kBlockN) + (kb ? Tile::kKeyBiasBytes : 0));
                    tma_load_bias_tile<kBlockN>(sm.bias + bslot * Tile::kBiasBytes, &maps.bias, &sm.bias_full[bslot], walk.bias, m_start, key0, h, b);
                    if (kb) bulk_load(sm.key_bias + bslot * kBlockN, kb + key0, Tile::kKeyBiasBytes, &sm.bias_full[bslot]);
                }
                mbar_wait(&v_empty[slot], phase ^ 1);
                mbar_arrive_expect_tx(&v_full[slot], Tile::kTileBytes);
                for (int c = 0; c < kCB; c++) {
                    uint8_t* dst = v_smem + slot * Tile::kTileBytes + c * kBlockN * 128;
                    if constexpr (kCluster == 1) tma_load_4d(dst, &maps.v, &v_full[slot], 64 * c, h_kv, k_row0 + key0, map_b);
                    else if (c == cta_rank) tma_load_4d_multicast(dst, &maps.v, &v_full[slot], 0x3, 64 * c, h_kv, key0, b);
                }
            }
        };
        if constexpr (!kDynamic) {
            int tile_iter = 0;
            for (int w = walk.work(tile_iter); w < num_items; w = walk.work(++tile_iter)) load_item(w, tile_iter);
        } else {
            const int unit = (int)blockIdx.x / kCluster, units = (int)gridDim.x / kCluster;
            int w = unit;
            for (int tile_iter = 0; ; tile_iter++) {
                if (tile_iter > 0) {   // the next item: rank 0 claims it and hands it to rank 1
                    if (cta_rank == 0) w = persistent_claim(kCounterForward, units);
                    if constexpr (kCluster > 1) {
                        const int hslot = (tile_iter - 1) % Tile::kQSlots, hphase = ((tile_iter - 1) / Tile::kQSlots) & 1;
                        if (cta_rank == 0) {
                            mbar_wait(&hand_empty[hslot], hphase ^ 1);   // rank 1 has read the slot's last index
                            st_shared_remote(&hand_w[hslot], 1, w);
                            mbar_arrive_remote_release(&hand_full[hslot], 1);
                        } else {
                            mbar_wait<true>(&hand_full[hslot], hphase);
                            w = hand_w[hslot];
                            mbar_arrive_remote(&hand_empty[hslot], 0);
                        }
                    }
                }
                const int qslot = tile_iter % Tile::kQSlots;
                mbar_wait(&q_empty[qslot], ((tile_iter / Tile::kQSlots) & 1) ^ 1);
                item_w[qslot] = w;   // the consumers read it once q_full completes
                if (w >= num_items) { mbar_arrive(&q_full[qslot]); break; }
                load_item(w, tile_iter);
            }
            if (cta_rank == 0) persistent_claims_done(kCounterForward, units);
        }
}

// A consumer warpgroup (cwg: query rows 64 cwg .. 64 cwg + 63 of each block): per work item, the intra-warpgroup
// overlap loop over its K/V tiles, then the epilogue.
template <class Tile, bool kPingPong, int kCluster, bool kDynamic, bool kGeneral>
__device__ __forceinline__ void forward_ws_consumer(const AttentionForwardParams& p, const ForwardWsSmem<Tile>& sm,
                                                    const ForwardWsWalk<Tile::kBlockM, Tile::kBlockN, kCluster, kGeneral>& walk, int cwg) {
    constexpr int HS = Tile::kHeadSize, kNCWG = Tile::kNCWG, kBlockM = Tile::kBlockM, kBlockN = Tile::kBlockN, kStages = Tile::kStages;
    constexpr bool kHalf = Tile::kHalf;
    constexpr int kNT = kBlockN / 8;      // n8 column groups of S per thread
    constexpr int kPS = kBlockN / 16;     // k16 steps of P V
    constexpr int kDT = HS / 8;           // n8 column groups of O
    const int Tk = walk.Tk, NH = walk.NH, diag = walk.diag, cta_rank = walk.cta_rank, num_items = walk.num_items;
    const int num_m_blocks = walk.num_m_blocks, num_ranks = walk.num_ranks, num_bh = walk.num_bh, section_heads = walk.section_heads;
    uint8_t *q_smem = sm.q, *k_smem = sm.k, *v_smem = sm.v, *o_smem = sm.o;
    uint64_t *q_full = sm.q_full, *q_empty = sm.q_empty, *k_full = sm.k_full, *k_empty = sm.k_empty;
    uint64_t *v_full = sm.v_full, *v_empty = sm.v_empty;
    const int* item_w = sm.item_w;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, tq = lane % 4;
    const int warp_row0 = cwg * 64 + (warp % 4) * 16;   // this warp's 16 rows of the tile
    const float scale_log2 = p.scale * kLog2e;
    const float inv_scale = 1.0f / p.scale;   // kBias: S + bias / scale, so the softmax's scale gives scale S + bias
    uint64_t q_desc;   // this warpgroup's rows of column block 0 of the work item's Q slot

    // kHalfDiag: with kBlockM = kBlockN an item's first tile is its diagonal block, whose right half (keys
    // m_start + 64 ..) lies above every row of consumer warpgroup 0. That warpgroup computes S and the softmax of
    // the left half only (P's right half is zeros for P V, which stays whole), a tenth of its work at T = 1024.
    // It runs its own copy of the consumer code, half_diag a constant: ptxas serialises every wgmma of a kernel
    // that has one under a branch it cannot prove uniform (C7520). HS 128 runs the one copy: its kernels serve long
    // T, where the saving is under 1% and a second copy measured slower.
    // (not with a bias, whose ring goes tile by tile, nor with packed sequences, whose diagonals differ)
    constexpr bool kHalfDiag = kBlockM == kBlockN && HS == 64 && !Tile::kBias && !Tile::kVarlen && !Tile::kMods;
    auto consumer = [&](auto wg0) {
        constexpr bool half_diag = kHalfDiag && decltype(wg0)::value;
        float s[kNT * 4];       // S of the current tile, then P in fp32
        uint32_t pa[kPS][4];    // P of the previous tile in bf16: the A fragments of P V
        float o_acc[kDT * 4];   // O, as in the kernels above
        float row_max[2], row_sum[2], alpha[2];

        // Ping-pong turn order: consumer c waits on barrier 1 + c and then lets consumer c + 1 go. Consumer 0 takes
        // the very first turn without waiting and the last consumer skips its very last hand-over, so every
        // bar.arrive meets a bar.sync and no barrier is left half-arrived when the CTA exits.
        [[maybe_unused]] bool first_turn = true;
        auto turn_begin = [&]() {
            if constexpr (kPingPong) {
                if (!(cwg == 0 && first_turn)) named_barrier_sync(1 + cwg, 256);
                first_turn = false;
            }
        };
        auto turn_end = [&](bool last_turn_of_cta) {
            if constexpr (kPingPong) {
                if (!(cwg == kNCWG - 1 && last_turn_of_cta)) named_barrier_arrive(1 + (cwg + 1) % kNCWG, 256);
            }
        };
        auto release = [&](uint64_t* bar) { if (lane == 0) mbar_arrive(bar); };   // after this warp's wgmma_wait
        auto release_kv = [&](uint64_t* bar) {   // a K/V slot: both CTAs' copies are rewritten together
            if (lane == 0) {
                mbar_arrive(bar);
                if constexpr (kCluster > 1) mbar_arrive_remote(bar, cta_rank ^ 1);
            }
        };
        auto issue_s = [&](int slot) {   // S = Q K^T; step 0 overwrites s
            wgmma_ss_over_hs<kHalf, HS, kBlockN, kBlockM, /*kScaleD0=*/0>(s, q_desc, k_smem + slot * Tile::kTileBytes);
            wgmma_commit();
        };
        // an item's first S; with half_diag its left half only, into s_left = the upper half of s (with the lower
        // half, ptxas reports C7511: wgmmas serialised for want of registers)
        float (&s_left)[kNT * 2] = *reinterpret_cast<float(*)[kNT * 2]>(s + kNT * 2);
        auto issue_s0 = [&](int slot) {
            if constexpr (half_diag) {
                wgmma_ss_over_hs<kHalf, HS, kBlockN / 2, kBlockM, /*kScaleD0=*/0, kBlockN>(s_left, q_desc, k_smem + slot * Tile::kTileBytes);
                wgmma_commit();
            } else {
                issue_s(slot);
            }
        };
        auto issue_pv = [&](int slot) {   // O += P V: k16 step i = keys 16i .. 16i + 15
            #pragma unroll
            for (int i = 0; i < kPS; i++) wgmma_rs_m64k16_trans_b<kHalf, HS, kBlockN>(o_acc, pa[i], v_smem + slot * Tile::kTileBytes, i);
            wgmma_commit();
        };
        auto pack_p = [&]() {
            #pragma unroll
            for (int i = 0; i < kPS; i++) accum_to_a_frag<kHalf>(pa[i], s, i);
        };

        // S_0 = Q K_0^T of a work item: its Q slot and first K/V tile (kv_iter kv0)
        auto wait_first_tiles = [&](int tile_iter, int kv0) {
            mbar_wait(&q_full[tile_iter % Tile::kQSlots], (tile_iter / Tile::kQSlots) & 1);
            mbar_wait(&k_full[kv0 % kStages], (kv0 / kStages) & 1);
        };
        auto set_q_slot = [&](int tile_iter) { q_desc = wgmma_desc(q_smem + (tile_iter % Tile::kQSlots) * Tile::kQBytes + cwg * 64 * 128); };
        // kCluster 2, rank 1: the item's first tile (the upper block's diagonal) has keys above all of this CTA's rows:
        // wait for it and release it, so both CTAs' slots go round together
        int kv_iter = 0, tile_iter = 0;
        auto skip_upper_diagonal = [&]() {
            if (kCluster > 1 && cta_rank == 1) {
                const int slot = kv_iter % kStages, parity = (kv_iter / kStages) & 1;
                mbar_wait(&k_full[slot], parity);
                mbar_wait(&v_full[slot], parity);
                release_kv(&k_empty[slot]);
                release_kv(&v_empty[slot]);
                kv_iter++;
            }
        };

        // Each work item starts with its S_0 already issued: the first here, the others in the previous item's last
        // turn (kEarlyS0: two Q slots, so the next Q is in by then) or right after its epilogue. Early, S_0 runs on
        // the tensor cores during the epilogue. After the CTA's last item a dummy S_0 (stale slots, result unused)
        // keeps every wgmma issue unconditional.
        constexpr bool kEarlyS0 = Tile::kQSlots == 2;
        // the item of round r: kDynamic, the producer's index, there once the item's Q slot is full (lane 0 reads it:
        // only lane 0 of each warp arrives on q_empty, see persistent_item_index); otherwise the round-robin walk. A
        // claimed index is known only once the producer has issued the previous item's loads, so it is read in the
        // item's last turn, not at its start (the round-robin has_next is read at the start, as it always was).
        auto item_of = [&](int round) {
            if constexpr (kDynamic) {
                mbar_wait(&q_full[round % Tile::kQSlots], (round / Tile::kQSlots) & 1);
                int w = 0;
                if (lane == 0) w = item_w[round % Tile::kQSlots];
                return __shfl_sync(0xffffffffu, w, 0);
            } else {
                return walk.work(round);
            }
        };
        skip_upper_diagonal();
        wait_first_tiles(0, kv_iter);   // blockIdx.x / kCluster < num_items: the grid is at most num_items clusters
        set_q_slot(0);
        turn_begin();
        reg_fence(s);
        wgmma_fence();
        issue_s0(kv_iter % kStages);
        turn_end(false);
        for (int w = item_of(tile_iter); w < num_items; w = item_of(++tile_iter)) {
            // the item's block and key tiles; packed: its sequence's lengths, diagonal and first row of O
            // n_top: its last key tile, the first walked; n_blocks: how many it walks (down to the window's first)
            int m_start, b, h, n_top, n_blocks, item_Tk = Tk, item_diag = diag, item_lo = walk.lo, out_row0 = 0, rows = 0;
            if constexpr (Tile::kVarlen) {
                const PackedBlock pb = walk.packed_item(w);
                m_start = pb.block * kBlockM, b = pb.b, h = pb.h, n_top = walk.packed_key_blocks(pb) - 1;
                n_blocks = n_top + 1 - walk.packed_first_key_block(pb, n_top + 1);
                item_Tk = pb.Tk, item_diag = pb.diag, item_lo = pb.lo, out_row0 = pb.q0, rows = pb.T;
            } else {
                const PersistentItem item = persistent_item(w, num_ranks, num_bh, section_heads);
                const int m_block = num_m_blocks - 1 - kCluster * item.rank - cta_rank;
                b = item.bh / NH, h = item.bh % NH;
                m_start = walk.block_start(m_block);
                n_top = walk.key_blocks(m_start) - 1;
                n_blocks = n_top + 1 - walk.first_key_block(m_start, n_top + 1);
            }
            const int qslot = tile_iter % Tile::kQSlots;
            bool has_next = false;
            if constexpr (!kDynamic) has_next = item_of(tile_iter + 1) < num_items;
            // kMods: the item's score modifiers, its ALiBi slope read once (unused, and so gone, in the other copies)
            const ScoreMods mods = score_mods(p.x, b, h, Tile::kVarlen ? rows : walk.T, item_Tk, NH);
            auto softmax = [&](int j) {   // on tile j (loop order): P_j (fp32) in s, row statistics, alpha
                const int key0 = (n_top - j) * kBlockN;
                float shift[2];   // kMods: the row term of one-sided ALiBi (apply_score_mods_frag)
                if constexpr (Tile::kMods)   // softcap, ALiBi
                    apply_score_mods_frag(s, mods, m_start + warp_row0, key0, lane, item_diag, shift);
                if constexpr (Tile::kBias) {   // its bias tile and key bias (loaded with K tile j), then handed back
                    const int it = kv_iter + j, bslot = it % Tile::kBiasStages;
                    mbar_wait(&sm.bias_full[bslot], (it / Tile::kBiasStages) & 1);
                    add_bias_tile_smem<kNT, kBlockM>(s, sm.bias + bslot * Tile::kBiasBytes, walk.bias.rows, warp_row0 + g, tq, inv_scale);
                    if (p.x.key_bias) add_key_bias_frag<kNT>(s, sm.key_bias + bslot * kBlockN, 0, tq, inv_scale);
                    __syncwarp();
                    release(&sm.bias_empty[bslot]);
                }
                constexpr bool kKeyBound = !std::remove_reference_t<decltype(walk)>::kSelfCausal;
                if (key0 + kBlockN - 1 > (kKeyBound ? min(m_start + warp_row0 + item_diag, item_Tk - 1) : m_start + warp_row0 + item_diag) ||
                    (kKeyBound && key0 < m_start + warp_row0 + 15 + item_lo))
                    mask_tile<kNT, kKeyBound, HS == 64>(s, m_start + warp_row0 + item_diag, key0, item_Tk, g, tq, m_start + warp_row0 + item_lo);
                online_softmax_tile<kNT, Tile::kMods>(s, row_max, row_sum, alpha, scale_log2, shift);
                if constexpr (Tile::kMods && HS <= 128) {   // dropout: P V over the kept probabilities (the row sums keep them all)
                    if (p.x.dropout_p > 0.0f) {
                        uint32_t keep[(kNT + 7) / 8];
                        dropout_keep_frag<kNT, false>(keep, attention_dropout(p.x), mods.bh, m_start + warp_row0, key0, lane);
                        dropout_apply_frag<kNT>(s, keep, 1.0f);
                    }
                }
            };
            #pragma unroll
            for (int i = 0; i < kDT * 4; i++) o_acc[i] = 0.0f;
            row_max[0] = row_max[1] = -INFINITY;
            row_sum[0] = row_sum[1] = 0.0f;

            // tile 0: softmax only (O is still 0, so alpha is not needed); S_0 was issued before
            wgmma_wait<0>();
            reg_fence(s);
            release_kv(&k_empty[kv_iter % kStages]);
            if (n_blocks == 1) release(&q_empty[qslot]);
            if constexpr (half_diag) {   // the left half: keys m_start .. m_start + 63
                mask_tile<kNT / 2, false>(s_left, m_start + warp_row0, m_start, Tk, g, tq);
                online_softmax_tile<kNT / 2>(s_left, row_max, row_sum, alpha, scale_log2);
                #pragma unroll
                for (int i = 0; i < kPS; i++) {
                    if (i < kPS / 2) accum_to_a_frag<kHalf>(pa[i], s_left, i);
                    else pa[i][0] = pa[i][1] = pa[i][2] = pa[i][3] = 0u;
                }
            } else {
                softmax(0);
                pack_p();
            }

            for (int j = 1; j < n_blocks; j++) {
                const int kslot = (kv_iter + j) % kStages, vslot = (kv_iter + j - 1) % kStages;
                mbar_wait(&k_full[kslot], ((kv_iter + j) / kStages) & 1);
                mbar_wait(&v_full[vslot], ((kv_iter + j - 1) / kStages) & 1);
                turn_begin();
                reg_fence(s); reg_fence(pa); reg_fence(o_acc);   // every ordinary write to them is done
                wgmma_fence();                                   // ... and visible to wgmma
                issue_s(kslot);
                issue_pv(vslot);
                turn_end(false);
                wgmma_wait<1>();   // S_j done; P_{j-1} V_{j-1} may still run: o_acc and pa are not ours yet
                reg_fence(s);
                release_kv(&k_empty[kslot]);
                if (j == n_blocks - 1) release(&q_empty[qslot]);   // the tile's last read of Q is done
                #pragma unroll 1
                for (unsigned once = 0; once < schedule_pin(); once++) softmax(j);   // runs while P V does
                wgmma_wait<0>();   // P V done
                reg_fence(o_acc); reg_fence(pa);
                release_kv(&v_empty[vslot]);
                #pragma unroll
                for (int dt = 0; dt < kDT; dt++) {
                    o_acc[4 * dt + 0] *= alpha[0]; o_acc[4 * dt + 1] *= alpha[0];
                    o_acc[4 * dt + 2] *= alpha[1]; o_acc[4 * dt + 3] *= alpha[1];
                }
                pack_p();
            }

            // the last P V (and with kEarlyS0 the next item's S_0, in the same turn)
            const int vslot = (kv_iter + n_blocks - 1) % kStages;
            mbar_wait(&v_full[vslot], ((kv_iter + n_blocks - 1) / kStages) & 1);
            kv_iter += n_blocks;
            if constexpr (kDynamic && kEarlyS0) has_next = item_of(tile_iter + 1) < num_items;
            if (kEarlyS0 && has_next) { skip_upper_diagonal(); wait_first_tiles(tile_iter + 1, kv_iter); set_q_slot(tile_iter + 1); }
            turn_begin();
            reg_fence(pa); reg_fence(o_acc); reg_fence(s);
            wgmma_fence();
            issue_pv(vslot);
            if constexpr (kEarlyS0) issue_s0(kv_iter % kStages);
            turn_end(kEarlyS0 && !has_next);
            wgmma_wait<kEarlyS0 ? 1 : 0>();   // P V done (S_0 of the next item may still run)
            reg_fence(o_acc);
            release_kv(&v_empty[vslot]);

            // (kMods with dropout: the kept probabilities scaled by 1 / (1 - dropout_p))
            const float o_scale = Tile::kMods && HS <= 128 && p.x.dropout_p > 0.0f ? attention_dropout(p.x).scale : 1.0f;
            hopper_forward_epilogue<HS, Tile::kHalf, Tile::kStageO, kGeneral, Tile::kBias>(p, o_acc, row_max, row_sum, o_smem, b, h, m_start, warp_row0,
                                                                              out_row0, rows, o_scale);
            if constexpr (!kEarlyS0) {   // the next item's S_0 in a turn of its own
                if constexpr (kDynamic) has_next = item_of(tile_iter + 1) < num_items;
                if (has_next) { skip_upper_diagonal(); wait_first_tiles(tile_iter + 1, kv_iter); }
                set_q_slot(tile_iter + 1);
                turn_begin();
                reg_fence(s);
                wgmma_fence();
                issue_s0(kv_iter % kStages);
                turn_end(!has_next);
            }
        }
        wgmma_wait<0>();   // the dummy S_0
    };
    if (kHalfDiag && cwg == 0 && diag == 0 && walk.lo == -kBandFar) consumer(std::true_type{});   // causal, T = Tk, no window
    else consumer(std::false_type{});
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// kCluster = 2 (HS 128): the CTAs of a cluster pair take two neighbouring query blocks of one head, the upper one
// (rank 0, the pair's longest) and the one below it (rank 1), and share one K/V walk: each CTA's producer loads one
// of the two 64-column boxes of every K and V tile, multicast into both CTAs, so each byte leaves L2 once for two
// query blocks. Every K/V slot is released by the consumer warps of both CTAs (remote mbarrier arrives). The walk
// is the upper block's (kBlockM = kBlockN: one tile more than the lower block's, its diagonal, which rank 1 waits
// for and releases without computing). Needs an even number of query blocks (the launcher checks).
// kDynamic: items past the first round claimed from a counter (see persistent_claim); in a pair rank 0 claims and
// hands each index to rank 1 through its shared memory.
// kVarlen: a general copy for packed sequences (attention_hopper_packed_fits), their items from the block table
// kMods: a general copy with the score modifiers (softcap, ALiBi: ScoreMods), so that the calls without them keep
// their registers
template <int HS, int kNCWG, int kBlockN, int kStages, bool kPingPong, int kCluster = 1, bool kDynamic = false, bool kGeneral = false,
          bool kBias = false, bool kVarlen = false, bool kMods = false, bool kHalf = false>
__global__ void __launch_bounds__(HopperWsTile<HS, kNCWG, kBlockN, kStages>::kThreads, 1)
attention_forward_hopper_ws_kernel(const AttentionForwardParams p, const __grid_constant__ HopperForwardMaps<kBias, kVarlen> maps,
                                   int section_heads) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(HS == 64 || HS == 128 || HS == 256, "head dims 64, 128, 256");
    static_assert(kStages >= 2, "V_{j-1} and K_j are in flight together");
    static_assert(!kPingPong || kNCWG >= 2, "ping-pong needs two consumer warpgroups");
    using Tile = HopperWsTile<HS, kNCWG, kBlockN, kStages, kBias, kVarlen, kMods, kHalf>;
    constexpr int kBlockM = Tile::kBlockM;
    static_assert(kCluster == 1 || (kCluster == 2 && HS == 128 && kBlockN == kBlockM), "pairs split HS 128's two column boxes");
    static_assert(!kBias || (kGeneral && kCluster == 1 && kBlockN % 64 == 0), "the bias runs on the general copies");
    static_assert(!kVarlen || (kGeneral && kCluster == 1 && !kDynamic && !kBias), "packed sequences run on the general copies");
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    const ForwardWsSmem<Tile> sm(smem);
    constexpr int kConsumerWarps = 4 * kNCWG;   // every consumer warp arrives once on an empty barrier

    if (threadIdx.x == 0) {
        for (int s = 0; s < Tile::kQSlots; s++) { mbar_init(&sm.q_full[s], 1); mbar_init(&sm.q_empty[s], kConsumerWarps); }
        if constexpr (kDynamic)
            for (int s = 0; s < Tile::kQSlots; s++) { mbar_init(&sm.hand_full[s], 1); mbar_init(&sm.hand_empty[s], 1); }
        for (int s = 0; s < kStages; s++) {
            mbar_init(&sm.k_full[s], 1); mbar_init(&sm.k_empty[s], kConsumerWarps * kCluster);
            mbar_init(&sm.v_full[s], 1); mbar_init(&sm.v_empty[s], kConsumerWarps * kCluster);
        }
        for (int s = 0; s < Tile::kBiasStages; s++) { mbar_init(&sm.bias_full[s], 1); mbar_init(&sm.bias_empty[s], kConsumerWarps); }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");   // visible to the async (TMA) proxy
    }
    if constexpr (kCluster > 1) cluster_sync();   // the peer's barriers exist before anything reaches them
    else __syncthreads();
    const int* packed = nullptr;
    if constexpr (kVarlen) packed = maps.packed;
    const ForwardWsWalk<kBlockM, kBlockN, kCluster, kGeneral> walk(p, section_heads, packed);
    if (kVarlen && (int)blockIdx.x >= walk.num_items) return;   // the grid was sized for the longest sequences
    const int wg = threadIdx.x / 128;
    if (wg == 0) {   // ---- producer
        setmaxnreg_dec<Tile::kProducerRegs>();
        if (threadIdx.x == 0) forward_ws_producer<Tile, kCluster, kDynamic, kGeneral>(sm, maps, walk);
        if constexpr (kCluster > 1) cluster_sync();   // matches the consumers' (see the end)
        return;
    }

    // ---- consumers
    setmaxnreg_inc<Tile::kConsumerRegs>();
    forward_ws_consumer<Tile, kPingPong, kCluster, kDynamic, kGeneral>(p, sm, walk, /*cwg=*/wg - 1);
    if constexpr (kCluster > 1) cluster_sync();   // no CTA leaves while its peer may still arrive on its barriers
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

inline CUtensorMap attention_tensor_map(const floatX* base, const AttentionStrides& st, int B, int T, int NH, int HS, int box_rows) {
    return bthd_tensor_map(base, st.row, st.head, st.batch, B, T, NH, HS, box_rows);
}
// all `rows` rows of a packed tensor (batch stride 0) as one batch: the loads of a sequence's last tile read the next
// sequence's first rows, or zeros past the last
inline CUtensorMap packed_tensor_map(const floatX* base, const AttentionStrides& st, int rows, int NH, int HS, int box_rows) {
    return bthd_tensor_map(base, st.row, st.head, st.row * rows, 1, rows, NH, HS, box_rows);
}
// The Hopper kernels' kVarlen copies take packed sequences (cu_seqlens_q and _k) whose totals are given, with the batch
// strides 0 and no other extra (strides: the checks of attention_unsupported_reason)
inline bool attention_hopper_packed_fits(const AttentionExtras& x, std::initializer_list<AttentionStrides> strides) {
    if (!x.cu_seqlens_q || !x.cu_seqlens_k || x.total_q <= 0 || x.total_k <= 0) return false;
    if (x.bias || x.seqlens_k || x.gate || x.doc_start || x.key_bias || x.dropout_p > 0.0f || !hopper_path_available()) return false;
    for (const AttentionStrides& st : strides) if (st.batch != 0) return false;
    return true;
}
inline bool attention_forward_hopper_packed_fits(const AttentionForwardParams& p) {
    return (p.HS >= 64 || !attention_head_dim_compiled(p.HS)) && attention_hopper_packed_fits(p.x, {p.q_st, p.k_st, p.v_st, p.o_st});
}

// The Hopper kernels' kBias copies take the kernels' extras (attention_kernel_extras) of a bf16 tile bias whose
// pointer and non-zero strides TMA accepts (16 bytes), a key bias (bias2, key masks), either or both, and gating: the
// forward at every head dim, the backward up to 128 (with dBias too); everything else with a bias runs on the mma.sync
// kExtras copies.
// a bf16 bias TMA can load: its pointer and non-zero strides 16-byte multiples
inline bool bias_tma_ready(const void* bias, const AttentionStrides& st, bool fp32) {
    return !fp32 && (uintptr_t)bias % 16 == 0 && st.row % 8 == 0 && st.head % 8 == 0 && st.batch % 8 == 0;
}
inline bool attention_hopper_bias_fits(const AttentionExtras& x) {
    if ((!x.bias && !x.key_bias) || x.seqlens_k || x.cu_seqlens_q || x.cu_seqlens_k || x.doc_start || x.dropout_p > 0.0f ||
        !hopper_path_available())
        return false;
    return !x.bias || bias_tma_ready(x.bias, x.bias_st, x.bias_fp32);
}
// gating alone: the forward's Hopper kBias copies (with a zero tile bias: their epilogue gates), the backward's general
// Hopper copies (its preprocess gates)
inline bool attention_gate_only(const AttentionExtras& x) {
    return x.gate && !x.bias && !x.key_bias && !x.seqlens_k && !x.cu_seqlens_q && !x.cu_seqlens_k && !x.doc_start && !(x.dropout_p > 0.0f);
}

// ----------------------------------------------------------------------------
// The kernels' extras. The kernels add one tile bias (AttentionExtras::bias, rows of queries x keys) and one key bias
// (key_bias: fp32 per (b, h, key), every query row alike). A call's bias2, a bias without query rows and the key mask
// become those here: the one without rows (and the mask, as -inf) goes into key_bias; two biases with rows are summed
// into one fp32 tile bias (the mma.sync copies run it). On Hopper a bf16 tile bias whose rows are not 16 bytes apart
// (Tk not a multiple of 8: AlphaFold's odd lengths) is copied into rows that are, so that TMA can load it. The dBias
// reductions read the caller's strides, not these.

// dst (Bd, Hd, Td, Tk rows of `row` elements) = a + c (c optional), each read through its broadcast strides; keys past
// Tk get 0. grid (row / 256, Td, Bd * Hd)
static __global__ void bias_dense_kernel(void* dst, bool dst_fp32, AttentionStrides dst_st, int Hd, int Tk, long long row, const void* a,
                                  AttentionStrides a_st, bool a_fp32, const void* c, AttentionStrides c_st, bool c_fp32) {
    const long long j = blockIdx.x * 256LL + threadIdx.x;
    const int i = blockIdx.y, b = blockIdx.z / Hd, h = blockIdx.z % Hd;
    if (j >= row) return;
    auto at = [&](const void* x, const AttentionStrides& st, bool fp32) {
        const long long e = b * st.batch + h * st.head + i * st.row + j;
        return fp32 ? ((const float*)x)[e] : __bfloat162float(((const __nv_bfloat16*)x)[e]);
    };
    const float v = j < Tk ? at(a, a_st, a_fp32) + (c ? at(c, c_st, c_fp32) : 0.0f) : 0.0f;
    const long long o = b * dst_st.batch + h * dst_st.head + i * dst_st.row + j;
    if (dst_fp32) ((float*)dst)[o] = v;
    else ((__nv_bfloat16*)dst)[o] = __float2bfloat16(v);
}
// key_bias (Bk, Hk, rows of key_bias_row(Tk)) = src (a bias without rows; nullptr: 0) and -inf where key_mask is 0
static __global__ void key_bias_kernel(float* kb, int Hk, int Tk, long long row, const void* src, AttentionStrides src_st, bool src_fp32,
                                const uint8_t* mask, long long mask_batch) {
    const long long j = blockIdx.x * 256LL + threadIdx.x;
    const int b = blockIdx.y / Hk, h = blockIdx.y % Hk;
    if (j >= row) return;
    float v = 0.0f;
    if (j < Tk) {
        if (src) {
            const long long e = b * src_st.batch + h * src_st.head + j;
            v = src_fp32 ? ((const float*)src)[e] : __bfloat162float(((const __nv_bfloat16*)src)[e]);
        }
        if (mask && !mask[b * mask_batch + j]) v = -INFINITY;
    }
    kb[(long long)blockIdx.y * row + j] = v;
}
// A call's biases in the kernels' roles: the first without query rows is the key bias, the others tile biases (a
// second one summed into the first); source: 1 for AttentionExtras::bias, 2 for bias2, 0 for none
struct KernelBias { const void* ptr; AttentionStrides st; bool fp32; int source; };
struct KernelBiases { KernelBias keys, rows, rows2; };
inline KernelBiases kernel_biases(const AttentionExtras& x) {
    KernelBiases r{};
    for (KernelBias b : {KernelBias{x.bias, x.bias_st, x.bias_fp32, 1}, KernelBias{x.bias2, x.bias2_st, x.bias2_fp32, 2}}) {
        if (!b.ptr) continue;
        if (b.st.row == 0 && !r.keys.ptr) r.keys = b;
        else if (!r.rows.ptr) r.rows = b;
        else r.rows2 = b;
    }
    return r;
}
inline AttentionExtras attention_kernel_extras(const AttentionExtras& in, int B, int T, int Tk, int NH, cudaStream_t stream) {
    AttentionExtras x = in;
    static void* buf[2] = {nullptr, nullptr};   // the key bias, the tile bias: scratch of the last call (one stream)
    static size_t capacity[2] = {0, 0};
    const KernelBiases kb = kernel_biases(in);
    const KernelBias &keys = kb.keys, &rows = kb.rows, &rows2 = kb.rows2;
    x.bias2 = nullptr;
    if (keys.ptr || x.key_mask) {
        const int Bk = (keys.ptr && keys.st.batch) || (x.key_mask && x.key_mask_batch) ? B : 1, Hk = keys.ptr && keys.st.head ? NH : 1;
        const long long row = key_bias_row(Tk);
        float* d = (float*)grow_device_buffer(buf[0], capacity[0], (size_t)Bk * Hk * row * sizeof(float));
        key_bias_kernel<<<dim3((unsigned)(row / 256), Bk * Hk), 256, 0, stream>>>(d, Hk, Tk, row, keys.ptr, keys.st, keys.fp32,
                                                                                x.key_mask, x.key_mask_batch);
        cudaCheck(cudaGetLastError());
        x.key_bias = d, x.key_bias_batch = Bk > 1 ? Hk * row : 0, x.key_bias_head = Hk > 1 ? row : 0;
        x.key_mask = nullptr;
    }
    x.bias = rows.ptr, x.bias_st = rows.st, x.bias_fp32 = rows.fp32;
    const bool pad_rows = !rows.fp32 && !bias_tma_ready(rows.ptr, rows.st, rows.fp32) && hopper_path_available();
    if (rows.ptr && (rows2.ptr || pad_rows)) {
        // dense rows: the sum of two biases in fp32, or one bf16 bias in rows padded to 8 keys
        const AttentionStrides a = rows.st, c = rows2.ptr ? rows2.st : rows.st;
        const int Bd = a.batch || c.batch ? B : 1, Hd = a.head || c.head ? NH : 1, Td = a.row || c.row ? T : 1;
        const bool fp32 = rows2.ptr != nullptr;
        const long long row = fp32 ? Tk : (Tk + 7) / 8 * 8;
        const AttentionStrides st{Bd > 1 ? Hd * Td * row : 0, Td > 1 ? row : 0, Hd > 1 ? Td * row : 0};
        void* dst = grow_device_buffer(buf[1], capacity[1], (size_t)Bd * Hd * Td * row * (fp32 ? 4 : 2));
        bias_dense_kernel<<<dim3((unsigned)ceil_div(row, 256LL), Td, Bd * Hd), 256, 0, stream>>>(dst, fp32, st, Hd, Tk, row, rows.ptr,
                                                                                           rows.st, rows.fp32, rows2.ptr, rows2.st, rows2.fp32);
        cudaCheck(cudaGetLastError());
        x.bias = dst, x.bias_st = st, x.bias_fp32 = fp32;
    }
    return x;
}
// The Hopper kBias copies always read a tile bias: without one they get a zero one that broadcasts (1 x Tk)
inline AttentionExtras with_zero_tile_bias(AttentionExtras x, int Tk) {
    if (x.bias) return x;
    static void* buf = nullptr;
    static size_t capacity = 0;
    const size_t had = capacity;
    void* zeros = grow_device_buffer(buf, capacity, key_bias_row(Tk) * 2);
    if (capacity != had) cudaCheck(cudaMemset(zeros, 0, capacity));
    x.bias = zeros, x.bias_st = {0, 0, 0}, x.bias_fp32 = false;
    return x;
}
// The bias as a 4-D tensor map (Tk, T, NH, B): boxes of 64 keys x box_rows queries (1 where it broadcasts over
// queries) x 1 x 1, 128-byte swizzle; a dimension that broadcasts (stride 0) has extent 1, read at 0.
inline CUtensorMap bias_tensor_map(const AttentionExtras& x, int B, int T, int Tk, int NH, int box_rows) {
    const AttentionStrides& st = x.bias_st;
    const cuuint64_t dims[4] = {(cuuint64_t)Tk, (cuuint64_t)(st.row ? T : 1), (cuuint64_t)(st.head ? NH : 1), (cuuint64_t)(st.batch ? B : 1)};
    // a dimension of extent 1 is never stepped along: it gets the stride it would have packed after the one before
    const cuuint64_t row = st.row ? st.row * 2 : ((cuuint64_t)Tk * 2 + 15) / 16 * 16;
    const cuuint64_t head = st.head ? st.head * 2 : row * dims[1];
    const cuuint64_t strides[3] = {row, head, st.batch ? (cuuint64_t)st.batch * 2 : head * dims[2]};
    const cuuint32_t box[4] = {64, (cuuint32_t)HopperBiasBoxes(x, box_rows).rows, 1, 1};
    return swizzled_tensor_map(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, x.bias, dims, strides, box);
}

// kCluster 2: pairs of CTAs (thread-block clusters, launched with cudaLaunchKernelEx), as many pairs as fit at once
// kGeneral: any call (non-causal, T != Tk); otherwise causal self-attention only (T = Tk, checked here)
// kBias: a general copy that adds the kernels' tile bias and key bias and gates (attention_hopper_bias_fits says which calls)
// kVarlen: packed sequences (attention_hopper_packed_fits): Q, K, V through tensor maps of all the pack's rows, the items
// from the query-block table
template <int HS, int kNCWG, int kBlockN, int kStages, bool kPingPong, int kCluster = 1, bool kDynamic = false, bool kGeneral = false,
          bool kBias = false, bool kVarlen = false, bool kMods = false, bool kHalf = false>
void launch_attention_forward_hopper_ws(const AttentionForwardParams& p, cudaStream_t stream) {
    using Tile = HopperWsTile<HS, kNCWG, kBlockN, kStages, kBias, kVarlen, kMods, kHalf>;
    constexpr auto kKernel = attention_forward_hopper_ws_kernel<HS, kNCWG, kBlockN, kStages, kPingPong, kCluster, kDynamic, kGeneral, kBias, kVarlen,
                                                                kMods, kHalf>;
    static_assert(!kMods || (kGeneral && !kBias && !kVarlen), "the score modifiers' copies are general, without bias tiles or packs");
    static_assert(!kGeneral || kCluster == 1, "CTA pairs walk the causal diagonal of self-attention");
    if (!kGeneral) attention_check_self_causal(p);
    constexpr int kSmemBytes = Tile::kSmemBytes + (kDynamic ? Tile::kDynamicBytes : 0);
    static_assert(kSmemBytes <= 227 * 1024, "shared memory");
    HopperForwardMaps<kBias, kVarlen> maps;
    if constexpr (kVarlen) {
        maps.q = packed_tensor_map(p.q, p.q_st, p.x.total_q, p.NH, p.HS, Tile::kBlockM);
        maps.k = packed_tensor_map(p.k, p.k_st, p.x.total_k, p.NH_kv, p.HS, kBlockN);
        maps.v = packed_tensor_map(p.v, p.v_st, p.x.total_k, p.NH_kv, p.HS, kBlockN);
        maps.packed = packed_blocks_tables(p.x, p.B, p.T, p.Tk, Tile::kBlockM, 0, stream).queries;
    } else {
        maps.q = attention_tensor_map(p.q, p.q_st, p.B, p.T, p.NH, p.HS, Tile::kBlockM);
        maps.k = attention_tensor_map(p.k, p.k_st, p.B, p.Tk, p.NH_kv, p.HS, kBlockN);
        maps.v = attention_tensor_map(p.v, p.v_st, p.B, p.Tk, p.NH_kv, p.HS, kBlockN);
    }
    if constexpr (kBias) maps.bias = bias_tensor_map(p.x, p.B, p.T, p.Tk, p.NH, Tile::kBlockM);
    const int num_m_blocks = ceil_div(p.T, Tile::kBlockM), section_heads = persistent_section_heads(p.B * p.NH, p.Tk, HS);
    if constexpr (kCluster == 1) {
        const int num_items = p.B * p.NH * num_m_blocks;
        launch_with_smem<kKernel>(dim3(std::min(num_items, device_props().multiProcessorCount)), Tile::kThreads,
                                  kSmemBytes, stream, p, maps, section_heads);
    } else {
        if (num_m_blocks % kCluster != 0) {
            fprintf(stderr, "attention: the clustered forward needs a multiple of %d query blocks of %d rows (T = %d)\n",
                    kCluster, Tile::kBlockM, p.T);
            exit(EXIT_FAILURE);
        }
        const int num_items = p.B * p.NH * num_m_blocks / kCluster;
        launch_persistent_clusters<kKernel, kCluster>(num_items, Tile::kThreads, kSmemBytes, stream, p, maps, section_heads);
    }
}

// ----------------------------------------------------------------------------
// decoding (flash-decoding): a few new query rows against a long KV cache
//
// The forward kernels give each (query block, head) one CTA that walks every key: with T = 1 that is B * NH CTAs of
// one row each, too few to stream a long cache at full bandwidth. Here one CTA takes (split, b, key/value head, chunk):
// 16 of the R = T * NH / NH_kv query rows that read this key/value head (with GQA the group's heads share every K/V
// byte read; row r is head h_kv * group + r / T, token r % T), against one split of the keys. Its 4 warps take 16 keys
// each of every 64-key stage of a 3-deep cp.async ring and keep their own online softmax; at the end the CTA merges its
// warps. With one split it writes O and LSE itself; otherwise each split leaves (O / l, LSE) in fp32 scratch, and the
// last split of a (b, key/value head, chunk) to finish (a counter each) combines them, each weighted by
// exp(LSE_split - LSE): no second kernel, whose launch and ramp cost more than the combine itself.
// The cache is FlashAttention's (AttentionKVCache): per-sequence lengths and left padding, rows picked by batch_idx or
// pages by a block table (an address per key row, so any page size), and the new tokens' keys and values appended in
// place: the split whose keys hold a new position writes it (chunk 0's CTA, K rotated), and every CTA that reads it
// takes it from k_new / v_new (rotated the same way), as the cache's copy may not be written yet. The band (causal,
// window, leftpad, lengths) bounds each chunk's keys; softcap and ALiBi change the scores where given; the queries may
// be packed (FlashAttention's varlen over a paged cache).
constexpr int kDecodeRows = 16, kDecodeWarps = 4, kDecodeKeys = 64, kDecodeStages = 3;

template <int HS>
struct DecodeTile {
    static constexpr int kThreads = 32 * kDecodeWarps;
    static constexpr int kQBytes = kDecodeRows * HS * 2;
    static constexpr int kStageBytes = 2 * kDecodeKeys * HS * 2;   // K then V, swizzle<HS>
    static constexpr int kSmemBytes = kQBytes + kDecodeStages * kStageBytes;
    // the warps' (row max, row sum, O) for the merge overlay the ring once the walk is done
    static constexpr int kMergeFloats = kDecodeRows * (HS + 2);
    static_assert(kDecodeWarps * kMergeFloats * 4 <= kDecodeStages * kStageBytes, "the warps' partials fit in the ring");
    // the combining split keeps every split's weight of its rows in the ring too
    static constexpr int kMaxSplits = (kDecodeStages * kStageBytes / 4 - kDecodeRows) / kDecodeRows;
};

// the splits' partials: lse [split][row], o [split][row][HS] (row = (b * NH + h) * T + t), fp32; done: per
// (b, key/value head, chunk), the splits finished so far (zero between launches: the last split resets it)
struct DecodePartials { float* lse; float* o; int* done; };

// 8 elements (16 bytes, dims 8 ch ..) of a 16-bit row with the rotary embedding at position pos applied to the dims
// below kv.rotary_dim, in fp32 and rounded back (FlashAttention's rotary: x cos - y sin, y cos + x sin over each pair)
// (not inlined, its arguments by value: the decode kernel calls it off its hot path, where an inlined copy would take
// registers its main loop needs)
template <bool kHalf>
__device__ __noinline__ uint4 rotary_chunk(const floatX* row, int ch, int pos, const floatX* rotary_cos, const floatX* rotary_sin,
                                           int rotary_dim, bool interleaved) {
    uint4 x = *reinterpret_cast<const uint4*>(row + ch * 8);
    const int d0 = ch * 8, half = rotary_dim / 2;
    if (d0 >= rotary_dim) return x;
    const floatX* cos_row = rotary_cos + (size_t)pos * half;
    const floatX* sin_row = rotary_sin + (size_t)pos * half;
    uint32_t* xw = &x.x;
    if (interleaved) {   // pairs (2i, 2i + 1) of the chunk, angles d0 / 2 .. d0 / 2 + 3
        const uint2 c = *reinterpret_cast<const uint2*>(cos_row + d0 / 2), s = *reinterpret_cast<const uint2*>(sin_row + d0 / 2);
        const uint32_t cw[2] = {c.x, c.y}, sw[2] = {s.x, s.y};
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            const float2 v = unpack_x2<kHalf>(xw[i]);
            const float cs = i % 2 ? unpack_x2<kHalf>(cw[i / 2]).y : unpack_x2<kHalf>(cw[i / 2]).x;
            const float sn = i % 2 ? unpack_x2<kHalf>(sw[i / 2]).y : unpack_x2<kHalf>(sw[i / 2]).x;
            xw[i] = pack_x2<kHalf>(v.x * cs - v.y * sn, v.x * sn + v.y * cs);
        }
    } else {   // dim d pairs with d + half: the partner chunk, angles of the lower dims
        const bool low = d0 < half;
        const int angle0 = low ? d0 : d0 - half;
        uint4 y = *reinterpret_cast<const uint4*>(row + (low ? d0 + half : d0 - half));
        const uint4 c = *reinterpret_cast<const uint4*>(cos_row + angle0), s = *reinterpret_cast<const uint4*>(sin_row + angle0);
        const uint32_t* yw = &y.x;
        const uint32_t* cw = &c.x;
        const uint32_t* sw = &s.x;
        const float sign = low ? -1.0f : 1.0f;
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            const float2 v = unpack_x2<kHalf>(xw[i]), w = unpack_x2<kHalf>(yw[i]);
            const float2 cs = unpack_x2<kHalf>(cw[i]), sn = unpack_x2<kHalf>(sw[i]);
            xw[i] = pack_x2<kHalf>(v.x * cs.x + sign * w.x * sn.x, v.y * cs.y + sign * w.y * sn.y);
        }
    }
    return x;
}

// the CTAs an SM holds by their shared memory, which their registers must allow too: HS 32 8 (6 with kCache, whose
// extra registers would spill at 8), HS 64 4; larger head dims' shared memory allows fewer than their registers
template <int HS, bool kCache> constexpr int kDecodeMinBlocks = HS == 32 ? (kCache ? 6 : 8) : HS == 64 ? 4 : 1;

// kCache: FlashAttention's cache (pages, batch_idx, leftpad, the append and rotary, the window, softcap and ALiBi);
// without it a contiguous cache of per-sequence lengths (GPT-2's generation, attention_forward's decoding), whose
// kernels keep the registers that leave room for more CTAs an SM
template <int HS, bool kHalf, bool kCache>
__global__ void __launch_bounds__(32 * kDecodeWarps, kDecodeMinBlocks<HS, kCache>)
attention_decode_kernel(const AttentionForwardParams p, const AttentionKVCache kv, int split_keys, DecodePartials part) {
    using Tile = DecodeTile<HS>;
    constexpr int kKS = HS / 16, kDT = HS / 8, kChunks = HS / 8;
    extern __shared__ __align__(1024) uint8_t smem[];
    uint8_t* q_smem = smem;                   // (16, HS): the chunk's rows, zeros below
    uint8_t* ring = smem + Tile::kQBytes;     // [stage][K, V] (64, HS)
    const int split = blockIdx.x, num_splits = gridDim.x;
    const int b = blockIdx.y / p.NH_kv, h_kv = blockIdx.y % p.NH_kv;
    const int group = p.NH / p.NH_kv, T = p.T, R = group * T;
    const int r0 = blockIdx.z * kDecodeRows, rows_here = min(R - r0, kDecodeRows);   // this CTA's rows r0 ..
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    if (kCache && kv.block_table && threadIdx.x == 0) {
        // the page table's entries of the split's first keys into L1 while the lengths load: the first K/V addresses
        // then wait on one memory round trip, not two (a split of few stages would feel the second)
        asm volatile("prefetch.global.L1 [%0];" :: "l"(kv.block_table + b * kv.block_table_batch + split * split_keys / kv.page_size));
    }
    const int head_chunks = p.HS / 8;          // the head dim's chunks; those past it load as zeros
    const int cached = (kv.seqlens ? kv.seqlens[b] : kv.seqlen) - (kCache && kv.seqlens_count_new ? kv.T_new : 0);
    const int keys = kCache ? cached + kv.T_new : cached;   // sequence b's positions, the new tokens' included
    const int key_first = kCache && kv.leftpad ? kv.leftpad[b] : 0;
    // packed queries (p.x.cu_seqlens_q, FlashAttention's varlen over a paged cache): sequence b's T_b rows from row q0
    // of q and out; T (the grid's) is the longest, and the rows t >= T_b see no key and write nothing
    const int* cu_q = kCache ? p.x.cu_seqlens_q : nullptr;
    const int q0 = cu_q ? cu_q[b] : 0, T_b = cu_q ? cu_q[b + 1] - q0 : T;
    const KeyBand band = attention_band(p.x, p.causal, T_b, keys);
    // the keys the chunk's rows see, within this split: tokens t_lo .. t_hi (all, where the chunk wraps round a head)
    const bool one_head = r0 / T == (r0 + rows_here - 1) / T;
    const int t_lo = one_head ? r0 % T : 0, t_hi_grid = one_head ? (r0 + rows_here - 1) % T : T - 1;
    const int t_hi = cu_q ? min(t_hi_grid, T_b - 1) : t_hi_grid;
    const int split_begin = split * split_keys, split_end = min(split_begin + split_keys, p.Tk);
    const int key_begin = max(max(split_begin, key_first), t_lo + band.lo);
    const int key_end = cu_q && t_hi < t_lo ? key_begin : min(min(split_end, keys), t_hi + band.hi + 1);
    const int stages = key_end > key_begin ? ceil_div(key_end - key_begin, kDecodeKeys) : 0;

    // where position j of this (sequence, key/value head) lives in the caches: k_gl + k_offset(j) (v likewise)
    const int* pages = kCache && kv.block_table ? kv.block_table + b * kv.block_table_batch : nullptr;
    const long long cache_row0 = pages ? 0 : (long long)(kCache && kv.batch_idx ? kv.batch_idx[b] : b);
    const floatX* k_gl = p.k + cache_row0 * p.k_st.batch + h_kv * p.k_st.head;
    const floatX* v_gl = p.v + cache_row0 * p.v_st.batch + h_kv * p.v_st.head;
    // a page size that is a power of two (FlashAttention's and vLLM's usual ones) divides by a shift
    const bool page_pow2 = (kv.page_size & (kv.page_size - 1)) == 0;
    const int page_shift = __ffs(kv.page_size) - 1;
    auto cache_offsets = [&](int j, size_t& k_off, size_t& v_off) {
        if (pages) {
            const int page_index = page_pow2 ? j >> page_shift : j / kv.page_size;
            const size_t page = pages[page_index], row = j - page_index * kv.page_size;
            k_off = page * p.k_st.batch + row * p.k_st.row;
            v_off = page * p.v_st.batch + row * p.v_st.row;
        } else {
            k_off = (size_t)j * p.k_st.row;
            v_off = (size_t)j * p.v_st.row;
        }
    };
    const floatX* k_new = kv.k_new + b * kv.k_new_st.batch + h_kv * kv.k_new_st.head;   // used only with kv.k_new
    const floatX* v_new = kv.v_new + b * kv.v_new_st.batch + h_kv * kv.v_new_st.head;
    auto new_key_chunk = [&](int j, int ch) {   // position j >= cached: the new token's key, rotated at j
        const floatX* row = k_new + (j - cached) * kv.k_new_st.row;
        return kv.rotary_dim ? rotary_chunk<kHalf>(row, ch, j, kv.rotary_cos, kv.rotary_sin, kv.rotary_dim, kv.rotary_interleaved)
                             : *reinterpret_cast<const uint4*>(row + ch * 8);
    };
    auto new_value_chunk = [&](int j, int ch) { return *reinterpret_cast<const uint4*>(v_new + (j - cached) * kv.v_new_st.row + ch * 8); };

    // the append: chunk 0's CTA of the split holding a new position writes it into the caches
    if (kCache && kv.k_new && blockIdx.z == 0) {
        floatX* k_cache = const_cast<floatX*>(k_gl);   // the caller's caches, writable with an append (AttentionKVCache)
        floatX* v_cache = const_cast<floatX*>(v_gl);
        const int j0 = max(split_begin, cached), j1 = min(split_end, keys);
        for (int c = threadIdx.x; c < (j1 - j0) * head_chunks; c += Tile::kThreads) {
            const int j = j0 + c / head_chunks, ch = c % head_chunks;
            size_t k_off, v_off;
            cache_offsets(j, k_off, v_off);
            *reinterpret_cast<uint4*>(k_cache + k_off + ch * 8) = new_key_chunk(j, ch);
            *reinterpret_cast<uint4*>(v_cache + v_off + ch * 8) = new_value_chunk(j, ch);
        }
    }

    for (int c = threadIdx.x; c < kDecodeRows * kChunks; c += Tile::kThreads) {   // Q, rotated where asked
        const int i = c / kChunks, ch = c % kChunks, r = r0 + i;
        const int t = r % T;
        const bool valid = i < rows_here && ch < head_chunks && (!cu_q || t < T_b);
        const floatX* src = p.q + b * p.q_st.batch + (valid ? (q0 + t) * p.q_st.row + (h_kv * group + r / T) * p.q_st.head : 0) + ch * 8;
        const uint32_t dst = smem_addr(q_smem + swizzle<HS>(i, ch));
        if (kCache && kv.rotary_dim && valid)
            st_shared_16(dst, rotary_chunk<kHalf>(src - ch * 8, ch, kv.rotary_per_token ? cached + t : cached, kv.rotary_cos, kv.rotary_sin,
                                                  kv.rotary_dim, kv.rotary_interleaved));
        else cp_async_16(dst, src, valid);
    }
    auto load_stage = [&](int s) {   // keys key_begin + 64 s .. + 63 (zeros from key_end on) into slot s % kDecodeStages
        uint8_t* k_slot = ring + (s % kDecodeStages) * Tile::kStageBytes;
        uint8_t* v_slot = k_slot + kDecodeKeys * HS * 2;
        const int row0 = key_begin + s * kDecodeKeys;
        const bool new_rows = kCache && row0 + kDecodeKeys > cached && key_end > cached;   // any of the new tokens' keys
        for (int c = threadIdx.x; c < kDecodeKeys * kChunks; c += Tile::kThreads) {
            const int i = c / kChunks, ch = c % kChunks, j = row0 + i;
            const bool valid = j < key_end && ch < head_chunks;
            const uint32_t k_dst = smem_addr(k_slot + swizzle<HS>(i, ch)), v_dst = smem_addr(v_slot + swizzle<HS>(i, ch));
            if (new_rows && valid && j >= cached) {   // a new token's: from k_new / v_new (the cache's copy may not be written yet)
                st_shared_16(k_dst, new_key_chunk(j, ch));
                st_shared_16(v_dst, new_value_chunk(j, ch));
                continue;
            }
            size_t k_off = 0, v_off = 0;
            if (valid) cache_offsets(j, k_off, v_off);
            cp_async_16(k_dst, k_gl + k_off + ch * 8, valid);
            cp_async_16(v_dst, v_gl + v_off + ch * 8, valid);
        }
    };
    #pragma unroll
    for (int s = 0; s < kDecodeStages - 1; s++) {   // one commit group per stage, empty past the end (Q joins the first)
        if (s < stages) load_stage(s);
        cp_async_commit();
    }

    // this thread's rows g, g + 8: the keys each sees (first_key > last_key: a padding row), its ALiBi slope (/ scale)
    // and diagonal (the ALiBi distance to key j is diag - j)
    int first_key[2], last_key[2];
    float slope[2] = {0.0f, 0.0f}, diag[2] = {0.0f, 0.0f};
    #pragma unroll
    for (int half = 0; half < 2; half++) {
        const int i = g + 8 * half, r = r0 + i, t = r % T;
        first_key[half] = kCache ? max(key_first, t + band.lo) : 0;
        last_key[half] = i >= rows_here || (cu_q && t >= T_b) ? -1 : min(min(keys - 1, t + band.hi), key_end - 1);
        if (kCache && p.x.alibi_slopes && i < rows_here) slope[half] = p.x.alibi_slopes[b * p.x.alibi_batch + h_kv * group + r / T] * p.x.inv_scale;
        diag[half] = (float)(t + keys - T_b);
    }
    const bool score_mods = kCache && attention_has_score_mods(p.x);
    const float scale_log2 = p.scale * kLog2e;
    uint32_t q_frag[kKS][4];
    float o_acc[kDT][4];
    float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0.0f, 0.0f};
    #pragma unroll
    for (int dt = 0; dt < kDT; dt++) o_acc[dt][0] = o_acc[dt][1] = o_acc[dt][2] = o_acc[dt][3] = 0.0f;

    for (int s = 0; s < stages; s++) {
        if (s + kDecodeStages - 1 < stages) load_stage(s + kDecodeStages - 1);
        cp_async_commit();
        cp_async_wait<kDecodeStages - 1>();
        __syncthreads();   // stage s (and Q) visible to every warp
        if (s == 0) {
            #pragma unroll
            for (int ks = 0; ks < kKS; ks++)
                ldmatrix_x4(q_frag[ks], smem_addr(q_smem + swizzle<HS>(lane % 8 + 8 * ((lane / 8) % 2), 2 * ks + lane / 16)));
        }
        // this warp's 16 keys: rows 16 warp .. of the stage's tiles (a multiple of 8 rows keeps the swizzle phase)
        const uint8_t* k_s = ring + (s % kDecodeStages) * Tile::kStageBytes + warp * 16 * HS * 2;
        const uint8_t* v_s = k_s + kDecodeKeys * HS * 2;
        const int key0 = key_begin + s * kDecodeKeys + warp * 16;
        float sc[2][4] = {};
        #pragma unroll
        for (int ks = 0; ks < kKS; ks++) {
            uint32_t kb[4];
            ldmatrix_x4(kb, smem_addr(k_s + swizzle<HS>(lane % 8 + 8 * (lane / 16), 2 * ks + (lane / 8) % 2)));
            mma_16816<kHalf>(sc[0], q_frag[ks], kb[0], kb[1]);
            mma_16816<kHalf>(sc[1], q_frag[ks], kb[2], kb[3]);
        }
        #pragma unroll
        for (int half = 0; half < 2; half++) {
            float mx = row_max[half];
            #pragma unroll
            for (int nt = 0; nt < 2; nt++)
                #pragma unroll
                for (int e = 2 * half; e < 2 * half + 2; e++) {
                    const int key = key0 + nt * 8 + 2 * tq + (e % 2);
                    if (score_mods) {   // softcap, then ALiBi (ScoreMods' order and units)
                        if (p.x.softcap_in != 0.0f) sc[nt][e] = p.x.softcap_out * fast_tanh(sc[nt][e] * p.x.softcap_in);
                        sc[nt][e] -= slope[half] * fabsf(diag[half] - (float)key);
                    }
                    if (key > last_key[half] || (kCache && key < first_key[half])) sc[nt][e] = -INFINITY;
                    mx = fmaxf(mx, sc[nt][e]);
                }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
            const float m_scaled = mx == -INFINITY ? 0.0f : mx * scale_log2;   // as the forward: no -inf - -inf
            const float alpha = fast_exp2(row_max[half] * scale_log2 - m_scaled);
            row_max[half] = mx;
            float sum = 0.0f;
            #pragma unroll
            for (int nt = 0; nt < 2; nt++)
                #pragma unroll
                for (int e = 2 * half; e < 2 * half + 2; e++) { sc[nt][e] = fast_exp2(sc[nt][e] * scale_log2 - m_scaled); sum += sc[nt][e]; }
            row_sum[half] = row_sum[half] * alpha + sum;
            #pragma unroll
            for (int dt = 0; dt < kDT; dt++) { o_acc[dt][2 * half] *= alpha; o_acc[dt][2 * half + 1] *= alpha; }
        }
        uint32_t pa[4];   // P (16 rows x the warp's 16 keys) in 16 bits: the A fragment of O += P V
        accum_tiles_to_a_frag<kHalf>(pa, sc[0], sc[1]);
        #pragma unroll
        for (int dp = 0; dp < kDT / 2; dp++) {
            uint32_t vb[4];
            ldmatrix_x4_trans(vb, smem_addr(v_s + swizzle<HS>(lane % 8 + 8 * ((lane / 8) % 2), 2 * dp + lane / 16)));
            mma_16816<kHalf>(o_acc[2 * dp], pa, vb[0], vb[1]);
            mma_16816<kHalf>(o_acc[2 * dp + 1], pa, vb[2], vb[3]);
        }
        __syncthreads();   // every warp is done with the slot before it is refilled
    }
    cp_async_wait<0>();
    __syncthreads();

    // merge the warps: each leaves its rows' max (scaled), sum and unnormalised O in the ring
    float* merge = reinterpret_cast<float*>(ring);
    float* mine = merge + warp * Tile::kMergeFloats;   // [16] max, [16] sum, [16][HS] O
    #pragma unroll
    for (int half = 0; half < 2; half++) {
        float l = row_sum[half];
        l += __shfl_xor_sync(0xffffffff, l, 1);
        l += __shfl_xor_sync(0xffffffff, l, 2);
        const int i = g + 8 * half;
        if (tq == 0) { mine[i] = row_max[half] == -INFINITY ? -INFINITY : row_max[half] * scale_log2; mine[16 + i] = l; }
        #pragma unroll
        for (int dt = 0; dt < kDT; dt++)
            *reinterpret_cast<float2*>(mine + 32 + i * HS + dt * 8 + 2 * tq) = make_float2(o_acc[dt][2 * half], o_acc[dt][2 * half + 1]);
    }
    __syncthreads();
    const size_t rows = (size_t)gridDim.y * R;   // B * NH * T
    for (int c = threadIdx.x; c < rows_here * (HS / 4); c += Tile::kThreads) {
        const int i = c / (HS / 4), col = (c % (HS / 4)) * 4;
        float m = -INFINITY;
        #pragma unroll
        for (int w = 0; w < kDecodeWarps; w++) m = fmaxf(m, merge[w * Tile::kMergeFloats + i]);
        float l = 0.0f;
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (m != -INFINITY) {
            #pragma unroll
            for (int w = 0; w < kDecodeWarps; w++) {
                const float* wm = merge + w * Tile::kMergeFloats;
                const float f = fast_exp2(wm[i] - m);   // 0 for a warp that saw no key of this row
                const float4 x = *reinterpret_cast<const float4*>(wm + 32 + i * HS + col);
                l += f * wm[16 + i];
                acc.x += f * x.x; acc.y += f * x.y; acc.z += f * x.z; acc.w += f * x.w;
            }
        }
        const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
        const float lse = l > 0.0f ? (m + __log2f(l)) / kLog2e : -INFINITY;   // natural log
        const int r = r0 + i, h = h_kv * group + r / T, t = r % T;
        const size_t row = ((size_t)b * p.NH + h) * T + t;
        if (num_splits == 1) {
            if (cu_q && t >= T_b) continue;
            if (col < p.HS) {
                floatX* dst = p.out + b * p.o_st.batch + (q0 + t) * p.o_st.row + h * p.o_st.head + col;
                *reinterpret_cast<uint2*>(dst) = make_uint2(pack_x2<kHalf>(acc.x * inv_l, acc.y * inv_l), pack_x2<kHalf>(acc.z * inv_l, acc.w * inv_l));
            }
            if (p.lse && col == 0) p.lse[row] = lse;
        } else {
            *reinterpret_cast<float4*>(part.o + (split * rows + row) * HS + col) =
                make_float4(acc.x * inv_l, acc.y * inv_l, acc.z * inv_l, acc.w * inv_l);
            if (col == 0) part.lse[split * rows + row] = lse;
        }
    }
    if (num_splits == 1) return;

    // the last split of this (b, key/value head, chunk) combines: O = sum_s exp(lse_s - lse) O_s, lse = log sum_s exp(lse_s)
    __shared__ int is_last;
    const int counter = blockIdx.z * gridDim.y + blockIdx.y;
    __threadfence();   // this split's partials are visible device-wide before it is counted
    __syncthreads();
    if (threadIdx.x == 0) {
        const int finished = atomicAdd(&part.done[counter], 1);
        is_last = finished == num_splits - 1;
        if (is_last) part.done[counter] = 0;   // every split of this launch has counted: ready for the next
    }
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    // each row's split weights exp(lse_s - lse) into the ring (its merge is done): a warp a row, its lanes over the splits
    float* w = merge;                                    // [split][16]
    float* row_lse = merge + num_splits * kDecodeRows;   // [16]: the combined lse, or -inf
    for (int i = warp; i < rows_here; i += kDecodeWarps) {
        const int r = r0 + i;
        const size_t row = ((size_t)b * p.NH + h_kv * group + r / T) * T + r % T;
        float m = -INFINITY;
        for (int s = lane; s < num_splits; s += 32) {
            const float x = __ldcg(part.lse + s * rows + row);   // from L2: other SMs wrote it
            w[s * kDecodeRows + i] = x;
            m = fmaxf(m, x);
        }
        #pragma unroll
        for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, o));
        float sum = 0.0f;
        for (int s = lane; s < num_splits; s += 32) {
            const float e = m == -INFINITY ? 0.0f : expf(w[s * kDecodeRows + i] - m);
            w[s * kDecodeRows + i] = e;
            sum += e;
        }
        #pragma unroll
        for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffff, sum, o);
        const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        for (int s = lane; s < num_splits; s += 32) w[s * kDecodeRows + i] *= inv;
        if (lane == 0) row_lse[i] = sum > 0.0f ? m + logf(sum) : -INFINITY;
    }
    __syncthreads();
    for (int c = threadIdx.x; c < rows_here * (HS / 4); c += Tile::kThreads) {
        const int i = c / (HS / 4), col = (c % (HS / 4)) * 4;
        const int r = r0 + i, h = h_kv * group + r / T, t = r % T;
        const size_t row = ((size_t)b * p.NH + h) * T + t;
        if (cu_q && t >= T_b) continue;
        if (p.lse && col == 0) p.lse[row] = row_lse[i];
        if (col >= p.HS) continue;
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        #pragma unroll 16
        for (int s = 0; s < num_splits; s++) {
            const float ws = w[s * kDecodeRows + i];
            const float4 x = __ldcg(reinterpret_cast<const float4*>(part.o + (s * rows + row) * HS + col));
            acc.x += ws * x.x; acc.y += ws * x.y; acc.z += ws * x.z; acc.w += ws * x.w;
        }
        floatX* dst = p.out + b * p.o_st.batch + (q0 + t) * p.o_st.row + h * p.o_st.head + col;
        *reinterpret_cast<uint2*>(dst) = make_uint2(pack_x2<kHalf>(acc.x, acc.y), pack_x2<kHalf>(acc.z, acc.w));
    }
}

// attention_forward runs the decode kernels where the R = T * NH / NH_kv rows that share a key/value head fit one m16
// tile, and the keys are many enough that splitting them pays
inline bool attention_decode_applies(const AttentionForwardParams& p) {
    return (long long)p.T * (p.NH / p.NH_kv) <= kDecodeRows && p.Tk >= 2 * kDecodeKeys && (long long)p.B * p.NH_kv <= 65535 &&
           !p.x.bias && !p.x.cu_seqlens_q && !p.x.cu_seqlens_k && !p.x.gate && !p.x.doc_start && !p.x.bias2 && !p.x.key_mask &&
           !p.x.key_bias && !(p.x.dropout_p > 0.0f) && p.HS >= 32;
}

// fp32 scratch for the splits' partials, grown as needed, and the zeroed split counters (the decode call owns them; one
// stream at a time)
inline void* attention_decode_scratch(size_t bytes) {
    static void* buf = nullptr;
    static size_t capacity = 0;
    return grow_device_buffer(buf, capacity, bytes);
}
inline int* attention_decode_counters(int n) {
    static void* buf = nullptr;
    static size_t capacity = 0;
    const size_t had = capacity;
    int* counters = (int*)grow_device_buffer(buf, capacity, n * sizeof(int));
    if (capacity != had) cudaCheck(cudaMemset(counters, 0, capacity));
    return counters;
}

// p.x carries the score modifiers' kernel constants (attention_with_score_constants)
template <int HS, bool kHalf, bool kCache>
void launch_attention_decode(const AttentionForwardParams& p, const AttentionKVCache& kv, cudaStream_t stream) {
    using Tile = DecodeTile<HS>;
    constexpr auto kKernel = attention_decode_kernel<HS, kHalf, kCache>;
    // splits: the count whose CTAs (work items * splits) fill the GPU's CTA slots best (the last wave of a memory-bound
    // grid that is partly empty streams at part of the bandwidth), the fewest among equals (each split adds a partial
    // to combine). Each split streams at least 16 stages of keys (a shorter one spends much of its time filling its
    // ring), or 4 where 16 leave most slots empty. kv.num_splits caps them.
    const int chunks = ceil_div(p.T * (p.NH / p.NH_kv), kDecodeRows);
    const long items = (long)p.B * p.NH_kv * chunks;
    static int per_sm = 0;   // CTAs an SM holds (registers and shared memory)
    if (!per_sm) {
        cudaCheck(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes));
        cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kKernel, Tile::kThreads, Tile::kSmemBytes));
        per_sm = std::max(per_sm, 1);
    }
    const long slots = (long)per_sm * device_props().multiProcessorCount;
    const int most_splits = std::min(ceil_div(p.Tk, kDecodeKeys), Tile::kMaxSplits);
    auto best_splits = [&](int min_stages, double* fill_out) {
        const int max_splits = std::max(1, std::min(ceil_div(p.Tk, min_stages * kDecodeKeys), most_splits));
        int best_s = 1;
        double best = 0.0;
        for (int s = 1; s <= max_splits; s++) {
            const long ctas = items * s;
            const double fill = (double)ctas / (double)(ceil_div(ctas, slots) * slots);
            if (fill > best * 1.02) { best = fill; best_s = s; }
            if (ctas >= 4 * slots) break;   // past a few waves the fill only creeps up
        }
        *fill_out = best;
        return best_s;
    };
    double fill = 0.0;
    int splits = best_splits(16, &fill);
    if (fill < 0.5) splits = best_splits(4, &fill);
    if (kv.num_splits > 0) splits = std::max(1, std::min(kv.num_splits, most_splits));
    const int split_keys = ceil_div(ceil_div(p.Tk, splits), kDecodeKeys) * kDecodeKeys;
    splits = ceil_div(p.Tk, split_keys);
    DecodePartials part{nullptr, nullptr, nullptr};
    if (splits > 1) {
        const size_t rows = (size_t)p.B * p.NH * p.T;
        float* buf = (float*)attention_decode_scratch(splits * rows * (HS + 1) * sizeof(float));
        part = {buf, buf + splits * rows, attention_decode_counters((int)items)};
    }
    launch_with_smem<kKernel>(dim3(splits, p.B * p.NH_kv, chunks), Tile::kThreads, Tile::kSmemBytes, stream, p, kv, split_keys, part);
}

// a refused call in a program that cannot take the reason back (the C interface checks first and returns it)
inline void attention_exit_unsupported(const char* what, int B, int T, int Tk, int NH, int NH_kv, int HS, const char* why) {
    fprintf(stderr, "attention %s: unsupported call B=%d T=%d Tk=%d NH=%d NH_kv=%d HS=%d: %s\n", what, B, T, Tk, NH, NH_kv, HS, why);
    exit(EXIT_FAILURE);
}

// the forward runs on wgmma wherever the binary carries sm_90a code for this GPU (every head dim)
inline bool attention_forward_uses_hopper(int /*HS*/) { return hopper_path_available(); }

// ----------------------------------------------------------------------------
// The shipped launchers the dev harnesses also run (dev/cuda/attention_forward's variants 3 and 5 at src's tiles, bf16):
// compiled once, by src/attention_forward.cu's bf16 object, and linked from build/attention.a by every other file that
// includes this header, which then does not compile their kernels again. X(parameter list, launcher).
#define ATTENTION_FORWARD_SHARED_LAUNCHERS(X) \
    X((const AttentionForwardParams&, cudaStream_t), launch_attention_forward<64, 2, 4, 64>) \
    X((const AttentionForwardParams&, cudaStream_t), launch_attention_forward<128, 2, 4, 48>) \
    X((const AttentionForwardParams&, cudaStream_t), launch_attention_forward_hopper_ws<64, 3, 128, 3, true>) \
    X((const AttentionForwardParams&, cudaStream_t), launch_attention_forward_hopper_ws<64, 2, 128, 3, true>) \
    X((const AttentionForwardParams&, cudaStream_t), launch_attention_forward_hopper_ws<128, 2, 128, 2, true>) \
    X((const AttentionForwardParams&, cudaStream_t), launch_attention_forward_hopper_ws<128, 2, 128, 2, true, 2>)
#define ATTENTION_EXTERN_LAUNCHER(params, ...) extern template void __VA_ARGS__ params;
#define ATTENTION_LAUNCHER_INSTANCE(params, ...) template void __VA_ARGS__ params;
ATTENTION_FORWARD_SHARED_LAUNCHERS(ATTENTION_EXTERN_LAUNCHER)
