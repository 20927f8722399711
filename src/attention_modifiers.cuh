/*
flashgpt attention, the modifiers: what a general kernel applies to a tile of scores besides the product Q K^T, each a
small piece of code the kernels compose (FlexAttention's mask_mod / score_mod idea, as compile-time or tile-uniform
choices instead of kernel copies per feature).

  mask modifiers   which (query, key) pairs are visible and which whole tiles are skipped: the band (KeyBand: the
                   causal diagonal, the sliding window's two sides, bottom-right aligned per sequence) with the tile
                   ranges it gives the walks (attention_first_key_block, attention_query_blocks); the key count per
                   sequence (key lengths, packed sequences: SequenceSpan in the kernels); document masking (a per-row
                   first key); the window's left side as -inf scores on the tiles that reach past it
  score modifiers  change a visible score, with their gradient in the backward: ScoreMods (softcap, ALiBi) on the
                   Hopper kernels' kMods copies and the mma.sync general copies; the additive biases (tile and key
                   biases, in the kernel headers beside their loads)
  dropout          which probabilities are kept: Philox keep bits laid out for the mma.sync layouts of S and S^T
                   (Dropout, dropout_keep_bits), on the mma.sync kExtras copies

A new mask modifier narrows the band or masks elements on the tiles that cross it; a new score modifier adds a term to
ScoreMods::apply and its derivative to ScoreMods::grad, plus its dispatch entry (the kMods copies). Included by
src/attention_forward.cuh (and so by src/attention_backward.cuh); src/attention.cuh holds the parameters
(AttentionExtras).
*/
#pragma once
#include "attention.cuh"
#include "ptx.cuh"

// ----------------------------------------------------------------------------
// mask modifiers: the band

// The keys a query sees (the mask modifiers causal, window and the sequence's key count): query i of a sequence with
// T queries and Tk keys sees keys j with i + lo <= j <= i + hi and 0 <= j < Tk. Unbounded sides are +-kBandFar, so
// that i + lo and i + hi never overflow (T is below 2^22 and Tk below 2^30: attention_unsupported_reason).
constexpr int kBandFar = 1 << 30;
struct KeyBand { int lo, hi; };
__host__ __device__ inline KeyBand attention_band(const AttentionExtras& x, bool causal, int T, int Tk) {
    // a side at least as wide as the sequence bounds nothing: unbounded (exact, and keeps the sums small)
    const int right = causal ? 0 : x.window && x.window_right >= 0 && x.window_right < T ? x.window_right : -1;
    const int left = x.window && x.window_left >= 0 && x.window_left < Tk ? x.window_left : -1;
    return {left < 0 ? -kBandFar : Tk - T - left, right < 0 ? kBandFar : Tk - T + right};
}
// the first key tile of kBlockN keys a query block from first_row sees (0 without a left bound)
__host__ __device__ inline int attention_first_key_block(int first_row, int lo, int kBlockN) {
    return first_row + lo > 0 ? (first_row + lo) / kBlockN : 0;
}
// the query blocks of kBlockM rows that see some key of the key tile n_start .. n_start + kBlockN - 1: m_first ..
// m_end - 1 (of m_blocks; empty where none does)
struct QueryBlocks { int first, end; };
__host__ __device__ inline QueryBlocks attention_query_blocks(int n_start, int kBlockN, int kBlockM, KeyBand band, int m_blocks) {
    const int first = (n_start - band.hi > 0 ? n_start - band.hi : 0) / kBlockM;
    const int last_row = n_start + kBlockN - 1 - band.lo;   // the last query whose window reaches these keys
    const int end = last_row < 0 ? 0 : last_row / kBlockM + 1 < m_blocks ? last_row / kBlockM + 1 : m_blocks;
    return {first, end > first ? end : first};
}
// (forward or backward params) the band of the call's lengths T, Tk (per sequence where they differ: attention_band)
template <class Params>
__host__ __device__ inline KeyBand attention_band(const Params& p) { return attention_band(p.x, p.causal, p.T, p.Tk); }

// ----------------------------------------------------------------------------
// score modifiers: softcap and ALiBi

// The score modifiers (AttentionExtras::softcap, alibi_slopes) of one (b, h) of a sequence of T queries and Tk keys, in
// the units the kernels keep S in (q.k, which the softmax multiplies by scale): s -> softcap_out * tanh(s * softcap_in),
// then s -= slope * |row + Tk - T - key| (slope = the ALiBi slope / scale). The softcap's constants stay in the kernel
// parameters (x: the kernel's AttentionExtras, attention_with_score_constants), so that only the slope and the
// diagonal take registers. The backward's softcap factor 1 - t^2 comes back from P: with x = s * scale log2e - lse2 =
// log2 P and no bias beside softcap, softcap log2e t = log2 P + lse2 + alibi log2e |d|.
struct ScoreMods {
    const AttentionExtras& x;
    float slope;   // 0: no ALiBi
    int diag0;
    uint32_t bh;   // b * NH + h: the dropout's head (the Hopper kMods copies run dropout too)
    __device__ __forceinline__ bool any() const { return x.softcap_in != 0.0f || slope != 0.0f; }
    __device__ __forceinline__ float cap(float s) const { return x.softcap_out * fast_tanh(s * x.softcap_in); }
    // row + Tk - T - key as a float: ALiBi's distance before the abs. The loops convert it once per thread and tile and
    // add their constant offsets (an I2F per element would cost as much as the MUFU.EX2 the softmax needs)
    __device__ __forceinline__ float dist0(int row, int key) const { return (float)(row + diag0 - key); }
    // d score / d (scale q.k) from P, its row's lse2 and the ALiBi distance: 1 - t^2 with softcap, else 1 (P = 0 gives
    // t = -1 after the clamp: a factor 0 on a dS that is 0)
    __device__ __forceinline__ float grad(float p, float lse2, float dist) const {
        if (x.softcap_in == 0.0f) return 1.0f;
        const float t = (fast_log2(p) + lse2) * x.softcap_t + slope * x.softcap_in * fabsf(dist);
        const float tc = fminf(fmaxf(t, -1.0f), 1.0f);
        return 1.0f - tc * tc;
    }
    // the sign that the distances row + diag0 - key of rows row0 .. row0 + rows - 1 and keys key0 .. key0 + keys - 1 share
    // where visible (hi: the band's right side, attention_band; at or left of the diagonal every visible key has
    // distance >= 0, the masked ones not counting), 0 where they differ
    __device__ __forceinline__ float dist_sign(int hi, int row0, int rows, int key0, int keys) const {
        if (hi <= diag0 || row0 + diag0 >= key0 + keys - 1) return 1.0f;
        return row0 + rows - 1 + diag0 <= key0 ? -1.0f : 0.0f;
    }
    // the same from the modified score s (S units, softcap then ALiBi applied), where a kernel still holds it
    __device__ __forceinline__ float grad_from_score(float s, float dist) const {
        const float t = fminf(fmaxf((s + slope * fabsf(dist)) * x.softcap_in, -1.0f), 1.0f);
        return 1.0f - t * t;
    }
};
__device__ __forceinline__ ScoreMods score_mods(const AttentionExtras& x, int b, int h, int T, int Tk, int NH) {
    return {x, x.alibi_slopes ? x.alibi_slopes[b * x.alibi_batch + h] * x.inv_scale : 0.0f, Tk - T, (uint32_t)(b * NH + h)};
}
// the kernels' form of the softcap and the scale (AttentionExtras' constants; attention_forward / attention_backward)
inline AttentionExtras attention_with_score_constants(AttentionExtras x, float scale) {
    x.softcap_in = x.softcap > 0.0f ? scale / x.softcap : 0.0f;
    x.softcap_out = x.softcap > 0.0f ? x.softcap / scale : 0.0f;
    x.softcap_t = x.softcap > 0.0f ? 1.0f / (x.softcap * kLog2e) : 0.0f;
    x.inv_scale = 1.0f / scale;
    return x;
}
// s = mods(s) over a warp's kMT m16 x kNT n8 accumulator tiles (rows row0 + 16mt + g (+8), keys key0 + 8nt + 2tq (+1))
template <int kMT, int kNT>
__device__ __forceinline__ void apply_score_mods(float (&s)[kMT][kNT][4], const ScoreMods& m, int row0, int key0, int lane) {
    if (m.x.softcap_in != 0.0f) {
        #pragma unroll
        for (int mt = 0; mt < kMT; mt++)
            #pragma unroll
            for (int nt = 0; nt < kNT; nt++)
                #pragma unroll
                for (int e = 0; e < 4; e++) s[mt][nt][e] = m.cap(s[mt][nt][e]);
    }
    if (m.slope != 0.0f) {
        const float d0 = m.dist0(row0 + lane / 4, key0 + 2 * (lane % 4));
        #pragma unroll
        for (int mt = 0; mt < kMT; mt++)
            #pragma unroll
            for (int nt = 0; nt < kNT; nt++)
                #pragma unroll
                for (int e = 0; e < 4; e++) s[mt][nt][e] -= m.slope * fabsf(d0 + (float)(mt * 16 + 8 * (e / 2) - nt * 8 - e % 2));
    }
}
// the same on one thread's part of a wgmma accumulator of S (s[4i + e]: row row0 + g + 8 (e / 2), key key0 + 8i + 2tq
// + e % 2; the warp's 16 rows, 2N keys; hi: the band's right side, attention_band). Where ALiBi's visible distances on
// the tile share one sign (ScoreMods::dist_sign), -slope |d| = -slope sign (d0 + 8 half - (8 (i / 4) + i % 2)) splits
// into a key term, one FFMA a score, and a row term left out of s and returned in shift[half] (else 0), for the softmax
// to add to its row maxima and exponents (online_softmax_tile's kShift) or the backward to take from its lse2; where
// the signs differ, -slope |d| as it is (an FADD and an FFMA a score)
template <int N>
__device__ __forceinline__ void apply_score_mods_frag(float (&s)[N], const ScoreMods& m, int row0, int key0, int lane, int hi,
                                                      float (&shift)[2]) {
    shift[0] = shift[1] = 0.0f;
    if (m.x.softcap_in != 0.0f) {
        #pragma unroll
        for (int i = 0; i < N; i++) s[i] = m.cap(s[i]);
    }
    if (m.slope == 0.0f) return;
    const float d0 = m.dist0(row0 + lane / 4, key0 + 2 * (lane % 4)), sign = m.dist_sign(hi, row0, 16, key0, 2 * N);
    if (sign != 0.0f) {
        const float slope = m.slope * sign;
        shift[0] = -slope * d0;
        shift[1] = -slope * (d0 + 8.0f);
        #pragma unroll
        for (int i = 0; i < N; i++) s[i] = fmaf(slope, (float)(8 * (i / 4) + i % 2), s[i]);
    } else {
        #pragma unroll
        for (int i = 0; i < N; i++) s[i] -= m.slope * fabsf(d0 + (float)(8 * ((i % 4) / 2) - 8 * (i / 4) - i % 2));
    }
}

// ----------------------------------------------------------------------------
// the backward's layouts: score modifiers on S^T, the softcap's factor, the window's left side as -inf scores

// The score modifiers on S^T (the dK/dV kernels' layout: keys key0 + 16mt + g (+8) as rows, queries q0 + 8nt + 2tq
// (+1)), and after backward_p_ds the softcap's factor on dS^T from P^T and the queries' lse2 (lse2_s: the stage's rows,
// query q0 first)
template <int kMT, int kQT>
__device__ __forceinline__ void apply_score_mods_t(float (&st)[kMT][kQT][4], const ScoreMods& m, int key0, int q0, int lane) {
    if (m.x.softcap_in != 0.0f) {
        #pragma unroll
        for (int mt = 0; mt < kMT; mt++)
            #pragma unroll
            for (int nt = 0; nt < kQT; nt++)
                #pragma unroll
                for (int e = 0; e < 4; e++) st[mt][nt][e] = m.cap(st[mt][nt][e]);
    }
    if (m.slope != 0.0f) {
        const float d0 = m.dist0(q0 + 2 * (lane % 4), key0 + lane / 4);
        #pragma unroll
        for (int mt = 0; mt < kMT; mt++)
            #pragma unroll
            for (int nt = 0; nt < kQT; nt++)
                #pragma unroll
                for (int e = 0; e < 4; e++) st[mt][nt][e] -= m.slope * fabsf(d0 + (float)(nt * 8 + e % 2 - mt * 16 - 8 * (e / 2)));
    }
}
template <int kMT, int kQT>
__device__ __forceinline__ void softcap_grad_t(float (&dst)[kMT][kQT][4], const float (&pt)[kMT][kQT][4], const ScoreMods& m,
                                               const float* lse2_s, int key0, int q0, int lane) {
    const float d0 = m.dist0(q0 + 2 * (lane % 4), key0 + lane / 4);
    #pragma unroll
    for (int nt = 0; nt < kQT; nt++) {
        const float2 l2 = *reinterpret_cast<const float2*>(lse2_s + nt * 8 + 2 * (lane % 4));
        #pragma unroll
        for (int mt = 0; mt < kMT; mt++)
            #pragma unroll
            for (int e = 0; e < 4; e++)
                dst[mt][nt][e] *= m.grad(pt[mt][nt][e], e % 2 ? l2.y : l2.x, d0 + (float)(nt * 8 + e % 2 - mt * 16 - 8 * (e / 2)));
    }
}
// the same two on a wgmma accumulator of S^T (the Hopper dK/dV kernels: st[4i + e] at key key0 + g + 8 (e / 2), query
// q0 + 8i + 2tq + e % 2)
template <int N>
__device__ __forceinline__ void apply_score_mods_frag_t(float (&st)[N], const ScoreMods& m, int key0, int q0) {
    const int lane = threadIdx.x % 32;
    if (m.x.softcap_in != 0.0f) {
        #pragma unroll
        for (int i = 0; i < N; i++) st[i] = m.cap(st[i]);
    }
    if (m.slope != 0.0f) {
        const float d0 = m.dist0(q0 + 2 * (lane % 4), key0 + lane / 4);
        #pragma unroll
        for (int i = 0; i < N; i++) st[i] -= m.slope * fabsf(d0 + (float)(8 * (i / 4) + i % 2 - 8 * ((i % 4) / 2)));
    }
}
template <int N>
__device__ __forceinline__ void softcap_grad_frag_t(float (&dst)[N], const float (&pt)[N], const ScoreMods& m, const float* lse2_s,
                                                    int key0, int q0) {
    const int lane = threadIdx.x % 32;
    const float d0 = m.dist0(q0 + 2 * (lane % 4), key0 + lane / 4);
    #pragma unroll
    for (int i = 0; i < N / 4; i++) {
        const float2 l2 = *reinterpret_cast<const float2*>(lse2_s + i * 8 + 2 * (lane % 4));
        #pragma unroll
        for (int e = 0; e < 4; e++)
            dst[4 * i + e] *= m.grad(pt[4 * i + e], e % 2 ? l2.y : l2.x, d0 + (float)(8 * i + e % 2 - 8 * (e / 2)));
    }
}

// The window's left side (the general copies, only on tiles that reach past it: the P loops keep their one mask): the
// score = -inf where key < query + lo, so that P = 0 there. On mma.sync S^T tiles (keys key0 + 16mt + g (+8), queries
// q0 + 8nt + 2tq (+1)); on mma.sync S tiles (rows row0 + 16mt + g (+8), keys key0 + 8nt + 2tq (+1)); on wgmma
// accumulators of S (s[4i + e]: row row0 + g + 8 (e / 2), key key0 + 8i + 2tq + e % 2) and of S^T (st[4i + e]: key
// key0 + g + 8 (e / 2), query q0 + 8i + 2tq + e % 2).
template <int kMT, int kQT>
__device__ __forceinline__ void mask_before_window_t(float (&st)[kMT][kQT][4], int key0, int q0, int lo, int lane) {
    #pragma unroll
    for (int mt = 0; mt < kMT; mt++)
        #pragma unroll
        for (int nt = 0; nt < kQT; nt++)
            #pragma unroll
            for (int e = 0; e < 4; e++)
                if (key0 + mt * 16 + lane / 4 + 8 * (e / 2) < q0 + nt * 8 + 2 * (lane % 4) + (e % 2) + lo) st[mt][nt][e] = -INFINITY;
}
template <int kMT, int kNT>
__device__ __forceinline__ void mask_before_window(float (&s)[kMT][kNT][4], int row0, int key0, int lo, int lane) {
    #pragma unroll
    for (int mt = 0; mt < kMT; mt++)
        #pragma unroll
        for (int nt = 0; nt < kNT; nt++)
            #pragma unroll
            for (int e = 0; e < 4; e++)
                if (key0 + nt * 8 + 2 * (lane % 4) + (e % 2) < row0 + mt * 16 + lane / 4 + 8 * (e / 2) + lo) s[mt][nt][e] = -INFINITY;
}
template <int N>
__device__ __forceinline__ void mask_before_window_frag(float (&s)[N], int row0, int key0, int lo) {
    const int lane = threadIdx.x % 32;
    #pragma unroll
    for (int i = 0; i < N; i++)
        if (key0 + 8 * (i / 4) + 2 * (lane % 4) + i % 2 < row0 + lane / 4 + 8 * ((i % 4) / 2) + lo) s[i] = -INFINITY;
}
template <int N>
__device__ __forceinline__ void mask_before_window_frag_t(float (&st)[N], int key0, int q0, int lo) {
    const int lane = threadIdx.x % 32;
    #pragma unroll
    for (int i = 0; i < N; i++)
        if (key0 + lane / 4 + 8 * ((i % 4) / 2) < q0 + 8 * (i / 4) + 2 * (lane % 4) + i % 2 + lo) st[i] = -INFINITY;
}

// ----------------------------------------------------------------------------
// document masking (the mma.sync kExtras copies: train_gpt2cu -dm 1)

// document masking: s = -inf where key < the row's document start (rows row0 + 16mt + g (+8) of doc_first, keys key0 +
// 8nt + 2tq (+1)); doc_first[mt][half] holds this thread's rows' starts
template <int kMT, int kNT>
__device__ __forceinline__ void mask_before_documents(float (&s)[kMT][kNT][4], const int (&doc_first)[kMT][2], int key0, int lane) {
    const int tq = lane % 4;
    #pragma unroll
    for (int mt = 0; mt < kMT; mt++)
        #pragma unroll
        for (int nt = 0; nt < kNT; nt++)
            #pragma unroll
            for (int e = 0; e < 4; e++)
                if (key0 + nt * 8 + 2 * tq + (e % 2) < doc_first[mt][e / 2]) s[mt][nt][e] = -INFINITY;
}
// Document masking of a query block from m_start (docs: the sequence's doc_start row): the first key tile any of its
// rows sees (n_first, raised to the tile of its first row's document), this thread's rows' document starts (rows past
// T: T, which masks nothing they need), and this warp's earliest
template <int kMT, int kBlockN>
__device__ __forceinline__ void query_block_documents(int& n_first, int (&doc_first)[kMT][2], int& warp_doc_first, const int* docs,
                                                      int m_start, int warp_row0, int T, int lane) {
    n_first = max(n_first, docs[m_start] / kBlockN);
    #pragma unroll
    for (int mt = 0; mt < kMT; mt++)
        #pragma unroll
        for (int half = 0; half < 2; half++) {
            const int row = m_start + warp_row0 + mt * 16 + lane / 4 + 8 * half;
            doc_first[mt][half] = row < T ? docs[row] : T;
        }
    warp_doc_first = docs[min(m_start + warp_row0, T - 1)];
}

// ----------------------------------------------------------------------------
// dropout (the mma.sync kExtras copies): which probabilities are kept

// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"): 128 random bits from a 128-bit counter
// and a 64-bit key
__host__ __device__ inline uint4 philox4x32_10(uint4 c, uint2 k) {
    #pragma unroll
    for (int round = 0; round < 10; round++) {
        const uint32_t lo0 = c.x * 0xD2511F53u, lo1 = c.z * 0xCD9E8D57u;
#if defined(__CUDA_ARCH__)
        const uint32_t hi0 = __umulhi(c.x, 0xD2511F53u), hi1 = __umulhi(c.z, 0xCD9E8D57u);
#else
        const uint32_t hi0 = (uint32_t)(((uint64_t)c.x * 0xD2511F53u) >> 32), hi1 = (uint32_t)(((uint64_t)c.z * 0xCD9E8D57u) >> 32);
#endif
        c = make_uint4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
        k.x += 0x9E3779B9u; k.y += 0xBB67AE85u;
    }
    return c;
}

// The dropout of one call (AttentionExtras::dropout_p, _seed, _offset): element (b, h, i, j) of the softmax (i, j the
// query and key within sequence b) is kept with probability 1 - threshold / 256 (the nearest to 1 - dropout_p), then
// scaled by 1 / (1 - dropout_p). Its 8 random bits come from one Philox call per 16 x 16 block (I, J) = (i / 16, j / 16)
// and pair (A, C) of its 8 x 8 quarter's (row, column) pairs: the call's four words are the groups {a, a + 8} x {c, c + 8}
// (a = i % 8 in 2A, 2A + 1, c = j % 8 in 2C, 2C + 1), word 2 (a & 1) + (c & 1), byte 2 (i % 16 >= 8) + (j % 16 >= 8).
// In the mma.sync layouts of S and of S^T a thread's eight elements of a block are two words of one call, so each
// layout (the forward and dQ kernels' S, the dK/dV kernels' S^T) needs one call per block for two lanes.
struct Dropout {
    uint2 key;            // the seed, with the offset's high word added
    uint32_t offset;      // the offset's low word (the counter's last word)
    uint32_t threshold;   // drop where the byte < threshold
    float scale;          // 1 / (1 - dropout_p)
};
__host__ __device__ inline Dropout attention_dropout(const AttentionExtras& x) {
    const float t = x.dropout_p * 256.0f + 0.5f;
    return {make_uint2((uint32_t)x.dropout_seed, (uint32_t)(x.dropout_seed >> 32) + (uint32_t)(x.dropout_offset >> 32)),
            (uint32_t)x.dropout_offset, t < 255.0f ? (uint32_t)t : 255u, 1.0f / (1.0f - x.dropout_p)};
}
// the four words of block (I, J), quarter pair (A, C) of head bh = b * NH + h
__host__ __device__ inline uint4 dropout_words(const Dropout& d, uint32_t bh, uint32_t I, uint32_t J, uint32_t A, uint32_t C) {
    return philox4x32_10(make_uint4(J * 16 + A * 4 + C, I, bh, d.offset), d.key);
}
// one element's decision (the host reference, the mask kernel): kept or dropped
__host__ __device__ inline bool dropout_keep(const Dropout& d, uint32_t bh, int i, int j) {
    const uint4 w = dropout_words(d, bh, i / 16, j / 16, (i % 8) / 2, (j % 8) / 2);
    const uint32_t word = (i & 1) ? ((j & 1) ? w.w : w.z) : ((j & 1) ? w.y : w.x);
    return ((word >> (8 * (2 * ((i % 16) / 8) + (j % 16) / 8))) & 0xFF) >= d.threshold;
}
// This thread's keep bits over a warp's tiles in the mma.sync layout, bit 4nt + e of keep[mt] for element e of tile
// (mt, nt): kT false, S (kMT m16 of queries i0 + 16mt + g (+8) as rows, kNT n8 of keys j0 + 8nt + 2tq (+1)); kT true,
// S^T (keys j0 + 16mt + g (+8) as rows, queries i0 + 8nt + 2tq (+1)). i0, j0 multiples of 16. A 16 x 16 block's call is
// the same for lanes g and g ^ 1 (the quarter pair is (g / 2, tq), or (tq, g / 2) on S^T), each of which needs two of
// its words: of a pair of blocks, each lane makes one call and hands the other lane its two words (a shuffle across 4
// lanes), half the calls of making both.
template <int kMT, int kNT, bool kT>
__device__ __forceinline__ void dropout_keep_bits(uint32_t (&keep)[kMT], const Dropout& d, uint32_t bh, int i0, int j0, int lane) {
    static_assert(kNT % 2 == 0 && kNT <= 8, "whole 16 x 16 blocks, 32 bits");
    constexpr int kBlocks = kNT / 2;
    const int g = lane / 4, tq = lane % 4, odd_g = g & 1;
    // of a block's four words, those of the lanes with g & 1 = p: S's keys 2tq (even) and 2tq + 1 (odd) of row g; S^T's
    // queries 2tq and 2tq + 1 of key g
    auto lane_words = [](const uint4& w, int p) { return kT ? (p ? make_uint2(w.y, w.w) : make_uint2(w.x, w.z))
                                                          : (p ? make_uint2(w.z, w.w) : make_uint2(w.x, w.y)); };
    #pragma unroll
    for (int mt = 0; mt < kMT; mt++) {
        keep[mt] = 0;
        uint2 words[kBlocks];
        #pragma unroll
        for (int nb = 0; nb < kBlocks; nb += 2) {
            const bool pair = nb + 1 < kBlocks;   // a lone last block: both lanes make its call
            const int mine = pair ? nb + odd_g : nb;
            const uint4 w = dropout_words(d, bh, (i0 / 16) + (kT ? mine : mt), (j0 / 16) + (kT ? mt : mine), kT ? tq : g / 2, kT ? g / 2 : tq);
            const uint2 own = lane_words(w, odd_g);
            if (pair) {   // (selects, not an index by odd_g: the words stay in registers)
                const uint2 other = lane_words(w, odd_g ^ 1);
                const uint2 got = make_uint2(__shfl_xor_sync(0xffffffff, other.x, 4), __shfl_xor_sync(0xffffffff, other.y, 4));
                words[nb] = odd_g ? got : own;
                words[nb + 1] = odd_g ? own : got;
            } else {
                words[nb] = own;
            }
        }
        #pragma unroll
        for (int nb = 0; nb < kBlocks; nb++)
            #pragma unroll
            for (int h = 0; h < 2; h++)   // n8 tile 2nb + h: the block's half h of the columns
                #pragma unroll
                for (int e = 0; e < 4; e++) {
                    // byte 2 (query % 16 >= 8) + (key % 16 >= 8): S's row half is e / 2, S^T's query half h
                    const int byte_index = kT ? 2 * h + e / 2 : 2 * (e / 2) + h;
                    const uint32_t byte = (((e % 2) ? words[nb].y : words[nb].x) >> (8 * byte_index)) & 0xFF;
                    keep[mt] |= (uint32_t)(byte >= d.threshold) << (4 * (2 * nb + h) + e);
                }
    }
}
// The same on a wgmma accumulator fragment (the Hopper kMods copies): x[4i + e] is element e of n8 group i of a warp's
// 16 rows (rows i0 + g (+8), columns j0 + 8i + 2tq (+1)), the mma.sync layout with kMT = 1; kT: S^T (keys as rows j0..,
// queries i0 + 8i.. as columns). Bit 4 (i % 8) + e of keep[i / 8], 64 columns a word (kC on).
template <int kNT, bool kT, int kC = 0>
__device__ __forceinline__ void dropout_keep_frag(uint32_t (&keep)[(kNT + 7) / 8], const Dropout& d, uint32_t bh, int i0, int j0, int lane) {
    static_assert(kNT % 2 == 0, "whole 16 x 16 blocks");
    if constexpr (kC < kNT) {
        constexpr int kChunk = kNT - kC < 8 ? kNT - kC : 8;
        uint32_t (&word)[1] = *reinterpret_cast<uint32_t(*)[1]>(&keep[kC / 8]);
        dropout_keep_bits<1, kChunk, kT>(word, d, bh, kT ? i0 + 8 * kC : i0, kT ? j0 : j0 + 8 * kC, lane);
        dropout_keep_frag<kNT, kT, kC + kChunk>(keep, d, bh, i0, j0, lane);
    }
}
// x = kept ? x * scale : 0 over a fragment with dropout_keep_frag's bits
template <int kNT>
__device__ __forceinline__ void dropout_apply_frag(float (&x)[kNT * 4], const uint32_t (&keep)[(kNT + 7) / 8], float scale) {
    #pragma unroll
    for (int i = 0; i < kNT; i++)
        #pragma unroll
        for (int e = 0; e < 4; e++) x[4 * i + e] = (keep[i / 8] >> (4 * (i % 8) + e)) & 1 ? x[4 * i + e] * scale : 0.0f;
}
// x = kept ? x * scale : 0 over the tiles of keep (either layout)
template <int kMT, int kNT>
__device__ __forceinline__ void dropout_apply(float (&x)[kMT][kNT][4], const uint32_t (&keep)[kMT], float scale) {
    #pragma unroll
    for (int mt = 0; mt < kMT; mt++)
        #pragma unroll
        for (int nt = 0; nt < kNT; nt++)
            #pragma unroll
            for (int e = 0; e < 4; e++) x[mt][nt][e] = (keep[mt] >> (4 * nt + e)) & 1 ? x[mt][nt][e] * scale : 0.0f;
}
