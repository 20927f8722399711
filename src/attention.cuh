/*
flashgpt fused flash attention: forward and backward, bf16 or fp16 in/out, fp32 accumulation.

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
  dropout   (p.x too; FlashAttention's dropout_p with a seed and offset) on the mma.sync kExtras copies
  modifiers (p.x too; FlashAttention's) a sliding window (a mask modifier: the band's second diagonal, every general
            kernel skips the key tiles outside it), softcap and ALiBi (score modifiers, ScoreMods, with their gradients:
            the Hopper kernels' kMods copies, the mma.sync general copies); they compose with each other and the extras
  head dims 8, 16, 32, 64, 96, 128, 256 have kernels (on Hopper 8-32 run HS 64's and 96 HS 128's, zero-padded; before
            sm_90a 8 runs zero-padded to 16); on Hopper every other multiple of 8 up to 256 runs zero-padded on the next
            one's kernels, in the calls FlashAttention's interface makes (attention_unsupported_reason says which)

  attention_forward(const AttentionForwardParams&, stream), attention_backward(const AttentionBackwardParams&, stream);
  attention_unsupported_reason() / attention_backward_unsupported_reason() say why a call is refused. GPT-2's calls
  (fused QKV, causal, scale 1/sqrt(HS)) are thin wrappers: attention_forward(out, lse, qkv, B, T, NH, HS, stream).

Forward loop order is FlashAttention-2's: one CTA per (Q tile of kBlockM rows, b, h); each warp owns 16 * kWarpTilesM
query rows and walks the K/V tiles from the last visible one down to key 0, keeping O, the row max and the row sum in
registers (online softmax, normalised once at the end). The longest Q tiles (the last ones, causal) are launched first.

fp16: p.fp16 makes q, k, v, out (the backward's dout, dq, dk, dv) and the gate IEEE half (the floatX pointers then point
at __half data); every kernel has an fp16 copy, instantiated only where the dispatch reaches it (the template flag
kHalf: the MMAs' operand type and the roundings to 16 bits), compiled in objects of their own (ATTENTION_FP16).

Paths: sm_80+ mma.sync (m16n8k16 bf16 or fp16, ldmatrix, cp.async double buffering, 128-byte swizzled shared memory), every
head dim; on Hopper, when the binary carries sm_90a code, head dims 64, 128 and 256 run the same loops on wgmma,
warp-specialised: a producer warpgroup issues TMA loads (tensor maps over the strided tensors) into mbarrier rings,
consumer warpgroups (setmaxnreg) do the math, persistent CTAs take the longest tiles first; the forward's consumers
ping-pong their GEMMs. Causal self-attention without GQA (GPT-2's family) runs kernels compiled for it (kGeneral
false: the diagonal and Tk constants to the compiler); every other call the general copies of the same kernels; biases,
key masks and gating (kBias: a TMA-loaded tile bias plus a per-key bias, see attention_kernel_extras) and packed
sequences with their totals (kVarlen) general copies of their own; other calls with extras (key lengths, document
masks, fp32 tile biases) the mma.sync kernels' kExtras copies. Decoding (a few query rows against a long KV cache)
runs split-key kernels, which also serve FlashAttention's KV-cache call (attention_forward_kvcache with an
AttentionKVCache: paged caches, the in-place append with the rotary embedding, left padding, the modifiers).

Files: this header is the interface (parameters and the calls); src/attention_modifiers.cuh the mask and score
modifiers the general kernels compose (the band, ScoreMods); the kernels compile once, in src/attention_forward.cu
(forward and decoding dispatch, over the kernels of src/attention_forward.cuh), src/attention_backward.cu and
src/attention_backward_general.cu (GPT-2's family's and the general backward dispatch, over src/attention_backward.cuh),
into build/attention.a, which every program that includes this header links (make builds it; libflashgpt_attention.so
carries it too). The dev harnesses include the kernel headers only for the variants they own.
*/
#pragma once
#include <cmath>
#include "common.cuh"

// ----------------------------------------------------------------------------
// parameters: one struct per direction, shared with the dev/cuda harness

// A bf16 (or fp16) tensor of (batch, sequence, head, head dim) with its head dim contiguous: element (b, t, h, d) at
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
    // A sliding window (FlashAttention's window_size, a mask modifier every general kernel applies, not an extra that
    // picks other copies): query i of sequence b sees keys i + Tk_b - T_b - window_left .. i + Tk_b - T_b + window_right,
    // bottom-right aligned as the causal diagonal; -1 leaves that side unbounded, causal sets window_right to 0. Key
    // tiles wholly outside every row's window are skipped, in both directions.
    bool window;
    int window_left, window_right;
    // Score modifiers (FlashAttention's softcap and ALiBi), applied by every general kernel with their gradients: the
    // logit of query i, key j is softcap * tanh(scale * q_i.k_j / softcap) (softcap > 0; else scale * q_i.k_j), plus
    // the biases, minus alibi_slopes[b * alibi_batch + h] * |i + Tk_b - T_b - j|. softcap does not combine with a
    // bias, bias2 or key mask (its gradient is recovered from P, which they would shift).
    float softcap;                // 0: none
    const float* alibi_slopes;    // (B, NH) or (NH) fp32 device; nullptr: none
    long long alibi_batch;        // NH, or 0: one row of slopes for every sequence
    // The kernels' constants of the score modifiers (set by attention_forward / attention_backward from softcap and the
    // scale; never by the caller): scale / softcap, softcap / scale, 1 / (softcap log2e) (0 without softcap), 1 / scale
    float softcap_in, softcap_out, softcap_t, inv_scale;
    // Dropout (FlashAttention's dropout_p): each probability of the softmax is kept with probability 1 - dropout_p and
    // scaled by 1 / (1 - dropout_p), or zeroed; the LSE stays that of the whole softmax. Which are kept is a pure
    // function of (dropout_seed, dropout_offset, b, h, i, j) (src/attention_modifiers.cuh's Dropout), so the backward
    // recomputes the forward's mask and a seed gives the same one every time. It runs on the Hopper kMods copies (head
    // dims up to 128, no extras) and the mma.sync kExtras copies, and not with softcap (as FlashAttention).
    float dropout_p;                      // 0: none; below 1
    unsigned long long dropout_seed, dropout_offset;
};
__host__ __device__ inline bool attention_has_score_mods(const AttentionExtras& x) { return x.softcap > 0.0f || x.alibi_slopes; }
__host__ __device__ inline bool attention_has_dropout(const AttentionExtras& x) { return x.dropout_p > 0.0f; }
// any modifier: the window, a score modifier or dropout (GPT-2's kernels and the decoding ones take none)
__host__ __device__ inline bool attention_has_modifiers(const AttentionExtras& x) {
    return x.window || attention_has_score_mods(x) || attention_has_dropout(x);
}
// the head dims with kernels of their own; any other multiple of 8 runs zero-padded on the next one's Hopper copies
inline bool attention_head_dim_compiled(int HS) {
    return HS == 8 || HS == 16 || HS == 32 || HS == 64 || HS == 96 || HS == 128 || HS == 256;
}
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
    bool fp16 = false;            // q, k, v, out (and the gate, gated_out) IEEE fp16, else bf16
};

// GPT-2's family: causal self-attention (T = Tk) without GQA at head dims 64 and 128. It runs on kernels compiled for
// it (kGeneral false: the diagonal and Tk constants to the compiler), which refuse anything else; every other call
// runs the general copies.
template <class Params>
inline bool attention_self_causal(const Params& p) {
    return p.causal && p.T == p.Tk && p.NH == p.NH_kv && (p.HS == 64 || p.HS == 128) && !attention_has_extras(p.x) &&
           !attention_has_modifiers(p.x);
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


// A/B overrides for the dev harness (--schedule, --pdl, --dbias-slots); by default the dispatch's rules decide
struct AttentionTuning {
    enum { kByShape = 0, kRoundRobin = 1, kClaimed = 2 };
    int schedule = kByShape;   // the persistent Hopper kernels' schedule
    bool pdl = true;           // programmatic dependent launch of the Hopper backward's kernels
    int dbias_slots = 0;       // the ordered dBias's accumulator slots (DbiasOrder); 0: by shape
    int section_heads = 0;     // heads per section of the persistent walks (persistent_section_heads); 0: by shape
};
AttentionTuning& attention_tuning();

// ----------------------------------------------------------------------------
// forward (src/attention_forward.cu)

// nullptr if the call runs on this GPU, else the reason it does not
const char* attention_unsupported_reason(const AttentionForwardParams& p);
// whether head dim HS, a multiple of 8 without kernels of its own (attention_head_dim_compiled), runs zero-padded on
// the Hopper copies in a call with: extras (attention_has_extras), and if so whether they are packed sequences alone
// that the kVarlen copies take (attention_forward_hopper_packed_fits); softcap or ALiBi; dropout. For given features
// it holds up to a head dim and not past it (flashgpt_attention_padded_head_dim_limit reports that one)
bool attention_padded_head_dim_runs(int HS, bool extras, bool packed_alone, bool score_mods, bool dropout);
// GPT-2's shape (fused QKV, causal, scale 1/sqrt(HS))
const char* attention_unsupported_reason(int B, int T, int NH, int HS);
// the kernel GPT-2's family runs at this head dim on this GPU, in words
const char* attention_forward_path_name(int HS);

// out = softmax(scale * Q K^T, masks) V and lse, for any call attention_unsupported_reason() accepts (else it exits
// with the reason). A few query rows against many keys (decoding) run the split-key kernels; GPT-2's family the kernels
// compiled for it; everything else the general copies of the same kernels.
void attention_forward(const AttentionForwardParams& p, cudaStream_t stream);
// GPT-2: causal self-attention on the fused QKV activation. doc_start (B, T), optional: document masking (train_gpt2cu
// -dm 1), on the mma.sync kernels' kExtras copies
void attention_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH, int HS, cudaStream_t stream,
                       const int* doc_start = nullptr);
// A KV cache as FlashAttention's flash_attn_with_kvcache takes it: its lengths, rows, pages, and the new tokens'
// keys and values appended in place (with the rotary embedding) by the attention call itself. Sequence b's keys are
// positions leftpad[b] .. seqlens[b] + T_new - 1 of its cache, the last T_new of them the new tokens'; the causal
// diagonal and the window are aligned to that end (query t sees keys <= t + seqlens[b] + T_new - T), and ALiBi's
// distance is |t + seqlens[b] + T_new - T - j| (FlashAttention's).
struct AttentionKVCache {
    const int* seqlens;           // (B) device: the keys in sequence b's cache before this call's new ones
                                  // (FlashAttention's cache_seqlens); nullptr: seqlen for every sequence
    int seqlen;
    bool seqlens_count_new;       // seqlens (seqlen) count the new tokens too (a server's lengths after the step,
                                  // generate_gpt2cu's): the cache before the call holds seqlens[b] - T_new
    const int* batch_idx;         // (B) device: the cache row (batch index) sequence b reads (cache_batch_idx); nullptr: b
    const int* leftpad;           // (B) device: sequence b's keys start at position leftpad[b] (cache_leftpad); nullptr: 0
    const int* block_table;       // (B, block_table_batch) device: a paged cache, position j of sequence b at row
    long long block_table_batch;  // j % page_size of page block_table[b * block_table_batch + j / page_size]; p.k and
    int page_size;                // p.v are then (pages, page_size, NH_kv, HS) with k_st.batch the page stride, and
                                  // p.Tk is the positions a table row reaches; nullptr: contiguous (B_cache, Tk, ...)
    const floatX *k_new, *v_new;  // (B, T_new, NH_kv, HS): written into the caches (p.k, p.v, which must be writable) at
    AttentionStrides k_new_st, v_new_st;   // positions seqlens[b] .. + T_new - 1, K with the rotary embedding, before
    int T_new;                    // the attention reads them; nullptr / 0: no append
    const floatX *rotary_cos, *rotary_sin;  // (positions, rotary_dim / 2) contiguous, q's dtype: the rotary embedding
    int rotary_dim;               // of the new keys (at their positions) and of the queries (rotary_per_token: query t at
    bool rotary_interleaved;      // seqlens[b] + t; else all at seqlens[b]); the first rotary_dim (a multiple of 16) dims,
    bool rotary_per_token;        // pairs (2i, 2i + 1) where interleaved (GPT-J), else (i, i + rotary_dim / 2) (GPT-NeoX);
                                  // 0: none. Only with an append (as FlashAttention).
    int num_splits;               // the key splits: 0 by the occupancy, else at most this many
};
// nullptr if the KV-cache call runs on this GPU, else the reason it does not
const char* attention_kvcache_unsupported_reason(const AttentionForwardParams& p, const AttentionKVCache& kv);
// Attention against a KV cache (FlashAttention's flash_attn_with_kvcache): p.q the T new queries (any T; the split-key
// kernels take 16 query rows of a key/value head at a time), p.k and p.v the caches (kv says how they are laid out),
// p.Tk their positions per sequence, p.x's window, softcap and ALiBi, and packed queries (p.x.cu_seqlens_q, as the
// general call's; FlashAttention's varlen over a paged cache) without an append; p.lse may be nullptr. Head dims
// multiples of 8 up to 256. Exits with the reason where attention_kvcache_unsupported_reason refuses the call.
void attention_forward_kvcache(const AttentionForwardParams& p, const AttentionKVCache& kv, cudaStream_t stream);
// the same on a contiguous cache already holding the new tokens: seqlens_k (device, B ints; nullptr: Tk each) counts
// sequence b's keys, the new tokens' included (causal: query t sees keys <= t + seqlens_k[b] - T)
inline void attention_forward_kvcache(const AttentionForwardParams& p, const int* seqlens_k, cudaStream_t stream) {
    AttentionKVCache kv = {};
    kv.seqlens = seqlens_k;
    kv.seqlen = p.Tk;
    attention_forward_kvcache(p, kv, stream);
}
// GPT-2's family (attention_self_causal) on the kernels compiled for it (dev/cuda/attention_forward's variant 0)
void attention_forward_self_causal_path(const AttentionForwardParams& p, cudaStream_t stream);
// The dropout mask of the call p (its x.dropout_*, lengths, packed sequences): mask (B, NH, T, Tk) bytes, 1 where
// probability (b, h, i, j) is kept, 0 where dropped or past sequence b's lengths (for tests and FlashAttention's S_dmask)
void attention_dropout_mask(uint8_t* mask, const AttentionForwardParams& p, cudaStream_t stream);

// ============================================================================
// backward (src/attention_backward.cu; the general calls' dispatch in src/attention_backward_general.cu)

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
    bool fp16 = false;            // the forward's: every floatX tensor here (q .. dv, dout, dgate) IEEE fp16, else bf16
    Fp8Copy dqkv8 = {};           // optional (q set), GPT-2's kernels only, beside dqkv_sums (attention_backward_writes_dqkv8):
                                  // dq, dk, dv go there in FP8 instead of to dq, dk, dv, as the QKV projection's backward
                                  // matmuls read them: (B * T, 3 * NH * HS) row-major for dinp, then at q + B * T * 3 * NH * HS
                                  // its transpose (3 * NH * HS, B * T) for dweight
};

// GPT-2: dqkv (B, T, 3, NH, HS) from dout (B, T, NH, HS)
inline AttentionBackwardParams fused_qkv_backward_params(floatX* dqkv, void* scratch, const floatX* dout, const floatX* qkv,
                                                         const floatX* out, const float* lse, int B, int T, int NH, int HS) {
    const AttentionStrides qkv_st = fused_qkv_strides(T, NH, HS), bthd = bthd_strides(T, NH, HS);
    const size_t part = (size_t)NH * HS;
    return {dqkv, dqkv + part, dqkv + 2 * part, scratch, dout, qkv, qkv + part, qkv + 2 * part, out, lse,
            qkv_st, qkv_st, qkv_st, bthd, bthd, qkv_st, qkv_st, qkv_st, B, T, T, NH, NH, HS, true, 1.0f / std::sqrt((float)HS)};
}

// Opt-in to the non-deterministic (atomic dQ) path: FLASHGPT_ATTN_NONDETERMINISTIC=1, or set this flag before
// sizing the scratch (the atomic path needs the fp32 dQ accumulator).
bool& attention_backward_nondeterministic();
// the scratch the backward needs (AttentionBackwardParams::scratch), in bytes
size_t attention_backward_scratch_bytes(const AttentionBackwardParams& p);
size_t attention_backward_scratch_bytes(int B, int T, int NH, int HS);   // GPT-2
// the statistics (and, with_dq_accum, the fp32 dQ accumulator and its order counters) alone
size_t attention_backward_scratch_bytes_for(int B, int T, int NH, int HS, bool with_dq_accum);
// the kernels GPT-2's family runs at this head dim on this GPU, in words
const char* attention_backward_path_name(int HS);
// Whether GPT-2's backward writes AttentionBackwardParams::dqkv_sums at this shape: on the deterministic Hopper split
// (not with the atomic or ordered dQ, not with document masking)
bool attention_backward_sums_dqkv(int T, int HS, bool document_masking);
// Whether GPT-2's backward can write dqkv in FP8 (AttentionBackwardParams::dqkv8) at this shape: where it sums dqkv,
// with T % 16 == 0 (a warp's 16 rows of the transpose are one store)
bool attention_backward_writes_dqkv8(int T, int HS, bool document_masking);
// nullptr if the call runs on this GPU, else the reason it does not
const char* attention_backward_unsupported_reason(const AttentionBackwardParams& p);

// dq, dk, dv for any call attention_backward_unsupported_reason() accepts (else it exits with the reason): GPT-2's
// family on the kernels compiled for it, everything else on the general copies of the Hopper split (HS 64, 128, 256,
// the head dims between them zero-padded) or the mma.sync split. Deterministic unless
// attention_backward_nondeterministic() is set (which only GPT-2's family uses).
void attention_backward(const AttentionBackwardParams& p, cudaStream_t stream);
// GPT-2: dqkv (B, T, 3, NH, HS) from dout (B, T, NH, HS); scratch: attention_backward_scratch_bytes(B, T, NH, HS)
// (doc_start: the forward's document masking). dqkv_sums (optional, (B * ceil(T / 16), 3 * NH * HS) fp32): where
// attention_backward_sums_dqkv, dqkv's sums over each 16 tokens (the QKV bias gradient's partials) go there too;
// returns whether they did. dqkv8 (optional, only where attention_backward_writes_dqkv8, with dqkv_sums): dqkv goes
// there in FP8 instead of to dqkv.
bool attention_backward(floatX* dqkv, void* scratch, const floatX* dout, const floatX* qkv, const floatX* out,
                        const float* lse, int B, int T, int NH, int HS, cudaStream_t stream, const int* doc_start = nullptr,
                        float* dqkv_sums = nullptr, const Fp8Copy* dqkv8 = nullptr);
// GPT-2's family (attention_self_causal) on the kernels compiled for it (dev/cuda/attention_backward's variant 0)
void attention_backward_self_causal_path(const AttentionBackwardParams& p, cudaStream_t stream);
