/*
libflashgpt_attention.so: src/attention.cuh's general attention behind the C interface of src/attention_capi.h.

  make lib        builds ./libflashgpt_attention.so (the same flags and archs as every other target)

Each call checks what src/attention.cuh would refuse (attention_unsupported_reason and the backward's), plus what only
a foreign caller gets wrong (null pointers, a small scratch, another device), and returns the reason instead of
letting attention_forward / attention_backward exit the process. After the launches it returns cudaGetLastError's
message, if any. CUDA failures inside src/attention.cuh's own cudaCheck calls (a failed launch, say) still exit, as
they do in train_gpt2cu. The calls without _ex are the _ex calls with every extra (biases, key mask, key lengths,
packed sequences, gate, dbias) off, their arguments read from a FlashgptAttentionCall.
*/
#include "attention_capi.h"
#include <mutex>
#include "attention.cuh"

// python/flashgpt_attention.py's _Call mirrors this layout byte for byte
static_assert(sizeof(FlashgptAttentionCall) == 376 && offsetof(FlashgptAttentionCall, q_strides) == 128 &&
              offsetof(FlashgptAttentionCall, B) == 320, "FlashgptAttentionCall's layout changed: change _Call with it");

#ifndef GIT_COMMIT
#define GIT_COMMIT "unknown"
#endif

namespace {

// src/attention.cuh keeps its one-time setup in plain statics (the device properties, the sm_90a probe, each kernel's
// shared-memory opt-in), and PyTorch runs the backward on its own thread, so the calls take turns
std::mutex g_call_mutex;
// those statics hold for one device: the first one a call ran on
int g_device = -1;
// messages with numbers in them, valid until the calling thread's next call
thread_local char g_message[256];

// nullptr when the current device can run the kernels
const char* device_problem() {
    int device = -1, major = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    if (err != cudaSuccess) {
        cudaGetLastError();   // a failed query leaves its error pending: the caller gets it here instead
        return cudaGetErrorString(err);
    }
    if (g_device < 0) g_device = device;
    if (device != g_device) {
        snprintf(g_message, sizeof(g_message), "libflashgpt_attention runs on one device per process: device %d was used "
                 "first, this call is on device %d", g_device, device);
        return g_message;
    }
    return nullptr;
}

// cudaGetLastError's message after the launches, nullptr if none
const char* launch_problem() {
    const cudaError_t err = cudaGetLastError();
    return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}

AttentionStrides strides_of(const long long* s) { return {s[0], s[1], s[2]}; }

// the _ex calls' extras as src/attention.cuh's AttentionExtras; nullptr, or why they are refused
const char* extras_of(AttentionExtras& x, const void* bias, const long long* bias_strides, int bias_fp32,
                      const int* seqlens_k, const int* cu_seqlens_q, const int* cu_seqlens_k, int total_q, int total_k,
                      const void* gate, const long long* gate_strides, const void* bias2, const long long* bias2_strides,
                      int bias2_fp32, const unsigned char* key_mask, long long key_mask_batch, int window_left, int window_right,
                      float softcap, const float* alibi_slopes, long long alibi_batch, float dropout_p,
                      unsigned long long dropout_seed, unsigned long long dropout_offset) {
    if (bias && !bias_strides) return "a bias needs its 3 strides (bias_strides not null)";
    if (bias2 && !bias2_strides) return "bias2 needs its 3 strides (bias2_strides not null)";
    if (gate && !gate_strides) return "a gate needs its 3 strides (gate_strides not null)";
    x = {};
    x.bias2 = bias2;
    if (bias2) x.bias2_st = strides_of(bias2_strides);
    x.bias2_fp32 = bias2_fp32 != 0;
    x.key_mask = key_mask;
    x.key_mask_batch = key_mask_batch;
    x.bias = bias;
    if (bias) x.bias_st = strides_of(bias_strides);
    x.bias_fp32 = bias_fp32 != 0;
    x.seqlens_k = seqlens_k;
    x.cu_seqlens_q = cu_seqlens_q;
    x.cu_seqlens_k = cu_seqlens_k;
    x.total_q = cu_seqlens_q ? total_q : 0;
    x.total_k = cu_seqlens_k ? total_k : 0;
    x.gate = (const floatX*)gate;
    if (gate) x.gate_st = strides_of(gate_strides);
    x.window = window_left != -1 || window_right != -1;
    x.window_left = window_left, x.window_right = window_right;
    x.softcap = softcap;
    x.alibi_slopes = alibi_slopes, x.alibi_batch = alibi_batch;
    x.dropout_p = dropout_p, x.dropout_seed = dropout_seed, x.dropout_offset = dropout_offset;
    return nullptr;
}

// the forward's tensors, shape, mask and scale into p (the calls check their pointers and strides for null first)
void set_forward_call(AttentionForwardParams& p, const void* q, const void* k, const void* v, void* out, float* lse,
                      const long long* q_strides, const long long* k_strides, const long long* v_strides,
                      const long long* o_strides, int B, int T, int Tk, int NH, int NH_kv, int HS, int causal, float scale,
                      int fp16) {
    p.q = (const floatX*)q; p.k = (const floatX*)k; p.v = (const floatX*)v;
    p.out = (floatX*)out; p.lse = lse;
    p.q_st = strides_of(q_strides); p.k_st = strides_of(k_strides); p.v_st = strides_of(v_strides); p.o_st = strides_of(o_strides);
    p.B = B; p.T = T; p.Tk = Tk; p.NH = NH; p.NH_kv = NH_kv; p.HS = HS;
    p.causal = causal != 0;
    p.scale = scale;
    p.fp16 = fp16 != 0;
}

// nullptr when a gate and what its gating writes (the forward's gated_out, the backward's dgate, named) come together
// or both stay null, else why not
const char* gate_output_problem(const void* gate, const void* written, const char* name) {
    if (gate && !written) {
        snprintf(g_message, sizeof(g_message), "a gate needs %s, where the gating writes (not null)", name);
        return g_message;
    }
    if (!gate && written) {
        snprintf(g_message, sizeof(g_message), "%s needs a gate (without one nothing writes it)", name);
        return g_message;
    }
    return nullptr;
}

}  // namespace

extern "C" {

const char* flashgpt_attention_forward_ex(const void* q, const void* k, const void* v, void* out, float* lse,
                                          const long long* q_strides, const long long* k_strides,
                                          const long long* v_strides, const long long* o_strides,
                                          int B, int T, int Tk, int NH, int NH_kv, int HS, int causal, float scale,
                                          const void* bias, const long long* bias_strides, int bias_fp32,
                                          const int* seqlens_k, const int* cu_seqlens_q, const int* cu_seqlens_k,
                                          int total_q, int total_k, const void* gate, const long long* gate_strides,
                                          void* gated_out, const void* bias2, const long long* bias2_strides, int bias2_fp32,
                                          const unsigned char* key_mask, long long key_mask_batch, int window_left, int window_right,
                                          float softcap, const float* alibi_slopes, long long alibi_batch, float dropout_p,
                                          unsigned long long dropout_seed, unsigned long long dropout_offset, int fp16, void* stream) {
    if (!q || !k || !v || !out || !lse) return "q, k, v, out and lse must not be null";
    if (!q_strides || !k_strides || !v_strides || !o_strides) return "every stride array must have 3 elements (not null)";
    AttentionForwardParams p{};
    if (const char* why = extras_of(p.x, bias, bias_strides, bias_fp32, seqlens_k, cu_seqlens_q, cu_seqlens_k,
                                    total_q, total_k, gate, gate_strides, bias2, bias2_strides, bias2_fp32, key_mask, key_mask_batch,
                                    window_left, window_right, softcap, alibi_slopes, alibi_batch, dropout_p, dropout_seed,
                                    dropout_offset))
        return why;
    if (const char* why = gate_output_problem(gate, gated_out, "gated_out")) return why;
    p.x.gated_out = (floatX*)gated_out;
    std::lock_guard<std::mutex> lock(g_call_mutex);
    if (const char* why = device_problem()) return why;
    set_forward_call(p, q, k, v, out, lse, q_strides, k_strides, v_strides, o_strides, B, T, Tk, NH, NH_kv, HS, causal, scale, fp16);
    if (const char* why = attention_unsupported_reason(p)) return why;
    attention_forward(p, (cudaStream_t)stream);
    return launch_problem();
}

const char* flashgpt_attention_forward(const FlashgptAttentionCall* c) {
    if (!c) return "the call's arguments must not be null";
    return flashgpt_attention_forward_ex(c->q, c->k, c->v, c->out, c->lse, c->q_strides, c->k_strides, c->v_strides, c->o_strides,
                                         c->B, c->T, c->Tk, c->NH, c->NH_kv, c->HS, c->causal, c->scale, nullptr, nullptr, 0,
                                         nullptr, nullptr, nullptr, 0, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0, nullptr, 0,
                                         c->window_left, c->window_right, c->softcap, c->alibi_slopes, c->alibi_batch,
                                         c->dropout_p, c->dropout_seed, c->dropout_offset, c->fp16, c->stream);
}

const char* flashgpt_attention_kvcache(const void* q, void* k_cache, void* v_cache, void* out, float* lse,
                                      const long long* q_strides, const long long* k_strides, const long long* v_strides,
                                      const long long* o_strides, int B, int T, int Tk, int NH, int NH_kv, int HS, int causal,
                                      float scale, const int* cu_seqlens_q, const int* cache_seqlens, int cache_seqlen,
                                      const int* cache_batch_idx, const int* cache_leftpad, const int* block_table, long long block_table_batch,
                                      int page_size, const void* k_new, const void* v_new, const long long* k_new_strides,
                                      const long long* v_new_strides, int T_new, const void* rotary_cos, const void* rotary_sin,
                                      int rotary_dim, int rotary_interleaved, int rotary_per_token, int window_left,
                                      int window_right, float softcap, const float* alibi_slopes, long long alibi_batch,
                                      int num_splits, int fp16, void* stream) {
    if (!q || !k_cache || !v_cache || !out) return "q, k_cache, v_cache and out must not be null";
    if (!q_strides || !k_strides || !v_strides || !o_strides) return "every stride array must have 3 elements (not null)";
    if ((k_new || v_new) && (!k_new_strides || !v_new_strides)) return "k_new and v_new need their 3 strides each (not null)";
    AttentionForwardParams p{};
    if (const char* why = extras_of(p.x, nullptr, nullptr, 0, nullptr, cu_seqlens_q, nullptr, 0, 0, nullptr, nullptr, nullptr,
                                    nullptr, 0, nullptr, 0, window_left, window_right, softcap, alibi_slopes, alibi_batch, 0.0f, 0, 0))
        return why;
    AttentionKVCache kv{};
    kv.seqlens = cache_seqlens;
    kv.seqlen = cache_seqlen;
    kv.batch_idx = cache_batch_idx;
    kv.leftpad = cache_leftpad;
    kv.block_table = block_table, kv.block_table_batch = block_table_batch, kv.page_size = page_size;
    kv.k_new = (const floatX*)k_new, kv.v_new = (const floatX*)v_new, kv.T_new = k_new ? T_new : 0;
    if (k_new) kv.k_new_st = strides_of(k_new_strides);   // checked above: given with k_new, v_new
    if (v_new) kv.v_new_st = strides_of(v_new_strides);
    kv.rotary_cos = (const floatX*)rotary_cos, kv.rotary_sin = (const floatX*)rotary_sin;
    kv.rotary_dim = rotary_dim;
    kv.rotary_interleaved = rotary_interleaved != 0, kv.rotary_per_token = rotary_per_token != 0;
    kv.num_splits = num_splits;
    std::lock_guard<std::mutex> lock(g_call_mutex);
    if (const char* why = device_problem()) return why;
    set_forward_call(p, q, k_cache, v_cache, out, lse, q_strides, k_strides, v_strides, o_strides, B, T, Tk, NH, NH_kv, HS,
                     causal, scale, fp16);
    if (const char* why = attention_kvcache_unsupported_reason(p, kv)) return why;
    attention_forward_kvcache(p, kv, (cudaStream_t)stream);
    return launch_problem();
}

size_t flashgpt_attention_backward_scratch_bytes_ex(int B, int T, int Tk, int NH, int NH_kv, int HS, int causal,
                                                    const void* bias, const long long* bias_strides, int bias_fp32,
                                                    const int* seqlens_k, const int* cu_seqlens_q,
                                                    const int* cu_seqlens_k, int total_q, int total_k, const void* gate,
                                                    const long long* gate_strides, const void* dbias, const void* bias2,
                                                    const long long* bias2_strides, int bias2_fp32, const unsigned char* key_mask,
                                                    long long key_mask_batch, const void* dbias2, int window_left, int window_right,
                                                    float softcap, const float* alibi_slopes, long long alibi_batch, float dropout_p) {
    if (B < 1 || T < 1 || Tk < 1 || NH < 1 || NH_kv < 1 || HS < 1) return 0;
    AttentionBackwardParams p{};
    if (extras_of(p.x, bias, bias_strides, bias_fp32, seqlens_k, cu_seqlens_q, cu_seqlens_k, total_q, total_k, gate, gate_strides,
                  bias2, bias2_strides, bias2_fp32, key_mask, key_mask_batch, window_left, window_right, softcap, alibi_slopes,
                  alibi_batch, dropout_p, 0, 0))
        return 0;
    // only whether there is a gate (the gated dO it adds) or a dbias (the ds buffer) counts here, never an address
    p.dbias = (void*)dbias, p.dbias2 = (void*)dbias2;
    std::lock_guard<std::mutex> lock(g_call_mutex);
    if (device_problem()) return 0;
    p.B = B; p.T = T; p.Tk = Tk; p.NH = NH; p.NH_kv = NH_kv; p.HS = HS;
    p.causal = causal != 0;
    return attention_backward_scratch_bytes(p);
}

size_t flashgpt_attention_backward_scratch_bytes(int B, int T, int Tk, int NH, int NH_kv, int HS, int causal) {
    return flashgpt_attention_backward_scratch_bytes_ex(B, T, Tk, NH, NH_kv, HS, causal, nullptr, nullptr, 0, nullptr, nullptr,
                                                        nullptr, 0, 0, nullptr, nullptr, nullptr, nullptr, nullptr, 0, nullptr, 0,
                                                        nullptr, -1, -1, 0.0f, nullptr, 0, 0.0f);
}

const char* flashgpt_attention_backward_ex(void* dq, void* dk, void* dv, const void* dout, const void* q,
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
                                           void* dbias2, int window_left, int window_right, float softcap, const float* alibi_slopes,
                                           long long alibi_batch, float dropout_p, unsigned long long dropout_seed,
                                           unsigned long long dropout_offset, int fp16, void* scratch, size_t scratch_bytes, void* stream) {
    if (!dq || !dk || !dv || !dout || !q || !k || !v || !out || !lse) return "dq, dk, dv, dout, q, k, v, out and lse must not be null";
    if (!dq_strides || !dk_strides || !dv_strides || !do_strides || !q_strides || !k_strides || !v_strides || !o_strides)
        return "every stride array must have 3 elements (not null)";
    if (!scratch || (uintptr_t)scratch % 16) return "scratch must be device memory, 16-byte aligned";
    AttentionBackwardParams p{};
    if (const char* why = extras_of(p.x, bias, bias_strides, bias_fp32, seqlens_k, cu_seqlens_q, cu_seqlens_k,
                                    total_q, total_k, gate, gate_strides, bias2, bias2_strides, bias2_fp32, key_mask, key_mask_batch,
                                    window_left, window_right, softcap, alibi_slopes, alibi_batch, dropout_p, dropout_seed,
                                    dropout_offset))
        return why;
    if (const char* why = gate_output_problem(gate, dgate, "dgate")) return why;
    std::lock_guard<std::mutex> lock(g_call_mutex);
    if (const char* why = device_problem()) return why;
    p.dq = (floatX*)dq; p.dk = (floatX*)dk; p.dv = (floatX*)dv;
    p.dbias = dbias, p.dbias2 = dbias2;
    p.dgate = (floatX*)dgate;
    p.scratch = scratch;
    p.dout = (const floatX*)dout;
    p.q = (const floatX*)q; p.k = (const floatX*)k; p.v = (const floatX*)v;
    p.out = (const floatX*)out; p.lse = lse;
    p.q_st = strides_of(q_strides); p.k_st = strides_of(k_strides); p.v_st = strides_of(v_strides); p.o_st = strides_of(o_strides);
    p.do_st = strides_of(do_strides); p.dq_st = strides_of(dq_strides); p.dk_st = strides_of(dk_strides); p.dv_st = strides_of(dv_strides);
    p.B = B; p.T = T; p.Tk = Tk; p.NH = NH; p.NH_kv = NH_kv; p.HS = HS;
    p.causal = causal != 0;
    p.scale = scale;
    p.fp16 = fp16 != 0;
    if (const char* why = attention_backward_unsupported_reason(p)) return why;
    const size_t needed = attention_backward_scratch_bytes(p);
    if (scratch_bytes < needed) {
        snprintf(g_message, sizeof(g_message), "scratch has %zu bytes, this call needs %zu "
                 "(flashgpt_attention_backward_scratch_bytes_ex, with the same extras and dbias)", scratch_bytes, needed);
        return g_message;
    }
    attention_backward(p, (cudaStream_t)stream);
    return launch_problem();
}

const char* flashgpt_attention_backward(const FlashgptAttentionCall* c) {
    if (!c) return "the call's arguments must not be null";
    return flashgpt_attention_backward_ex(c->dq, c->dk, c->dv, c->dout, c->q, c->k, c->v, c->out, c->lse, c->dq_strides,
                                          c->dk_strides, c->dv_strides, c->do_strides, c->q_strides, c->k_strides, c->v_strides,
                                          c->o_strides, c->B, c->T, c->Tk, c->NH, c->NH_kv, c->HS, c->causal, c->scale, nullptr,
                                          nullptr, 0, nullptr, nullptr, nullptr, 0, 0, nullptr, nullptr, nullptr, nullptr, nullptr,
                                          nullptr, 0, nullptr, 0, nullptr, c->window_left, c->window_right, c->softcap,
                                          c->alibi_slopes, c->alibi_batch, c->dropout_p, c->dropout_seed, c->dropout_offset,
                                          c->fp16, c->scratch, c->scratch_bytes, c->stream);
}

const char* flashgpt_attention_dropout_mask(unsigned char* mask, int B, int NH, int T, int Tk, const int* cu_seqlens_q,
                                            const int* cu_seqlens_k, float dropout_p, unsigned long long dropout_seed,
                                            unsigned long long dropout_offset, void* stream) {
    if (!mask) return "mask must not be null";
    if (B < 1 || NH < 1 || T < 1 || Tk < 1 || T > 65535) return "B, NH, T, Tk must be at least 1 (T at most 65535)";
    if (!(dropout_p >= 0.0f && dropout_p < 1.0f)) return "dropout_p must be in [0, 1)";
    if (!cu_seqlens_q != !cu_seqlens_k) return "packed sequences need both cu_seqlens_q and cu_seqlens_k";
    std::lock_guard<std::mutex> lock(g_call_mutex);
    if (const char* why = device_problem()) return why;
    AttentionForwardParams p{};
    p.B = B; p.NH = NH; p.T = T; p.Tk = Tk;
    p.x.cu_seqlens_q = cu_seqlens_q, p.x.cu_seqlens_k = cu_seqlens_k;
    p.x.dropout_p = dropout_p, p.x.dropout_seed = dropout_seed, p.x.dropout_offset = dropout_offset;
    attention_dropout_mask(mask, p, (cudaStream_t)stream);
    return launch_problem();
}

int flashgpt_attention_padded_head_dim_limit(int packed, int score_mods, int dropout) {
    std::lock_guard<std::mutex> lock(g_call_mutex);
    if (device_problem()) return 0;
    int limit = 0;
    for (int HS = 8; HS <= 256; HS += 8)   // (attention_padded_head_dim_runs holds up to a limit)
        if (!attention_head_dim_compiled(HS) && attention_padded_head_dim_runs(HS, packed != 0, packed != 0, score_mods != 0, dropout != 0))
            limit = HS;
    return limit;
}

const char* flashgpt_attention_version(void) { return GIT_COMMIT; }

int flashgpt_attention_abi(void) { return FLASHGPT_ATTENTION_ABI; }

}  // extern "C"
