/*
The GPU attention references of the GPT-2 variant harnesses (attention_forward.cu, attention_backward.cu; variant 1
runs them as the naive variant): fp32 forward and backward kernels, each checked against the CPU fp64 references of
reference.h on small shapes before a run trusts them. Included after dev/cuda/common.h.
*/
#pragma once
#include "dev/cuda/common.h"

// ----------------------------------------------------------------------------
// GPU reference forward: one warp per query row, fp32. Lanes split the keys; pass 1 finds the
// row max, pass 2 accumulates exp(s - max) * v. With kRoundBf16 it rounds S, P and out to bf16
// where a naive bf16 implementation would (the "naive bf16" error of the FlashAttention rule).
// out is OutT (float for the reference, floatX when it serves as variant 1).

template <int HS, bool kRoundBf16, class OutT>
__global__ void reference_forward_kernel(OutT* out, float* lse, const floatX* qkv, int B, int T, int NH) {
    const int t = blockIdx.y, bh = blockIdx.x, b = bh / NH, h = bh % NH, lane = threadIdx.x;
    const size_t row_stride = 3 * (size_t)NH * HS;
    const floatX* q = qkv + ((size_t)b * T + t) * row_stride + h * HS;
    const floatX* k_base = qkv + (size_t)b * T * row_stride + NH * HS + h * HS;
    const floatX* v_base = k_base + NH * HS;
    const float scale = 1.0f / sqrtf((float)HS);
    auto score = [&](int j) {
        const floatX* k = k_base + (size_t)j * row_stride;
        float dot = 0.0f;
        for (int d = 0; d < HS; d++) dot += __bfloat162float(q[d]) * __bfloat162float(k[d]);
        dot *= scale;
        return kRoundBf16 ? __bfloat162float(__float2bfloat16(dot)) : dot;
    };
    float row_max = -INFINITY;
    for (int j = lane; j <= t; j += 32) row_max = fmaxf(row_max, score(j));
    for (int o = 16; o > 0; o >>= 1) row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffff, row_max, o));
    float row_sum = 0.0f;
    for (int j = lane; j <= t; j += 32) row_sum += expf(score(j) - row_max);
    for (int o = 16; o > 0; o >>= 1) row_sum += __shfl_xor_sync(0xffffffff, row_sum, o);
    float acc[HS];
    for (int d = 0; d < HS; d++) acc[d] = 0.0f;
    for (int j = lane; j <= t; j += 32) {
        float p = expf(score(j) - row_max) / row_sum;
        if (kRoundBf16) p = __bfloat162float(__float2bfloat16(p));
        const floatX* v = v_base + (size_t)j * row_stride;
        for (int d = 0; d < HS; d++) acc[d] += p * __bfloat162float(v[d]);
    }
    OutT* o = out + (((size_t)b * T + t) * NH + h) * HS;
    #pragma unroll
    for (int d = 0; d < HS; d++) {
        float x = acc[d];
        for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffff, x, off);
        if (d % 32 == lane) {
            if constexpr (sizeof(OutT) == 2) o[d] = __float2bfloat16(x);
            else o[d] = kRoundBf16 ? __bfloat162float(__float2bfloat16(x)) : x;
        }
    }
    if (lane == 0 && lse) lse[((size_t)b * NH + h) * T + t] = row_max + logf(row_sum);
}

template <bool kRoundBf16, class OutT>
void reference_forward(OutT* out, float* lse, const floatX* qkv, const Shape& s, cudaStream_t stream) {
    dim3 grid(s.B * s.NH, s.T);   // heads in x: B * NH may pass 65535 (the "large B*NH" edge case), T may not
    if (s.HS == 64) reference_forward_kernel<64, kRoundBf16, OutT><<<grid, 32, 0, stream>>>(out, lse, qkv, s.B, s.T, s.NH);
    else if (s.HS == 128) reference_forward_kernel<128, kRoundBf16, OutT><<<grid, 32, 0, stream>>>(out, lse, qkv, s.B, s.T, s.NH);
    else { fprintf(stderr, "reference_forward: HS %d not supported\n", s.HS); exit(EXIT_FAILURE); }
    cudaCheck(cudaGetLastError());
}

// The GPU reference is only trusted after it agrees with the CPU fp64 reference; this runs on a
// small shape (cheap on the CPU) each time a dev binary starts.
inline bool self_check_reference_forward(uint64_t seed) {
    bool ok = true;
    for (Shape s : {Shape{2, 67, 3, 64}, Shape{1, 35, 2, 128}}) {
        std::mt19937_64 rng(seed);
        size_t nqkv = (size_t)s.B * s.T * 3 * s.NH * s.HS, nout = nqkv / 3, nlse = (size_t)s.B * s.NH * s.T;
        std::vector<floatX> h_qkv(nqkv);
        fill_randn_bf16(h_qkv, 2.0f, rng);
        std::vector<float> qkv_f = to_float(h_qkv), cpu_out(nout), cpu_lse(nlse), cpu_naive(nout), cpu_naive_lse(nlse);
        attention_forward_cpu(cpu_out.data(), cpu_lse.data(), qkv_f.data(), s.B, s.T, s.NH, s.HS);
        attention_forward_cpu(cpu_naive.data(), cpu_naive_lse.data(), qkv_f.data(), s.B, s.T, s.NH, s.HS, true);
        floatX* d_qkv = device_alloc<floatX>(nqkv);
        float* d_out = device_alloc<float>(nout);
        float* d_lse = device_alloc<float>(nlse);
        to_device(d_qkv, h_qkv);
        poison(d_out, nout * 4); poison(d_lse, nlse * 4);
        reference_forward<false, float>(d_out, d_lse, d_qkv, s, 0);
        std::vector<float> out = from_device(d_out, nout), lse = from_device(d_lse, nlse);
        // the fp32 GPU reference must be far closer to the fp64 one than bf16 rounding is
        printf("GPU reference forward vs CPU fp64 reference, B=%d T=%d NH=%d HS=%d:\n", s.B, s.T, s.NH, s.HS);
        ErrorStats e = error_stats(out.data(), cpu_out.data(), nout), en = error_stats(cpu_naive.data(), cpu_out.data(), nout);
        bool this_ok = e.nonfinite == 0 && e.max_abs < 1e-5 + 0.05 * en.max_abs;
        printf("  out  max_err %.3e (naive bf16 %.3e) %s\n", e.max_abs, en.max_abs, this_ok ? "ok" : "FAIL");
        ok = ok && this_ok && lse_check(lse.data(), cpu_lse.data(), nlse, Describe{s, Describe::LSE});
        cudaCheck(cudaFree(d_qkv)); cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_lse));
    }
    return ok;
}

// ----------------------------------------------------------------------------
// GPU reference backward: fp32, naive. Lanes split the head dimension (HS / 32 elements each), so every
// q.k and dout.v is a coalesced warp dot product; P is recomputed from the given lse. Two kernels:
//   dq:   one warp per query row i: pass 1 D_i = sum_j P_ij dP_ij (stored in dpsum), pass 2 dQ_i = scale sum_j dS_ij K_j
//   dkdv: one warp per key row j:   dV_j = sum_i P_ij dO_i,  dK_j = scale sum_i dS_ij Q_i   (i >= j)
// With kRoundBf16, S, P, dP, dS and the outputs are rounded to bf16 where a naive bf16 implementation would
// (attention_backward_cpu's round_like_bf16; pass it the naive forward's out and lse, which come from the
// same bf16 scores, as PyTorch's bf16 autograd would have them), and D is taken the way every FlashAttention backward takes it,
// D = rowsum(dout * out) from the bf16 out it is given, instead of sum_j P_ij dP_ij: the "naive bf16" error of
// the FlashAttention rule. Why: with inputs x8 most rows are one-hot (P = 1 on one key), dQ and dK are ~0, and
// the sum_j P dP form cancels exactly in bf16 too, leaving no naive error to measure against, while any
// algorithm that uses the rowsum(dout * out) identity (FA2, FA3, ours) carries fp32 rounding of dP - D there.
// dqkv (B, T, 3, NH, HS) is OutT (float for the reference, floatX when it serves as variant 1).

constexpr int kRefBwdWarps = 4;   // rows per 128-thread block

template <bool kRoundBf16> __device__ __forceinline__ float ref_round(float x) {
    return kRoundBf16 ? __bfloat162float(__float2bfloat16(x)) : x;
}
template <int HS> __device__ __forceinline__ float warp_dot(const float (&a)[HS / 32], const floatX* b, int lane) {
    float x = 0.0f;
    #pragma unroll
    for (int c = 0; c < HS / 32; c++) x += a[c] * __bfloat162float(b[lane + 32 * c]);
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffff, x, o);
    return x;
}
template <class OutT> __device__ __forceinline__ void ref_store(OutT* dst, float x) {
    if constexpr (sizeof(OutT) == 2) *dst = __float2bfloat16(x); else *dst = x;
}

template <int HS, bool kRoundBf16, class OutT>
__global__ void reference_backward_dq_kernel(OutT* dqkv, float* dpsum, const floatX* dout, const floatX* qkv,
                                             const floatX* out, const float* lse, int B, int T, int NH) {
    constexpr int kPer = HS / 32;
    const int i = blockIdx.y * kRefBwdWarps + threadIdx.x / 32, bh = blockIdx.x, b = bh / NH, h = bh % NH, lane = threadIdx.x % 32;
    if (i >= T) return;
    const size_t row_stride = 3 * (size_t)NH * HS;
    const floatX* k_base = qkv + (size_t)b * T * row_stride + NH * HS + h * HS;
    const floatX* v_base = k_base + NH * HS;
    float q[kPer], dout_i[kPer];
    for (int c = 0; c < kPer; c++) {
        q[c] = __bfloat162float(qkv[((size_t)b * T + i) * row_stride + h * HS + lane + 32 * c]);
        dout_i[c] = __bfloat162float(dout[(((size_t)b * T + i) * NH + h) * HS + lane + 32 * c]);
    }
    const float scale = 1.0f / sqrtf((float)HS), row_lse = lse[(size_t)bh * T + i];
    float D = 0.0f;
    if (kRoundBf16) {   // D = rowsum(dout * out), out as the forward stored it (bf16)
        D = warp_dot<HS>(dout_i, out + (((size_t)b * T + i) * NH + h) * HS, lane);
    } else {            // D = sum_j P_ij dP_ij
        for (int j = 0; j <= i; j++) {
            float pr = expf(warp_dot<HS>(q, k_base + (size_t)j * row_stride, lane) * scale - row_lse);
            float dp = warp_dot<HS>(dout_i, v_base + (size_t)j * row_stride, lane);
            D += pr * dp;
        }
    }
    float acc[kPer] = {};
    for (int j = 0; j <= i; j++) {
        const floatX* k = k_base + (size_t)j * row_stride;
        float pr = ref_round<kRoundBf16>(expf(ref_round<kRoundBf16>(warp_dot<HS>(q, k, lane) * scale) - row_lse));
        float dp = ref_round<kRoundBf16>(warp_dot<HS>(dout_i, v_base + (size_t)j * row_stride, lane));
        float ds = ref_round<kRoundBf16>(pr * (dp - D));
        for (int c = 0; c < kPer; c++) acc[c] += ds * __bfloat162float(k[lane + 32 * c]);
    }
    OutT* dq = dqkv + ((size_t)b * T + i) * row_stride + h * HS;
    for (int c = 0; c < kPer; c++) ref_store(dq + lane + 32 * c, ref_round<kRoundBf16>(acc[c] * scale));
    if (lane == 0) dpsum[(size_t)bh * T + i] = D;
}

template <int HS, bool kRoundBf16, class OutT>
__global__ void reference_backward_dkdv_kernel(OutT* dqkv, const float* dpsum, const floatX* dout, const floatX* qkv,
                                               const float* lse, int B, int T, int NH) {
    constexpr int kPer = HS / 32;
    const int j = blockIdx.y * kRefBwdWarps + threadIdx.x / 32, bh = blockIdx.x, b = bh / NH, h = bh % NH, lane = threadIdx.x % 32;
    if (j >= T) return;
    const size_t row_stride = 3 * (size_t)NH * HS;
    const floatX* q_base = qkv + (size_t)b * T * row_stride + h * HS;
    float k[kPer], v[kPer], dk[kPer] = {}, dv[kPer] = {};
    for (int c = 0; c < kPer; c++) {
        k[c] = __bfloat162float(q_base[(size_t)j * row_stride + NH * HS + lane + 32 * c]);
        v[c] = __bfloat162float(q_base[(size_t)j * row_stride + 2 * NH * HS + lane + 32 * c]);
    }
    const float scale = 1.0f / sqrtf((float)HS);
    for (int i = j; i < T; i++) {
        const floatX* q = q_base + (size_t)i * row_stride;
        const floatX* dout_i = dout + (((size_t)b * T + i) * NH + h) * HS;
        float pr = ref_round<kRoundBf16>(expf(ref_round<kRoundBf16>(warp_dot<HS>(k, q, lane) * scale) - lse[(size_t)bh * T + i]));
        float dp = ref_round<kRoundBf16>(warp_dot<HS>(v, dout_i, lane));
        float ds = ref_round<kRoundBf16>(pr * (dp - dpsum[(size_t)bh * T + i]));
        for (int c = 0; c < kPer; c++) {
            dv[c] += pr * __bfloat162float(dout_i[lane + 32 * c]);
            dk[c] += ds * __bfloat162float(q[lane + 32 * c]);
        }
    }
    OutT* dk_out = dqkv + ((size_t)b * T + j) * row_stride + NH * HS + h * HS;
    for (int c = 0; c < kPer; c++) {
        ref_store(dk_out + lane + 32 * c, ref_round<kRoundBf16>(dk[c] * scale));
        ref_store(dk_out + NH * HS + lane + 32 * c, ref_round<kRoundBf16>(dv[c]));
    }
}

// dpsum: (B, NH, T) fp32 scratch for D; out (B, T, NH, HS) bf16 is read only with kRoundBf16
template <bool kRoundBf16, class OutT>
void reference_backward(OutT* dqkv, float* dpsum, const floatX* dout, const floatX* qkv, const floatX* out, const float* lse,
                        const Shape& s, cudaStream_t stream) {
    dim3 grid(s.B * s.NH, ceil_div(s.T, kRefBwdWarps)), block(32 * kRefBwdWarps);   // heads in x, as the forward's
    if (s.HS == 64) {
        reference_backward_dq_kernel<64, kRoundBf16, OutT><<<grid, block, 0, stream>>>(dqkv, dpsum, dout, qkv, out, lse, s.B, s.T, s.NH);
        reference_backward_dkdv_kernel<64, kRoundBf16, OutT><<<grid, block, 0, stream>>>(dqkv, dpsum, dout, qkv, lse, s.B, s.T, s.NH);
    } else if (s.HS == 128) {
        reference_backward_dq_kernel<128, kRoundBf16, OutT><<<grid, block, 0, stream>>>(dqkv, dpsum, dout, qkv, out, lse, s.B, s.T, s.NH);
        reference_backward_dkdv_kernel<128, kRoundBf16, OutT><<<grid, block, 0, stream>>>(dqkv, dpsum, dout, qkv, lse, s.B, s.T, s.NH);
    } else { fprintf(stderr, "reference_backward: HS %d not supported\n", s.HS); exit(EXIT_FAILURE); }
    cudaCheck(cudaGetLastError());
}

// Like self_check_reference_forward: the fp32 GPU reference backward must sit far closer to the CPU fp64
// reference than the naive bf16 computation does, and its bf16 flavour must err about like the CPU's naive bf16.
inline bool self_check_reference_backward(uint64_t seed) {
    bool ok = true;
    for (Shape s : {Shape{2, 67, 3, 64}, Shape{1, 35, 2, 128}}) {
        std::mt19937_64 rng(seed + 1);
        size_t nqkv = (size_t)s.B * s.T * 3 * s.NH * s.HS, nout = nqkv / 3, nlse = (size_t)s.B * s.NH * s.T;
        std::vector<floatX> h_qkv(nqkv), h_dout(nout);
        fill_randn_bf16(h_qkv, 2.0f, rng);
        fill_randn_bf16(h_dout, 1.0f, rng);
        std::vector<float> qkv_f = to_float(h_qkv), dout_f = to_float(h_dout), cpu(nqkv), cpu_naive(nqkv);
        attention_backward_cpu(cpu.data(), dout_f.data(), qkv_f.data(), s.B, s.T, s.NH, s.HS);
        attention_backward_cpu(cpu_naive.data(), dout_f.data(), qkv_f.data(), s.B, s.T, s.NH, s.HS, true);
        floatX* d_qkv = device_alloc<floatX>(nqkv);
        floatX* d_dout = device_alloc<floatX>(nout);
        floatX* d_out = device_alloc<floatX>(nout);
        float* d_lse = device_alloc<float>(nlse);
        float* d_dpsum = device_alloc<float>(nlse);
        float* d_dqkv = device_alloc<float>(nqkv);
        to_device(d_qkv, h_qkv); to_device(d_dout, h_dout);
        reference_forward<false, floatX>(d_out, d_lse, d_qkv, s, 0);
        floatX* d_naive_out = device_alloc<floatX>(nout);
        float* d_naive_lse = device_alloc<float>(nlse);
        reference_forward<true, floatX>(d_naive_out, d_naive_lse, d_qkv, s, 0);
        printf("GPU reference backward vs CPU fp64 reference, B=%d T=%d NH=%d HS=%d:\n", s.B, s.T, s.NH, s.HS);
        ErrorStats en = error_stats(cpu_naive.data(), cpu.data(), nqkv);
        poison(d_dqkv, nqkv * 4);
        reference_backward<false, float>(d_dqkv, d_dpsum, d_dout, d_qkv, d_out, d_lse, s, 0);
        std::vector<float> got = from_device(d_dqkv, nqkv);
        ErrorStats e = error_stats(got.data(), cpu.data(), nqkv);
        bool this_ok = e.nonfinite == 0 && e.max_abs < 1e-5 + 0.05 * en.max_abs;
        printf("  dqkv fp32 max_err %.3e (CPU naive bf16 %.3e) %s\n", e.max_abs, en.max_abs, this_ok ? "ok" : "FAIL");
        poison(d_dqkv, nqkv * 4);
        reference_backward<true, float>(d_dqkv, d_dpsum, d_dout, d_qkv, d_naive_out, d_naive_lse, s, 0);
        got = from_device(d_dqkv, nqkv);
        ErrorStats eb = error_stats(got.data(), cpu.data(), nqkv);
        // it takes D from the bf16 out where the CPU's naive takes sum P dP: same order of error, not the same
        bool naive_ok = eb.nonfinite == 0 && eb.max_abs <= 4.0 * en.max_abs + 1e-5 && eb.max_abs >= 0.25 * en.max_abs;
        printf("  dqkv bf16-rounded max_err %.3e (CPU naive bf16 %.3e) %s\n", eb.max_abs, en.max_abs, naive_ok ? "ok" : "FAIL");
        ok = ok && this_ok && naive_ok;
        cudaCheck(cudaFree(d_qkv)); cudaCheck(cudaFree(d_dout)); cudaCheck(cudaFree(d_out));
        cudaCheck(cudaFree(d_lse)); cudaCheck(cudaFree(d_dpsum)); cudaCheck(cudaFree(d_dqkv));
        cudaCheck(cudaFree(d_naive_out)); cudaCheck(cudaFree(d_naive_lse));
    }
    return ok;
}
