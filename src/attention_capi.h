/*
C interface of libflashgpt_attention.so (`make lib`): src/attention.cuh's general forward and backward behind plain C
types, for callers that are not C++ (python/flashgpt_attention.py loads it with ctypes).

Tensors are bf16 (or, with fp16 set, IEEE fp16) on the current CUDA device, each with its head dim contiguous and three strides in elements,
(batch, row, head): element (b, t, h, d) of a (B, T, H, HS) tensor lives at base[b * s[0] + t * s[1] + h * s[2] + d],
so BTHD, BHTD, a view into a fused QKV buffer and so on all pass without a copy. Every stride must be a multiple of 8
and every pointer 16-byte aligned.

  q (B, T, NH, HS), k and v (B, Tk, NH_kv, HS), out (B, T, NH, HS), lse (B, NH, T) fp32 contiguous (natural log)
  query head h reads key/value head h / (NH / NH_kv) (GQA; MQA: NH_kv = 1)
  causal: query i sees key j iff j <= i + Tk - T (the diagonal aligned bottom-right; T = Tk: j <= i)
  scale: softmax(scale * Q K^T), usually 1 / sqrt(HS)
  stream: a cudaStream_t (nullptr: the legacy default stream)

The _ex calls take src/attention.cuh's optional extras (AttentionExtras) too, every pointer null: none. The calls
without _ex (FlashgptAttentionCall, below) take the window, softcap, ALiBi and dropout of them, and no other:

  bias (B, NH, T, Tk) bf16, or fp32 where bias_fp32: softmax(scale * Q K^T + bias). Element (b, h, i, j) lives at
       bias[b * s[0] + i * s[1] + h * s[2] + j] with bias_strides s (batch, row = query, head) in elements, the key dim
       contiguous; a stride 0 broadcasts its dimension. Aligned to its element size. A -inf entry masks its key.
  seqlens_k (B) int32 device: sequence b sees the first seqlens_k[b] (<= Tk) of its keys (key padding)
  cu_seqlens_q, cu_seqlens_k (B + 1) int32 device: packed sequences (FlashAttention's varlen): sequence b's rows are
       cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1 of q and out (of k and v with cu_seqlens_k), with the batch strides 0;
       T and Tk are then the longest lengths. lse stays (B, NH, T), only the first T_b rows of each sequence written.
       seqlens_k and cu_seqlens_k exclude each other.
  total_q, total_k: with cu_seqlens, the rows of q (and out) and of k (and v) in memory, at least cu_seqlens_q[B] and
       cu_seqlens_k[B] (the tensors' first dimension), so that the kernels' tile loads stay inside them: on Hopper
       the packed sequences then run on the wgmma kernels (head dims 64, 128; forward 256 too) where no other extra
       is given; 0: unknown (the portable kernels run them)
  gate (B, T, NH, HS) bf16 like q, with its own gate_strides (batch, row, head) (packed: the batch stride 0, rows
       as q's): output gating. The forward then also writes gated_out = out * gate (like out, with o_strides; out
       itself is still written, as the backward reads it); the backward takes dout = d loss / d gated_out and writes
       dgate = d loss / d gate, with gate_strides. A gate needs gated_out (forward) and dgate (backward), and neither
       comes without a gate; all three 16-byte aligned, strides multiples of 8. The backward's scratch grows with a
       gate (B * T * NH * HS bf16).
  bias2, bias2_strides, bias2_fp32: a second additive bias, as bias (AlphaFold's mask bias beside its pair bias)
  key_mask (B, Tk) bytes device: key j of sequence b is seen where key_mask[b * key_mask_batch + j] is nonzero (any
       pattern; key_mask_batch 0 broadcasts one mask row to every sequence)
  window_left, window_right: a sliding window (FlashAttention's window_size): query i sees keys
       i + Tk_b - T_b - window_left .. i + Tk_b - T_b + window_right; -1 leaves a side unbounded (both -1: no window),
       causal sets window_right to 0
  softcap: > 0 caps the scores, softcap * tanh(scale * q.k / softcap) (FlashAttention's softcap; 0: none). It does
       not combine with a bias, bias2 or key mask.
  alibi_slopes (B, NH) or (NH) fp32 device: ALiBi, the logit of query i and key j minus
       alibi_slopes[b * alibi_batch + h] * |i + Tk_b - T_b - j| (FlashAttention's alibi_slopes; alibi_batch NH, or 0
       for one row of slopes)
  dropout_p, dropout_seed, dropout_offset: dropout (FlashAttention's dropout_p): each probability kept with probability
       1 - dropout_p (then scaled by 1 / (1 - dropout_p)) or zeroed, the mask a function of the seed, the offset and
       (b, h, i, j), so the backward, given the same three, recomputes the forward's; 0: none. Not with softcap.
  fp16 (every call): q, k, v, out (the backward's dout, dq, dk, dv too) and the gate are IEEE fp16, not bf16 (biases
       keep their own dtype: bf16 or fp32)
  dbias, dbias2 (backward only): d loss / d bias (bias2), in that bias's dtype and with its strides (summed over its
       broadcast dimensions); each needs its bias, and the scratch that flashgpt_attention_backward_scratch_bytes_ex
       gives with them.
Each sequence b runs with its own lengths T_b, Tk_b, the causal diagonal aligned bottom-right per sequence
(key j <= i + Tk_b - T_b); a row that sees no key (all its keys masked) gets 0 and no gradient.

flashgpt_attention_abi() says which version of these signatures the library has, FLASHGPT_ATTENTION_ABI when it was
built from this header (8: the plain calls take a FlashgptAttentionCall; 7: flashgpt_attention_kvcache; 6: every call takes fp16, the _ex calls dropout; 5: the window, softcap and ALiBi; 4: bias2 and the key mask; 3: the packed totals; 2: the gate arguments), so
a caller can refuse a library built from another.

The calls return nullptr on success, else a message that says why: a call src/attention.cuh does not support (its
attention_unsupported_reason), or a CUDA error. They never exit the process for an unsupported call. All calls must
use one device per process (the first one used): the kernels' one-time setup is per process.
*/
#pragma once
#include <stddef.h>

#if defined(_WIN32)
#define FLASHGPT_API __declspec(dllexport)
#else
#define FLASHGPT_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

// The plain calls: the _ex calls below without their extras (biases, key mask, key lengths, packed sequences, gate),
// the window, softcap, ALiBi and dropout kept, with their arguments in one struct. A binding that repeats a shape fills
// one struct per shape and sets only the pointers (and the seed) a call, so it converts one argument, not 30 to 50.
// Fields as the _ex calls' arguments of the same names. The forward reads q .. lse, writes out and lse; the backward
// reads every tensor and overwrites dq (like q), dk and dv (like k and v; with GQA summed over each group of query
// heads), from dout (like out) and the forward's q, k, v, out and lse. Pointers a call does not read may be null.
typedef struct FlashgptAttentionCall {
    const void* q; const void* k; const void* v; void* out; float* lse;
    const void* dout; void* dq; void* dk; void* dv;
    void* scratch;            // the backward's device scratch, 16-byte aligned, scratch_bytes of it, at least
    size_t scratch_bytes;     // flashgpt_attention_backward_scratch_bytes(_ex) with the call's window and modifiers
    void* stream;
    const float* alibi_slopes; long long alibi_batch;
    unsigned long long dropout_seed, dropout_offset;
    long long q_strides[3], k_strides[3], v_strides[3], o_strides[3];
    long long do_strides[3], dq_strides[3], dk_strides[3], dv_strides[3];
    int B, T, Tk, NH, NH_kv, HS, causal, fp16;
    float scale;
    int window_left, window_right;   // -1, -1: no window
    float softcap, dropout_p;        // 0: none
} FlashgptAttentionCall;

// out and lse from q, k, v
FLASHGPT_API const char* flashgpt_attention_forward(const FlashgptAttentionCall* call);

// bytes of device scratch flashgpt_attention_backward needs for this shape without a window or modifiers (0: the
// shape is refused, or no device; the backward then says why); with them, flashgpt_attention_backward_scratch_bytes_ex
FLASHGPT_API size_t flashgpt_attention_backward_scratch_bytes(int B, int T, int Tk, int NH, int NH_kv, int HS, int causal);

// dq, dk, dv (see above)
FLASHGPT_API const char* flashgpt_attention_backward(const FlashgptAttentionCall* call);

// flashgpt_attention_forward with the extras above
FLASHGPT_API const char* flashgpt_attention_forward_ex(const void* q, const void* k, const void* v, void* out, float* lse,
                                                       const long long* q_strides, const long long* k_strides,
                                                       const long long* v_strides, const long long* o_strides,
                                                       int B, int T, int Tk, int NH, int NH_kv, int HS, int causal, float scale,
                                                       const void* bias, const long long* bias_strides, int bias_fp32,
                                                       const int* seqlens_k, const int* cu_seqlens_q, const int* cu_seqlens_k,
                                                       int total_q, int total_k, const void* gate, const long long* gate_strides,
                                                       void* gated_out, const void* bias2, const long long* bias2_strides,
                                                       int bias2_fp32, const unsigned char* key_mask, long long key_mask_batch,
                                                       int window_left, int window_right, float softcap,
                                                       const float* alibi_slopes, long long alibi_batch, float dropout_p,
                                                       unsigned long long dropout_seed, unsigned long long dropout_offset,
                                                       int fp16, void* stream);

// flashgpt_attention_backward_scratch_bytes for flashgpt_attention_backward_ex with these extras (pass the backward's
// own: dbias may add B * NH * T * Tk fp32, a gate B * T * NH * HS bf16, and the extras change which kernels run)
FLASHGPT_API size_t flashgpt_attention_backward_scratch_bytes_ex(int B, int T, int Tk, int NH, int NH_kv, int HS, int causal,
                                                                 const void* bias, const long long* bias_strides, int bias_fp32,
                                                                 const int* seqlens_k, const int* cu_seqlens_q,
                                                                 const int* cu_seqlens_k, int total_q, int total_k,
                                                                 const void* gate, const long long* gate_strides, const void* dbias,
                                                                 const void* bias2, const long long* bias2_strides, int bias2_fp32,
                                                                 const unsigned char* key_mask, long long key_mask_batch,
                                                                 const void* dbias2, int window_left, int window_right,
                                                                 float softcap, const float* alibi_slopes, long long alibi_batch,
                                                                 float dropout_p);

// flashgpt_attention_backward with the extras above (the forward's) and, optionally, dbias (overwritten); with a gate,
// dout is d loss / d gated_out, out is still the forward's out (not gated_out), and dgate is overwritten;
// scratch_bytes >= flashgpt_attention_backward_scratch_bytes_ex() with the same arguments
FLASHGPT_API const char* flashgpt_attention_backward_ex(void* dq, void* dk, void* dv, const void* dout, const void* q,
                                                        const void* k, const void* v, const void* out, const float* lse,
                                                        const long long* dq_strides, const long long* dk_strides,
                                                        const long long* dv_strides, const long long* do_strides,
                                                        const long long* q_strides, const long long* k_strides,
                                                        const long long* v_strides, const long long* o_strides,
                                                        int B, int T, int Tk, int NH, int NH_kv, int HS, int causal, float scale,
                                                        const void* bias, const long long* bias_strides, int bias_fp32,
                                                        const int* seqlens_k, const int* cu_seqlens_q, const int* cu_seqlens_k,
                                                        int total_q, int total_k, const void* gate, const long long* gate_strides,
                                                        void* dgate, void* dbias, const void* bias2, const long long* bias2_strides,
                                                        int bias2_fp32, const unsigned char* key_mask, long long key_mask_batch,
                                                        void* dbias2, int window_left, int window_right, float softcap,
                                                        const float* alibi_slopes, long long alibi_batch, float dropout_p,
                                                        unsigned long long dropout_seed, unsigned long long dropout_offset,
                                                        int fp16, void* scratch, size_t scratch_bytes, void* stream);

// dropout's keep mask of a call with these lengths and dropout arguments: mask (B, NH, T, Tk) bytes, contiguous, 1 where
// probability (b, h, i, j) is kept and 0 where dropped (with cu_seqlens, (i, j) within sequence b; 0 past its lengths)
FLASHGPT_API const char* flashgpt_attention_dropout_mask(unsigned char* mask, int B, int NH, int T, int Tk,
                                                         const int* cu_seqlens_q, const int* cu_seqlens_k, float dropout_p,
                                                         unsigned long long dropout_seed, unsigned long long dropout_offset,
                                                         void* stream);

// FlashAttention's flash_attn_with_kvcache (src/attention.cuh's AttentionKVCache says each argument's meaning): q
// (B, T, NH, HS) against the caches k_cache, v_cache, contiguous (B_cache, Tk, NH_kv, HS) or, with block_table
// (B, block_table_batch) int32, paged (pages, page_size, NH_kv, HS) with the page stride as the batch stride and Tk the
// positions a table row reaches. cache_seqlens (B) int32 device (nullptr: cache_seqlen for all): the keys in each
// sequence's cache before this call; cache_batch_idx, cache_leftpad (B) int32 device or nullptr. k_new, v_new
// (B, T_new, NH_kv, HS) or nullptr: appended into the caches in place at cache_seqlens[b] .., K with the rotary
// embedding (rotary_cos, rotary_sin (positions, rotary_dim / 2) of q's dtype; rotary_dim 0: none), before the
// attention reads them. The window, softcap and ALiBi as the _ex calls; num_splits: 0 chooses; lse may be null. Head
// dims multiples of 8 up to 256. cu_seqlens_q (B + 1) int32 device or nullptr: packed queries, as the _ex calls' (q and
// out (total_q, NH, HS) with the batch strides 0, T the longest; lse (B, NH, T)), without an append.
FLASHGPT_API const char* flashgpt_attention_kvcache(const void* q, void* k_cache, void* v_cache, void* out, float* lse,
                                                    const long long* q_strides, const long long* k_strides,
                                                    const long long* v_strides, const long long* o_strides,
                                                    int B, int T, int Tk, int NH, int NH_kv, int HS, int causal, float scale,
                                                    const int* cu_seqlens_q, const int* cache_seqlens, int cache_seqlen,
                                                    const int* cache_batch_idx, const int* cache_leftpad, const int* block_table, long long block_table_batch,
                                                    int page_size, const void* k_new, const void* v_new,
                                                    const long long* k_new_strides, const long long* v_new_strides, int T_new,
                                                    const void* rotary_cos, const void* rotary_sin, int rotary_dim,
                                                    int rotary_interleaved, int rotary_per_token, int window_left,
                                                    int window_right, float softcap, const float* alibi_slopes,
                                                    long long alibi_batch, int num_splits, int fp16, void* stream);

// On the current device, the largest head dim between the library's own (8, 16, 32, 64, 96, 128, 256) that a call with
// these features takes as it is, zero-padded inside the Hopper kernels (a multiple of 8; 0: none): packed sequences
// (cu_seqlens, no other extras), softcap or ALiBi (score_mods), dropout. A caller pads a head dim past it to the next of
// the library's own (flashgpt.flash_attn_interface does, where FlashAttention's wrapper pads to a multiple of 8).
FLASHGPT_API int flashgpt_attention_padded_head_dim_limit(int packed, int score_mods, int dropout);

// the git commit the library was built from
FLASHGPT_API const char* flashgpt_attention_version(void);

// the version of these signatures the library was built with, FLASHGPT_ATTENTION_ABI; a library without this call
// predates the gate arguments of the _ex calls
#define FLASHGPT_ATTENTION_ABI 9
FLASHGPT_API int flashgpt_attention_abi(void);

#ifdef __cplusplus
}
#endif
