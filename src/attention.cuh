/*
flashgpt fused flash attention: forward and backward, bf16 in/out, fp32 accumulation.

  forward   out = softmax(scale * Q K^T + mask) V
            q (B, T, NH, HS), k and v (B, Tk, NH_kv, HS), out (B, T, NH, HS): any batch / row / head strides
            (multiples of 8 elements, head dim contiguous), so GPT-2's fused QKV activation (B, T, 3, NH, HS), BTHD
            and BHTD tensors are all read and written in place, with no permutes
            lse (B, NH, T) fp32, the natural log of each row's softmax denominator: all the backward needs besides out
            mask: causal or not; causal with T != Tk aligned bottom-right (query i sees keys j <= i + Tk - T, as
            FlashAttention 2.1+ and cuDNN); a row that sees no key gets O = 0 and LSE = -inf
            GQA / MQA: query head h reads key/value head h / (NH / NH_kv)
  backward  recomputes P = exp(scale * Q K^T - lse) tile by tile (never stores T x Tk) and writes dq, dk, dv (with GQA
            dk, dv summed over each group of query heads, in a fixed order: deterministic)

  extras    (AttentionExtras p.x, off by default) two additive biases with broadcast strides and their gradients, a key
            mask of any pattern, key lengths per sequence, packed variable-length sequences, output gating, document
            masking (AlphaFold's attention: a pair bias, a mask bias or key mask, gating, head dims 8-32)
  head dims 8, 16, 32, 64, 96, 128, 256 (on Hopper 8-32 run HS 64's kernels and 96 HS 128's, zero-padded; before
            sm_90a 8 runs zero-padded to 16)

  attention_forward(const AttentionForwardParams&, stream), attention_backward(const AttentionBackwardParams&, stream);
  attention_unsupported_reason() / attention_backward_unsupported_reason() say why a call is refused. GPT-2's calls
  (fused QKV, causal, scale 1/sqrt(HS)) are thin wrappers: attention_forward(out, lse, qkv, B, T, NH, HS, stream).

Forward loop order is FlashAttention-2's: one CTA per (Q tile of kBlockM rows, b, h); each warp owns 16 * kWarpTilesM
query rows and walks the K/V tiles from the last visible one down to key 0, keeping O, the row max and the row sum in
registers (online softmax, normalised once at the end). The longest Q tiles (the last ones, causal) are launched first.

Paths: sm_80+ mma.sync (m16n8k16 bf16, ldmatrix, cp.async double buffering, 128-byte swizzled shared memory), every
head dim; on Hopper, when the binary carries sm_90a code, head dims 64, 128 and 256 run the same loops on wgmma,
warp-specialised: a producer warpgroup issues TMA loads (tensor maps over the strided tensors) into mbarrier rings,
consumer warpgroups (setmaxnreg) do the math, persistent CTAs take the longest tiles first; the forward's consumers
ping-pong their GEMMs. Causal self-attention without GQA (GPT-2's family) runs kernels compiled for it (kGeneral
false: the diagonal and Tk constants to the compiler); every other call the general copies of the same kernels; biases,
key masks and gating (kBias: a TMA-loaded tile bias plus a per-key bias, see attention_kernel_extras) and packed
sequences with their totals (kVarlen) general copies of their own; other calls with extras (key lengths, document
masks, fp32 tile biases) the mma.sync kernels' kExtras copies. Decoding (a few query rows against a long KV cache)
runs split-key kernels.
*/
#pragma once
#include <cmath>
#include <type_traits>      // std::true_type: the forward's per-warpgroup consumer copies
#include "common.cuh"
#include "ptx.cuh"          // the PTX wrappers (mma.sync, wgmma, TMA, mbarriers, ...) and tensor maps

// ----------------------------------------------------------------------------
// parameters: one struct per direction, shared with the dev/cuda harness

// A bf16 tensor of (batch, sequence, head, head dim) with its head dim contiguous: element (b, t, h, d) at
// base[b * batch + t * row + h * head + d]. Strides in elements; every one a multiple of 8 (16-byte rows).
struct AttentionStrides { long long batch, row, head; };

// (B, T, NH, HS) contiguous (BTHD), and the fused QKV activation (B, T, 3, NH, HS): Q at qkv, K at qkv + NH * HS,
// V at qkv + 2 * NH * HS, each with these strides
inline AttentionStrides bthd_strides(int T, int NH, int HS) { return {(long long)T * NH * HS, (long long)NH * HS, HS}; }
inline AttentionStrides fused_qkv_strides(int T, int NH, int HS) { return {3LL * T * NH * HS, 3LL * NH * HS, HS}; }

// Optional parts of a call (every pointer nullptr: off). Attention runs per sequence b with its own lengths:
//   T_b  = cu_seqlens_q[b + 1] - cu_seqlens_q[b] with packed queries (else T),
//   Tk_b = cu_seqlens_k[b + 1] - cu_seqlens_k[b] with packed keys, else seqlens_k[b] (key padding), else Tk;
// the causal diagonal is aligned bottom-right per sequence (key j <= i + Tk_b - T_b), as FlashAttention's varlen.
// Packed sequences (FlashAttention's varlen): sequence b's rows are cu_seqlens_q[b] .. of Q and O (cu_seqlens_k[b] ..
// of K and V) with the batch stride 0 (any batch stride is added too); T and Tk are then the longest lengths, which
// size the grid and the LSE (B, NH, T) rows, of which only the first T_b of each sequence are written. Rows of O past
// T_b (in a padded layout) are not written; dK and dV rows past Tk_b are written as zeros where the layout has them.
// bias: an additive logit bias of logical shape (B, NH, T, Tk), element (b, h, i, j) at
// bias[b * bias_st.batch + h * bias_st.head + i * bias_st.row + j] (i, j local to the sequence; keys contiguous), any
// of the three strides 0 to broadcast (xformers' attn_bias, AlphaFold's pair bias); bf16 or fp32. A -inf entry masks
// its key; a row whose keys are all masked gets O = 0, LSE = -inf and no gradient.
// gate: output gating (AlphaFold's): the forward also writes gated_out = O * gate (elementwise; O itself still goes to
// out, which the backward needs); the backward then takes dout = d loss / d gated_out and writes dgate.
struct AttentionExtras {
    const void* bias;             // nullptr: none
    AttentionStrides bias_st;     // (batch, row = query, head) strides in elements; 0 broadcasts
    bool bias_fp32;               // fp32 bias, else bf16
    const int* seqlens_k;         // (B) device: keys of sequence b (key padding, <= Tk)
    const int* cu_seqlens_q;      // (B + 1) device: packed query rows (varlen)
    const int* cu_seqlens_k;      // (B + 1) device: packed key rows (varlen)
    const floatX* gate;           // (B, T, NH, HS) like Q, with gate_st; nullptr: no gating
    AttentionStrides gate_st;
    floatX* gated_out;            // (B, T, NH, HS) with o_st: the forward's O * gate
    const int* doc_start;         // (B, T) device, causal self-attention only: document masking (packed pretraining),
                                  // query i of sequence b sees keys doc_start[b * T + i] .. i (its document's first
                                  // token on), nondecreasing along each sequence; key tiles before a block's first
                                  // document are skipped
    int total_q, total_k;         // packed sequences: the rows of Q / O and of K / V in memory (at least cu_seqlens_q[B]
                                  // and cu_seqlens_k[B]). Where both are given (and the batch strides are 0) the Hopper
                                  // kernels run the pack, their tile loads bounded by them; 0: the mma.sync kExtras copies
    const void* bias2;            // a second additive bias, as bias (its own broadcast strides and dtype): AlphaFold's
    AttentionStrides bias2_st;    // mask bias beside its pair bias, DeepSpeed's bias1 beside bias2
    bool bias2_fp32;
    const uint8_t* key_mask;      // (B, Tk) bytes, nonzero: the key is seen (any pattern); element (b, j) at
    long long key_mask_batch;     // key_mask[b * key_mask_batch + j], 0 broadcasts. A masked key is a -inf logit
    // The kernels' form of the row-broadcast bias and the key mask (set by attention_forward / attention_backward from
    // bias2, a bias without rows and key_mask; never by the caller): fp32 (b, h, key) at key_bias[b * key_bias_batch +
    // h * key_bias_head + key], rows padded with zeros to whole key tiles (kKeyBiasPad), so the kernels read it unguarded
    const float* key_bias;
    long long key_bias_batch, key_bias_head;
};
__host__ __device__ inline bool attention_has_extras(const AttentionExtras& x) {
    return x.bias || x.seqlens_k || x.cu_seqlens_q || x.cu_seqlens_k || x.gate || x.doc_start || x.bias2 || x.key_mask || x.key_bias;
}
// key_bias rows are padded to a multiple of this many keys (every kernel's key tile divides it)
constexpr int kKeyBiasPad = 256;
__host__ __device__ inline long long key_bias_row(int Tk) { return (Tk + kKeyBiasPad - 1) / kKeyBiasPad * kKeyBiasPad; }
// the key bias of (b, h): nullptr where there is none
__device__ __forceinline__ const float* key_bias_of(const AttentionExtras& x, int b, int h) {
    return x.key_bias ? x.key_bias + b * x.key_bias_batch + h * x.key_bias_head : nullptr;
}

// Query i (of T) sees key j (of Tk) iff j < Tk and, when causal, j <= i + Tk - T: the causal diagonal aligned
// bottom-right, as FlashAttention 2.1+ and cuDNN (T = Tk: the usual j <= i). Rows that see no key (causal, T > Tk)
// get O = 0 and LSE = -inf, and contribute no gradient.
struct AttentionForwardParams {
    const floatX *q, *k, *v;      // (B, T, NH, HS), (B, Tk, NH_kv, HS), (B, Tk, NH_kv, HS)
    floatX* out;                  // (B, T, NH, HS)
    float* lse;                   // (B, NH, T) contiguous, natural log
    AttentionStrides q_st, k_st, v_st, o_st;
    int B, T, Tk, NH, NH_kv, HS;  // query head h reads key/value head h / (NH / NH_kv) (GQA; MQA: NH_kv = 1)
    bool causal;
    float scale;                  // softmax(scale * Q K^T + bias)
    AttentionExtras x = {};       // bias, key lengths, packed sequences, gating, documents: all off by default
};

// (forward or backward params) the keys of query row i must satisfy key <= i + diag: Tk - T when causal, no limit
// (past Tk) otherwise
template <class Params>
__host__ __device__ inline int attention_diagonal(const Params& p) { return p.causal ? p.Tk - p.T : (1 << 30); }

// GPT-2's family: causal self-attention (T = Tk) without GQA at head dims 64 and 128. It runs on kernels compiled for
// it (kGeneral false: the diagonal and Tk constants to the compiler), which refuse anything else; every other call
// runs the general copies.
template <class Params>
inline bool attention_self_causal(const Params& p) {
    return p.causal && p.T == p.Tk && p.NH == p.NH_kv && (p.HS == 64 || p.HS == 128) && !attention_has_extras(p.x);
}
template <class Params>
inline void attention_check_self_causal(const Params& p) {
    if (attention_self_causal(p)) return;
    fprintf(stderr, "attention: a kernel compiled for causal self-attention without GQA (HS 64, 128) got another call\n");
    exit(EXIT_FAILURE);
}

// GPT-2's causal self-attention on the fused QKV activation, out (B, T, NH, HS), scale 1/sqrt(HS)
inline AttentionForwardParams fused_qkv_forward_params(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH, int HS) {
    const AttentionStrides qkv_st = fused_qkv_strides(T, NH, HS);
    return {qkv, qkv + (size_t)NH * HS, qkv + 2 * (size_t)NH * HS, out, lse, qkv_st, qkv_st, qkv_st, bthd_strides(T, NH, HS),
            B, T, T, NH, NH, HS, true, 1.0f / std::sqrt((float)HS)};
}

constexpr float kLog2e = 1.4426950408889634f;

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
__host__ __device__ inline int attention_diagonal(bool causal, int T, int Tk) { return causal ? Tk - T : (1 << 30); }

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
// rows sees, this thread's rows' document starts (rows past T: T, which masks nothing they need), and this warp's
// earliest
template <int kMT, int kBlockN>
__device__ __forceinline__ void query_block_documents(int& n_first, int (&doc_first)[kMT][2], int& warp_doc_first, const int* docs,
                                                      int m_start, int warp_row0, int T, int lane) {
    n_first = docs[m_start] / kBlockN;
    #pragma unroll
    for (int mt = 0; mt < kMT; mt++)
        #pragma unroll
        for (int half = 0; half < 2; half++) {
            const int row = m_start + warp_row0 + mt * 16 + lane / 4 + 8 * half;
            doc_first[mt][half] = row < T ? docs[row] : T;
        }
    warp_doc_first = docs[min(m_start + warp_row0, T - 1)];
}

// eight bf16 products (fp32 math, one rounding)
__device__ __forceinline__ uint4 mul_bf16x8(const uint4& a, const uint4& b) {
    const __nv_bfloat162* a2 = reinterpret_cast<const __nv_bfloat162*>(&a);
    const __nv_bfloat162* b2 = reinterpret_cast<const __nv_bfloat162*>(&b);
    uint4 out;
    uint32_t* o = reinterpret_cast<uint32_t*>(&out);
    #pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 x = __bfloat1622float2(a2[i]), y = __bfloat1622float2(b2[i]);
        o[i] = pack_bf16x2(x.x * y.x, x.y * y.y);
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

// kGeneral false: causal self-attention without GQA only (Tk = T, the diagonal 0: constants to the compiler);
// kExtras (general only): the AttentionExtras (bias, per-sequence lengths, packed rows, gating, document masking) and
// head dims 8 / 16, in their own copy so that the calls without them keep their registers
template <int HS, int kWarpTilesM, int kNWarps, int kBlockN, bool kGeneral = false, bool kExtras = false>
__global__ void __launch_bounds__(kNWarps * 32)
attention_forward_kernel(const AttentionForwardParams p) {
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
    const int T = seq.T, Tk = seq.Tk, diag = kGeneral ? attention_diagonal(p.causal, T, Tk) : 0;
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
    // document masking: the block's first row starts the earliest document; the key tiles before it are skipped
    int n_first = 0, doc_first[kMT][2] = {}, warp_doc_first = 0;
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
        // a warp whose rows all lie above this K tile has nothing to do here (every key masked)
        const bool warp_active = n_block * kBlockN <= m_start + warp_row0 + 16 * kMT - 1 + diag &&
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
                        mma_bf16_16816(s[mt][2 * np], qa, kb[0], kb[1]);
                        mma_bf16_16816(s[mt][2 * np + 1], qa, kb[2], kb[3]);
                    }
                }
            }
            if constexpr (kExtras) {   // the additive bias, in units of S (scale multiplies it back); document masking
                if (p.x.bias) add_bias_tile<kMT, kNT>(s, bias_tile(stage), bias_pitch, p.x.bias_fp32, warp_row0, 1.0f / p.scale, lane);
                if (p.x.key_bias) add_key_bias<kMT, kNT>(s, key_bias_of(p.x, b, h), n_block * kBlockN, 1.0f / p.scale, lane);
                if (p.x.doc_start) mask_before_documents<kMT, kNT>(s, doc_first, n_block * kBlockN, lane);
            }
            // mask (the causal diagonal, keys past Tk), only on tiles that cross this warp's limits
            if (n_block * kBlockN + kBlockN - 1 > (kGeneral ? min(m_start + warp_row0 + diag, Tk - 1) : m_start + warp_row0)) {
                #pragma unroll
                for (int mt = 0; mt < kMT; mt++)
                    #pragma unroll
                    for (int nt = 0; nt < kNT; nt++)
                        #pragma unroll
                        for (int e = 0; e < 4; e++) {
                            int row = m_start + warp_row0 + mt * 16 + g + 8 * (e / 2);
                            int key = n_block * kBlockN + nt * 8 + 2 * tq + (e % 2);
                            if (key > row + diag || (kGeneral && key >= Tk)) s[mt][nt][e] = -INFINITY;
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
            // O += P V (V is [key][d])
            const uint8_t* v_s = v_tile(stage);
            mma_accum_times_tile(o_acc, s, [&](int kk, int dp) { return v_frag_addr(v_s, kk, dp); });
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
            const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
            const int row = warp_row0 + mt * 16 + g + 8 * half;
            if (tq == 0 && m_start + row < T)
                p.lse[((size_t)b * NH + h) * p.T + m_start + row] = l > 0.0f ? row_max[mt][half] * scale + logf(l) : -INFINITY;
            #pragma unroll
            for (int dt = 0; dt < kDT; dt++) {
                uint32_t packed = pack_bf16x2(o_acc[mt][dt][2 * half] * inv_l, o_acc[mt][dt][2 * half + 1] * inv_l);
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
                    *reinterpret_cast<uint4*>(p.x.gated_out + b * p.o_st.batch + r * p.o_st.row + h * p.o_st.head + ch * 8) = mul_bf16x8(o, gv);
                }
            }
        }
    }
}

template <int HS, int kWarpTilesM, int kNWarps, int kBlockN, bool kGeneral = false, bool kExtras = false>
void launch_attention_forward(const AttentionForwardParams& p, cudaStream_t stream) {
    using Tile = ForwardTile<HS, kWarpTilesM, kNWarps, kBlockN>;
    constexpr auto kernel = attention_forward_kernel<HS, kWarpTilesM, kNWarps, kBlockN, kGeneral, kExtras>;
    if (!kGeneral) attention_check_self_causal(p);
    const int smem = Tile::kSmemBytes + (kExtras && p.x.bias ? 2 * Tile::kBlockM * bias_tile_pitch(kBlockN, p.x.bias_fp32) : 0);
    launch_with_smem<kernel>(dim3(p.B * p.NH, ceil_div(p.T, Tile::kBlockM)), Tile::kThreads, smem, stream, p);
}

// ----------------------------------------------------------------------------
// Hopper (sm_90a) forward helpers: one thread's rows g and g + 8 of a warpgroup's m64 x kBlockN S tile
// (s[4 * i + e]: key column 8i + 2tq + e % 2, row g + 8 (e / 2), the wgmma accumulator layout).

// mask on a tile that crosses this warp's limits: key > row + diag or (kKeyBound) key >= Tk; lim0 = the warp's first
// query row + diag, key0 = the tile's first key. Causal self-attention needs no key bound: row + 0 < T = Tk.
template <int kNT, bool kKeyBound = true>
__device__ __forceinline__ void mask_tile(float (&s)[kNT * 4], int lim0, int key0, int Tk, int g, int tq) {
    #pragma unroll
    for (int i = 0; i < kNT; i++)
        #pragma unroll
        for (int e = 0; e < 4; e++) {
            const int key = key0 + i * 8 + 2 * tq + (e % 2);
            if (key > lim0 + g + 8 * (e / 2) || (kKeyBound && key >= Tk)) s[4 * i + e] = -INFINITY;
        }
}

// online softmax, as in the mma.sync kernel: new row max (quad shuffles), P = exp2(s * c - m * c) in place,
// row_sum rescaled by alpha[half] = exp2((m_old - m_new) * c) plus this tile's sum; the caller rescales O by alpha
template <int kNT>
__device__ __forceinline__ void online_softmax_tile(float (&s)[kNT * 4], float (&row_max)[2], float (&row_sum)[2],
                                                    float (&alpha)[2], float scale_log2) {
    #pragma unroll
    for (int half = 0; half < 2; half++) {
        float mx = row_max[half];
        #pragma unroll
        for (int i = 0; i < kNT; i++) mx = fmaxf(mx, fmaxf(s[4 * i + 2 * half], s[4 * i + 2 * half + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
        // a row with no visible key yet keeps max -inf: use 0 so exp2 sees -inf - 0, not -inf - -inf = NaN
        const float m_scaled = mx == -INFINITY ? 0.0f : mx * scale_log2;
        alpha[half] = fast_exp2(row_max[half] * scale_log2 - m_scaled);
        row_max[half] = mx;
        float sum = 0.0f;
        #pragma unroll
        for (int i = 0; i < kNT; i++)
            #pragma unroll
            for (int e = 2 * half; e < 2 * half + 2; e++) {
                s[4 * i + e] = fast_exp2(s[4 * i + e] * scale_log2 - m_scaled);
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

// Head dims 8, 16 and 32 run the HS 64 Hopper copies, head dim 96 the HS 128 ones, zero-padded: TMA reads the head
// dims past the caller's as zeros (past the tensor map's inner dimension), so S and dP are exact and the padded
// columns of O, dQ, dK and dV come out zero and are not stored. Whether the 8 head dims of chunk ch are the caller's
// (kGeneral: the general copies, the only ones the padded head dims reach):
template <int HS, bool kGeneral>
__device__ __forceinline__ bool head_chunk_stored(int head_dim, int ch) { return (HS != 64 && HS != 128) || !kGeneral || ch * 8 < head_dim; }

// gating (the kBias copies): gated_out = O * gate over this warp's 16 rows of the tile, 16 bytes a lane, O read back
// from the staging (o_staged, swizzle<HS>) or, unstaged, from out where this warp has just written it
template <int HS>
__device__ __forceinline__ void hopper_forward_gate(const AttentionForwardParams& p, const uint8_t* o_staged, int b, int h, int m_start,
                                                    int warp_row0, int out_row0, int T) {
    const AttentionStrides& gs = p.x.gate_st;
    if (!o_staged) __syncwarp();   // this warp's stores of O are visible to its lanes
    for (int c = threadIdx.x % 32; c < 16 * (HS / 8); c += 32) {
        const int row = warp_row0 + c / (HS / 8), ch = c % (HS / 8);
        const long long r = out_row0 + m_start + row;
        if ((unsigned)(m_start + row) >= (unsigned)T || !head_chunk_stored<HS, true>(p.HS, ch)) continue;
        const uint4 o = o_staged ? *reinterpret_cast<const uint4*>(o_staged + swizzle<HS>(row, ch))
                                 : *reinterpret_cast<const uint4*>(p.out + b * p.o_st.batch + r * p.o_st.row + h * p.o_st.head + ch * 8);
        const uint4 g = *reinterpret_cast<const uint4*>(p.x.gate + b * gs.batch + r * gs.row + h * gs.head + ch * 8);
        *reinterpret_cast<uint4*>(p.x.gated_out + b * p.o_st.batch + r * p.o_st.row + h * p.o_st.head + ch * 8) = mul_bf16x8(o, g);
    }
}

// epilogue, as in the mma.sync kernel: O /= l, LSE = m * scale + log(l); each warp stages only its own 16 rows
// of O (swizzle<HS>, in Q's shared memory: the caller ordered every wgmma read of Q before this) for 16-byte stores;
// kStaged false: no staging (q_smem unused), each thread stores its own bf16 pairs
// Packed sequences: out_row0 = the sequence's first row of O, rows = its length (0: p.T); the LSE rows stay (B, NH, T)
// kGate (the kBias copies, which the gated calls run): gated_out = O * gate too, where the call gates
template <int HS, bool kStaged = true, bool kGeneral = false, bool kGate = false>
__device__ __forceinline__ void hopper_forward_epilogue(const AttentionForwardParams& p, float (&o_acc)[HS / 2],
                                                        const float (&row_max)[2], const float (&row_sum)[2],
                                                        uint8_t* q_smem, int b, int h, int m_start, int warp_row0,
                                                        int out_row0 = 0, int rows = 0) {
    const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    const int T = rows ? rows : p.T, NH = p.NH;
    const float scale = p.scale;
    __syncwarp();   // a persistent kernel comes back here: this warp's reads of its previous O rows are done
    #pragma unroll
    for (int half = 0; half < 2; half++) {
        float l = row_sum[half];
        l += __shfl_xor_sync(0xffffffff, l, 1);
        l += __shfl_xor_sync(0xffffffff, l, 2);
        const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
        const int row = warp_row0 + g + 8 * half;
        if (tq == 0 && (unsigned)(m_start + row) < (unsigned)T)   // m_start < 0: see block_start
            p.lse[((size_t)b * NH + h) * p.T + m_start + row] = l > 0.0f ? row_max[half] * scale + logf(l) : -INFINITY;
        #pragma unroll
        for (int dt = 0; dt < HS / 8; dt++) {
            const uint32_t o2 = pack_bf16x2(o_acc[4 * dt + 2 * half] * inv_l, o_acc[4 * dt + 2 * half + 1] * inv_l);
            if constexpr (kStaged) *reinterpret_cast<uint32_t*>(q_smem + swizzle<HS>(row, dt) + 4 * tq) = o2;
            else if ((unsigned)(m_start + row) < (unsigned)T && head_chunk_stored<HS, kGeneral>(p.HS, dt))
                *reinterpret_cast<uint32_t*>(p.out + b * p.o_st.batch + (out_row0 + m_start + row) * p.o_st.row + h * p.o_st.head + dt * 8 + 2 * tq) = o2;
        }
    }
    if constexpr (!kStaged) {
        if (kGate && p.x.gate) hopper_forward_gate<HS>(p, nullptr, b, h, m_start, warp_row0, out_row0, T);
        return;
    }
    __syncwarp();
    floatX* out_gl = p.out + b * p.o_st.batch + h * p.o_st.head;
    for (int c = lane; c < 16 * (HS / 8); c += 32) {
        int row = warp_row0 + c / (HS / 8), ch = c % (HS / 8);
        if ((unsigned)(m_start + row) < (unsigned)T && head_chunk_stored<HS, kGeneral>(p.HS, ch))
            *reinterpret_cast<uint4*>(out_gl + (out_row0 + m_start + row) * p.o_st.row + ch * 8) =
                *reinterpret_cast<const uint4*>(q_smem + swizzle<HS>(row, ch));
    }
    if (kGate && p.x.gate) hopper_forward_gate<HS>(p, q_smem, b, h, m_start, warp_row0, out_row0, T);
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
__global__ void __launch_bounds__(1024) packed_blocks_kernel(PackedTableSpec queries, PackedTableSpec keys, int B) {
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
// item w of a table: head h of sequence b's block `block`, the sequence's first rows and lengths, its causal diagonal
struct PackedBlock { int b, h, block, q0, T, k0, Tk, diag; };
__device__ __forceinline__ PackedBlock packed_block(const int* table, int w, const AttentionExtras& x, bool causal) {
    const int count = table[0], pair = w % count;
    const int b = table[1 + 2 * pair], block = table[2 + 2 * pair];
    const int q0 = x.cu_seqlens_q[b], k0 = x.cu_seqlens_k[b];
    const int T = x.cu_seqlens_q[b + 1] - q0, Tk = x.cu_seqlens_k[b + 1] - k0;
    return {b, w / count, block, q0, T, k0, Tk, attention_diagonal(causal, T, Tk)};
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
template <int HS, int kNCWG_, int kBlockN_, int kStages_, bool kBias_ = false, bool kVarlen_ = false>
struct HopperWsTile {
    static constexpr int kHeadSize = HS, kNCWG = kNCWG_, kBlockN = kBlockN_, kStages = kStages_;
    static constexpr int kBlockM = 64 * kNCWG, kThreads = 128 * (kNCWG + 1);
    static constexpr int kQBytes = kBlockM * HS * 2, kTileBytes = kBlockN * HS * 2;
    static constexpr bool kBias = kBias_, kVarlen = kVarlen_;
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
// A/B overrides for the dev harness (--schedule, --pdl); by default the rules below decide
struct AttentionTuning {
    enum { kByShape = 0, kRoundRobin = 1, kClaimed = 2 };
    int schedule = kByShape;   // the persistent Hopper kernels' schedule
    bool pdl = true;           // programmatic dependent launch of the Hopper backward's kernels
    int dbias_slots = 0;       // the ordered dBias's accumulator slots (DbiasOrder); 0: by shape
};
inline AttentionTuning& attention_tuning() { static AttentionTuning t; return t; }

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
    int T, Tk, NH, group, diag, num_bh, num_m_blocks, num_ranks, num_items, section_heads, cta_rank;
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
          diag(kSelfCausal ? 0 : attention_diagonal(p)), num_bh(p.B * p.NH),
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
            int m_start, b, h, n_blocks, q_row0 = 0, k_row0 = 0, map_b;
            if constexpr (Tile::kVarlen) {
                const PackedBlock pb = walk.packed_item(w);
                m_start = pb.block * kBlockM, b = pb.b, h = pb.h, n_blocks = walk.packed_key_blocks(pb);
                q_row0 = pb.q0, k_row0 = pb.k0, map_b = 0;
            } else {
                const PersistentItem item = persistent_item(w, num_ranks, num_bh, section_heads);
                const int m_top = num_m_blocks - 1 - kCluster * item.rank;   // the item's upper block: its walk is the ring's
                b = item.bh / NH, h = item.bh % NH, map_b = b;
                m_start = walk.block_start(m_top - cta_rank);
                n_blocks = walk.key_blocks(walk.block_start(m_top));
            }
            const int h_kv = h / walk.group;
            const int qslot = tile_iter % Tile::kQSlots;
            mbar_wait(&q_empty[qslot], ((tile_iter / Tile::kQSlots) & 1) ^ 1);   // the slot's last S has read Q
            mbar_arrive_expect_tx(&q_full[qslot], Tile::kQBytes);
            for (int c = 0; c < kCB; c++)
                tma_load_4d(q_smem + qslot * Tile::kQBytes + c * kBlockM * 128, &maps.q, &q_full[qslot], 64 * c, h, q_row0 + m_start, map_b);
            for (int i = 0; i < n_blocks; i++, kv_iter++) {   // the diagonal tile first, as the consumers walk
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
    constexpr bool kHalfDiag = kBlockM == kBlockN && HS == 64 && !Tile::kBias && !Tile::kVarlen;
    auto consumer = [&](auto wg0) {
        constexpr bool half_diag = kHalfDiag && decltype(wg0)::value;
        float s[kNT * 4];       // S of the current tile, then P in fp32
        uint32_t pa[kPS][4];    // P of the previous tile in bf16: the A fragments of P V
        float o_acc[kDT * 4];   // O, as in the kernels above
        float row_max[2], row_sum[2], alpha[2];

        // Ping-pong turn order: consumer c waits on barrier 1 + c and then lets consumer c + 1 go. Consumer 0 takes
        // the very first turn without waiting and the last consumer skips its very last hand-over, so every
        // bar.arrive meets a bar.sync and no barrier is left half-arrived when the CTA exits.
        bool first_turn = true;
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
            wgmma_ss_over_hs<HS, kBlockN, kBlockM, /*kScaleD0=*/0>(s, q_desc, k_smem + slot * Tile::kTileBytes);
            wgmma_commit();
        };
        // an item's first S; with half_diag its left half only, into s_left = the upper half of s (with the lower
        // half, ptxas reports C7511: wgmmas serialised for want of registers)
        float (&s_left)[kNT * 2] = *reinterpret_cast<float(*)[kNT * 2]>(s + kNT * 2);
        auto issue_s0 = [&](int slot) {
            if constexpr (half_diag) {
                wgmma_ss_over_hs<HS, kBlockN / 2, kBlockM, /*kScaleD0=*/0, kBlockN>(s_left, q_desc, k_smem + slot * Tile::kTileBytes);
                wgmma_commit();
            } else {
                issue_s(slot);
            }
        };
        auto issue_pv = [&](int slot) {   // O += P V: k16 step i = keys 16i .. 16i + 15
            #pragma unroll
            for (int i = 0; i < kPS; i++) wgmma_rs_m64k16_trans_b<HS, kBlockN>(o_acc, pa[i], v_smem + slot * Tile::kTileBytes, i);
            wgmma_commit();
        };
        auto pack_p = [&]() {
            #pragma unroll
            for (int i = 0; i < kPS; i++) accum_to_a_frag(pa[i], s, i);
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
            int m_start, b, h, n_blocks, item_Tk = Tk, item_diag = diag, out_row0 = 0, rows = 0;
            if constexpr (Tile::kVarlen) {
                const PackedBlock pb = walk.packed_item(w);
                m_start = pb.block * kBlockM, b = pb.b, h = pb.h, n_blocks = walk.packed_key_blocks(pb);
                item_Tk = pb.Tk, item_diag = pb.diag, out_row0 = pb.q0, rows = pb.T;
            } else {
                const PersistentItem item = persistent_item(w, num_ranks, num_bh, section_heads);
                const int m_block = num_m_blocks - 1 - kCluster * item.rank - cta_rank;
                b = item.bh / NH, h = item.bh % NH;
                m_start = walk.block_start(m_block);
                n_blocks = walk.key_blocks(m_start);
            }
            const int qslot = tile_iter % Tile::kQSlots;
            bool has_next = false;
            if constexpr (!kDynamic) has_next = item_of(tile_iter + 1) < num_items;
            auto softmax = [&](int j) {   // on tile j (loop order): P_j (fp32) in s, row statistics, alpha
                const int key0 = (n_blocks - 1 - j) * kBlockN;
                if constexpr (Tile::kBias) {   // its bias tile and key bias (loaded with K tile j), then handed back
                    const int it = kv_iter + j, bslot = it % Tile::kBiasStages;
                    mbar_wait(&sm.bias_full[bslot], (it / Tile::kBiasStages) & 1);
                    add_bias_tile_smem<kNT, kBlockM>(s, sm.bias + bslot * Tile::kBiasBytes, walk.bias.rows, warp_row0 + g, tq, inv_scale);
                    if (p.x.key_bias) add_key_bias_frag<kNT>(s, sm.key_bias + bslot * kBlockN, 0, tq, inv_scale);
                    __syncwarp();
                    release(&sm.bias_empty[bslot]);
                }
                constexpr bool kKeyBound = !std::remove_reference_t<decltype(walk)>::kSelfCausal;
                if (key0 + kBlockN - 1 > (kKeyBound ? min(m_start + warp_row0 + item_diag, item_Tk - 1) : m_start + warp_row0 + item_diag))
                    mask_tile<kNT, kKeyBound>(s, m_start + warp_row0 + item_diag, key0, item_Tk, g, tq);
                online_softmax_tile<kNT>(s, row_max, row_sum, alpha, scale_log2);
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
                    if (i < kPS / 2) accum_to_a_frag(pa[i], s_left, i);
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

            hopper_forward_epilogue<HS, Tile::kStageO, kGeneral, Tile::kBias>(p, o_acc, row_max, row_sum, o_smem, b, h, m_start, warp_row0,
                                                                              out_row0, rows);
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
    if (kHalfDiag && cwg == 0 && diag == 0) consumer(std::true_type{});   // causal, T = Tk
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
template <int HS, int kNCWG, int kBlockN, int kStages, bool kPingPong, int kCluster = 1, bool kDynamic = false, bool kGeneral = false,
          bool kBias = false, bool kVarlen = false>
__global__ void __launch_bounds__(HopperWsTile<HS, kNCWG, kBlockN, kStages>::kThreads, 1)
attention_forward_hopper_ws_kernel(const AttentionForwardParams p, const __grid_constant__ HopperForwardMaps<kBias, kVarlen> maps,
                                   int section_heads) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(HS == 64 || HS == 128 || HS == 256, "head dims 64, 128, 256");
    static_assert(kStages >= 2, "V_{j-1} and K_j are in flight together");
    static_assert(!kPingPong || kNCWG >= 2, "ping-pong needs two consumer warpgroups");
    using Tile = HopperWsTile<HS, kNCWG, kBlockN, kStages, kBias, kVarlen>;
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
    if (x.bias || x.seqlens_k || x.gate || x.doc_start || x.key_bias || !hopper_path_available()) return false;
    for (const AttentionStrides& st : strides) if (st.batch != 0) return false;
    return true;
}
inline bool attention_forward_hopper_packed_fits(const AttentionForwardParams& p) {
    return (p.HS == 64 || p.HS == 96 || p.HS == 128 || p.HS == 256) && attention_hopper_packed_fits(p.x, {p.q_st, p.k_st, p.v_st, p.o_st});
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
    if ((!x.bias && !x.key_bias) || x.seqlens_k || x.cu_seqlens_q || x.cu_seqlens_k || x.doc_start || !hopper_path_available()) return false;
    return !x.bias || bias_tma_ready(x.bias, x.bias_st, x.bias_fp32);
}
// gating alone: the forward's Hopper kBias copies (with a zero tile bias: their epilogue gates), the backward's general
// Hopper copies (its preprocess gates)
inline bool attention_gate_only(const AttentionExtras& x) {
    return x.gate && !x.bias && !x.key_bias && !x.seqlens_k && !x.cu_seqlens_q && !x.cu_seqlens_k && !x.doc_start;
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
__global__ void bias_dense_kernel(void* dst, bool dst_fp32, AttentionStrides dst_st, int Hd, int Tk, long long row, const void* a,
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
__global__ void key_bias_kernel(float* kb, int Hk, int Tk, long long row, const void* src, AttentionStrides src_st, bool src_fp32,
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
          bool kBias = false, bool kVarlen = false>
void launch_attention_forward_hopper_ws(const AttentionForwardParams& p, cudaStream_t stream) {
    using Tile = HopperWsTile<HS, kNCWG, kBlockN, kStages, kBias, kVarlen>;
    constexpr auto kKernel = attention_forward_hopper_ws_kernel<HS, kNCWG, kBlockN, kStages, kPingPong, kCluster, kDynamic, kGeneral, kBias, kVarlen>;
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
// one row each, too few to stream a long cache at full bandwidth. Here one CTA takes (split, b, key/value head): the
// R = T * NH / NH_kv query rows that read this key/value head (with GQA the group's heads share every K/V byte read),
// padded to one m16 tile, against one split of the keys. Its 4 warps take 16 keys each of every 64-key stage of a
// 3-deep cp.async ring and keep their own online softmax; at the end the CTA merges its warps. With one split it
// writes O and LSE itself; otherwise each split leaves (O / l, LSE) in fp32 scratch, and the last split of a
// (b, key/value head) to finish (a counter per pair) combines them, each weighted by exp(LSE_split - LSE): no second
// kernel, whose launch and ramp cost more than the combine itself. seqlens_k (optional, per sequence): the keys of
// sequence b are 0 .. seqlens_k[b] - 1 of the cache, the last T of them the new tokens' (causal: query t sees keys
// <= t + len - T).
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
// (b, key/value head), the splits finished so far (zero between launches: the last split resets it)
struct DecodePartials { float* lse; float* o; int* done; };

template <int HS>
__global__ void __launch_bounds__(32 * kDecodeWarps)
attention_decode_kernel(const AttentionForwardParams p, const int* seqlens_k, int split_keys, DecodePartials part) {
    using Tile = DecodeTile<HS>;
    constexpr int kKS = HS / 16, kDT = HS / 8;
    extern __shared__ __align__(1024) uint8_t smem[];
    uint8_t* q_smem = smem;                   // (16, HS): the R rows, zeros below
    uint8_t* ring = smem + Tile::kQBytes;     // [stage][K, V] (64, HS)
    const int split = blockIdx.x, num_splits = gridDim.x;
    const int b = blockIdx.y / p.NH_kv, h_kv = blockIdx.y % p.NH_kv;
    const int group = p.NH / p.NH_kv, T = p.T, R = group * T;   // row r: query head h_kv * group + r / T, token t = r % T
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    const int keys = seqlens_k ? seqlens_k[b] : p.Tk;
    const int key_begin = split * split_keys, key_end = min(key_begin + split_keys, keys);
    const int stages = key_end > key_begin ? ceil_div(key_end - key_begin, kDecodeKeys) : 0;
    const floatX* k_gl = p.k + b * p.k_st.batch + h_kv * p.k_st.head;
    const floatX* v_gl = p.v + b * p.v_st.batch + h_kv * p.v_st.head;

    for (int c = threadIdx.x; c < kDecodeRows * (HS / 8); c += Tile::kThreads) {
        const int r = c / (HS / 8), ch = c % (HS / 8);
        const bool valid = r < R;
        const floatX* src = p.q + b * p.q_st.batch + (valid ? (r % T) * p.q_st.row + (h_kv * group + r / T) * p.q_st.head : 0) + ch * 8;
        cp_async_16(smem_addr(q_smem + swizzle<HS>(r, ch)), src, valid);
    }
    auto load_stage = [&](int s) {   // keys key_begin + 64 s .. + 63 (zeros from key_end on) into slot s % kDecodeStages
        uint8_t* slot = ring + (s % kDecodeStages) * Tile::kStageBytes;
        const int row0 = key_begin + s * kDecodeKeys;
        load_tile_async<HS, Tile::kThreads>(slot, k_gl, p.k_st.row, row0, kDecodeKeys, key_end);
        load_tile_async<HS, Tile::kThreads>(slot + kDecodeKeys * HS * 2, v_gl, p.v_st.row, row0, kDecodeKeys, key_end);
    };
    #pragma unroll
    for (int s = 0; s < kDecodeStages - 1; s++) {   // one commit group per stage, empty past the end (Q joins the first)
        if (s < stages) load_stage(s);
        cp_async_commit();
    }

    // this thread's rows g, g + 8: the last key each may see (-1: a padding row)
    int last_key[2];
    #pragma unroll
    for (int half = 0; half < 2; half++) {
        const int r = g + 8 * half;
        last_key[half] = r >= R ? -1 : min(p.causal ? r % T + keys - T : keys - 1, key_end - 1);
    }
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
            mma_bf16_16816(sc[0], q_frag[ks], kb[0], kb[1]);
            mma_bf16_16816(sc[1], q_frag[ks], kb[2], kb[3]);
        }
        #pragma unroll
        for (int half = 0; half < 2; half++) {
            float mx = row_max[half];
            #pragma unroll
            for (int nt = 0; nt < 2; nt++)
                #pragma unroll
                for (int e = 2 * half; e < 2 * half + 2; e++) {
                    if (key0 + nt * 8 + 2 * tq + (e % 2) > last_key[half]) sc[nt][e] = -INFINITY;
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
        uint32_t pa[4];   // P (16 rows x the warp's 16 keys) in bf16: the A fragment of O += P V
        accum_tiles_to_a_frag(pa, sc[0], sc[1]);
        #pragma unroll
        for (int dp = 0; dp < kDT / 2; dp++) {
            uint32_t vb[4];
            ldmatrix_x4_trans(vb, smem_addr(v_s + swizzle<HS>(lane % 8 + 8 * ((lane / 8) % 2), 2 * dp + lane / 16)));
            mma_bf16_16816(o_acc[2 * dp], pa, vb[0], vb[1]);
            mma_bf16_16816(o_acc[2 * dp + 1], pa, vb[2], vb[3]);
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
        const int r = g + 8 * half;
        if (tq == 0) { mine[r] = row_max[half] == -INFINITY ? -INFINITY : row_max[half] * scale_log2; mine[16 + r] = l; }
        #pragma unroll
        for (int dt = 0; dt < kDT; dt++)
            *reinterpret_cast<float2*>(mine + 32 + r * HS + dt * 8 + 2 * tq) = make_float2(o_acc[dt][2 * half], o_acc[dt][2 * half + 1]);
    }
    __syncthreads();
    const size_t rows = (size_t)gridDim.y * R;   // B * NH * T
    for (int c = threadIdx.x; c < R * (HS / 4); c += Tile::kThreads) {
        const int r = c / (HS / 4), col = (c % (HS / 4)) * 4;
        float m = -INFINITY;
        #pragma unroll
        for (int w = 0; w < kDecodeWarps; w++) m = fmaxf(m, merge[w * Tile::kMergeFloats + r]);
        float l = 0.0f;
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (m != -INFINITY) {
            #pragma unroll
            for (int w = 0; w < kDecodeWarps; w++) {
                const float* wm = merge + w * Tile::kMergeFloats;
                const float f = fast_exp2(wm[r] - m);   // 0 for a warp that saw no key of this row
                const float4 x = *reinterpret_cast<const float4*>(wm + 32 + r * HS + col);
                l += f * wm[16 + r];
                acc.x += f * x.x; acc.y += f * x.y; acc.z += f * x.z; acc.w += f * x.w;
            }
        }
        const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
        const float lse = l > 0.0f ? (m + __log2f(l)) / kLog2e : -INFINITY;   // natural log
        const int h = h_kv * group + r / T, t = r % T;
        const size_t row = ((size_t)b * p.NH + h) * T + t;
        if (num_splits == 1) {
            floatX* dst = p.out + b * p.o_st.batch + t * p.o_st.row + h * p.o_st.head + col;
            *reinterpret_cast<uint2*>(dst) = make_uint2(pack_bf16x2(acc.x * inv_l, acc.y * inv_l), pack_bf16x2(acc.z * inv_l, acc.w * inv_l));
            if (p.lse && col == 0) p.lse[row] = lse;
        } else {
            *reinterpret_cast<float4*>(part.o + (split * rows + row) * HS + col) =
                make_float4(acc.x * inv_l, acc.y * inv_l, acc.z * inv_l, acc.w * inv_l);
            if (col == 0) part.lse[split * rows + row] = lse;
        }
    }
    if (num_splits == 1) return;

    // the last split of this (b, key/value head) combines: O = sum_s exp(lse_s - lse) O_s, lse = log sum_s exp(lse_s)
    __shared__ int is_last;
    __threadfence();   // this split's partials are visible device-wide before it is counted
    __syncthreads();
    if (threadIdx.x == 0) {
        const int finished = atomicAdd(&part.done[blockIdx.y], 1);
        is_last = finished == num_splits - 1;
        if (is_last) part.done[blockIdx.y] = 0;   // every split of this launch has counted: ready for the next
    }
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    // each row's split weights exp(lse_s - lse) into the ring (its merge is done): a warp a row, its lanes over the splits
    float* w = merge;                                    // [split][16]
    float* row_lse = merge + num_splits * kDecodeRows;   // [16]: the combined lse, or -inf
    for (int r = warp; r < R; r += kDecodeWarps) {
        const size_t row = ((size_t)b * p.NH + h_kv * group + r / T) * T + r % T;
        float m = -INFINITY;
        for (int s = lane; s < num_splits; s += 32) {
            const float x = __ldcg(part.lse + s * rows + row);   // from L2: other SMs wrote it
            w[s * kDecodeRows + r] = x;
            m = fmaxf(m, x);
        }
        #pragma unroll
        for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, o));
        float sum = 0.0f;
        for (int s = lane; s < num_splits; s += 32) {
            const float e = m == -INFINITY ? 0.0f : expf(w[s * kDecodeRows + r] - m);
            w[s * kDecodeRows + r] = e;
            sum += e;
        }
        #pragma unroll
        for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffff, sum, o);
        const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        for (int s = lane; s < num_splits; s += 32) w[s * kDecodeRows + r] *= inv;
        if (lane == 0) row_lse[r] = sum > 0.0f ? m + logf(sum) : -INFINITY;
    }
    __syncthreads();
    for (int c = threadIdx.x; c < R * (HS / 4); c += Tile::kThreads) {
        const int r = c / (HS / 4), col = (c % (HS / 4)) * 4;
        const int h = h_kv * group + r / T, t = r % T;
        const size_t row = ((size_t)b * p.NH + h) * T + t;
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        #pragma unroll 16
        for (int s = 0; s < num_splits; s++) {
            const float ws = w[s * kDecodeRows + r];
            const float4 x = __ldcg(reinterpret_cast<const float4*>(part.o + (s * rows + row) * HS + col));
            acc.x += ws * x.x; acc.y += ws * x.y; acc.z += ws * x.z; acc.w += ws * x.w;
        }
        floatX* dst = p.out + b * p.o_st.batch + t * p.o_st.row + h * p.o_st.head + col;
        *reinterpret_cast<uint2*>(dst) = make_uint2(pack_bf16x2(acc.x, acc.y), pack_bf16x2(acc.z, acc.w));
        if (p.lse && col == 0) p.lse[row] = row_lse[r];
    }
}

// the decode kernels run where the R = T * NH / NH_kv rows that share a key/value head fit one m16 tile, and the keys
// are many enough that splitting them pays
inline bool attention_decode_applies(const AttentionForwardParams& p) {
    return (long long)p.T * (p.NH / p.NH_kv) <= kDecodeRows && p.Tk >= 2 * kDecodeKeys && (long long)p.B * p.NH_kv <= 65535 &&
           !p.x.bias && !p.x.cu_seqlens_q && !p.x.cu_seqlens_k && !p.x.gate && !p.x.doc_start && !p.x.bias2 && !p.x.key_mask &&
           !p.x.key_bias && p.HS >= 32;
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

template <int HS>
void launch_attention_decode(const AttentionForwardParams& p, const int* seqlens_k, cudaStream_t stream) {
    using Tile = DecodeTile<HS>;
    // splits: the count whose kv_heads * splits CTAs fill the GPU's CTA slots best (the last wave of a memory-bound
    // grid that is partly empty streams at part of the bandwidth), the fewest among equals (each split adds a partial
    // to combine). Each split streams at least 16 stages of keys (a shorter one spends much of its time filling its
    // ring), or 4 where 16 leave most slots empty.
    const int kv_heads = p.B * p.NH_kv;
    static int per_sm = 0;   // CTAs an SM holds (registers and shared memory)
    if (!per_sm) {
        cudaCheck(cudaFuncSetAttribute(attention_decode_kernel<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize, Tile::kSmemBytes));
        cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, attention_decode_kernel<HS>, Tile::kThreads, Tile::kSmemBytes));
        per_sm = std::max(per_sm, 1);
    }
    const long slots = (long)per_sm * device_props().multiProcessorCount;
    auto best_splits = [&](int min_stages, double* fill_out) {
        const int max_splits = std::max(1, std::min(ceil_div(p.Tk, min_stages * kDecodeKeys), Tile::kMaxSplits));
        int best_s = 1;
        double best = 0.0;
        for (int s = 1; s <= max_splits; s++) {
            const long ctas = (long)kv_heads * s;
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
    const int split_keys = ceil_div(ceil_div(p.Tk, splits), kDecodeKeys) * kDecodeKeys;
    splits = ceil_div(p.Tk, split_keys);
    DecodePartials part{nullptr, nullptr, nullptr};
    if (splits > 1) {
        const size_t rows = (size_t)p.B * p.NH * p.T;
        float* buf = (float*)attention_decode_scratch(splits * rows * (HS + 1) * sizeof(float));
        part = {buf, buf + splits * rows, attention_decode_counters(kv_heads)};
    }
    launch_with_smem<attention_decode_kernel<HS>>(dim3(splits, kv_heads), Tile::kThreads, Tile::kSmemBytes, stream, p, seqlens_k,
                                                  split_keys, part);
}

// ----------------------------------------------------------------------------
// public API

// nullptr if the call runs on this GPU, else the reason it does not
inline const char* attention_unsupported_reason(const AttentionForwardParams& p) {
    if (p.HS != 8 && p.HS != 16 && p.HS != 32 && p.HS != 64 && p.HS != 96 && p.HS != 128 && p.HS != 256)
        return "head dim must be 8, 16, 32, 64, 96, 128 or 256";
    if (p.B < 1 || p.T < 1 || p.Tk < 1 || p.NH < 1 || p.NH_kv < 1) return "B, T, Tk, NH and NH_kv must be at least 1";
    if (p.NH % p.NH_kv != 0) return "the query heads NH must be a multiple of the key/value heads NH_kv";
    if ((long long)p.B * p.NH > 2147483647LL) return "B * NH too large for the grid";
    if (p.x.seqlens_k && p.x.cu_seqlens_k) return "give key lengths either as seqlens_k (padded) or cu_seqlens_k (packed), not both";
    if (p.x.doc_start && (!p.causal || p.T != p.Tk || p.x.seqlens_k || p.x.cu_seqlens_q || p.x.cu_seqlens_k))
        return "document masking (doc_start) is for causal self-attention without key lengths or packed sequences";
    if (p.x.bias && (uintptr_t)p.x.bias % (p.x.bias_fp32 ? 4 : 2)) return "the bias must be aligned to its element size";
    if (p.x.bias2 && (uintptr_t)p.x.bias2 % (p.x.bias2_fp32 ? 4 : 2)) return "bias2 must be aligned to its element size";
    if (p.x.key_bias) return "key_bias is the kernels' form of bias2 and key_mask, set by attention_forward / attention_backward";
    if (p.x.gate && (!p.x.gated_out || (uintptr_t)p.x.gate % 16 || (uintptr_t)p.x.gated_out % 16 || p.x.gate_st.batch % 8 ||
                     p.x.gate_st.row % 8 || p.x.gate_st.head % 8))
        return "gating needs gated_out (the backward: dgate), and gate, gated_out 16-byte aligned with strides multiples of 8 elements";
    if (ceil_div(p.T, 64) > 65535) return "T too large for the grid";
    for (const AttentionStrides& st : {p.q_st, p.k_st, p.v_st, p.o_st}) {
        if (st.batch % 8 || st.row % 8 || st.head % 8) return "every batch, row and head stride must be a multiple of 8 elements (16 bytes)";
        if (st.row >= (1LL << 31)) return "row strides must be below 2^31 elements";
    }
    for (const void* ptr : {(const void*)p.q, (const void*)p.k, (const void*)p.v, (const void*)p.out})
        if ((uintptr_t)ptr % 16) return "Q, K, V and O must be 16-byte aligned";
    if (device_props().major < 8) return "needs compute capability 8.0 or newer (bf16 tensor cores)";
    return nullptr;
}
// GPT-2's shape (fused QKV, causal, scale 1/sqrt(HS))
inline const char* attention_unsupported_reason(int B, int T, int NH, int HS) {
    if (HS != 64 && HS != 128) return "head size (C / NH) must be 64 or 128";
    return attention_unsupported_reason(fused_qkv_forward_params(nullptr, nullptr, nullptr, B, T, NH, HS));
}

inline void attention_exit_unsupported(const char* what, int B, int T, int Tk, int NH, int NH_kv, int HS, const char* why) {
    fprintf(stderr, "attention %s: unsupported call B=%d T=%d Tk=%d NH=%d NH_kv=%d HS=%d: %s\n", what, B, T, Tk, NH, NH_kv, HS, why);
    exit(EXIT_FAILURE);
}

// Dispatch (tiles chosen by dev/cuda/attention_forward's sweeps, see dev/cuda/RESULTS.md):
//   Hopper with sm_90a code in the binary, HS 64, 96, 128, 256 -> the warp-specialised TMA kernel
//                (attention_forward_hopper_ws_kernel; HS 96 on HS 128's copies, zero-padded: see head_chunk_stored)
//   otherwise -> the mma.sync kernel: HS 64 128x64 tiles, HS 128 128x48 (4 warps of 32 rows: the largest key tile with no
//                spill at 255 registers); HS 32 128x64, HS 96 128x64, HS 256 64x32 (16 rows a warp: O alone is 128 registers)
inline bool attention_forward_uses_hopper(int /*HS*/) { return hopper_path_available(); }   // every head dim

inline const char* attention_forward_path_name(int HS) {
    if (attention_forward_uses_hopper(HS) && HS == 256)
        return "flash forward, wgmma+TMA sm90a, warp-specialised, 128x80 tiles (128x64 with a bias or packed sequences), 2 consumer warpgroups, 2 stages (HS=256)";
    if (attention_forward_uses_hopper(HS) && HS == 96)
        return "flash forward, wgmma+TMA sm90a, warp-specialised, HS 128's kernel with head dims 96..127 zero-padded, 128x128 tiles, 2 consumer warpgroups (HS=96)";
    if (attention_forward_uses_hopper(HS) && HS < 64)
        return "flash forward, wgmma+TMA sm90a, warp-specialised, HS 64's kernel with the head dims past HS zero-padded, 128x128 tiles, 2 consumer warpgroups (HS=8..32)";
    if (attention_forward_uses_hopper(HS))
        return HS == 64 ? "flash forward, wgmma+TMA sm90a, warp-specialised, 192x128 tiles / 3 consumer warpgroups (128x128 / 2 with few tiles), 3 stages (HS=64)"
                        : "flash forward, wgmma+TMA sm90a, warp-specialised, 128x128 tiles, 2 consumer warpgroups, CTA pairs sharing K/V where the blocks pair up (causal, T = Tk), items claimed at T >= 4096 (HS=128)";
    switch (HS) {
        case 64: return "flash forward, mma.sync sm80, 128x64 tiles, 4 warps (HS=64)";
        case 128: return "flash forward, mma.sync sm80, 128x48 tiles, 4 warps (HS=128)";
        case 256: return "flash forward, mma.sync sm80, 64x32 tiles, 4 warps (HS=256)";
        default: return "flash forward, mma.sync sm80, 128x64 tiles, 4 warps (HS=32, 96)";   // HS 96: before sm_90a
    }
}

inline void attention_forward_kvcache(const AttentionForwardParams& p, const int* seqlens_k, cudaStream_t stream);

// GPT-2's family (attention_self_causal) on the kernels compiled for it. The GPT-2 wrapper below calls only this, so
// a binary that uses only GPT-2's calls compiles none of the general copies.
inline void attention_forward_self_causal_path(const AttentionForwardParams& p, cudaStream_t stream) {
    const int HS = p.HS, T = p.T;
    if (attention_forward_uses_hopper(HS)) {
        // Warp-specialised TMA kernel, ping-pong on. HS 64: 3 consumer warpgroups (192-row blocks: a third less K/V
        // traffic per FLOP, a third warpgroup's softmax to hide the GEMMs behind) from 128K query rows (B * NH * T,
        // about 5 such blocks per SM), else 2 (128 rows); a 3-deep K/V ring for both, since each item's first S is
        // issued early.
        if (HS == 64 && (long)p.B * p.NH * T >= 128 * 1024) launch_attention_forward_hopper_ws<64, 3, 128, 3, true>(p, stream);
        else if (HS == 64) launch_attention_forward_hopper_ws<64, 2, 128, 3, true>(p, stream);
        // HS 128: pairs of CTAs share each K/V tile by TMA multicast where the 128-row query blocks pair up (an even
        // count; on the causal diagonal the pair's walk is its upper block's), which halves the K/V traffic out of
        // L2. At T >= 4096 the pairs claim their items (claimed_schedule).
        else if (ceil_div(T, 128) % 2 == 0 && claimed_schedule(T)) launch_attention_forward_hopper_ws<128, 2, 128, 2, true, 2, true>(p, stream);
        else if (ceil_div(T, 128) % 2 == 0) launch_attention_forward_hopper_ws<128, 2, 128, 2, true, 2>(p, stream);
        else launch_attention_forward_hopper_ws<128, 2, 128, 2, true>(p, stream);
    }
    else if (HS == 64) launch_attention_forward<64, 2, 4, 64>(p, stream);
    else launch_attention_forward<128, 2, 4, 48>(p, stream);
}

#ifndef FLASHGPT_ATTENTION_GPT2_ONLY   // (train_gpt2.cu defines it: a GPT-2 binary compiles none of the general copies)
// out = softmax(scale * Q K^T, masks) V and lse, for any call attention_unsupported_reason() accepts. A few query rows
// against many keys (decoding) run the split-key kernels; GPT-2's family the kernels above; everything else the general
// copies of the same kernels.
inline void attention_forward(const AttentionForwardParams& p, cudaStream_t stream) {
    if (const char* why = attention_unsupported_reason(p)) attention_exit_unsupported("forward", p.B, p.T, p.Tk, p.NH, p.NH_kv, p.HS, why);
    const int HS = p.HS, T = p.T;
    if (attention_decode_applies(p)) { attention_forward_kvcache(p, p.x.seqlens_k, stream); return; }
    if (attention_self_causal(p)) { attention_forward_self_causal_path(p, stream); return; }
    AttentionForwardParams k = p;   // the kernels' extras: bias2 and the key mask as the key bias (attention_kernel_extras)
    k.x = attention_kernel_extras(p.x, p.B, p.T, p.Tk, p.NH, stream);
    const bool hopper = attention_forward_uses_hopper(HS);
    // a bf16 tile bias, a key bias, gating: the Hopper kernels' kBias copies, the tiles below (HS 8-32 on HS 64's,
    // zero-padded; HS 256: 64 keys, since a ring of bias tiles does not fit beside 80-key K/V stages); gating alone
    // with a zero tile bias (their epilogue is the one that gates)
    if (attention_hopper_bias_fits(k.x) || (hopper && attention_gate_only(k.x))) {
        k.x = with_zero_tile_bias(k.x, p.Tk);
        if (HS <= 64) launch_attention_forward_hopper_ws<64, 2, 128, 3, true, 1, false, true, true>(k, stream);
        else if (HS == 96 || HS == 128) launch_attention_forward_hopper_ws<128, 2, 128, 2, true, 1, false, true, true>(k, stream);
        else launch_attention_forward_hopper_ws<256, 2, 64, 2, true, 1, false, true, true>(k, stream);
    }
    else if (attention_forward_hopper_packed_fits(k)) {   // packed sequences with their totals: the kVarlen copies
        if (HS == 64) launch_attention_forward_hopper_ws<64, 2, 128, 3, true, 1, false, true, false, true>(k, stream);
        else if (HS == 96 || HS == 128) launch_attention_forward_hopper_ws<128, 2, 128, 2, true, 1, false, true, false, true>(k, stream);
        else launch_attention_forward_hopper_ws<256, 2, 80, 2, true, 1, false, true, false, true>(k, stream);
    }
    else if (attention_has_extras(k.x) || (!hopper && HS <= 16)) {
        // key lengths, packed sequences, document masks, an fp32 bias; before sm_90a HS 8 and 16: the mma.sync kExtras copies
        if (HS <= 16) launch_attention_forward<16, 2, 4, 64, true, true>(k, stream);
        else if (HS == 64) launch_attention_forward<64, 2, 4, 64, true, true>(k, stream);
        else if (HS == 128) launch_attention_forward<128, 2, 4, 48, true, true>(k, stream);
        else if (HS == 32) launch_attention_forward<32, 2, 4, 64, true, true>(k, stream);
        else if (HS == 96) launch_attention_forward<96, 2, 4, 64, true, true>(k, stream);
        else launch_attention_forward<256, 1, 4, 32, true, true>(k, stream);
    }
    else if (hopper) {
        // the tiles of the path above (HS 8-32: HS 64's, HS 96: HS 128's, zero-padded); HS 256: 80-key tiles (a 128-row
        // Q block and two 40 KB stages each of K and V fill the 227 KB; O takes 128 registers a thread, S 40)
        if (HS <= 64 && (long)p.B * p.NH * T >= 128 * 1024) launch_attention_forward_hopper_ws<64, 3, 128, 3, true, 1, false, true>(k, stream);
        else if (HS <= 64) launch_attention_forward_hopper_ws<64, 2, 128, 3, true, 1, false, true>(k, stream);
        // HS 96 / 128 causal from T = 4096: claimed items, as the self-attention path's CTA pairs (which need T = Tk
        // and no GQA) claim theirs; round-robin, the long items of the last query blocks end on a few SMs
        else if ((HS == 96 || HS == 128) && p.causal && claimed_schedule(T)) launch_attention_forward_hopper_ws<128, 2, 128, 2, true, 1, true, true>(k, stream);
        else if (HS == 96 || HS == 128) launch_attention_forward_hopper_ws<128, 2, 128, 2, true, 1, false, true>(k, stream);
        // HS 256 causal: the items' lengths differ, and with the heads cut into sections (see persistent_section_heads)
        // the round-robin walk leaves the SMs unevenly loaded; from T = 1024 the items are claimed
        else if (p.causal && claimed_schedule(T, 1024)) launch_attention_forward_hopper_ws<256, 2, 80, 2, true, 1, true, true>(k, stream);
        else launch_attention_forward_hopper_ws<256, 2, 80, 2, true, 1, false, true>(k, stream);
    }
    else if (HS == 64) launch_attention_forward<64, 2, 4, 64, true>(k, stream);
    else if (HS == 128) launch_attention_forward<128, 2, 4, 48, true>(k, stream);
    else if (HS == 32) launch_attention_forward<32, 2, 4, 64, true>(k, stream);
    else if (HS == 96) launch_attention_forward<96, 2, 4, 64, true>(k, stream);
    else launch_attention_forward<256, 1, 4, 32, true>(k, stream);
}
#endif  // FLASHGPT_ATTENTION_GPT2_ONLY

// GPT-2: causal self-attention on the fused QKV activation. doc_start (B, T), optional: document masking (train_gpt2cu
// -dm 1), on the mma.sync kernels' kExtras copies
inline void attention_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH, int HS, cudaStream_t stream,
                              const int* doc_start = nullptr) {
    if (const char* why = attention_unsupported_reason(B, T, NH, HS)) attention_exit_unsupported("forward", B, T, T, NH, NH, HS, why);
    AttentionForwardParams p = fused_qkv_forward_params(out, lse, qkv, B, T, NH, HS);
    if (!doc_start) { attention_forward_self_causal_path(p, stream); return; }
    p.x.doc_start = doc_start;
    if (HS == 64) launch_attention_forward<64, 2, 4, 64, true, true>(p, stream);
    else launch_attention_forward<128, 2, 4, 48, true, true>(p, stream);
}

// Decoding against a KV cache: p.k, p.v the caches (B, Tk, NH_kv, HS) with p.Tk their capacity, p.q the T new tokens'
// queries; seqlens_k (device, B ints; nullptr: Tk each): sequence b's valid keys, the new tokens' included (causal:
// query t sees keys <= t + seqlens_k[b] - T). p.lse may be nullptr. Runs the split-key kernels, which need
// T * NH / NH_kv <= 16 (a prefill runs attention_forward).
inline void attention_forward_kvcache(const AttentionForwardParams& p, const int* seqlens_k, cudaStream_t stream) {
    const char* why = attention_unsupported_reason(p);
    if (!why && (long long)p.T * (p.NH / p.NH_kv) > kDecodeRows) why = "the KV-cache path takes T * NH / NH_kv <= 16 query rows (a prefill runs attention_forward)";
    if (!why && (long long)p.B * p.NH_kv > 65535) why = "B * NH_kv too large for the grid";
    if (!why && (p.x.bias || p.x.cu_seqlens_q || p.x.cu_seqlens_k || p.x.gate || p.x.doc_start || p.x.bias2 || p.x.key_mask))
        why = "the KV-cache path takes no bias, packed sequences, gating, key masks or document masks";
    if (!why && p.HS < 32) why = "the KV-cache path takes head dims 32 to 256 (attention_forward runs 8 and 16)";
    if (!seqlens_k) seqlens_k = p.x.seqlens_k;
    if (why) attention_exit_unsupported("forward (KV cache)", p.B, p.T, p.Tk, p.NH, p.NH_kv, p.HS, why);
    switch (p.HS) {
        case 32: launch_attention_decode<32>(p, seqlens_k, stream); break;
        case 64: launch_attention_decode<64>(p, seqlens_k, stream); break;
        case 96: launch_attention_decode<96>(p, seqlens_k, stream); break;
        case 128: launch_attention_decode<128>(p, seqlens_k, stream); break;
        default: launch_attention_decode<256>(p, seqlens_k, stream); break;
    }
}

// ============================================================================
// BACKWARD (below this line)

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

// The forward's call (q, k, v, out, lse, shape, causal, scale) plus dout and the three gradients, each with its
// strides (dq like q, dk and dv like k and v; they may be one fused buffer as in GPT-2)
struct AttentionBackwardParams {
    floatX *dq, *dk, *dv;         // fully overwritten; with GQA dK, dV are summed over each group of query heads
    void* scratch;                // attention_backward_scratch_bytes(p) bytes
    const floatX* dout;           // (B, T, NH, HS)
    const floatX *q, *k, *v;
    const floatX* out;            // the forward's output
    const float* lse;             // (B, NH, T) contiguous, the forward's natural-log LSE
    AttentionStrides q_st, k_st, v_st, o_st, do_st, dq_st, dk_st, dv_st;
    int B, T, Tk, NH, NH_kv, HS;
    bool causal;
    float scale;
    AttentionExtras x = {};       // the forward's
    void* dbias = nullptr;        // optional: d loss / d bias, bias's dtype and strides (summed over its broadcast
                                  // dimensions in a fixed order: deterministic); needs attention_backward_scratch_bytes(p)
    floatX* dgate = nullptr;      // with x.gate (then dout is d loss / d gated_out): d loss / d gate, with x.gate_st
    float* dqkv_sums = nullptr;   // optional, GPT-2's kernels only (attention_backward_sums_dqkv): (B * ceil(T / 16), 3 * NH * HS)
                                  // fp32; row (b, t / 16) holds the sums of dQ, dK, dV over tokens t .. t + 15 in the fused
                                  // QKV column order, so its column sums are the QKV projection's bias gradient
    void* dbias2 = nullptr;       // optional: d loss / d bias2, as dbias
};

// GPT-2: dqkv (B, T, 3, NH, HS) from dout (B, T, NH, HS)
inline AttentionBackwardParams fused_qkv_backward_params(floatX* dqkv, void* scratch, const floatX* dout, const floatX* qkv,
                                                         const floatX* out, const float* lse, int B, int T, int NH, int HS) {
    const AttentionStrides qkv_st = fused_qkv_strides(T, NH, HS), bthd = bthd_strides(T, NH, HS);
    const size_t part = (size_t)NH * HS;
    return {dqkv, dqkv + part, dqkv + 2 * part, scratch, dout, qkv, qkv + part, qkv + 2 * part, out, lse,
            qkv_st, qkv_st, qkv_st, bthd, bthd, qkv_st, qkv_st, qkv_st, B, T, T, NH, NH, HS, true, 1.0f / std::sqrt((float)HS)};
}

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
inline size_t attention_backward_scratch_bytes_for(int B, int T, int NH, int HS, bool with_dq_accum) {
    const size_t stats = 2 * (size_t)B * NH * bwd_padded_T(T) * sizeof(float);
    return stats + (with_dq_accum ? (size_t)B * NH * (T * HS * sizeof(float) + ceil_div(T, kDqOrderRows) * sizeof(int)) : 0);
}

// ----------------------------------------------------------------------------
// preprocess: dpsum = rowsum(dout * out), lse2 = lse * log2(e); a power of two of lanes per row (the shuffle reduction
// needs it: 16 at HS 96, HS / 8 otherwise), 16 bytes each
template <int HS> __host__ __device__ constexpr int preprocess_lanes() { return HS == 96 ? 16 : HS / 8; }

template <int HS, bool kExtras = false>
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
    const bool valid = row < (size_t)p.B * NH * Tp && t < T_b && chunk < (HS == 16 ? p.HS / 8 : HS / 8);   // HS 16: 8 or 16
    BackwardScratch sc = backward_scratch(p);
    float sum = 0.0f;
    if (valid) {
        const int r = q0 + t;
        const uint4 o = *reinterpret_cast<const uint4*>(p.out + b * p.o_st.batch + r * p.o_st.row + h * p.o_st.head + chunk * 8);
        uint4 d = *reinterpret_cast<const uint4*>(p.dout + b * p.do_st.batch + r * p.do_st.row + h * p.do_st.head + chunk * 8);
        if (kExtras && p.x.gate) {   // gating: dgate = dout * O; the kernels' dO = dout * gate, in the scratch
            const AttentionStrides& gs = p.x.gate_st;
            const uint4 gv = *reinterpret_cast<const uint4*>(p.x.gate + b * gs.batch + r * gs.row + h * gs.head + chunk * 8);
            *reinterpret_cast<uint4*>(p.dgate + b * gs.batch + r * gs.row + h * gs.head + chunk * 8) = mul_bf16x8(d, o);
            d = mul_bf16x8(d, gv);
            const AttentionStrides ds = gated_dout_strides(p);
            *reinterpret_cast<uint4*>(sc.gated_dout + b * ds.batch + r * ds.row + h * ds.head + chunk * 8) = d;
        }
        const __nv_bfloat162* o2 = reinterpret_cast<const __nv_bfloat162*>(&o);
        const __nv_bfloat162* d2 = reinterpret_cast<const __nv_bfloat162*>(&d);
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            float2 of = __bfloat1622float2(o2[i]), df = __bfloat1622float2(d2[i]);
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

// postprocess (atomic path): dq (bf16) = scale * dq_accum (B*NH, T, HS) fp32; 8 elements per thread
template <int HS>
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
    uint4 packed = make_uint4(pack_bf16x2(x.x * scale, x.y * scale), pack_bf16x2(x.z * scale, x.w * scale),
                              pack_bf16x2(y.x * scale, y.y * scale), pack_bf16x2(y.z * scale, y.w * scale));
    *reinterpret_cast<uint4*>(p.dq + b * p.dq_st.batch + t * p.dq_st.row + h * p.dq_st.head + chunk * 8) = packed;
}

// ----------------------------------------------------------------------------
// Warp-level steps of the dK/dV and fused kernels (S^T with the keys as MMA rows, so P^T and dS^T come out of the
// accumulators already in the A-fragment layout of dV += P^T dO and dK += dS^T Q: FA3's "swapAB"). A warp owns
// kMT m16 tiles of keys (rows warp_row0.. of the K, V tiles); accumulator tile [mt][nt] holds keys mt*16 + g, + 8
// and queries q0 + nt*8 + 2tq, +1 of the stage's Q, dO tiles (g = lane / 4, tq = lane % 4).

// S^T = K Q^T and dP^T = V dO^T, 16 * kMT keys x kQT * 8 queries
template <int HS, int kMT, int kQT>
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
                mma_bf16_16816(st[mt][2 * np], ka[mt], qb[0], qb[1]);
                mma_bf16_16816(st[mt][2 * np + 1], ka[mt], qb[2], qb[3]);
                mma_bf16_16816(dpt[mt][2 * np], va[mt], dob[0], dob[1]);
                mma_bf16_16816(dpt[mt][2 * np + 1], va[mt], dob[2], dob[3]);
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
template <int HS, int kMT, int kQT, int kCols = HS>
__device__ __forceinline__ void backward_dv_dk(float (&dv_acc)[kMT][kCols / 8][4], float (&dk_acc)[kMT][kCols / 8][4],
                                               const float (&st)[kMT][kQT][4], const float (&dpt)[kMT][kQT][4],
                                               const uint8_t* q_s, const uint8_t* do_s, int q0, int lane, int col0 = 0) {
    #pragma unroll
    for (int kk = 0; kk < kQT / 2; kk++) {
        uint32_t pa[kMT][4], dsa[kMT][4];
        #pragma unroll
        for (int mt = 0; mt < kMT; mt++) {
            accum_tiles_to_a_frag(pa[mt], st[mt][2 * kk], st[mt][2 * kk + 1]);
            accum_tiles_to_a_frag(dsa[mt], dpt[mt][2 * kk], dpt[mt][2 * kk + 1]);
        }
        #pragma unroll
        for (int dp = 0; dp < kCols / 16; dp++) {
            uint32_t dob[4], qb[4];
            const int qrow = q0 + 16 * kk + (lane % 8) + 8 * ((lane / 8) % 2);
            ldmatrix_x4_trans(dob, smem_addr(do_s + swizzle<HS>(qrow, col0 / 8 + 2 * dp + lane / 16)));
            ldmatrix_x4_trans(qb, smem_addr(q_s + swizzle<HS>(qrow, col0 / 8 + 2 * dp + lane / 16)));
            #pragma unroll
            for (int mt = 0; mt < kMT; mt++) {
                mma_bf16_16816(dv_acc[mt][2 * dp], pa[mt], dob[0], dob[1]);
                mma_bf16_16816(dv_acc[mt][2 * dp + 1], pa[mt], dob[2], dob[3]);
                mma_bf16_16816(dk_acc[mt][2 * dp], dsa[mt], qb[0], qb[1]);
                mma_bf16_16816(dk_acc[mt][2 * dp + 1], dsa[mt], qb[2], qb[3]);
            }
        }
    }
}

// epilogue: dK *= scale; dK, dV (the warp's keys x kDT * 8 columns from col0) -> bf16, staged in the warp's own rows
// of the K/V tiles (swizzle<HS>; free once every warp is past the last barrier) for 16-byte stores
// (dk_gl, dv_gl: key 0 of the head; Tk keys)
template <int HS, int kMT, int kDT>
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
                    pack_bf16x2(dk_acc[mt][dt][2 * half] * scale, dk_acc[mt][dt][2 * half + 1] * scale);
                *reinterpret_cast<uint32_t*>(v_smem + swizzle<HS>(row, col0 / 8 + dt) + 4 * tq) =
                    pack_bf16x2(dv_acc[mt][dt][2 * half], dv_acc[mt][dt][2 * half + 1]);
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

template <int HS, int kNWarps, int kMT, int kBlockM, bool kAtomicDq, bool kExtras = false>
__global__ void __launch_bounds__(kNWarps * 32)
attention_backward_dkdv_kernel(const AttentionBackwardParams p) {
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
    const int T = seq.T, Tk = seq.Tk, diag = attention_diagonal(p.causal, T, Tk);
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
    // the first query block with a query that sees a key here (query i sees key j iff j <= i + diag)
    const int m_first = max(n_start - diag, 0) / kBlockM;
    const int m_blocks = ceil_div(T, kBlockM);
    // document masking: the query blocks end at the first whose first row starts a document after these keys
    int m_end = m_blocks;
    if (kExtras && p.x.doc_start) {
        const int* docs = p.x.doc_start + (size_t)b * p.T;
        m_end = m_first;
        while (m_end < m_blocks && docs[m_end * kBlockM] < n_start + kBlockN) m_end++;
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
        backward_st_dpt<HS, kMT, kQT>(st, dpt, k_smem, v_smem, q_s, do_s, warp_row0, 0, lane);
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
        // P^T = exp2(S^T * c - lse2[query]), 0 where key > query + diag; dS^T = P^T * (dP^T - D[query]). Only tiles
        // where some key of this warp exceeds some query's limit need the mask (keys past Tk need none: their rows
        // of dK, dV are not stored).
        const bool need_mask = warp_key0 + 16 * kMT - 1 > m_start + diag;
        backward_p_ds<kMT, kQT>(st, dpt, lse2_s, dpsum_s, 0, need_mask, warp_key0, m_start + diag, scale_log2, lane);
        if constexpr (kAtomicDq) {   // dS^T (bf16) to shared memory, [key][query], for dQ = dS K below
            #pragma unroll
            for (int mt = 0; mt < kMT; mt++)
                #pragma unroll
                for (int nt = 0; nt < kQT; nt++) {
                    const int row = warp_row0 + mt * 16 + g;
                    *reinterpret_cast<uint32_t*>(ds_smem + swizzle<kBlockM>(row, nt) + 4 * tq) = pack_bf16x2(dpt[mt][nt][0], dpt[mt][nt][1]);
                    *reinterpret_cast<uint32_t*>(ds_smem + swizzle<kBlockM>(row + 8, nt) + 4 * tq) = pack_bf16x2(dpt[mt][nt][2], dpt[mt][nt][3]);
                }
        }
        backward_dv_dk<HS, kMT, kQT, kAccDT * 8>(dv_acc, dk_acc, st, dpt, q_s, do_s, 0, lane, col0);   // dV += P^T dO, dK += dS^T Q
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
                    mma_bf16_16816(dq[2 * dp], dsa, kb[0], kb[1]);
                    mma_bf16_16816(dq[2 * dp + 1], dsa, kb[2], kb[3]);
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
    backward_store_dk_dv<HS, kMT, kAccDT>(dk_acc, dv_acc, k_smem, v_smem, p.dk + b * p.dk_st.batch + h_kv * p.dk_st.head + seq.k0 * p.dk_st.row,
                                          p.dk_st.row, p.dv + b * p.dv_st.batch + h_kv * p.dv_st.head + seq.k0 * p.dv_st.row, p.dv_st.row,
                                          p.scale, kExtras && p.x.cu_seqlens_k ? Tk : p.Tk, n_start, warp_row0, col0, lane, head_chunks);
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

template <int HS, int kNWarps, int kMT, int kBlockN, bool kExtras = false>
__global__ void __launch_bounds__(kNWarps * 32)
attention_backward_dq_kernel(const AttentionBackwardParams p) {
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
    const int T = seq.T, Tk = seq.Tk, diag = attention_diagonal(p.causal, T, Tk);
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
    // document masking: the block's first row starts the earliest document; the key tiles before it are skipped
    int n_first = 0, doc_first[kMT][2] = {}, warp_doc_first = 0;
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
        // a warp whose rows all lie above this K tile has nothing to do here (every key masked)
        if (n_block * kBlockN <= m_start + warp_row0 + 16 * kMT - 1 + diag && (!kExtras || n_block * kBlockN + kBlockN > warp_doc_first)) {
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
                        mma_bf16_16816(s[mt][2 * np], qa, kb[0], kb[1]);
                        mma_bf16_16816(s[mt][2 * np + 1], qa, kb[2], kb[3]);
                        mma_bf16_16816(dp[mt][2 * np], da, vb[0], vb[1]);
                        mma_bf16_16816(dp[mt][2 * np + 1], da, vb[2], vb[3]);
                    }
                }
            }
            if (kExtras && p.x.bias) add_bias_tile<kMT, kNT>(s, bias_tile(stage), bias_pitch, p.x.bias_fp32, warp_row0, 1.0f / p.scale, lane);
            if (kExtras && p.x.key_bias) add_key_bias<kMT, kNT>(s, key_bias_of(p.x, b, h), n_block * kBlockN, 1.0f / p.scale, lane);
            if (kExtras && p.x.doc_start) mask_before_documents<kMT, kNT>(s, doc_first, n_block * kBlockN, lane);
            // P = exp2(S * c - lse2), 0 where key > query + diag or key >= Tk (only on tiles crossing this warp's
            // limits); dS = P * (dP - D)
            const bool need_mask = n_block * kBlockN + kBlockN - 1 > min(m_start + warp_row0 + diag, Tk - 1);
            #pragma unroll
            for (int mt = 0; mt < kMT; mt++)
                #pragma unroll
                for (int nt = 0; nt < kNT; nt++)
                    #pragma unroll
                    for (int e = 0; e < 4; e++) {
                        float x = s[mt][nt][e] * scale_log2 - row_lse2[mt][e / 2];
                        const int key = n_block * kBlockN + nt * 8 + 2 * tq + (e % 2);
                        if (need_mask && (key > m_start + warp_row0 + mt * 16 + g + 8 * (e / 2) + diag || key >= Tk)) x = -INFINITY;
                        dp[mt][nt][e] = fast_exp2(x) * (dp[mt][nt][e] - row_dpsum[mt][e / 2]);
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
            mma_accum_times_tile(dq_acc, dp, [&](int kk, int dpair) {
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
                    pack_bf16x2(dq_acc[mt][dt][2 * half] * scale, dq_acc[mt][dt][2 * half + 1] * scale);
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

// ----------------------------------------------------------------------------
// dbias: the dq kernel's dS (B, NH, T, Tk) summed over the bias's broadcast dimensions (its zero strides), one thread
// per dbias element, in a fixed order (deterministic). Elements a row does not see (masked, past its sequence, before
// its document) add 0: the dq kernel skips them.

inline size_t attention_dbias_elements(const AttentionBackwardParams& p, const AttentionStrides& st) {
    return (size_t)(st.batch ? p.B : 1) * (st.head ? p.NH : 1) * (st.row ? p.T : 1) * p.Tk;
}

// st, fp32, dbias: the bias's strides and dtype, and its gradient (bias or bias2)
__global__ void attention_dbias_kernel(const AttentionBackwardParams p, const AttentionStrides st, bool fp32, void* dbias) {
    const int Bd = st.batch ? p.B : 1, Hd = st.head ? p.NH : 1, Td = st.row ? p.T : 1;
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)Bd * Hd * Td * p.Tk) return;
    const int j = idx % p.Tk, i0 = idx / p.Tk % Td, h0 = idx / ((size_t)p.Tk * Td) % Hd, b0 = idx / ((size_t)p.Tk * Td * Hd);
    const float* ds = backward_scratch(p).ds;
    float sum = 0.0f;
    for (int b = st.batch ? b0 : 0; b < (st.batch ? b0 + 1 : p.B); b++) {
        const SequenceSpan seq = attention_sequence(p, b);
        const int diag = attention_diagonal(p.causal, seq.T, seq.Tk);
        if (j >= seq.Tk) continue;
        for (int h = st.head ? h0 : 0; h < (st.head ? h0 + 1 : p.NH); h++)
            for (int i = st.row ? i0 : 0; i < (st.row ? i0 + 1 : seq.T); i++)
                if (i < seq.T && j <= i + diag && (!p.x.doc_start || j >= p.x.doc_start[(size_t)b * p.T + i]))
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
__global__ void dbias_slots_kernel(const DbiasOrder o, int T, int Tk, AttentionStrides st, bool fp32, void* dbias) {
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

template <int HS, int kMT, int kWarpsQ, bool kDkDvSmem, bool kDq>
__global__ void __launch_bounds__(256, 1) attention_backward_fused_kernel(const AttentionBackwardParams p) {
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
            backward_st_dpt<HS, kMT, kQT>(st, dpt, k_smem, v_smem, q_s, do_s, warp_row0, q0, lane);
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
                            if constexpr (kStoreDs) *reinterpret_cast<uint32_t*>(ds_smem + off) = pack_bf16x2(dpt[mt][nt][2 * half], dpt[mt][nt][2 * half + 1]);
                            if constexpr (kDkDvSmem) *reinterpret_cast<uint32_t*>(pt_smem + off) = pack_bf16x2(st[mt][nt][2 * half], st[mt][nt][2 * half + 1]);
                        }
            };
            if (warp_key0 + 16 * kMT - 1 > m_start + q0) p_ds_to_smem(true);
            else p_ds_to_smem(false);
            // register path: dV += P^T dO and dK += dS^T Q over the warp's queries; accumulator tiles 2kk, 2kk+1
            // are the A fragment of k step kk
            if constexpr (!kDkDvSmem) backward_dv_dk<HS, kMT, kQT>(dv_acc, dk_acc, st, dpt, q_s, do_s, q0, lane);
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
                            mma_bf16_16816(dv_acc[mt][2 * dp], pa[mt], dob[0], dob[1]);
                            mma_bf16_16816(dv_acc[mt][2 * dp + 1], pa[mt], dob[2], dob[3]);
                            mma_bf16_16816(dk_acc[mt][2 * dp], dsa[mt], qb[0], qb[1]);
                            mma_bf16_16816(dk_acc[mt][2 * dp + 1], dsa[mt], qb[2], qb[3]);
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
                            mma_bf16_16816(dq[mt][2 * dp], dsa[mt], kb[0], kb[1]);
                            mma_bf16_16816(dq[mt][2 * dp + 1], dsa[mt], kb[2], kb[3]);
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
    backward_store_dk_dv<HS, kMT, kDT>(dk_acc, dv_acc, k_smem, v_smem, p.dk + b * p.dk_st.batch + h * p.dk_st.head, p.dk_st.row,
                                       p.dv + b * p.dv_st.batch + h * p.dv_st.head, p.dv_st.row, p.scale, T, n_start, warp_row0,
                                       acc_col0, lane);
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
template <int HS, int N, int kRowsA>
__device__ __forceinline__ void issue_s_dp(float (&s)[N / 2], float (&dp)[N / 2], uint64_t a_desc, uint64_t a2_desc,
                                           const uint8_t* b_s, const uint8_t* b2_s) {
    wgmma_fence();
    wgmma_ss_over_hs<HS, N, kRowsA, 0>(s, a_desc, b_s);
    wgmma_commit();
    wgmma_ss_over_hs<HS, N, kRowsA, 0>(dp, a2_desc, b2_s);
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
template <int HS, int kBlockM, bool kBias = false>
__device__ __forceinline__ void dkdv_p_ds(float (&st)[kBlockM / 2], float (&dpt)[kBlockM / 2], uint32_t (&pa)[kBlockM / 16][4],
                                          uint32_t (&dsa)[kBlockM / 16][4], const float* lse2_s, const float* dpsum_s,
                                          int n_start, int m_start, int warp_row0, float scale_log2, BiasTile bias = {}) {
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
    // dS^T = P^T * (dP^T - D[query])
    #pragma unroll
    for (int i = 0; i < kQT; i++) {
        const float2 dps = *reinterpret_cast<const float2*>(dpsum_s + i * 8 + 2 * tq);
        #pragma unroll
        for (int e = 0; e < 4; e++) dpt[4 * i + e] = st[4 * i + e] * (dpt[4 * i + e] - (e % 2 ? dps.y : dps.x));
    }
    #pragma unroll
    for (int j = 0; j < kQS; j++) { accum_to_a_frag(pa[j], st, j); accum_to_a_frag(dsa[j], dpt, j); }
}

// dV += P^T dO, dK += dS^T Q: one commit group; k step j = queries 16j..16j+15 = rows 16j.. of the (MN-major) tiles
template <int HS, int kBlockM>
__device__ __forceinline__ void dkdv_issue_dv_dk(float (&dk_acc)[HS / 2], float (&dv_acc)[HS / 2], const uint32_t (&pa)[kBlockM / 16][4],
                                                 const uint32_t (&dsa)[kBlockM / 16][4], const uint8_t* q_s, const uint8_t* do_s) {
    wgmma_fence();
    #pragma unroll
    for (int j = 0; j < kBlockM / 16; j++) wgmma_rs_m64k16_trans_b<HS, kBlockM>(dv_acc, pa[j], do_s, j);
    #pragma unroll
    for (int j = 0; j < kBlockM / 16; j++) wgmma_rs_m64k16_trans_b<HS, kBlockM>(dk_acc, dsa[j], q_s, j);
    wgmma_commit();
}

// the whole step; returns with every wgmma complete, so the caller may hand the stage back
template <int HS, int kBlockM, int kBlockN, bool kBias = false>
__device__ __forceinline__ void dkdv_hopper_step(float (&dk_acc)[HS / 2], float (&dv_acc)[HS / 2], uint64_t k_desc, uint64_t v_desc,
                                                 const uint8_t* q_s, const uint8_t* do_s, const float* lse2_s, const float* dpsum_s,
                                                 int n_start, int m_start, int warp_row0, float scale_log2, BiasTile bias = {}) {
    float st[kBlockM / 2], dpt[kBlockM / 2];
    uint32_t pa[kBlockM / 16][4], dsa[kBlockM / 16][4];
    issue_s_dp<HS, kBlockM, kBlockN>(st, dpt, k_desc, v_desc, q_s, do_s);
    dkdv_p_ds<HS, kBlockM, kBias>(st, dpt, pa, dsa, lse2_s, dpsum_s, n_start, m_start, warp_row0, scale_log2, bias);
    dkdv_issue_dv_dk<HS, kBlockM>(dk_acc, dv_acc, pa, dsa, q_s, do_s);
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

// dK *= scale; dK, dV -> bf16, staged in this warp's own 16 rows of dk_stage / dv_stage (swizzle<HS>: 256-byte rows at
// HS 128, not the column blocks; each warp reads back only what it wrote), then 16-byte stores into dk, dv
// (packed sequences: row0 = the sequence's first row of dK, dV, rows = its keys; rows 0: p.Tk)
template <int HS, bool kGeneral = false>
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
                pack_bf16x2(dk_acc[4 * dt + 2 * half] * scale, dk_acc[4 * dt + 2 * half + 1] * scale);
            *reinterpret_cast<uint32_t*>(dv_stage + swizzle<HS>(row, dt) + 4 * tq) =
                pack_bf16x2(dv_acc[4 * dt + 2 * half], dv_acc[4 * dt + 2 * half + 1]);
        }
    }
    __syncwarp();
    floatX* dk_gl = p.dk + b * p.dk_st.batch + h * p.dk_st.head;   // h: the key/value head
    floatX* dv_gl = p.dv + b * p.dv_st.batch + h * p.dv_st.head;
    const int Tk = rows ? rows : p.Tk;
    for (int c = lane; c < 16 * kDT; c += 32) {
        const int row = warp_row0 + c / kDT, ch = c % kDT, t = n_start + row;
        if (t < Tk && head_chunk_stored<HS, kGeneral>(p.HS, ch)) {
            *reinterpret_cast<uint4*>(dk_gl + (row0 + t) * p.dk_st.row + ch * 8) = *reinterpret_cast<const uint4*>(dk_stage + swizzle<HS>(row, ch));
            *reinterpret_cast<uint4*>(dv_gl + (row0 + t) * p.dv_st.row + ch * 8) = *reinterpret_cast<const uint4*>(dv_stage + swizzle<HS>(row, ch));
        }
    }
    if constexpr (!kGeneral) {
        if (p.dqkv_sums) {
            store_dqkv_sums<HS>(p, dk_acc, scale, b, n_start + warp_row0, (p.NH + h) * HS);
            store_dqkv_sums<HS>(p, dv_acc, 1.0f, b, n_start + warp_row0, (2 * p.NH + h) * HS);
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

// wait for S, P; wait for dP, dS; give dS as bf16 A fragments. kBias: S += the bias (kBlockM rows) first
template <int HS, int kBlockN, int kBlockM = 0, bool kBias = false>
__device__ __forceinline__ void dq_p_ds(float (&s)[kBlockN / 2], float (&dp)[kBlockN / 2], uint32_t (&dsa)[kBlockN / 16][4],
                                        const float (&row_lse2)[2], const float (&row_dpsum)[2], int n_block, int m_start, int warp_row0,
                                        float scale_log2, int diag = 0, int Tk = 1 << 30, BiasTile bias = {}) {
    constexpr int kNT = kBlockN / 8;      // n8 column groups of S (keys)
    const int lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    wgmma_wait<1>();   // S is ready; dP may still be running
    if constexpr (kBias) add_bias_tile_smem<kNT, kBlockM>(s, bias.tile, bias.rows, warp_row0 + g, tq, bias.inv_scale);
    if (kBias && bias.key_bias) add_key_bias_frag<kNT>(s, bias.key_bias, n_block * kBlockN, tq, bias.inv_scale);
    // keys past a row's limit (key > row + diag, key >= Tk) masked; causal self-attention: diag 0, no key bound
    const bool need_mask = n_block * kBlockN + kBlockN - 1 > min(m_start + warp_row0 + diag, Tk - 1);
    #pragma unroll 1
    for (unsigned once = 0; once < schedule_pin(); once++)   // see schedule_pin
    #pragma unroll
    for (int i = 0; i < kNT; i++)
        #pragma unroll
        for (int e = 0; e < 4; e++) {
            float x = s[4 * i + e] * scale_log2 - row_lse2[e / 2];
            const int key = n_block * kBlockN + i * 8 + 2 * tq + (e % 2);
            if (need_mask && (key > m_start + warp_row0 + g + 8 * (e / 2) + diag || key >= Tk)) x = -INFINITY;
            s[4 * i + e] = fast_exp2(x);
        }
    wgmma_wait<0>();   // dP
    #pragma unroll
    for (int i = 0; i < kNT * 4; i++) dp[i] = s[i] * (dp[i] - row_dpsum[(i % 4) / 2]);
    #pragma unroll
    for (int j = 0; j < kBlockN / 16; j++) accum_to_a_frag(dsa[j], dp, j);
}

// dQ += dS K: one commit group; k step j = keys 16j..16j+15 = rows 16j.. of the (MN-major) K tile
template <int HS, int kBlockN>
__device__ __forceinline__ void dq_issue_dq(float (&dq_acc)[HS / 2], const uint32_t (&dsa)[kBlockN / 16][4], const uint8_t* k_s) {
    wgmma_fence();
    #pragma unroll
    for (int j = 0; j < kBlockN / 16; j++) wgmma_rs_m64k16_trans_b<HS, kBlockN>(dq_acc, dsa[j], k_s, j);
    wgmma_commit();
}

// the whole step; returns with every wgmma complete. kBias: with the bias tile; ds_rows (dBias): this warp's rows g,
// g + 8 of the fp32 dS scratch ((b, h, query) rows of Tk keys; nullptr: a row past T or no dBias), written while dQ runs;
// order (the ordered dBias, DbiasOrder): its rows of the accumulator slot, added in turn while dQ runs
template <int HS, int kBlockM, int kBlockN, bool kBias = false>
__device__ __forceinline__ void dq_hopper_step(float (&dq_acc)[HS / 2], uint64_t q_desc, uint64_t do_desc, const uint8_t* k_s, const uint8_t* v_s,
                                               const float (&row_lse2)[2], const float (&row_dpsum)[2], int n_block, int m_start, int warp_row0,
                                               float scale_log2, int diag = 0, int Tk = 1 << 30, BiasTile bias = {},
                                               float* const (&ds_rows)[2] = {}, const DbiasWarp& order = {}) {
    float s[kBlockN / 2], dp[kBlockN / 2];
    uint32_t dsa[kBlockN / 16][4];
    issue_s_dp<HS, kBlockN, kBlockM>(s, dp, q_desc, do_desc, k_s, v_s);
    dq_p_ds<HS, kBlockN, kBlockM, kBias>(s, dp, dsa, row_lse2, row_dpsum, n_block, m_start, warp_row0, scale_log2, diag, Tk, bias);
    dq_issue_dq<HS, kBlockN>(dq_acc, dsa, k_s);
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
template <int HS, bool kGeneral = false>
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
                pack_bf16x2(dq_acc[4 * dt + 2 * half] * scale, dq_acc[4 * dt + 2 * half + 1] * scale);
    }
    __syncwarp();
    floatX* dq_gl = p.dq + b * p.dq_st.batch + h * p.dq_st.head;
    for (int c = lane; c < 16 * kDT; c += 32) {
        const int row = warp_row0 + c / kDT, ch = c % kDT;
        if (m_start + row < T && head_chunk_stored<HS, kGeneral>(p.HS, ch))
            *reinterpret_cast<uint4*>(dq_gl + (row0 + m_start + row) * p.dq_st.row + ch * 8) = *reinterpret_cast<const uint4*>(stage + swizzle<HS>(row, ch));
    }
    if constexpr (!kGeneral) {
        if (p.dqkv_sums) store_dqkv_sums<HS>(p, dq_acc, scale, b, m_start + warp_row0, h * HS);
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
template <int HS, int kBlockN>
__device__ __forceinline__ void issue_dq_from_ds(float (&dq)[HS / 4], const uint8_t* ds, const uint8_t* k_cols) {
    wgmma_fence();
    #pragma unroll
    for (int j = 0; j < kBlockN / 16; j++)
        wgmma_ss_m64k16_trans_ab<HS / 2>(dq, wgmma_desc(ds + j * 16 * 128), wgmma_desc(k_cols + j * 16 * 128), j);
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
    int T, Tk, NH, NH_kv, group, diag, Tp, num_bh, num_n_blocks, num_items, m_blocks, section_heads;
    bool snake, ordered_dq;
    HopperBiasBoxes bias;   // kBias
    const int* packed;      // kVarlen: the pack's key-block table (see packed_block: its heads are the key/value heads)
    AttentionExtras x;
    bool causal;
    template <bool kGeneral>
    __device__ __forceinline__ DkdvWsWalk(const AttentionBackwardParams& p, int section_heads_, bool ordered_dq_, std::bool_constant<kGeneral>,
                                          const int* packed_ = nullptr)
        : T(p.T), Tk(kGeneral ? p.Tk : p.T), NH(p.NH), NH_kv(kGeneral ? p.NH_kv : p.NH), group(kGeneral ? p.NH / p.NH_kv : 1),
          diag(kGeneral ? attention_diagonal(p) : 0), Tp(bwd_padded_T(p.T)), num_bh(p.B * NH_kv), num_n_blocks(ceil_div(Tk, Tile::kBlockN)),
          num_items(packed_ ? packed_[0] * NH_kv : num_n_blocks * num_bh), m_blocks(ceil_div(p.T, Tile::kBlockM)),
          section_heads(section_heads_), snake(packed_ || section_heads_ >= num_bh), ordered_dq(ordered_dq_), bias(p.x, Tile::kBlockM),
          packed(packed_), x(p.x), causal(p.causal) {}
    __device__ __forceinline__ int key_block_of(int rank) const { return Tile::kAtomicDq && ordered_dq ? num_n_blocks - 1 - rank : rank; }
    // the first query block with a query that sees a key of the block starting at n_start (query i sees key j iff j <= i + diag)
    __device__ __forceinline__ int first_query_block(int n_start) const { return max(n_start - diag, 0) / Tile::kBlockM; }
    // item w: its key block, head, query blocks (m_first .. m_end - 1) and diagonal; packed: its sequence's lengths and
    // where its rows lie in the tensor maps (rows q0.., k0.. of one batch)
    struct Item { int n_start, b, h_kv, m_first, m_end, diag, Tk, q_row0, k_row0, map_b; };
    __device__ __forceinline__ Item locate(int w) const {
        if constexpr (Tile::kVarlen) {
            const PackedBlock pb = packed_block(packed, w, x, causal);
            const int n_start = pb.block * Tile::kBlockN;
            return {n_start, pb.b, pb.h, max(n_start - pb.diag, 0) / Tile::kBlockM, ceil_div(pb.T, Tile::kBlockM), pb.diag, pb.Tk,
                    pb.q0, pb.k0, 0};
        } else {
            const PersistentItem item = persistent_item(w, num_n_blocks, num_bh, section_heads);
            const int n_start = key_block_of(item.rank) * Tile::kBlockN, b = item.bh / NH_kv;
            return {n_start, b, item.bh % NH_kv, first_query_block(n_start), m_blocks, diag, Tk, 0, 0, b};
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
          bool kBias = false, bool kVarlen = false>
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
                dkdv_hopper_step<HS, kBlockM, kBlockN, kBias>(dk_acc, dv_acc, k_desc, v_desc, q_tile(s), do_tile(s), lse2_tile(s),
                                                              lse2_tile(s) + kBlockM, n_start, m_block * kBlockM + it.diag, warp_row0,
                                                              p.scale * kLog2e, bias);
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
                issue_s_dp<HS, kBlockM, kBlockN>(st, dpt, k_desc, v_desc, q_tile(s), do_tile(s));
                dkdv_p_ds<HS, kBlockM>(st, dpt, pa, dsa, lse2_tile(s), lse2_tile(s) + kBlockM, n_start, m_block * kBlockM, warp_row0,
                                       p.scale * kLog2e);
                dkdv_issue_dv_dk<HS, kBlockM>(dk_acc, dv_acc, pa, dsa, q_tile(s), do_tile(s));
                uint8_t* ds = ds_buf(stage_iter);
                store_ds_t<kBlockM>(ds, dsa, warp_row0);
                fence_proxy_async();
                named_barrier_sync(1, 128 * kNCWG);                     // both halves of dS^T are written
                float dq[HS / 4];
                issue_dq_from_ds<HS, kBlockN>(dq, ds, k_cols);
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
        dkdv_hopper_epilogue<HS, kGeneral>(p, dk_acc, dv_acc, dk_stage, dv_stage, b, h_kv, n_start, warp_row0, it.k_row0, kVarlen ? it.Tk : 0);
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
          bool kVarlen = false>
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
    const int Tk = kGeneral ? p.Tk : T, diag = kGeneral ? attention_diagonal(p) : 0, group = kGeneral ? p.NH / p.NH_kv : 1;
    const int num_m_blocks = ceil_div(T, kBlockM);
    int num_items = num_m_blocks * num_bh;
    bool snake = section_heads >= num_bh;   // see persistent_work
    auto key_blocks = [&](int m_start) {   // the K/V tiles a query block walks
        if constexpr (kGeneral) return attention_key_blocks(m_start + kBlockM - 1, diag, Tk, kBlockN);
        else return min(ceil_div(m_start + kBlockM, kBlockN), ceil_div(T, kBlockN));
    };
    // item w: its query block, head and key tiles; packed: its sequence's lengths, diagonal and where its rows lie in
    // the tensor maps (rows q0.., k0.. of one batch)
    struct Item { int b, h, m_start, n_blocks, diag, Tk, T, q_row0, k_row0, map_b; };
    auto locate = [&](int w) {
        if constexpr (kVarlen) {
            const PackedBlock pb = packed_block(maps.packed, w, p.x, p.causal);
            const int m_start = pb.block * kBlockM;
            return Item{pb.b, pb.h, m_start, attention_key_blocks(min(m_start + kBlockM, pb.T) - 1, pb.diag, pb.Tk, kBlockN), pb.diag,
                        pb.Tk, pb.T, pb.q0, pb.k0, 0};
        } else {
            if constexpr (kBias) {
                if (maps.order.acc) {   // ordered dBias: ord-major (see DbiasOrder)
                    const DbiasOrder& o = maps.order;
                    const int ord = w / o.groups, grp = w % o.groups, own = grp / num_m_blocks;
                    const int b = o.bcast_b ? ord / (o.bcast_h ? NH : 1) : own / o.Hd, h = o.bcast_h ? ord % NH : own % o.Hd;
                    const int m_start = (num_m_blocks - 1 - grp % num_m_blocks) * kBlockM;
                    return Item{b, h, m_start, key_blocks(m_start), diag, Tk, T, 0, 0, b};
                }
            }
            const PersistentItem item = persistent_item(w, num_m_blocks, num_bh, section_heads);
            const int m_start = (num_m_blocks - 1 - item.rank) * kBlockM, b = item.bh / NH;
            return Item{b, item.bh % NH, m_start, key_blocks(m_start), diag, Tk, T, 0, 0, b};
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
                    const int key0 = (n_blocks - 1 - i) * kBlockN;
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
        mbar_wait(qo_full, item_iter & 1);
        for (int i = 0; i < n_blocks; i++, kv_iter++) {
            const int s = kv_iter % kStages;
            mbar_wait(kv_full(s), (kv_iter / kStages) & 1);
            const BiasTile bias{bias_tile(s), bias_boxes.rows, 1.0f / p.scale, key_bias_of(p.x, b, h)};
            dq_hopper_step<HS, kBlockM, kBlockN, kBias>(dq_acc, q_desc, do_desc, k_tile(s), v_tile(s), row_lse2, row_dpsum, n_blocks - 1 - i,
                                                        m_start, warp_row0, p.scale * kLog2e, it.diag, kGeneral ? it.Tk : 1 << 30, bias, ds_rows,
                                                        order);
            release(kv_empty(s));
        }
        release(qo_empty);
        dq_hopper_epilogue<HS, kGeneral>(p, dq_acc, dq_stage, b, h, m_start, warp_row0, it.q_row0, kVarlen ? it.T : 0);
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
template <int kRole, class Tile, bool kDynamic>
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
            float x[kBlockM / 2];   // S^T, then P^T (role 0); dP^T, then dS^T (role 1)
            uint32_t frag[kBlockM / 16][4];   // x as the A fragments of dV (role 0) or dK (role 1)
            wgmma_fence();
            wgmma_ss_over_hs<HS, kBlockM, kBlockN, 0>(x, a_desc, kRole == 0 ? sm.q_tile(s) : sm.do_tile(s));
            wgmma_commit();
            wgmma_wait<0>();
            if constexpr (kRole == 0) {
                // P^T = exp2(S^T * c - lse2[query]), 0 where key > query + diag (only where this warp's keys cross the tile)
                const bool need_mask = it.n_start + warp_row0 + 15 > m_start;
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
                }
                mbar_arrive(pt_empty);
            }
            // dV += P^T dO (role 0), dK += dS^T Q (role 1)
            #pragma unroll
            for (int j = 0; j < kBlockM / 16; j++) accum_to_a_frag(frag[j], x, j);
            wgmma_fence();
            #pragma unroll
            for (int j = 0; j < kBlockM / 16; j++) wgmma_rs_m64k16_trans_b<HS, kBlockM>(acc, frag[j], kRole == 0 ? sm.do_tile(s) : sm.q_tile(s), j);
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
                *reinterpret_cast<uint32_t*>(row + dt * 8) = pack_bf16x2(acc[4 * dt + 2 * half] * out_scale, acc[4 * dt + 2 * half + 1] * out_scale);
        }
    }
}
#endif

template <int kStages, bool kDynamic = false>
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
    if (wg == 1) dkdv256_consumer<0, Tile, kDynamic>(p, sm, walk);
    else dkdv256_consumer<1, Tile, kDynamic>(p, sm, walk);
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
}

// ----------------------------------------------------------------------------
// launchers

template <int HS, bool kExtras = false>
void launch_attention_backward_preprocess(const AttentionBackwardParams& p, bool zero_dq, cudaStream_t stream) {
    const size_t threads = (size_t)p.B * p.NH * bwd_padded_T(p.T) * preprocess_lanes<HS>();
    attention_backward_preprocess_kernel<HS, kExtras><<<(unsigned)ceil_div(threads, (size_t)256), 256, 0, stream>>>(p, zero_dq);
    cudaCheck(cudaGetLastError());
}

template <int HS>
void launch_attention_backward_postprocess(const AttentionBackwardParams& p, cudaStream_t stream) {
    const size_t threads = (size_t)p.B * p.NH * p.T * (HS / 8);
    attention_backward_postprocess_kernel<HS><<<(unsigned)ceil_div(threads, (size_t)256), 256, 0, stream>>>(p);
    cudaCheck(cudaGetLastError());
}

template <int HS, int kNWarps, int kMT, int kBlockM, bool kAtomicDq, bool kExtras = false>
void launch_attention_backward_dkdv(const AttentionBackwardParams& p, cudaStream_t stream) {
    using Tile = BackwardKVTile<HS, kNWarps, kMT, kBlockM, kAtomicDq>;
    constexpr auto kernel = attention_backward_dkdv_kernel<HS, kNWarps, kMT, kBlockM, kAtomicDq, kExtras>;
    const int smem = Tile::kSmemBytes + (kExtras && p.x.bias ? 2 * kBlockM * bias_tile_pitch(Tile::kBlockN, p.x.bias_fp32) : 0);
    launch_with_smem<kernel>(dim3(p.B * p.NH_kv, ceil_div(p.Tk, Tile::kBlockN), HS > 128 ? 2 : 1), Tile::kThreads, smem, stream, p);
}

template <int HS, int kNWarps, int kMT, int kBlockN, bool kExtras = false>
void launch_attention_backward_dq(const AttentionBackwardParams& p, cudaStream_t stream) {
    using Tile = BackwardQTile<HS, kNWarps, kMT, kBlockN>;
    constexpr auto kernel = attention_backward_dq_kernel<HS, kNWarps, kMT, kBlockN, kExtras>;
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
          bool kBias = false, bool kVarlen = false>
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
    launch_with_smem_ex<attention_backward_dkdv_hopper_ws_kernel<HS, kNCWG, kBlockM, kStages, kAtomicDq, kDynamic, kGeneral, kBias, kVarlen>>(
        dim3(std::min(num_items, device_props().multiProcessorCount)), Tile::kThreads, Tile::kSmemBytes, stream, early_start, p, maps,
        persistent_section_heads(p.B * p.NH_kv, p.T * (p.NH / p.NH_kv), HS), ordered_dq);
}

// early_start: launched to overlap the dK/dV kernel before it (programmatic dependent launch); packed (kVarlen): the
// query-block table
template <int HS, int kNCWG, int kBlockN, int kStages, bool kDynamic = false, bool kGeneral = false, bool kBias = false,
          bool kVarlen = false>
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
    launch_with_smem_ex<attention_backward_dq_hopper_ws_kernel<HS, kNCWG, kBlockN, kStages, kDynamic, kGeneral, kBias, kVarlen>>(
        dim3(std::min(num_items, device_props().multiProcessorCount)), Tile::kThreads, Tile::kSmemBytes, stream, early_start, p, maps,
        persistent_section_heads(p.B * p.NH, p.Tk, HS));
}

// atomic path: preprocess (+ zero dq_accum), dK/dV with red.global.add of dQ, dQ convert. Non-deterministic.
template <int HS, int kNWarps, int kBlockM>
void attention_backward_atomic(const AttentionBackwardParams& p, cudaStream_t stream) {
    launch_attention_backward_preprocess<HS>(p, /*zero_dq=*/true, stream);
    launch_attention_backward_dkdv<HS, kNWarps, 1, kBlockM, /*kAtomicDq=*/true>(p, stream);
    launch_attention_backward_postprocess<HS>(p, stream);
}

// the fused kernel over (B * NH, key blocks); kDq: with the atomic dQ
template <int HS, int kMT, int kWarpsQ, bool kDkDvSmem, bool kDq>
void launch_attention_backward_fused(const AttentionBackwardParams& p, cudaStream_t stream) {
    using Tile = BackwardFusedTile<HS, kMT, kWarpsQ, kDkDvSmem>;
    launch_with_smem<attention_backward_fused_kernel<HS, kMT, kWarpsQ, kDkDvSmem, kDq>>(dim3(p.B * p.NH, ceil_div(p.T, Tile::kBlockN)),
                         Tile::kThreads, Tile::kSmemBytes, stream, p);
}

// fused path (portable, non-deterministic): preprocess (+ zero dq_accum), the fused kernel, dQ convert
template <int HS, int kMT, int kWarpsQ, bool kDkDvSmem>
void attention_backward_fused(const AttentionBackwardParams& p, cudaStream_t stream) {
    launch_attention_backward_preprocess<HS>(p, /*zero_dq=*/true, stream);
    launch_attention_backward_fused<HS, kMT, kWarpsQ, kDkDvSmem, /*kDq=*/true>(p, stream);
    launch_attention_backward_postprocess<HS>(p, stream);
}

// split path with the fused kernel's dK/dV (kDq = false: no dQ, no atomics) and the mma.sync dQ kernel (kQWarps
// warps of 16 * kQMT query rows, kQBlockN-key steps). Deterministic.
template <int HS, int kMT, int kWarpsQ, bool kDkDvSmem, int kQWarps, int kQMT, int kQBlockN>
void attention_backward_split_wide(const AttentionBackwardParams& p, cudaStream_t stream) {
    launch_attention_backward_preprocess<HS>(p, /*zero_dq=*/false, stream);
    launch_attention_backward_fused<HS, kMT, kWarpsQ, kDkDvSmem, /*kDq=*/false>(p, stream);
    launch_attention_backward_dq<HS, kQWarps, kQMT, kQBlockN>(p, stream);
}

// split path: preprocess, dK/dV kernel (kKVWarps warps of 16 * kKVMT keys, kKVBlockM-query steps), dQ kernel
// (kQWarps warps of 16 * kQMT query rows, kQBlockN-key steps). Deterministic: every output written once, fixed order.
template <int HS, int kKVWarps, int kKVMT, int kKVBlockM, int kQWarps, int kQMT, int kQBlockN, bool kExtras = false>
void attention_backward_split(const AttentionBackwardParams& p, cudaStream_t stream) {
    launch_attention_backward_preprocess<HS, kExtras>(p, /*zero_dq=*/false, stream);
    AttentionBackwardParams q = p;   // with gating the kernels take dO = dout * gate from the scratch
    if (kExtras && p.x.gate) { q.dout = backward_scratch(p).gated_dout; q.do_st = gated_dout_strides(p); }
    launch_attention_backward_dkdv<HS, kKVWarps, kKVMT, kKVBlockM, /*kAtomicDq=*/false, kExtras>(q, stream);
    launch_attention_backward_dq<HS, kQWarps, kQMT, kQBlockN, kExtras>(q, stream);
}

// the same split, warp-specialised: dK/dV with kKVWG consumer warpgroups (64 keys each) and kKVBlockM-query
// stages, dQ with kQWG consumer warpgroups (64 query rows each) and kQBlockN-key stages; kStages-deep rings
// kGeneral: any call (non-causal, T != Tk, GQA); otherwise causal self-attention without GQA
// kBias (general): with a bf16 bias (attention_hopper_bias_fits), and dBias from the dQ kernel's dS where p.dbias is set
// kVarlen (general): packed sequences with their totals (attention_hopper_packed_fits), on the round-robin schedule
// order (kBias): the dQ kernel's ordered dBias (DbiasOrder), its accumulators zeroed
template <int HS, int kKVWG, int kKVBlockM, int kQWG, int kQBlockN, int kStages, bool kGeneral = false, bool kBias = false,
          bool kVarlen = false>
void attention_backward_split_hopper_ws(const AttentionBackwardParams& p, cudaStream_t stream, const DbiasOrder& order = {}) {
    PackedTables t{};   // kVarlen: built before the preprocess, which the dK/dV kernel's early start overlaps
    if constexpr (kVarlen) t = packed_blocks_tables(p.x, p.B, p.T, p.Tk, 64 * kQWG, 64 * kKVWG, stream);
    // the preprocess at the caller's head dim (HS 8-32 on the HS 64 copies, 96 on the HS 128 ones, zero-padded); with
    // gating (kExtras) it also writes dgate and dO * gate into the scratch, which the kernels then take as dO
    if constexpr (kGeneral) {
        const bool extras = kVarlen || p.x.gate;
        if (HS == 64 && p.HS == 32) launch_attention_backward_preprocess<32, true>(p, /*zero_dq=*/false, stream);
        else if (HS == 64 && p.HS < 32) launch_attention_backward_preprocess<16, true>(p, /*zero_dq=*/false, stream);
        else if (HS == 128 && p.HS == 96 && extras) launch_attention_backward_preprocess<96, true>(p, /*zero_dq=*/false, stream);
        else if (HS == 128 && p.HS == 96) launch_attention_backward_preprocess<96, false>(p, /*zero_dq=*/false, stream);
        else if (extras) launch_attention_backward_preprocess<HS, true>(p, /*zero_dq=*/false, stream);
        else launch_attention_backward_preprocess<HS, false>(p, /*zero_dq=*/false, stream);
    } else {
        launch_attention_backward_preprocess<HS, false>(p, /*zero_dq=*/false, stream);
    }
    AttentionBackwardParams q = p;   // with gating the kernels take dO = dout * gate from the scratch
    if (kGeneral && p.x.gate) { q.dout = backward_scratch(p).gated_dout; q.do_st = gated_dout_strides(p); }
    const bool early = backward_early_start();
    if constexpr (kVarlen) {
        launch_attention_backward_dkdv_hopper_ws<HS, kKVWG, kKVBlockM, kStages, false, false, true, false, true>(q, stream, early, false, t.keys);
        launch_attention_backward_dq_hopper_ws<HS, kQWG, kQBlockN, kStages, false, true, false, true>(q, stream, early, t.queries);
    } else if (claimed_schedule(p.T, 4096, /*even_items=*/!p.causal)) {
        launch_attention_backward_dkdv_hopper_ws<HS, kKVWG, kKVBlockM, kStages, false, true, kGeneral, kBias>(q, stream, early);
        launch_attention_backward_dq_hopper_ws<HS, kQWG, kQBlockN, kStages, true, kGeneral, kBias>(q, stream, early, nullptr, order);
    } else {
        launch_attention_backward_dkdv_hopper_ws<HS, kKVWG, kKVBlockM, kStages, false, false, kGeneral, kBias>(q, stream, early);
        launch_attention_backward_dq_hopper_ws<HS, kQWG, kQBlockN, kStages, false, kGeneral, kBias>(q, stream, early, nullptr, order);
    }
}

// HS 256 on Hopper (general): preprocess, the role-split dK/dV kernel (64 keys, 64-query stages), the dQ kernel with
// one consumer warpgroup (64 rows, 64-key stages); kStages-deep rings. Deterministic.
template <int kStages, bool kDynamic>
void launch_attention_backward_dkdv256_hopper_ws(const AttentionBackwardParams& p, cudaStream_t stream, bool early_start) {
    using Tile = HopperBackwardKV256Tile<kStages>;
    const int num_items = p.B * p.NH_kv * ceil_div(p.Tk, Tile::kBlockN);
    const HopperBackwardTmaMaps maps = backward_tma_maps(p, Tile::kBlockM, Tile::kBlockN);
    launch_with_smem_ex<attention_backward_dkdv256_hopper_ws_kernel<kStages, kDynamic>>(
        dim3(std::min(num_items, device_props().multiProcessorCount)), Tile::kThreads, Tile::kSmemBytes, stream, early_start, p, maps,
        persistent_section_heads(p.B * p.NH_kv, p.T * (p.NH / p.NH_kv), 256));
}
template <int kStages>
void attention_backward_split_hopper_ws_256(const AttentionBackwardParams& p, cudaStream_t stream) {
    launch_attention_backward_preprocess<256>(p, /*zero_dq=*/false, stream);
    const bool early = backward_early_start();
    if (claimed_schedule(p.T, 1024, /*even_items=*/!p.causal)) {
        launch_attention_backward_dkdv256_hopper_ws<kStages, true>(p, stream, early);
        launch_attention_backward_dq_hopper_ws<256, 1, 64, kStages, true, true>(p, stream, early);
    } else {
        launch_attention_backward_dkdv256_hopper_ws<kStages, false>(p, stream, early);
        launch_attention_backward_dq_hopper_ws<256, 1, 64, kStages, false, true>(p, stream, early);
    }
}

// Hopper atomic path (HS 64 or 128, sm_90a; dev variant 7): preprocess (+ zero dq_accum and dq_order), the
// warp-specialised dK/dV kernel that also reduce-adds dQ into dq_accum (5 GEMMs a tile pair instead of the split's
// 7), dQ convert. ordered_dq: the adds into each query block in a fixed order (from the diagonal key block down),
// deterministic; without it the order varies
template <int HS, int kStages>
void attention_backward_atomic_hopper_ws(const AttentionBackwardParams& p, cudaStream_t stream, bool ordered_dq) {
    launch_attention_backward_preprocess<HS>(p, /*zero_dq=*/true, stream);
    if (claimed_schedule(p.T))
        launch_attention_backward_dkdv_hopper_ws<HS, 2, 64, kStages, /*kAtomicDq=*/true, /*kDynamic=*/true>(p, stream, backward_early_start(), ordered_dq);
    else
        launch_attention_backward_dkdv_hopper_ws<HS, 2, 64, kStages, /*kAtomicDq=*/true>(p, stream, backward_early_start(), ordered_dq);
    launch_attention_backward_postprocess<HS>(p, stream);
}

// ----------------------------------------------------------------------------
// public API

// Opt-in to the non-deterministic (atomic dQ) path: FLASHGPT_ATTN_NONDETERMINISTIC=1, or set this flag before
// sizing the scratch (the atomic path needs the fp32 dQ accumulator).
inline bool& attention_backward_nondeterministic() {
    static bool flag = [] { const char* e = getenv("FLASHGPT_ATTN_NONDETERMINISTIC"); return e && e[0] == '1'; }();
    return flag;
}

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
    if (!p.dbias == !p.dbias2 || p.HS == 256 || !hopper_path_available() || x.seqlens_k || x.cu_seqlens_q || x.cu_seqlens_k || x.doc_start)
        return false;
    const KernelBiases kb = kernel_biases(x);   // the bias with the gradient must be the tile bias, alone, with rows, bf16
    return kb.rows.source == (p.dbias ? 1 : 2) && !kb.rows2.ptr && kb.rows.st.row != 0 && !kb.rows.fp32;
}

inline size_t attention_backward_scratch_bytes(const AttentionBackwardParams& p) {
    const bool tuned = attention_self_causal(p);
    const bool with_dq_accum = tuned && (attention_backward_nondeterministic() || attention_backward_ordered_dq(p.T, p.HS));
    const bool ds_scratch = (p.dbias || p.dbias2) && !attention_backward_dbias_ordered(p);
    const size_t ds = ds_scratch ? (size_t)p.B * p.NH * p.T * p.Tk * sizeof(float) : 0;
    const size_t gated_dout = p.x.gate ? (size_t)p.B * p.T * p.NH * p.HS * sizeof(floatX) : 0;
    return attention_backward_scratch_bytes_for(p.B, p.T, p.NH, p.HS, with_dq_accum) + ds + gated_dout;
}
inline size_t attention_backward_scratch_bytes(int B, int T, int NH, int HS) {   // GPT-2
    return attention_backward_scratch_bytes(fused_qkv_backward_params(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, B, T, NH, HS));
}

// The fused kernel's shared memory (163 KB at HS 64, 193.5 KB at HS 128) against this GPU's per-block limit (H100
// 227 KB, A100 163 KB, sm_86 / sm_89 99 KB): where it does not fit, the dK/dV kernel's paths run instead.
template <int HS, int kMT, int kWarpsQ, bool kDkDvSmem>
inline bool attention_backward_fused_fits() {
    return (size_t)BackwardFusedTile<HS, kMT, kWarpsQ, kDkDvSmem>::kSmemBytes <= device_props().sharedMemPerBlockOptin;
}

inline const char* attention_backward_path_name(int HS) {
    if (attention_backward_uses_hopper(HS) && HS == 128 && attention_backward_nondeterministic())
        return "flash backward, wgmma+TMA sm90a, warp-specialised dK/dV 128 keys x 64 with atomic dQ (TMA reduce-add, non-deterministic), 2 consumer warpgroups (HS=128)";
    if (attention_backward_uses_hopper(HS))
        return HS == 64 ? "flash backward, wgmma+TMA sm90a, warp-specialised split deterministic: dK/dV 128 keys x 128 + dQ 128 x 128, 2 consumer warpgroups each (HS=64)"
                        : "flash backward, wgmma+TMA sm90a, warp-specialised split deterministic: dK/dV 128 keys x 64 + dQ 128 x 96, 2 consumer warpgroups each; at T >= 8192 dK/dV 128 keys x 64 with dQ by TMA reduce-add in a fixed order (deterministic) (HS=128)";
    const bool fits = HS == 64 ? attention_backward_fused_fits<64, 2, 2, false>() : attention_backward_fused_fits<128, 2, 2, true>();
    if (attention_backward_nondeterministic() && fits)
        return HS == 64 ? "flash backward, mma.sync sm80, fused with atomic dQ (non-deterministic): 128 keys x 128-query stages, 4x2 warps, dK/dV in registers (HS=64)"
                        : "flash backward, mma.sync sm80, fused with atomic dQ (non-deterministic): 128 keys x 64-query stages, 4x2 warps, P^T/dS^T through shared memory (HS=128)";
    if (attention_backward_nondeterministic())
        return "flash backward, mma.sync sm80, atomic dQ (non-deterministic): 64 keys x 64 queries 4 warps (the fused kernel's shared memory does not fit)";
    if (fits)
        return HS == 64 ? "flash backward, mma.sync sm80, split deterministic: dK/dV 128 keys x 128-query stages 4x2 warps + dQ 64x64 4 warps (HS=64)"
                        : "flash backward, mma.sync sm80, split deterministic: dK/dV 128 keys x 64-query stages 4x2 warps + dQ 64x32 4 warps (HS=128)";
    return "flash backward, mma.sync sm80, split deterministic: dK/dV 64 keys x 32 queries 4 warps + dQ 4 warps (the fused kernel's shared memory does not fit)";
}

// Whether GPT-2's backward writes AttentionBackwardParams::dqkv_sums at this shape: on the deterministic Hopper split
// (not with the atomic or ordered dQ, not with document masking)
inline bool attention_backward_sums_dqkv(int T, int HS, bool document_masking) {
    return attention_backward_uses_hopper(HS) && !attention_backward_nondeterministic() && !attention_backward_ordered_dq(T, HS) &&
           !document_masking;
}

// nullptr if the call runs on this GPU, else the reason it does not
inline const char* attention_backward_unsupported_reason(const AttentionBackwardParams& p) {
    AttentionForwardParams f{p.q, p.k, p.v, nullptr, nullptr, p.q_st, p.k_st, p.v_st, p.o_st, p.B, p.T, p.Tk, p.NH, p.NH_kv, p.HS, p.causal, p.scale, p.x};
    f.x.gated_out = p.dgate;   // the backward's gating output (same checks: 16-byte aligned)
    if (const char* why = attention_unsupported_reason(f)) return why;
    for (const AttentionStrides& st : {p.do_st, p.dq_st, p.dk_st, p.dv_st})
        if (st.batch % 8 || st.row % 8 || st.head % 8) return "every batch, row and head stride must be a multiple of 8 elements (16 bytes)";
    if (p.dbias && !p.x.bias) return "dbias needs a bias (it takes the bias's dtype, strides and broadcast dimensions)";
    if (p.dbias && (uintptr_t)p.dbias % (p.x.bias_fp32 ? 4 : 2)) return "dbias must be aligned to its element size";
    if (p.dbias2 && !p.x.bias2) return "dbias2 needs bias2";
    if (p.dbias2 && (uintptr_t)p.dbias2 % (p.x.bias2_fp32 ? 4 : 2)) return "dbias2 must be aligned to its element size";
    if (p.dqkv_sums && !(attention_self_causal(p) && !attention_has_extras(p.x) && attention_backward_sums_dqkv(p.T, p.HS, false)))
        return "dqkv_sums is written only by GPT-2's causal self-attention on the deterministic Hopper split (attention_backward_sums_dqkv)";
    if ((uintptr_t)p.dqkv_sums % 8) return "dqkv_sums must be 8-byte aligned";
    for (const void* ptr : {(const void*)p.out, (const void*)p.dout, (const void*)p.dq, (const void*)p.dk, (const void*)p.dv})
        if ((uintptr_t)ptr % 16) return "O, dO, dQ, dK and dV must be 16-byte aligned";
    return nullptr;
}

// GPT-2's family (attention_self_causal): the kernels compiled for it; the GPT-2 wrapper calls only this.
// Deterministic unless attention_backward_nondeterministic() is set (which only this family uses).
inline void attention_backward_self_causal_path(const AttentionBackwardParams& p, cudaStream_t stream) {
    const int HS = p.HS, T = p.T;
    if (attention_backward_uses_hopper(HS)) {
        // warp-specialised split, 2 consumer warpgroups: dev variant 6's best configs, HS 64 kv128x128+q128x128, HS 128
        // kv128x64+q128x96 (96-key dQ steps: see wgmma_ss_m64n80k16). Non-deterministic at HS 128: the 5-GEMM kernel
        // with atomic dQ (dev variant 7); at HS 64 it loses to the split, which runs there either way.
        if (HS == 128 && attention_backward_nondeterministic()) attention_backward_atomic_hopper_ws<128, 2>(p, stream, /*ordered_dq=*/false);
        else if (attention_backward_ordered_dq(T, HS)) attention_backward_atomic_hopper_ws<128, 2>(p, stream, /*ordered_dq=*/true);
        else if (HS == 128) attention_backward_split_hopper_ws<128, 2, 64, 2, 96, 2>(p, stream);
        else attention_backward_split_hopper_ws<64, 2, 128, 2, 128, 2>(p, stream);
    } else if (attention_backward_nondeterministic()) {   // the fused kernel (dev variant 8), fastest at every shape measured
        if (HS == 64 && attention_backward_fused_fits<64, 2, 2, false>()) attention_backward_fused<64, 2, 2, false>(p, stream);
        else if (HS == 128 && attention_backward_fused_fits<128, 2, 2, true>()) attention_backward_fused<128, 2, 2, true>(p, stream);
        else if (HS == 64) attention_backward_atomic<64, 4, 64>(p, stream);    // dev variant 3, 64x64/4w (57 KB)
        else attention_backward_atomic<128, 4, 64>(p, stream);
    } else {
        // the fused kernel's dK/dV without dQ + the mma.sync dQ kernel (dev variant 4's wide configs); where the fused
        // kernel's shared memory does not fit, the dK/dV kernel's 64-key config
        if (HS == 64 && attention_backward_fused_fits<64, 2, 2, false>()) attention_backward_split_wide<64, 2, 2, false, 4, 1, 64>(p, stream);
        else if (HS == 128 && attention_backward_fused_fits<128, 2, 2, true>()) attention_backward_split_wide<128, 2, 2, true, 4, 1, 32>(p, stream);
        else if (HS == 64) attention_backward_split<64, 4, 1, 32, 4, 1, 64>(p, stream);
        else attention_backward_split<128, 4, 1, 32, 4, 1, 32>(p, stream);
    }
}

#ifndef FLASHGPT_ATTENTION_GPT2_ONLY
// dq, dk, dv for any call attention_backward_unsupported_reason() accepts: GPT-2's family on the kernels above,
// everything else on the general copies of the Hopper split (HS 64, 96, 128, 256) or the mma.sync split
inline void attention_backward(const AttentionBackwardParams& p, cudaStream_t stream) {
    if (const char* why = attention_backward_unsupported_reason(p)) attention_exit_unsupported("backward", p.B, p.T, p.Tk, p.NH, p.NH_kv, p.HS, why);
    const int HS = p.HS;
    if (attention_self_causal(p)) { attention_backward_self_causal_path(p, stream); return; }
    // the kernels' extras (attention_kernel_extras); they write dS into the scratch where either bias's gradient is asked
    // for, and the dbias kernel sums it over each bias's broadcast dimensions after them
    AttentionBackwardParams k = p;
    k.x = attention_kernel_extras(p.x, p.B, p.T, p.Tk, p.NH, stream);
    k.dbias = p.dbias ? p.dbias : p.dbias2, k.dbias2 = nullptr;
    const bool hopper = attention_backward_uses_hopper(HS);
    // (HS 8-32 run HS 64's Hopper copies, 96 HS 128's, zero-padded: see head_chunk_stored)
    if (HS != 256 && attention_hopper_bias_fits(k.x)) {   // a bf16 tile bias, a key bias, gating: the Hopper split's kBias copies
        k.x = with_zero_tile_bias(k.x, p.Tk);
        // the ordered dBias where the tile bias is the one bias whose gradient is asked for; else dS into the scratch
        const bool ordered = attention_backward_dbias_ordered(p);
        const DbiasOrder order = ordered ? dbias_order(k, 128, HS > 64 ? 64 : 128, stream) : DbiasOrder{};
        if (ordered) k.dbias = nullptr;
        if (HS > 64) attention_backward_split_hopper_ws<128, 2, 64, 2, 64, 2, true, true>(k, stream, order);
        else attention_backward_split_hopper_ws<64, 2, 128, 2, 128, 2, true, true>(k, stream, order);
        if (ordered) {
            const bool first = p.dbias != nullptr;
            dbias_from_order(order, k, first ? p.x.bias_st : p.x.bias2_st, first ? p.x.bias_fp32 : p.x.bias2_fp32, first ? p.dbias : p.dbias2, stream);
            return;
        }
    } else if ((HS == 64 || HS == 96 || HS == 128) && attention_hopper_packed_fits(k.x, {p.q_st, p.k_st, p.v_st, p.o_st, p.do_st, p.dq_st, p.dk_st, p.dv_st})) {
        // packed sequences with their totals: the Hopper split's kVarlen copies
        if (HS != 64) attention_backward_split_hopper_ws<128, 2, 64, 2, 64, 2, true, false, true>(k, stream);
        else attention_backward_split_hopper_ws<64, 2, 128, 2, 128, 2, true, false, true>(k, stream);
    } else if ((attention_has_extras(k.x) && !(hopper && HS != 256 && attention_gate_only(k.x))) || (!hopper && HS <= 16)) {
        // the mma.sync split's kExtras copies
        if (HS <= 16) attention_backward_split<16, 4, 1, 64, 4, 1, 64, true>(k, stream);
        else if (HS == 32) attention_backward_split<32, 4, 1, 64, 4, 1, 64, true>(k, stream);
        else if (HS == 64) attention_backward_split<64, 4, 1, 32, 4, 1, 64, true>(k, stream);
        else if (HS == 96) attention_backward_split<96, 4, 1, 32, 4, 1, 32, true>(k, stream);
        else if (HS == 128) attention_backward_split<128, 4, 1, 32, 4, 1, 32, true>(k, stream);
        else attention_backward_split<256, 4, 1, 32, 4, 1, 32, true>(k, stream);
    } else if (hopper) {
        // the warp-specialised split's general copies (GQA: each dK/dV item sums its group's query heads; gating)
        if (HS == 256) attention_backward_split_hopper_ws_256<2>(k, stream);
        else if (HS > 64) attention_backward_split_hopper_ws<128, 2, 64, 2, 96, 2, true>(k, stream);
        else attention_backward_split_hopper_ws<64, 2, 128, 2, 128, 2, true>(k, stream);
    } else {
        // general: preprocess, the dK/dV kernel (GQA: each CTA sums its group's query heads), the dQ kernel
        if (HS == 32) attention_backward_split<32, 4, 1, 64, 4, 1, 64>(k, stream);
        else if (HS == 64) attention_backward_split<64, 4, 1, 32, 4, 1, 64>(k, stream);
        else if (HS == 96) attention_backward_split<96, 4, 1, 32, 4, 1, 32>(k, stream);
        else if (HS == 128) attention_backward_split<128, 4, 1, 32, 4, 1, 32>(k, stream);
        else attention_backward_split<256, 4, 1, 32, 4, 1, 32>(k, stream);   // dK/dV in two column halves (blockIdx.z)
    }
    if (p.dbias) launch_attention_dbias(k, p.x.bias_st, p.x.bias_fp32, p.dbias, stream);
    if (p.dbias2) launch_attention_dbias(k, p.x.bias2_st, p.x.bias2_fp32, p.dbias2, stream);
}
#endif  // FLASHGPT_ATTENTION_GPT2_ONLY

// GPT-2: dqkv (B, T, 3, NH, HS) from dout (B, T, NH, HS); scratch: attention_backward_scratch_bytes(B, T, NH, HS)
// (doc_start: the forward's document masking). dqkv_sums (optional, (B * ceil(T / 16), 3 * NH * HS) fp32): where
// attention_backward_sums_dqkv, dqkv's sums over each 16 tokens (the QKV bias gradient's partials) go there too;
// returns whether they did.
inline bool attention_backward(floatX* dqkv, void* scratch, const floatX* dout, const floatX* qkv, const floatX* out,
                               const float* lse, int B, int T, int NH, int HS, cudaStream_t stream, const int* doc_start = nullptr,
                               float* dqkv_sums = nullptr) {
    if (const char* why = attention_unsupported_reason(B, T, NH, HS)) attention_exit_unsupported("backward", B, T, T, NH, NH, HS, why);
    AttentionBackwardParams p = fused_qkv_backward_params(dqkv, scratch, dout, qkv, out, lse, B, T, NH, HS);
    if (!doc_start) {
        if (attention_backward_sums_dqkv(T, HS, false)) p.dqkv_sums = dqkv_sums;
        attention_backward_self_causal_path(p, stream);
        return p.dqkv_sums != nullptr;
    }
    p.x.doc_start = doc_start;
    if (HS == 64) attention_backward_split<64, 4, 1, 32, 4, 1, 64, true>(p, stream);
    else attention_backward_split<128, 4, 1, 32, 4, 1, 32, true>(p, stream);
    return false;
}
