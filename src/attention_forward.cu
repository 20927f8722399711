/*
flashgpt attention, the forward's calls (declared in src/attention.cuh): the checks and the dispatch onto the kernels
of src/attention_forward.cuh, into build/attention.a (its bf16 and fp16 halves in two objects, see below).
*/
#include "attention_forward.cuh"

// This file compiles twice (the Makefile's build/attention_forward.o and build/attention_forward_fp16.o), so that the two
// compile side by side: the dispatch templates below take the kernels' 16-bit type, the fp16 object instantiates them
// for fp16 (ATTENTION_FP16 1) and the other for bf16, with every call of src/attention.cuh.
#ifndef ATTENTION_FP16
#define ATTENTION_FP16 0
#endif

// Dispatch (tiles chosen by dev/cuda/attention_forward's sweeps, see dev/cuda/RESULTS.md):
//   Hopper with sm_90a code in the binary -> the warp-specialised TMA kernel (attention_forward_hopper_ws_kernel), HS 64,
//                128 and 256 copies; head dims between them on the next one's, zero-padded (see head_chunk_stored)
//   otherwise -> the mma.sync kernel: HS 64 128x64 tiles, HS 128 128x48 (4 warps of 32 rows: the largest key tile with no
//                spill at 255 registers); HS 32 128x64, HS 96 128x64, HS 256 64x32 (16 rows a warp: O alone is 128 registers)
//
// GPT-2's family (attention_self_causal) on the kernels compiled for it, bf16 or (kHalf) fp16
template <bool kHalf>
void forward_self_causal(const AttentionForwardParams& p, cudaStream_t stream) {
    const int HS = p.HS, T = p.T;
    if (attention_forward_uses_hopper(HS)) {
        // Warp-specialised TMA kernel, ping-pong on. HS 64: 3 consumer warpgroups (192-row blocks: a third less K/V
        // traffic per FLOP, a third warpgroup's softmax to hide the GEMMs behind) from 128K query rows (B * NH * T,
        // about 5 such blocks per SM), else 2 (128 rows); a 3-deep K/V ring for both, since each item's first S is
        // issued early.
        if (HS == 64 && (long)p.B * p.NH * T >= 128 * 1024) launch_attention_forward_hopper_ws<64, 3, 128, 3, true, 1, false, false, false, false, false, kHalf>(p, stream);
        else if (HS == 64) launch_attention_forward_hopper_ws<64, 2, 128, 3, true, 1, false, false, false, false, false, kHalf>(p, stream);
        // HS 128: pairs of CTAs share each K/V tile by TMA multicast where the 128-row query blocks pair up (an even
        // count; on the causal diagonal the pair's walk is its upper block's), which halves the K/V traffic out of
        // L2. At T >= 4096 the pairs claim their items (claimed_schedule).
        else if (ceil_div(T, 128) % 2 == 0 && claimed_schedule(T)) launch_attention_forward_hopper_ws<128, 2, 128, 2, true, 2, true, false, false, false, false, kHalf>(p, stream);
        else if (ceil_div(T, 128) % 2 == 0) launch_attention_forward_hopper_ws<128, 2, 128, 2, true, 2, false, false, false, false, false, kHalf>(p, stream);
        else launch_attention_forward_hopper_ws<128, 2, 128, 2, true, 1, false, false, false, false, false, kHalf>(p, stream);
    }
    else if (HS == 64) launch_attention_forward<64, 2, 4, 64, false, false, kHalf>(p, stream);
    else launch_attention_forward<128, 2, 4, 48, false, false, kHalf>(p, stream);
}

// the general copies, chosen by the call's extras and modifiers; bf16 or (kHalf) fp16
template <bool kHalf>
void forward_general(const AttentionForwardParams& p, cudaStream_t stream) {
    const int HS = p.HS, T = p.T;
    AttentionForwardParams k = p;   // the kernels' extras: bias2 and the key mask as the key bias (attention_kernel_extras)
    k.x = attention_with_score_constants(attention_kernel_extras(p.x, p.B, p.T, p.Tk, p.NH, stream), p.scale);
    const bool hopper = attention_forward_uses_hopper(HS);
    // softcap, ALiBi (the score modifiers) and dropout: the Hopper kernels' kMods copies, or with other extras the
    // mma.sync kExtras copies, which apply them too (as every mma.sync general copy does the score modifiers); dropout at
    // HS 256 (whose 128-row blocks are not aligned to the keep bits' 16-row blocks) or before sm_90a: the kExtras copies
    const bool dropout = attention_has_dropout(k.x), mods = attention_has_score_mods(k.x) || dropout;
    // a bf16 tile bias, a key bias, gating: the Hopper kernels' kBias copies, the tiles below (HS 8-32 on HS 64's,
    // zero-padded; HS 256: 64 keys, since a ring of bias tiles does not fit beside 80-key K/V stages); gating alone
    // with a zero tile bias (their epilogue is the one that gates)
    if (!mods && (attention_hopper_bias_fits(k.x) || (hopper && attention_gate_only(k.x)))) {
        k.x = with_zero_tile_bias(k.x, p.Tk);
        if (HS <= 64) launch_attention_forward_hopper_ws<64, 2, 128, 3, true, 1, false, true, true, false, false, kHalf>(k, stream);
        else if (HS <= 128) launch_attention_forward_hopper_ws<128, 2, 128, 2, true, 1, false, true, true, false, false, kHalf>(k, stream);
        else launch_attention_forward_hopper_ws<256, 2, 64, 2, true, 1, false, true, true, false, false, kHalf>(k, stream);
    }
    else if (!mods && attention_forward_hopper_packed_fits(k)) {   // packed sequences with their totals: the kVarlen copies
        if (HS <= 64) launch_attention_forward_hopper_ws<64, 2, 128, 3, true, 1, false, true, false, true, false, kHalf>(k, stream);
        else if (HS <= 128) launch_attention_forward_hopper_ws<128, 2, 128, 2, true, 1, false, true, false, true, false, kHalf>(k, stream);
        else launch_attention_forward_hopper_ws<256, 2, 80, 2, true, 1, false, true, false, true, false, kHalf>(k, stream);
    }
    else if (attention_has_extras(k.x) || (!hopper && HS <= 16) || (dropout && (!hopper || HS > 128))) {
        // key lengths, packed sequences, document masks, an fp32 bias; before sm_90a HS 8 and 16: the mma.sync kExtras copies
        if (HS <= 16) launch_attention_forward<16, 2, 4, 64, true, true, kHalf>(k, stream);
        else if (HS == 64) launch_attention_forward<64, 2, 4, 64, true, true, kHalf>(k, stream);
        else if (HS == 128) launch_attention_forward<128, 2, 4, 48, true, true, kHalf>(k, stream);
        else if (HS == 32) launch_attention_forward<32, 2, 4, 64, true, true, kHalf>(k, stream);
        else if (HS == 96) launch_attention_forward<96, 2, 4, 64, true, true, kHalf>(k, stream);
        else launch_attention_forward<256, 1, 4, 32, true, true, kHalf>(k, stream);
    }
    else if (hopper && mods) {
        // the general tiles below, HS 64's three warpgroups from the same size on, except with dropout (which the
        // three-warpgroup copy gets wrong: the cause is not found); HS 96-256 claim their items whether causal or not
        // (one copy each: where the items are even, claiming them costs what the round-robin walk does)
        if (HS <= 64 && !dropout && (long)p.B * p.NH * T >= 128 * 1024) launch_attention_forward_hopper_ws<64, 3, 128, 3, true, 1, false, true, false, false, true, kHalf>(k, stream);
        else if (HS <= 64) launch_attention_forward_hopper_ws<64, 2, 128, 3, true, 1, false, true, false, false, true, kHalf>(k, stream);
        else if (HS <= 128) launch_attention_forward_hopper_ws<128, 2, 128, 2, true, 1, true, true, false, false, true, kHalf>(k, stream);
        else launch_attention_forward_hopper_ws<256, 2, 80, 2, true, 1, true, true, false, false, true, kHalf>(k, stream);
    }
    else if (hopper) {
        // the tiles of the path above (HS 8-56 on HS 64's, 72-120 on HS 128's, 136-248 on HS 256's, zero-padded);
        // HS 256: 80-key tiles (a 128-row Q block and two 40 KB stages each of K and V fill the 227 KB; O takes 128
        // registers a thread, S 40)
        if (HS <= 64 && (long)p.B * p.NH * T >= 128 * 1024) launch_attention_forward_hopper_ws<64, 3, 128, 3, true, 1, false, true, false, false, false, kHalf>(k, stream);
        else if (HS <= 64) launch_attention_forward_hopper_ws<64, 2, 128, 3, true, 1, false, true, false, false, false, kHalf>(k, stream);
        // HS 96 / 128 causal from T = 4096: claimed items, as the self-attention path's CTA pairs (which need T = Tk
        // and no GQA) claim theirs; round-robin, the long items of the last query blocks end on a few SMs
        else if (HS <= 128 && p.causal && claimed_schedule(T)) launch_attention_forward_hopper_ws<128, 2, 128, 2, true, 1, true, true, false, false, false, kHalf>(k, stream);
        else if (HS <= 128) launch_attention_forward_hopper_ws<128, 2, 128, 2, true, 1, false, true, false, false, false, kHalf>(k, stream);
        // HS 256 causal: the items' lengths differ, and with the heads cut into sections (see persistent_section_heads)
        // the round-robin walk leaves the SMs unevenly loaded; from T = 1024 the items are claimed
        else if (p.causal && claimed_schedule(T, 1024)) launch_attention_forward_hopper_ws<256, 2, 80, 2, true, 1, true, true, false, false, false, kHalf>(k, stream);
        else launch_attention_forward_hopper_ws<256, 2, 80, 2, true, 1, false, true, false, false, false, kHalf>(k, stream);
    }
    else if (HS == 64) launch_attention_forward<64, 2, 4, 64, true, false, kHalf>(k, stream);
    else if (HS == 128) launch_attention_forward<128, 2, 4, 48, true, false, kHalf>(k, stream);
    else if (HS == 32) launch_attention_forward<32, 2, 4, 64, true, false, kHalf>(k, stream);
    else if (HS == 96) launch_attention_forward<96, 2, 4, 64, true, false, kHalf>(k, stream);
    else launch_attention_forward<256, 1, 4, 32, true, false, kHalf>(k, stream);
}

// decoding: the split-key kernels, at the head dims they are compiled for (a head dim between them runs the next one's
// kernel, its columns past p.HS zero-filled and never written); kCache where the call has more than a contiguous cache
// with lengths (attention_decode_kernel)
template <bool kHalf, bool kCache>
void decode_by_head_dim(const AttentionForwardParams& p, const AttentionKVCache& kv, cudaStream_t stream) {
    if (p.HS <= 32) launch_attention_decode<32, kHalf, kCache>(p, kv, stream);
    else if (p.HS <= 64) launch_attention_decode<64, kHalf, kCache>(p, kv, stream);
    else if (p.HS <= 96) launch_attention_decode<96, kHalf, kCache>(p, kv, stream);
    else if (p.HS <= 128) launch_attention_decode<128, kHalf, kCache>(p, kv, stream);
    else launch_attention_decode<256, kHalf, kCache>(p, kv, stream);
}
template <bool kHalf>
void decode_by_head_dim(const AttentionForwardParams& p, const AttentionKVCache& kv, cudaStream_t stream) {
    const bool cache = kv.block_table || kv.batch_idx || kv.leftpad || kv.k_new || p.x.cu_seqlens_q || attention_has_modifiers(p.x);
    if (cache) decode_by_head_dim<kHalf, true>(p, kv, stream);
    else decode_by_head_dim<kHalf, false>(p, kv, stream);
}

#if ATTENTION_FP16
template void forward_self_causal<true>(const AttentionForwardParams& p, cudaStream_t stream);
template void forward_general<true>(const AttentionForwardParams& p, cudaStream_t stream);
template void decode_by_head_dim<true>(const AttentionForwardParams& p, const AttentionKVCache& kv, cudaStream_t stream);
#else
extern template void forward_self_causal<true>(const AttentionForwardParams& p, cudaStream_t stream);
extern template void forward_general<true>(const AttentionForwardParams& p, cudaStream_t stream);
extern template void decode_by_head_dim<true>(const AttentionForwardParams& p, const AttentionKVCache& kv, cudaStream_t stream);
ATTENTION_FORWARD_SHARED_LAUNCHERS(ATTENTION_LAUNCHER_INSTANCE)   // the dev harnesses' copies (attention_forward.cuh)

AttentionTuning& attention_tuning() { static AttentionTuning t; return t; }

// A head dim without kernels of its own (attention_head_dim_compiled) runs zero-padded on the Hopper copies, in the
// calls that reach them in both passes: without extras, or with packed sequences alone (the kVarlen copies: up to 128,
// without softcap, ALiBi or dropout); with dropout up to 128
bool attention_padded_head_dim_runs(int HS, bool extras, bool packed_alone, bool score_mods, bool dropout) {
    if (!hopper_path_available() || (dropout && HS > 128)) return false;
    return !extras || (packed_alone && !score_mods && !dropout && HS <= 128);
}

const char* attention_unsupported_reason(const AttentionForwardParams& p) {
    if (p.HS < 8 || p.HS > 256 || p.HS % 8) return "head dim must be a multiple of 8 from 8 to 256";
    if (!attention_head_dim_compiled(p.HS) &&
        !attention_padded_head_dim_runs(p.HS, attention_has_extras(p.x), attention_forward_hopper_packed_fits(p),
                                        attention_has_score_mods(p.x), attention_has_dropout(p.x)))
        return "head dims other than 8, 16, 32, 64, 96, 128 and 256 run on Hopper (sm_90a) only, without extras but packed "
               "sequences (those up to 128, without softcap, ALiBi or dropout), with dropout up to 128";
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
    if (p.Tk >= (1 << 30)) return "Tk must be below 2^30";
    if (p.x.window && p.x.window_left < -1) return "window_left must be -1 (unbounded) or at least 0";
    if (p.x.window && p.x.window_right < -1) return "window_right must be -1 (unbounded) or at least 0";
    if (!(p.x.softcap >= 0.0f) || std::isinf(p.x.softcap)) return "softcap must be 0 (none) or a finite positive number";
    if (!(p.x.dropout_p >= 0.0f && p.x.dropout_p < 1.0f)) return "dropout_p must be in [0, 1)";
    if (p.x.dropout_p > 0.0f && p.x.softcap > 0.0f) return "dropout does not combine with softcap (as FlashAttention)";
    if (p.x.softcap > 0.0f && (p.x.bias || p.x.bias2 || p.x.key_mask))
        return "softcap does not combine with a bias, bias2 or key mask (its gradient is recovered from P, which they shift)";
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
const char* attention_unsupported_reason(int B, int T, int NH, int HS) {
    if (HS != 64 && HS != 128) return "head size (C / NH) must be 64 or 128";
    return attention_unsupported_reason(fused_qkv_forward_params(nullptr, nullptr, nullptr, B, T, NH, HS));
}

const char* attention_forward_path_name(int HS) {
    if (attention_forward_uses_hopper(HS) && HS > 128)
        return "flash forward, wgmma+TMA sm90a, warp-specialised, 128x80 tiles (128x64 with a bias or packed sequences), 2 consumer warpgroups, 2 stages (HS=256; 136..248 zero-padded to it)";
    if (attention_forward_uses_hopper(HS) && HS > 64 && HS < 128)
        return "flash forward, wgmma+TMA sm90a, warp-specialised, HS 128's kernel with the head dims past HS zero-padded, 128x128 tiles, 2 consumer warpgroups (HS=72..120)";
    if (attention_forward_uses_hopper(HS) && HS < 64)
        return "flash forward, wgmma+TMA sm90a, warp-specialised, HS 64's kernel with the head dims past HS zero-padded, 128x128 tiles, 2 consumer warpgroups (HS=8..56)";
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

void attention_forward_self_causal_path(const AttentionForwardParams& p, cudaStream_t stream) {
    if (p.fp16) forward_self_causal<true>(p, stream);
    else forward_self_causal<false>(p, stream);
}

// any call attention_unsupported_reason() accepts: decoding, GPT-2's family, then the general copies by their extras
void attention_forward(const AttentionForwardParams& p, cudaStream_t stream) {
    if (const char* why = attention_unsupported_reason(p)) attention_exit_unsupported("forward", p.B, p.T, p.Tk, p.NH, p.NH_kv, p.HS, why);
    if (attention_decode_applies(p)) attention_forward_kvcache(p, p.x.seqlens_k, stream);
    else if (attention_self_causal(p)) attention_forward_self_causal_path(p, stream);
    else if (p.fp16) forward_general<true>(p, stream);
    else forward_general<false>(p, stream);
}

// GPT-2's call: document masking on the mma.sync kernels' kExtras copies
void attention_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH, int HS, cudaStream_t stream,
                       const int* doc_start) {
    if (const char* why = attention_unsupported_reason(B, T, NH, HS)) attention_exit_unsupported("forward", B, T, T, NH, NH, HS, why);
    AttentionForwardParams p = fused_qkv_forward_params(out, lse, qkv, B, T, NH, HS);
    if (!doc_start) { attention_forward_self_causal_path(p, stream); return; }
    p.x.doc_start = doc_start;
    if (HS == 64) launch_attention_forward<64, 2, 4, 64, true, true>(p, stream);
    else launch_attention_forward<128, 2, 4, 48, true, true>(p, stream);
}

const char* attention_kvcache_unsupported_reason(const AttentionForwardParams& p, const AttentionKVCache& kv) {
    if (p.HS < 8 || p.HS > 256 || p.HS % 8) return "the KV-cache call takes head dims that are multiples of 8 from 8 to 256";
    if (p.B < 1 || p.T < 1 || p.Tk < 1 || p.NH < 1 || p.NH_kv < 1) return "B, T, Tk, NH and NH_kv must be at least 1";
    if (p.NH % p.NH_kv != 0) return "the query heads NH must be a multiple of the key/value heads NH_kv";
    if ((long long)p.B * p.NH_kv > 65535) return "B * NH_kv too large for the grid";
    if (ceil_div((long long)p.T * (p.NH / p.NH_kv), (long long)kDecodeRows) > 65535) return "T * NH / NH_kv too large for the grid";
    if (p.Tk >= (1 << 30)) return "Tk must be below 2^30";
    if (p.x.bias || p.x.cu_seqlens_k || p.x.gate || p.x.doc_start || p.x.bias2 || p.x.key_mask || p.x.key_bias || p.x.dropout_p > 0.0f)
        return "the KV-cache call takes no bias, packed keys, gating, key masks, document masks or dropout (packed queries, yes)";
    if (p.x.cu_seqlens_q && kv.k_new) return "packed queries take no append";
    if (p.x.window && (p.x.window_left < -1 || p.x.window_right < -1)) return "window sides must be -1 (unbounded) or at least 0";
    if (!(p.x.softcap >= 0.0f) || std::isinf(p.x.softcap)) return "softcap must be 0 (none) or a finite positive number";
    const bool append = kv.k_new || kv.v_new;
    if (append && (!kv.k_new || !kv.v_new || kv.T_new < 1)) return "an append needs k_new, v_new and T_new >= 1";
    const int new_keys = append && !kv.seqlens_count_new ? kv.T_new : 0;
    if (!kv.seqlens && (kv.seqlen < 0 || kv.seqlen + new_keys > p.Tk)) return "the cache length plus the new tokens must fit Tk";
    if (kv.seqlens_count_new && !append) return "seqlens_count_new needs an append";
    if (kv.block_table && (kv.page_size < 1 || kv.batch_idx)) return "a paged cache needs page_size >= 1 and takes no batch_idx";
    if (kv.rotary_dim && (kv.rotary_dim % 16 || kv.rotary_dim > p.HS || !kv.rotary_cos || !kv.rotary_sin || !append ||
                          (uintptr_t)kv.rotary_cos % 16 || (uintptr_t)kv.rotary_sin % 16))
        return "the rotary embedding needs an append, rotary_dim a multiple of 16 up to the head dim, and cos, sin 16-byte aligned";
    for (const AttentionStrides& st : {p.q_st, p.k_st, p.v_st, p.o_st, append ? kv.k_new_st : p.q_st, append ? kv.v_new_st : p.q_st})
        if (st.batch % 8 || st.row % 8 || st.head % 8) return "every batch, row and head stride must be a multiple of 8 elements (16 bytes)";
    for (const void* ptr : {(const void*)p.q, (const void*)p.k, (const void*)p.v, (const void*)p.out, (const void*)kv.k_new, (const void*)kv.v_new})
        if ((uintptr_t)ptr % 16) return "Q, K, V, O and the new keys and values must be 16-byte aligned";
    if (device_props().major < 8) return "needs compute capability 8.0 or newer (bf16 tensor cores)";
    return nullptr;
}

void attention_forward_kvcache(const AttentionForwardParams& p, const AttentionKVCache& kv, cudaStream_t stream) {
    if (const char* why = attention_kvcache_unsupported_reason(p, kv))
        attention_exit_unsupported("forward (KV cache)", p.B, p.T, p.Tk, p.NH, p.NH_kv, p.HS, why);
    AttentionForwardParams k = p;
    k.x = attention_with_score_constants(p.x, p.scale);
    if (p.fp16) decode_by_head_dim<true>(k, kv, stream);
    else decode_by_head_dim<false>(k, kv, stream);
}

// the dropout mask (attention_dropout_mask): grid (B * NH, T), threads over the keys
static __global__ void dropout_mask_kernel(uint8_t* mask, const AttentionForwardParams p) {
    const int bh = blockIdx.x, b = bh / p.NH, i = blockIdx.y;
    const SequenceSpan seq = attention_sequence(p, b);
    const Dropout d = attention_dropout(p.x);
    uint8_t* row = mask + ((size_t)bh * p.T + i) * p.Tk;
    for (int j = threadIdx.x; j < p.Tk; j += blockDim.x) row[j] = i < seq.T && j < seq.Tk && dropout_keep(d, bh, i, j);
}
void attention_dropout_mask(uint8_t* mask, const AttentionForwardParams& p, cudaStream_t stream) {
    dropout_mask_kernel<<<dim3(p.B * p.NH, p.T), 256, 0, stream>>>(mask, p);
    cudaCheck(cudaGetLastError());
}

#endif  // ATTENTION_FP16
