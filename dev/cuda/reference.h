/*
CPU references for causal self-attention and the validation rule every kernel is judged by.
Plain C++ (no CUDA), so it is shared by the dev/cuda harness and by the CPU tests in tests/.

Layouts (llm.c's): qkv is (B, T, 3, NH, HS), out and dout are (B, T, NH, HS), lse is (B, NH, T).
  S = scale * Q K^T (scale = 1/sqrt(HS)), masked where key > query (causal)
  P = softmax(S) row-wise,  out = P V,  lse = log(sum_j exp(S_ij))   (natural log)
Backward, with D_i = sum_d dout_id * out_id:
  dV = P^T dout,  dP = dout V^T,  dS = P * (dP - D),  dQ = scale * dS K,  dK = scale * dS^T Q

The references accumulate in double. The rule (FlashAttention's tests): a kernel's max abs error
against the reference must be at most 2x the max abs error of the naive computation done in bf16,
plus a small constant for bf16 rounding of the output (see fa_rule_check).
*/
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

// ----------------------------------------------------------------------------
// indexing helpers for the three layouts

inline size_t qkv_index(int b, int t, int which, int h, int d, int T, int NH, int HS) {
    return ((((size_t)b * T + t) * 3 + which) * NH + h) * HS + d;
}
inline size_t bthd_index(int b, int t, int h, int d, int T, int NH, int HS) {
    return (((size_t)b * T + t) * NH + h) * HS + d;
}
inline size_t lse_index(int b, int h, int t, int T, int NH) {
    return ((size_t)b * NH + h) * T + t;
}

// bf16 round-to-nearest-even on the host, used to emulate the naive bf16 computation
inline float round_to_bf16(float x) {
    uint32_t bits;
    memcpy(&bits, &x, 4);
    if ((bits & 0x7f800000u) == 0x7f800000u) return x;  // inf / nan unchanged
    bits += 0x7fffu + ((bits >> 16) & 1u);
    bits &= 0xffff0000u;
    float y;
    memcpy(&y, &bits, 4);
    return y;
}
// IEEE fp16 round-to-nearest-even on the host (subnormals kept, overflow to inf), for the naive fp16 computation
inline float round_to_fp16(float x) {
    if (!std::isfinite(x)) return x;
    const float a = std::fabs(x);
    if (a >= 65520.0f) return std::copysign(INFINITY, x);   // past the largest fp16 (65504) by half a step
    int e;
    std::frexp(a, &e);                                       // a in [2^(e-1), 2^e): 11 significant bits, or 2^-24 steps
    const float step = std::ldexp(1.0f, std::max(e - 11, -24));
    return std::copysign(std::nearbyint(a / step) * step, x);
}

// ----------------------------------------------------------------------------
// forward: out (B, T, NH, HS), lse (B, NH, T). With round_like_bf16 the scores, the
// probabilities and the output are rounded to bf16 where a naive bf16 implementation
// (S = Q K^T in bf16, softmax, P in bf16, out = P V in bf16) would round them.

inline void attention_forward_cpu(float* out, float* lse, const float* qkv, int B, int T, int NH, int HS,
                                  bool round_like_bf16 = false) {
    const double scale = 1.0 / std::sqrt((double)HS);
    std::vector<double> s(T), acc(HS);
    for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
    for (int t = 0; t < T; t++) {
        const float* q = &qkv[qkv_index(b, t, 0, h, 0, T, NH, HS)];
        double row_max = -INFINITY;
        for (int j = 0; j <= t; j++) {
            const float* k = &qkv[qkv_index(b, j, 1, h, 0, T, NH, HS)];
            double dot = 0.0;
            for (int d = 0; d < HS; d++) dot += (double)q[d] * (double)k[d];
            s[j] = round_like_bf16 ? round_to_bf16((float)(dot * scale)) : dot * scale;
            row_max = std::fmax(row_max, s[j]);
        }
        double row_sum = 0.0;
        for (int j = 0; j <= t; j++) { s[j] = std::exp(s[j] - row_max); row_sum += s[j]; }
        for (int d = 0; d < HS; d++) acc[d] = 0.0;
        for (int j = 0; j <= t; j++) {
            double p = s[j] / row_sum;
            if (round_like_bf16) p = round_to_bf16((float)p);
            const float* v = &qkv[qkv_index(b, j, 2, h, 0, T, NH, HS)];
            for (int d = 0; d < HS; d++) acc[d] += p * (double)v[d];
        }
        float* o = &out[bthd_index(b, t, h, 0, T, NH, HS)];
        for (int d = 0; d < HS; d++) o[d] = round_like_bf16 ? round_to_bf16((float)acc[d]) : (float)acc[d];
        lse[lse_index(b, h, t, T, NH)] = (float)(row_max + std::log(row_sum));
    }
}

// backward: dqkv (B, T, 3, NH, HS) from dout (B, T, NH, HS); recomputes P in double.
// With round_like_bf16, S, P, dP, dS and the three outputs are rounded to bf16 as a naive
// bf16 implementation would round them.
inline void attention_backward_cpu(float* dqkv, const float* dout, const float* qkv, int B, int T, int NH, int HS,
                                   bool round_like_bf16 = false) {
    const double scale = 1.0 / std::sqrt((double)HS);
    auto rnd = [&](double x) { return round_like_bf16 ? (double)round_to_bf16((float)x) : x; };
    std::vector<double> P((size_t)T * T), dS((size_t)T * T), o(HS);
    std::vector<double> dq(HS), dk((size_t)T * HS), dv((size_t)T * HS);
    for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) {
        // P, row by row (causal)
        for (int i = 0; i < T; i++) {
            const float* q = &qkv[qkv_index(b, i, 0, h, 0, T, NH, HS)];
            double row_max = -INFINITY, row_sum = 0.0;
            for (int j = 0; j <= i; j++) {
                const float* k = &qkv[qkv_index(b, j, 1, h, 0, T, NH, HS)];
                double dot = 0.0;
                for (int d = 0; d < HS; d++) dot += (double)q[d] * (double)k[d];
                P[(size_t)i * T + j] = rnd(dot * scale);   // the scores, bf16 in a naive implementation
                row_max = std::fmax(row_max, P[(size_t)i * T + j]);
            }
            for (int j = 0; j <= i; j++) {
                double e = std::exp(P[(size_t)i * T + j] - row_max);
                P[(size_t)i * T + j] = e;
                row_sum += e;
            }
            for (int j = 0; j <= i; j++) P[(size_t)i * T + j] = rnd(P[(size_t)i * T + j] / row_sum);
        }
        // dS = P * (dP - D), with D_i = sum_j P_ij dP_ij (= rowsum(dout * out))
        for (int i = 0; i < T; i++) {
            const float* dout_i = &dout[bthd_index(b, i, h, 0, T, NH, HS)];
            double D = 0.0;
            for (int j = 0; j <= i; j++) {
                const float* v = &qkv[qkv_index(b, j, 2, h, 0, T, NH, HS)];
                double dp = 0.0;
                for (int d = 0; d < HS; d++) dp += (double)dout_i[d] * (double)v[d];
                dS[(size_t)i * T + j] = rnd(dp);
                D += P[(size_t)i * T + j] * dS[(size_t)i * T + j];
            }
            for (int j = 0; j <= i; j++)
                dS[(size_t)i * T + j] = rnd(P[(size_t)i * T + j] * (dS[(size_t)i * T + j] - D));
        }
        // dQ_i = scale * sum_j dS_ij K_j;  dK_j = scale * sum_i dS_ij Q_i;  dV_j = sum_i P_ij dout_i
        std::fill(dk.begin(), dk.end(), 0.0);
        std::fill(dv.begin(), dv.end(), 0.0);
        for (int i = 0; i < T; i++) {
            const float* q = &qkv[qkv_index(b, i, 0, h, 0, T, NH, HS)];
            const float* dout_i = &dout[bthd_index(b, i, h, 0, T, NH, HS)];
            std::fill(dq.begin(), dq.end(), 0.0);
            for (int j = 0; j <= i; j++) {
                const float* k = &qkv[qkv_index(b, j, 1, h, 0, T, NH, HS)];
                double ds = dS[(size_t)i * T + j], p = P[(size_t)i * T + j];
                for (int d = 0; d < HS; d++) {
                    dq[d] += ds * k[d];
                    dk[(size_t)j * HS + d] += ds * q[d];
                    dv[(size_t)j * HS + d] += p * dout_i[d];
                }
            }
            for (int d = 0; d < HS; d++) dqkv[qkv_index(b, i, 0, h, d, T, NH, HS)] = (float)rnd(dq[d] * scale);
        }
        for (int j = 0; j < T; j++)
            for (int d = 0; d < HS; d++) {
                dqkv[qkv_index(b, j, 1, h, d, T, NH, HS)] = (float)rnd(dk[(size_t)j * HS + d] * scale);
                dqkv[qkv_index(b, j, 2, h, d, T, NH, HS)] = (float)rnd(dv[(size_t)j * HS + d]);
            }
    }
}

// ----------------------------------------------------------------------------
// general attention (src/attention.cuh's AttentionForwardParams): q, dq, out, dout (B, T, NH, HS); k, v, dk, dv
// (B, Tk, NH_kv, HS), all contiguous here (the harness scatters them into the layout under test); lse (B, NH, T).
// Query head h reads key/value head h / (NH / NH_kv); query i sees key j iff j <= i + Tk - T when causal. A row
// that sees no key has out = 0 and lse = -inf; dK, dV sum over each group of query heads.

struct GeneralShape { int B, T, Tk, NH, NH_kv, HS; bool causal; double scale; };

// src/attention.cuh's AttentionExtras on padded tensors: sequence b has T_b[b] queries and Tk_b[b] keys (rows and keys
// past them are not part of it: their out is 0, lse -inf), and an additive bias (B, NH, T, Tk) whose element (b, h, i, j)
// is bias[b * bias_b + h * bias_h + i * bias_q + j] (a stride 0 broadcasts; -inf masks)
struct GeneralExtras {
    const float* bias = nullptr;
    long long bias_b = 0, bias_h = 0, bias_q = 0;
    const float* bias2 = nullptr;           // a second bias, likewise
    long long bias2_b = 0, bias2_h = 0, bias2_q = 0;
    std::vector<uint8_t> key_mask;          // (B, Tk), optional: key j of sequence b is seen where nonzero
    std::vector<int> T_b, Tk_b;   // empty: T, Tk for every sequence
    std::vector<int> doc_start;   // (B, T), optional: query i of sequence b sees keys from doc_start[b * T + i] on
    // a sliding window (FlashAttention's window_size): query i sees keys i + Tk_b - T_b - window_left ..
    // i + Tk_b - T_b + window_right; -1: that side unbounded
    int window_left = -1, window_right = -1;
    // the score modifiers: softcap > 0 makes the score softcap * tanh(scale q.k / softcap); ALiBi subtracts
    // alibi[b * alibi_batch + h] * |i + Tk_b - T_b - j| (alibi empty: none)
    double softcap = 0.0;
    std::vector<float> alibi;
    long long alibi_batch = 0;
    bool fp16 = false;            // the naive computation (round_like_bf16) rounds like an fp16 one instead
    // dropout: (B, NH, T, Tk), 1 where probability (b, h, i, j) is kept (then scaled by dropout_scale), 0 where dropped
    std::vector<uint8_t> dropout_keep;
    double dropout_scale = 1.0;
};
// the factor dropout puts on probability (b, h, i, j): dropout_scale where kept, 0 where dropped (1 without dropout)
inline double dropout_factor(const GeneralShape& s, const GeneralExtras* x, int b, int h, int i, int j) {
    if (!x || x->dropout_keep.empty()) return 1.0;
    return x->dropout_keep[(((size_t)b * s.NH + h) * s.T + i) * s.Tk + j] ? x->dropout_scale : 0.0;
}
// the naive computation's rounding: bf16, or fp16 where the extras say so
inline double round_like_16bit(double v, const GeneralExtras* x) {
    return x && x->fp16 ? (double)round_to_fp16((float)v) : (double)round_to_bf16((float)v);
}
inline int general_seq_T(const GeneralShape& s, const GeneralExtras* x, int b) { return x && !x->T_b.empty() ? x->T_b[b] : s.T; }
inline int general_seq_Tk(const GeneralShape& s, const GeneralExtras* x, int b) { return x && !x->Tk_b.empty() ? x->Tk_b[b] : s.Tk; }

// the last key row i of sequence b sees (-1: none)
inline int general_last_key(const GeneralShape& s, int i, const GeneralExtras* x = nullptr, int b = 0) {
    const int T = general_seq_T(s, x, b), Tk = general_seq_Tk(s, x, b);
    if (i >= T) return -1;
    return s.causal ? std::min(Tk - 1, i + Tk - T) : Tk - 1;
}

// Row i of query head h, batch b: P[j] = softmax_j(scale * q_i . k_j + bias) over the keys j <= last the row sees,
// rounded like a naive bf16 implementation (the scores, then the probabilities) with round_like_bf16. Returns last
// (-1: no key, or every key masked by a -inf bias: P = 0) and sets *lse (natural log; -inf without keys).
// dcap (optional): d score / d (scale q.k) per key, 1 - tanh^2 with softcap (else 1)
inline int general_softmax_row(std::vector<double>& P, double* lse, const float* q, const float* k, const GeneralShape& s,
                               int b, int h, int i, bool round_like_bf16, const GeneralExtras* x = nullptr,
                               std::vector<double>* dcap = nullptr) {
    auto rnd = [&](double v) { return round_like_bf16 ? round_like_16bit(v, x) : v; };
    int last = general_last_key(s, i, x, b);
    const int hk = h / (s.NH / s.NH_kv);
    const float* qi = &q[bthd_index(b, i, h, 0, s.T, s.NH, s.HS)];
    const float* bias_row = x && x->bias ? x->bias + b * x->bias_b + h * x->bias_h + i * x->bias_q : nullptr;
    const float* bias2_row = x && x->bias2 ? x->bias2 + b * x->bias2_b + h * x->bias2_h + i * x->bias2_q : nullptr;
    const uint8_t* mask_row = x && !x->key_mask.empty() ? &x->key_mask[(size_t)b * s.Tk] : nullptr;
    double row_max = -INFINITY, row_sum = 0.0;
    for (int j = 0; j <= last; j++) {
        const float* kj = &k[bthd_index(b, j, hk, 0, s.Tk, s.NH_kv, s.HS)];
        double dot = 0.0;
        for (int d = 0; d < s.HS; d++) dot += (double)qi[d] * (double)kj[d];
        P[j] = rnd(dot * s.scale);
        if (dcap) (*dcap)[j] = 1.0;
        if (x && x->softcap > 0.0) {
            const double t = std::tanh(P[j] / x->softcap);
            P[j] = rnd(x->softcap * t);
            if (dcap) (*dcap)[j] = 1.0 - t * t;
        }
        if (x && !x->alibi.empty())
            P[j] = rnd(P[j] - (double)x->alibi[b * x->alibi_batch + h] *
                                  std::fabs((double)i + general_seq_Tk(s, x, b) - general_seq_T(s, x, b) - j));
        if (bias_row) P[j] = rnd(P[j] + (double)bias_row[j]);
        if (bias2_row) P[j] = rnd(P[j] + (double)bias2_row[j]);
        if (mask_row && !mask_row[j]) P[j] = -INFINITY;
        if (x && !x->doc_start.empty() && j < x->doc_start[(size_t)b * s.T + i]) P[j] = -INFINITY;
        if (x && x->window_left >= 0 && j < (long long)i + general_seq_Tk(s, x, b) - general_seq_T(s, x, b) - x->window_left) P[j] = -INFINITY;
        if (x && x->window_right >= 0 && j > (long long)i + general_seq_Tk(s, x, b) - general_seq_T(s, x, b) + x->window_right) P[j] = -INFINITY;
        row_max = std::fmax(row_max, P[j]);
    }
    if (row_max == -INFINITY) last = -1;   // every key masked
    for (int j = 0; j <= last; j++) { P[j] = std::exp(P[j] - row_max); row_sum += P[j]; }
    for (int j = 0; j <= last; j++) P[j] = rnd(P[j] / row_sum);
    *lse = last < 0 ? -INFINITY : row_max + std::log(row_sum);
    return last;
}

// fn(unit) for unit = 0 .. units - 1 on every core. Each unit writes only its own outputs and sums in a fixed order, so
// the results do not depend on the thread count.
template <class Fn>
void parallel_units(int units, Fn fn) {
    const int threads = (int)std::min<unsigned>((unsigned)std::max(units, 1), std::max(1u, std::thread::hardware_concurrency()));
    std::atomic<int> next{0};
    auto work = [&] { for (int u = next++; u < units; u = next++) fn(u); };
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; t++) pool.emplace_back(work);
    work();
    for (std::thread& t : pool) t.join();
}

inline void attention_forward_cpu_general(float* out, float* lse, const float* q, const float* k, const float* v,
                                          const GeneralShape& s, bool round_like_bf16 = false, const GeneralExtras* x = nullptr) {
    parallel_units(s.B * s.NH, [&](int unit) {   // one (b, h) a unit
    const int b = unit / s.NH, h = unit % s.NH;
    std::vector<double> p(s.Tk), acc(s.HS);
    for (int i = 0; i < s.T; i++) {
        double row_lse;
        const int last = general_softmax_row(p, &row_lse, q, k, s, b, h, i, round_like_bf16, x), hk = h / (s.NH / s.NH_kv);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int j = 0; j <= last; j++) {
            const float* vj = &v[bthd_index(b, j, hk, 0, s.Tk, s.NH_kv, s.HS)];
            const double f = dropout_factor(s, x, b, h, i, j), pj = f == 1.0 ? p[j] : round_like_bf16 ? round_like_16bit(p[j] * f, x) : p[j] * f;
            for (int d = 0; d < s.HS; d++) acc[d] += pj * (double)vj[d];
        }
        float* o = &out[bthd_index(b, i, h, 0, s.T, s.NH, s.HS)];
        for (int d = 0; d < s.HS; d++) o[d] = round_like_bf16 ? (float)round_like_16bit(acc[d], x) : (float)acc[d];
        if (lse) lse[lse_index(b, h, i, s.T, s.NH)] = (float)row_lse;
    }
    });
}

// backward from dout; recomputes P in double, rounding like a naive bf16 implementation with round_like_bf16.
// dbias_full (optional): d loss / d logit (B, NH, T, Tk), the bias gradient before any broadcast sum (0 where unseen)
// out_for_d (optional, with round_like_bf16): D = rowsum(dout * out) from this bf16 out (B, T, NH, HS) instead of
// sum_j P_ij dP_ij, as common.h's GPU reference takes it and for the same reason: where a row's softmax is one-hot
// (inputs x8, one query against many keys) dP_j - D cancels exactly in the sum form, which then has no error to
// measure against, while every FlashAttention backward's D carries the rounding of the bf16 O there
inline void attention_backward_cpu_general(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                                           const float* v, const GeneralShape& s, bool round_like_bf16 = false,
                                           const GeneralExtras* x = nullptr, float* dbias_full = nullptr,
                                           const float* out_for_d = nullptr) {
    if (dbias_full) std::fill(dbias_full, dbias_full + (size_t)s.B * s.NH * s.T * s.Tk, 0.0f);
    auto rnd = [&](double v) { return round_like_bf16 ? round_like_16bit(v, x) : v; };
    std::vector<double> acc_dk((size_t)s.B * s.Tk * s.NH_kv * s.HS, 0.0), acc_dv(acc_dk.size(), 0.0);
    const int group = s.NH / s.NH_kv;
    parallel_units(s.B * s.NH_kv, [&](int unit) {   // one (b, key/value head) a unit: its dK, dV sum its group's heads
    const int b = unit / s.NH_kv;
    std::vector<double> P(s.Tk), dS(s.Tk), dqi(s.HS), dcap(s.Tk);
    for (int h = unit % s.NH_kv * group; h < (unit % s.NH_kv + 1) * group; h++)
    for (int i = 0; i < s.T; i++) {
        double row_lse, D = 0.0;
        const int last = general_softmax_row(P, &row_lse, q, k, s, b, h, i, round_like_bf16, x, &dcap), hk = h / (s.NH / s.NH_kv);
        const float* qi = &q[bthd_index(b, i, h, 0, s.T, s.NH, s.HS)];
        const float* doi = &dout[bthd_index(b, i, h, 0, s.T, s.NH, s.HS)];
        for (int j = 0; j <= last; j++) {
            const float* vj = &v[bthd_index(b, j, hk, 0, s.Tk, s.NH_kv, s.HS)];
            double dp = 0.0;
            for (int d = 0; d < s.HS; d++) dp += (double)doi[d] * (double)vj[d];
            const double f = dropout_factor(s, x, b, h, i, j);   // dropout: dP over the kept, scaled
            dS[j] = f == 1.0 ? rnd(dp) : rnd(rnd(dp) * f);
            if (!out_for_d) D += P[j] * dS[j];
        }
        if (out_for_d) {
            const float* oi = &out_for_d[bthd_index(b, i, h, 0, s.T, s.NH, s.HS)];
            for (int d = 0; d < s.HS; d++) D += (double)doi[d] * (double)oi[d];
            D = (double)(float)D;   // fp32, as the kernels keep it
        }
        std::fill(dqi.begin(), dqi.end(), 0.0);
        for (int j = 0; j <= last; j++) {
            const double ds_logit = rnd(P[j] * (dS[j] - D));   // d loss / d score (the biases' gradient)
            if (dbias_full) dbias_full[(((size_t)b * s.NH + h) * s.T + i) * s.Tk + j] = (float)ds_logit;
            const double ds = dcap[j] == 1.0 ? ds_logit : rnd(ds_logit * dcap[j]);   // through the softcap
            const float* kj = &k[bthd_index(b, j, hk, 0, s.Tk, s.NH_kv, s.HS)];
            const size_t kv = bthd_index(b, j, hk, 0, s.Tk, s.NH_kv, s.HS);
            const double f = dropout_factor(s, x, b, h, i, j), pj = f == 1.0 ? P[j] : rnd(P[j] * f);   // dV: the kept P, scaled
            for (int d = 0; d < s.HS; d++) {
                dqi[d] += ds * kj[d];
                acc_dk[kv + d] += ds * qi[d];
                acc_dv[kv + d] += pj * doi[d];
            }
        }
        float* dqo = &dq[bthd_index(b, i, h, 0, s.T, s.NH, s.HS)];
        for (int d = 0; d < s.HS; d++) dqo[d] = (float)rnd(dqi[d] * s.scale);
    }
    });
    for (size_t x = 0; x < acc_dk.size(); x++) { dk[x] = (float)rnd(acc_dk[x] * s.scale); dv[x] = (float)rnd(acc_dv[x]); }
}

// ----------------------------------------------------------------------------
// error statistics and the FlashAttention pass rule

struct ErrorStats {
    double max_abs = 0.0, mean_abs = 0.0, max_ref = 0.0;
    size_t worst = 0;        // flat index of the largest error
    size_t nonfinite = 0;    // NaN/inf in the tested tensor (never allowed)
};

inline ErrorStats error_stats(const float* got, const float* ref, size_t n) {
    ErrorStats s;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!std::isfinite(got[i])) { s.nonfinite++; continue; }
        double e = std::fabs((double)got[i] - (double)ref[i]);
        sum += e;
        if (e > s.max_abs) { s.max_abs = e; s.worst = i; }
        s.max_ref = std::fmax(s.max_ref, std::fabs((double)ref[i]));
    }
    s.mean_abs = n ? sum / n : 0.0;
    return s;
}

// The FlashAttention rule: max|got - ref| <= 2 * max|naive_bf16 - ref| + atol, where atol is the bf16
// rounding of the largest reference value (2^-8 relative; atol_exp -11: fp16's) plus 1e-5 absolute. `describe(i, buf)` turns
// a flat index into readable coordinates. Prints one line (and up to 5 mismatching pairs on failure)
// unless verbose is false (the CPU tests that feed it wrong outputs on purpose). atol_floor raises the constant
// where a tensor can be exactly zero in exact arithmetic (a gradient whose row sees one key) while the naive
// computation, rounding the same way as the reference, gets zero too.
template <class Describe>
bool fa_rule_check(const char* what, const float* got, const float* ref, const float* naive, size_t n,
                   Describe describe, bool verbose = true, double atol_floor = 0.0, int atol_exp = -8) {
    ErrorStats e = error_stats(got, ref, n);
    ErrorStats en = error_stats(naive, ref, n);
    double atol = std::fmax(std::ldexp(e.max_ref, atol_exp) + 1e-5, atol_floor);
    double bound = 2.0 * en.max_abs + atol;
    bool ok = e.nonfinite == 0 && e.max_abs <= bound;
    char where[128];
    describe(e.worst, where);
    if (verbose) {
        printf("  %-4s max_err %.3e (at %s) mean_err %.3e | naive max_err %.3e | ratio %.2f | bound %.3e %s",
               what, e.max_abs, where, e.mean_abs, en.max_abs, en.max_abs > 0 ? e.max_abs / en.max_abs : 0.0, bound,
               ok ? "ok" : "FAIL");
        if (e.nonfinite) printf(" (%zu non-finite = unwritten or NaN)", e.nonfinite);
        printf("\n");
    }
    if (verbose && !ok) {  // llm.c style: show the first mismatching pairs, at most 5
        int shown = 0;
        for (size_t i = 0; i < n && shown < 5; i++) {
            if (!std::isfinite(got[i]) || std::fabs((double)got[i] - ref[i]) > bound) {
                describe(i, where);
                printf("    %s: got %.6f ref %.6f naive %.6f\n", where, got[i], ref[i], naive[i]);
                shown++;
            }
        }
    }
    return ok;
}

// LSE is fp32 in every fused implementation, so it gets a plain relative bound (1e-4 of max(1, |lse|))
// instead of the bf16 rule; a path that rounds the scores to bf16 first passes its own, looser tol.
template <class Describe>
bool lse_check(const float* got, const float* ref, size_t n, Describe describe, bool verbose = true, double tol = 1e-4) {
    double worst_rel = 0.0; size_t worst = 0, nonfinite = 0;
    for (size_t i = 0; i < n; i++) {
        if (!std::isfinite(got[i])) { nonfinite++; continue; }
        double rel = std::fabs((double)got[i] - ref[i]) / std::fmax(1.0, std::fabs((double)ref[i]));
        if (rel > worst_rel) { worst_rel = rel; worst = i; }
    }
    bool ok = nonfinite == 0 && worst_rel <= tol;
    char where[128];
    describe(worst, where);
    if (verbose) {
        printf("  lse  max_err/max(1,|ref|) %.3e (at %s: got %.6f ref %.6f) tol %.1e %s", worst_rel, where,
               got[worst], ref[worst], tol, ok ? "ok" : "FAIL");
        if (nonfinite) printf(" (%zu non-finite = unwritten or NaN)", nonfinite);
        printf("\n");
    }
    return ok;
}
