/*
flashgpt attention, the backward's calls (declared in src/attention.cuh): the checks, the scratch sizes and GPT-2's
family's dispatch onto the kernels of src/attention_backward.cuh, into build/attention.a (its bf16 and fp16 halves in two
objects, see below); the general calls' dispatch is src/attention_backward_general.cu's.
*/
#include "attention_backward.cuh"

// Compiles twice, as src/attention_forward.cu does (see there): ATTENTION_FP16 1, the fp16 dispatch alone
#ifndef ATTENTION_FP16
#define ATTENTION_FP16 0
#endif

// GPT-2's family (attention_self_causal): the kernels compiled for it, bf16 or (kHalf) fp16; the non-deterministic path
// is this family's
template <bool kHalf>
void backward_self_causal(const AttentionBackwardParams& p, cudaStream_t stream) {
    const int HS = p.HS, T = p.T;
    if (attention_backward_uses_hopper(HS)) {
        // warp-specialised split, 2 consumer warpgroups: dev variant 6's best configs, HS 64 kv128x128+q128x128, HS 128
        // kv128x64+q128x96 (96-key dQ steps: see wgmma_ss_m64n80k16). Non-deterministic at HS 128: the 5-GEMM kernel
        // with atomic dQ (dev variant 7); at HS 64 it loses to the split, which runs there either way.
        if (HS == 128 && attention_backward_nondeterministic()) attention_backward_atomic_hopper_ws<128, 2, kHalf>(p, stream, /*ordered_dq=*/false);
        else if (attention_backward_ordered_dq(T, HS)) attention_backward_atomic_hopper_ws<128, 2, kHalf>(p, stream, /*ordered_dq=*/true);
        else if (HS == 128) attention_backward_split_hopper_ws<128, 2, 64, 2, 96, 2, false, false, false, false, kHalf>(p, stream);
        else attention_backward_split_hopper_ws<64, 2, 128, 2, 128, 2, false, false, false, false, kHalf>(p, stream);
    } else if (attention_backward_nondeterministic()) {   // the fused kernel (dev variant 8), fastest at every shape measured
        if (HS == 64 && attention_backward_fused_fits<64, 2, 2, false>()) attention_backward_fused<64, 2, 2, false, kHalf>(p, stream);
        else if (HS == 128 && attention_backward_fused_fits<128, 2, 2, true>()) attention_backward_fused<128, 2, 2, true, kHalf>(p, stream);
        else if (HS == 64) attention_backward_atomic<64, 4, 64, kHalf>(p, stream);    // dev variant 3, 64x64/4w (57 KB)
        else attention_backward_atomic<128, 4, 64, kHalf>(p, stream);
    } else {
        // the fused kernel's dK/dV without dQ + the mma.sync dQ kernel (dev variant 4's wide configs); where the fused
        // kernel's shared memory does not fit, the dK/dV kernel's 64-key config
        if (HS == 64 && attention_backward_fused_fits<64, 2, 2, false>()) attention_backward_split_wide<64, 2, 2, false, 4, 1, 64, kHalf>(p, stream);
        else if (HS == 128 && attention_backward_fused_fits<128, 2, 2, true>()) attention_backward_split_wide<128, 2, 2, true, 4, 1, 32, kHalf>(p, stream);
        else if (HS == 64) attention_backward_split<64, 4, 1, 32, 4, 1, 64, false, kHalf>(p, stream);
        else attention_backward_split<128, 4, 1, 32, 4, 1, 32, false, kHalf>(p, stream);
    }
}

// the general copies (src/attention_backward_general.cu: its own bf16 and fp16 objects, which compile beside this file's)
template <bool kHalf>
void backward_general(const AttentionBackwardParams& p, cudaStream_t stream);

#if ATTENTION_FP16
template void backward_self_causal<true>(const AttentionBackwardParams& p, cudaStream_t stream);
#else
extern template void backward_self_causal<true>(const AttentionBackwardParams& p, cudaStream_t stream);
ATTENTION_BACKWARD_SHARED_LAUNCHERS(ATTENTION_LAUNCHER_INSTANCE)   // the dev harnesses' copies (attention_backward.cuh)

bool& attention_backward_nondeterministic() {
    static bool flag = [] { const char* e = getenv("FLASHGPT_ATTN_NONDETERMINISTIC"); return e && e[0] == '1'; }();
    return flag;
}

size_t attention_backward_scratch_bytes_for(int B, int T, int NH, int HS, bool with_dq_accum) {
    const size_t stats = 2 * (size_t)B * NH * bwd_padded_T(T) * sizeof(float);
    return stats + (with_dq_accum ? (size_t)B * NH * (T * HS * sizeof(float) + ceil_div(T, kDqOrderRows) * sizeof(int)) : 0);
}
size_t attention_backward_scratch_bytes(const AttentionBackwardParams& p) {
    const bool tuned = attention_self_causal(p);
    const bool with_dq_accum = tuned && (attention_backward_nondeterministic() || attention_backward_ordered_dq(p.T, p.HS));
    const bool ds_scratch = (p.dbias || p.dbias2) && !attention_backward_dbias_ordered(p);
    const size_t ds = ds_scratch ? (size_t)p.B * p.NH * p.T * p.Tk * sizeof(float) : 0;
    const size_t gated_dout = p.x.gate ? (size_t)p.B * p.T * p.NH * p.HS * sizeof(floatX) : 0;
    return attention_backward_scratch_bytes_for(p.B, p.T, p.NH, p.HS, with_dq_accum) + ds + gated_dout;
}
size_t attention_backward_scratch_bytes(int B, int T, int NH, int HS) {   // GPT-2
    return attention_backward_scratch_bytes(fused_qkv_backward_params(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, B, T, NH, HS));
}

const char* attention_backward_path_name(int HS) {
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

bool attention_backward_sums_dqkv(int T, int HS, bool document_masking) {
    return attention_backward_uses_hopper(HS) && !attention_backward_nondeterministic() && !attention_backward_ordered_dq(T, HS) &&
           !document_masking;
}

bool attention_backward_writes_dqkv8(int T, int HS, bool document_masking) {
    return attention_backward_sums_dqkv(T, HS, document_masking) && T % 16 == 0;
}

const char* attention_backward_unsupported_reason(const AttentionBackwardParams& p) {
    AttentionForwardParams f{p.q, p.k, p.v, nullptr, nullptr, p.q_st, p.k_st, p.v_st, p.o_st, p.B, p.T, p.Tk, p.NH, p.NH_kv, p.HS, p.causal, p.scale, p.x};
    f.x.gated_out = p.dgate, f.fp16 = p.fp16;   // the backward's gating output (same checks: 16-byte aligned)
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
    if (p.dqkv8.q && !(p.dqkv_sums && attention_backward_writes_dqkv8(p.T, p.HS, false) && !p.fp16))
        return "dqkv8 is written only beside dqkv_sums, in bf16, with T % 16 == 0 (attention_backward_writes_dqkv8)";
    if ((uintptr_t)p.dqkv8.q % 16) return "dqkv8 must be 16-byte aligned (T % 16 == 0 aligns its transpose)";
    for (const void* ptr : {(const void*)p.out, (const void*)p.dout, (const void*)p.dq, (const void*)p.dk, (const void*)p.dv})
        if ((uintptr_t)ptr % 16) return "O, dO, dQ, dK and dV must be 16-byte aligned";
    return nullptr;
}

void attention_backward_self_causal_path(const AttentionBackwardParams& p, cudaStream_t stream) {
    if (p.fp16) backward_self_causal<true>(p, stream);
    else backward_self_causal<false>(p, stream);
}

// any call attention_backward_unsupported_reason() accepts: GPT-2's family, then the general copies by their extras
void attention_backward(const AttentionBackwardParams& p, cudaStream_t stream) {
    if (const char* why = attention_backward_unsupported_reason(p)) attention_exit_unsupported("backward", p.B, p.T, p.Tk, p.NH, p.NH_kv, p.HS, why);
    if (attention_self_causal(p)) attention_backward_self_causal_path(p, stream);
    else if (p.fp16) backward_general<true>(p, stream);
    else backward_general<false>(p, stream);
}

// GPT-2's call: document masking on the mma.sync split's kExtras copies
bool attention_backward(floatX* dqkv, void* scratch, const floatX* dout, const floatX* qkv, const floatX* out,
                        const float* lse, int B, int T, int NH, int HS, cudaStream_t stream, const int* doc_start,
                        float* dqkv_sums, const Fp8Copy* dqkv8) {
    if (const char* why = attention_unsupported_reason(B, T, NH, HS)) attention_exit_unsupported("backward", B, T, T, NH, NH, HS, why);
    AttentionBackwardParams p = fused_qkv_backward_params(dqkv, scratch, dout, qkv, out, lse, B, T, NH, HS);
    if (dqkv8 && !(dqkv_sums && !doc_start && attention_backward_writes_dqkv8(T, HS, false)))
        attention_exit_unsupported("backward", B, T, T, NH, NH, HS, "dqkv8 needs dqkv_sums and attention_backward_writes_dqkv8");
    if (!doc_start) {
        if (attention_backward_sums_dqkv(T, HS, false)) p.dqkv_sums = dqkv_sums;
        if (dqkv8) p.dqkv8 = *dqkv8;
        attention_backward_self_causal_path(p, stream);
        return p.dqkv_sums != nullptr;
    }
    p.x.doc_start = doc_start;
    if (HS == 64) attention_backward_split<64, 4, 1, 32, 4, 1, 64, true>(p, stream);
    else attention_backward_split<128, 4, 1, 32, 4, 1, 32, true>(p, stream);
    return false;
}

#endif  // ATTENTION_FP16
