// The CPU reference backward (dev/cuda/reference.h) checked by finite differences of the CPU forward: with
// loss = sum(out * dout), dL/dx for every q, k and v element must match attention_backward_cpu's dqkv.
// Central differences in double (the forward stores float, so the step is large enough to beat its rounding).
#include <cmath>
#include <random>
#include <vector>
#include "test.h"
#include "dev/cuda/reference.h"

static double attention_loss(const std::vector<float>& qkv, const std::vector<float>& dout, int B, int T, int NH, int HS) {
    std::vector<float> out((size_t)B * T * NH * HS), lse((size_t)B * NH * T);
    attention_forward_cpu(out.data(), lse.data(), qkv.data(), B, T, NH, HS);
    double loss = 0.0;
    for (size_t i = 0; i < out.size(); i++) loss += (double)out[i] * dout[i];
    return loss;
}

// max |analytic - numeric| over the dQ (which = 0), dK (1) or dV (2) elements, relative to the largest gradient
static double finite_difference_error(int which, int B, int T, int NH, int HS, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> qkv((size_t)B * T * 3 * NH * HS), dout((size_t)B * T * NH * HS), dqkv(qkv.size());
    for (auto& x : qkv) x = dist(rng);
    for (auto& x : dout) x = dist(rng);
    attention_backward_cpu(dqkv.data(), dout.data(), qkv.data(), B, T, NH, HS);
    const float h = 1e-2f;   // float inputs: (f(x+h) - f(x-h)) / 2h has O(h^2) truncation, ~1e-5 rounding
    double max_err = 0.0, max_grad = 0.0;
    for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
    for (int hd = 0; hd < NH; hd++)
    for (int d = 0; d < HS; d++) {
        const size_t i = qkv_index(b, t, which, hd, d, T, NH, HS);
        const float x0 = qkv[i];
        qkv[i] = x0 + h;
        const double up = attention_loss(qkv, dout, B, T, NH, HS);
        qkv[i] = x0 - h;
        const double down = attention_loss(qkv, dout, B, T, NH, HS);
        qkv[i] = x0;
        const double numeric = (up - down) / ((double)(x0 + h) - (double)(x0 - h));
        max_err = std::fmax(max_err, std::fabs(numeric - dqkv[i]));
        max_grad = std::fmax(max_grad, std::fabs((double)dqkv[i]));
    }
    return max_err / std::fmax(max_grad, 1e-30);
}

TEST(attention_backward_cpu_dq_matches_finite_differences) {
    CHECK(finite_difference_error(0, 1, 5, 2, 64, 11) < 1e-3);
}
TEST(attention_backward_cpu_dk_matches_finite_differences) {
    CHECK(finite_difference_error(1, 1, 5, 2, 64, 12) < 1e-3);
}
TEST(attention_backward_cpu_dv_matches_finite_differences) {
    CHECK(finite_difference_error(2, 1, 5, 2, 64, 13) < 1e-3);
}
// T = 1: the single key is the whole softmax, so dQ and dK must be exactly 0 and dV = dout
TEST(attention_backward_cpu_single_token) {
    const int HS = 64;
    std::vector<float> qkv(3 * HS), dout(HS), dqkv(3 * HS);
    for (int i = 0; i < 3 * HS; i++) qkv[i] = 0.1f * (i % 7) - 0.3f;
    for (int i = 0; i < HS; i++) dout[i] = 0.05f * (i % 5) - 0.1f;
    attention_backward_cpu(dqkv.data(), dout.data(), qkv.data(), 1, 1, 1, HS);
    for (int d = 0; d < HS; d++) {
        CHECK(std::fabs(dqkv[d]) < 1e-7);
        CHECK(std::fabs(dqkv[HS + d]) < 1e-7);
        CHECK(std::fabs(dqkv[2 * HS + d] - dout[d]) < 1e-7);
    }
}

// The general reference (GQA, cross, non-causal) by finite differences of its own forward, on a case with all three:
// 4 query heads over 2 key/value heads, T = 5 queries against Tk = 7 keys, causal (bottom-right: query 0 sees keys
// 0..2) and not; and equal to the fused-layout reference on causal self-attention. x: the extras and modifiers
static double general_gradient_error(bool causal, uint64_t seed, const GeneralExtras* x = nullptr) {
    const GeneralShape s{2, 5, 7, 4, 2, 8, causal, 0.37};
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    const size_t nq = (size_t)s.B * s.T * s.NH * s.HS, nkv = (size_t)s.B * s.Tk * s.NH_kv * s.HS;
    std::vector<float> q(nq), k(nkv), v(nkv), dout(nq), dq(nq), dk(nkv), dv(nkv), out(nq);
    for (auto* x : {&q, &k, &v, &dout}) for (auto& e : *x) e = dist(rng);
    attention_backward_cpu_general(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), s, false, x);
    auto loss = [&]() {
        attention_forward_cpu_general(out.data(), nullptr, q.data(), k.data(), v.data(), s, false, x);
        double l = 0.0;
        for (size_t i = 0; i < nq; i++) l += (double)out[i] * dout[i];
        return l;
    };
    const float h = 1e-2f;
    double max_err = 0.0, max_grad = 0.0;
    for (auto [x, g] : {std::make_pair(&q, &dq), std::make_pair(&k, &dk), std::make_pair(&v, &dv)})
        for (size_t i = 0; i < x->size(); i++) {
            const float keep = (*x)[i];
            (*x)[i] = keep + h; const double up = loss();
            (*x)[i] = keep - h; const double down = loss();
            (*x)[i] = keep;
            max_err = std::fmax(max_err, std::fabs((up - down) / (2 * h) - (*g)[i]));
            max_grad = std::fmax(max_grad, std::fabs((*g)[i]));
        }
    return max_err / max_grad;
}
TEST(attention_general_cpu_gradients_match_finite_differences) {
    CHECK(general_gradient_error(true, 11) < 1e-3);
    CHECK(general_gradient_error(false, 12) < 1e-3);
}
TEST(attention_general_cpu_equals_fused_reference_on_self_causal) {
    const int B = 2, T = 9, NH = 3, HS = 16;
    std::mt19937_64 rng(5);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> qkv((size_t)B * T * 3 * NH * HS), q((size_t)B * T * NH * HS), k(q.size()), v(q.size());
    for (auto& x : qkv) x = dist(rng);
    for (int b = 0; b < B; b++) for (int t = 0; t < T; t++) for (int h = 0; h < NH; h++) for (int d = 0; d < HS; d++) {
        q[bthd_index(b, t, h, d, T, NH, HS)] = qkv[qkv_index(b, t, 0, h, d, T, NH, HS)];
        k[bthd_index(b, t, h, d, T, NH, HS)] = qkv[qkv_index(b, t, 1, h, d, T, NH, HS)];
        v[bthd_index(b, t, h, d, T, NH, HS)] = qkv[qkv_index(b, t, 2, h, d, T, NH, HS)];
    }
    std::vector<float> out1(q.size()), lse1((size_t)B * NH * T), out2(q.size()), lse2(lse1.size());
    attention_forward_cpu(out1.data(), lse1.data(), qkv.data(), B, T, NH, HS);
    attention_forward_cpu_general(out2.data(), lse2.data(), q.data(), k.data(), v.data(), GeneralShape{B, T, T, NH, NH, HS, true, 0.25});
    double err = 0.0;
    for (size_t i = 0; i < out1.size(); i++) err = std::fmax(err, std::fabs(out1[i] - out2[i]));
    for (size_t i = 0; i < lse1.size(); i++) err = std::fmax(err, std::fabs(lse1[i] - lse2[i]));
    CHECK(err < 1e-6);
}
TEST(attention_general_cpu_rows_without_keys) {   // causal, T > Tk: query i sees keys 0 .. i - 3
    const GeneralShape s{1, 5, 2, 1, 1, 8, true, 0.35};
    std::vector<float> q(5 * 8, 1.0f), k(2 * 8, 0.5f), v(2 * 8, 2.0f), out(5 * 8), lse(5);
    attention_forward_cpu_general(out.data(), lse.data(), q.data(), k.data(), v.data(), s);
    CHECK(std::isinf(lse[0]) && lse[0] < 0 && std::isinf(lse[2]) && std::isfinite(lse[3]) && out[0] == 0.0f && out[8 * 3] == 2.0f);
}

// The extras (dev/cuda/reference.h's GeneralExtras): dbias by finite differences of the forward with a broadcast bias
// (1, NH, T, Tk), per-sequence key lengths; a -inf bias above the diagonal equals causal; a fully masked row gives
// out 0, lse -inf and no gradient.
TEST(attention_general_cpu_bias_gradient_matches_finite_differences) {
    const GeneralShape s{2, 5, 6, 2, 1, 8, false, 0.41};
    std::mt19937_64 rng(21);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    const size_t nq = (size_t)s.B * s.T * s.NH * s.HS, nkv = (size_t)s.B * s.Tk * s.NH_kv * s.HS;
    std::vector<float> q(nq), k(nkv), v(nkv), dout(nq), dq(nq), dk(nkv), dv(nkv), out(nq), bias((size_t)s.NH * s.T * s.Tk);
    std::vector<float> dfull((size_t)s.B * s.NH * s.T * s.Tk);
    for (auto* x : {&q, &k, &v, &dout, &bias}) for (auto& e : *x) e = dist(rng);
    GeneralExtras x;
    x.bias = bias.data(); x.bias_b = 0; x.bias_h = (long long)s.T * s.Tk; x.bias_q = s.Tk;
    x.Tk_b = {6, 4};
    attention_backward_cpu_general(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), s, false, &x, dfull.data());
    auto loss = [&]() {
        attention_forward_cpu_general(out.data(), nullptr, q.data(), k.data(), v.data(), s, false, &x);
        double l = 0.0;
        for (size_t i = 0; i < nq; i++) l += (double)out[i] * dout[i];
        return l;
    };
    const float h = 1e-2f;
    double max_err = 0.0, max_grad = 0.0;
    for (size_t i = 0; i < bias.size(); i++) {   // dbias (h, i, j) = sum over b of dS (b, h, i, j)
        const float keep = bias[i];
        bias[i] = keep + h; const double up = loss();
        bias[i] = keep - h; const double down = loss();
        bias[i] = keep;
        double analytic = 0.0;
        for (int b = 0; b < s.B; b++) analytic += dfull[(size_t)b * s.NH * s.T * s.Tk + i];
        max_err = std::fmax(max_err, std::fabs((up - down) / (2 * h) - analytic));
        max_grad = std::fmax(max_grad, std::fabs(analytic));
    }
    CHECK(max_err / max_grad < 1e-3);
    for (int j = 4; j < 6; j++) for (int d = 0; d < s.HS; d++)   // keys past sequence 1's 4 get no gradient
        CHECK(dk[bthd_index(1, j, 0, d, s.Tk, s.NH_kv, s.HS)] == 0.0f && dv[bthd_index(1, j, 0, d, s.Tk, s.NH_kv, s.HS)] == 0.0f);
}
TEST(attention_general_cpu_minus_inf_bias_is_a_mask) {
    const GeneralShape causal{1, 6, 6, 2, 2, 8, true, 0.3}, open{1, 6, 6, 2, 2, 8, false, 0.3};
    std::mt19937_64 rng(22);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> q(6 * 2 * 8), k(q.size()), v(q.size()), out1(q.size()), out2(q.size()), lse1(12), lse2(12), bias(36, 0.0f);
    for (auto* x : {&q, &k, &v}) for (auto& e : *x) e = dist(rng);
    for (int i = 0; i < 6; i++) for (int j = i + 1; j < 6; j++) bias[i * 6 + j] = -INFINITY;
    bias[3 * 6 + 0] = bias[3 * 6 + 1] = bias[3 * 6 + 2] = bias[3 * 6 + 3] = -INFINITY;   // row 3: every key masked
    GeneralExtras x;
    x.bias = bias.data(); x.bias_q = 6;
    attention_forward_cpu_general(out1.data(), lse1.data(), q.data(), k.data(), v.data(), causal);
    attention_forward_cpu_general(out2.data(), lse2.data(), q.data(), k.data(), v.data(), open, false, &x);
    double err = 0.0;
    for (int t = 0; t < 6; t++) for (int h = 0; h < 2; h++) {
        if (t == 3) {
            CHECK(std::isinf(lse2[h * 6 + t]) && lse2[h * 6 + t] < 0);
            for (int d = 0; d < 8; d++) CHECK(out2[bthd_index(0, t, h, d, 6, 2, 8)] == 0.0f);
            continue;
        }
        err = std::fmax(err, std::fabs(lse1[h * 6 + t] - lse2[h * 6 + t]));
        for (int d = 0; d < 8; d++) err = std::fmax(err, std::fabs(out1[bthd_index(0, t, h, d, 6, 2, 8)] - out2[bthd_index(0, t, h, d, 6, 2, 8)]));
    }
    CHECK(err < 1e-6);
}
// document masking: each document (starts 0, 3, 7 of 9 tokens) attends as if it were its own sequence
TEST(attention_general_cpu_documents_are_separate_sequences) {
    const int T = 9, NH = 2, HS = 8;
    std::mt19937_64 rng(23);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> q(T * NH * HS), k(q.size()), v(q.size()), out(q.size()), lse(NH * T);
    for (auto* x : {&q, &k, &v}) for (auto& e : *x) e = dist(rng);
    GeneralExtras x;
    x.doc_start = {0, 0, 0, 3, 3, 3, 3, 7, 7};
    attention_forward_cpu_general(out.data(), lse.data(), q.data(), k.data(), v.data(), GeneralShape{1, T, T, NH, NH, HS, true, 0.3}, false, &x);
    double err = 0.0;
    for (int start : {0, 3, 7}) {
        const int len = start == 0 ? 3 : start == 3 ? 4 : 2;
        const size_t off = (size_t)start * NH * HS;
        std::vector<float> o2(len * NH * HS), l2(NH * len);
        attention_forward_cpu_general(o2.data(), l2.data(), q.data() + off, k.data() + off, v.data() + off, GeneralShape{1, len, len, NH, NH, HS, true, 0.3});
        for (size_t i = 0; i < o2.size(); i++) err = std::fmax(err, std::fabs(o2[i] - out[off + i]));
        for (int h = 0; h < NH; h++) for (int t = 0; t < len; t++) err = std::fmax(err, std::fabs(l2[h * len + t] - lse[h * T + start + t]));
    }
    CHECK(err < 1e-6);
}

// The modifiers (FlashAttention's window, softcap and ALiBi): softcap's and ALiBi's gradients by finite differences
// (a cap of 1.5 keeps tanh far from linear), with a window beside them; a window and ALiBi each equal to the explicit
// bias they stand for (-inf outside the band; -slope |i + Tk - T - j|).
TEST(attention_general_cpu_modifier_gradients_match_finite_differences) {
    GeneralExtras x;
    x.softcap = 1.5;
    x.alibi = {0.3f, 0.7f, 0.1f, 0.45f, 0.2f, 0.9f, 0.05f, 0.6f};   // (B, NH) = (2, 4)
    x.alibi_batch = 4;
    CHECK(general_gradient_error(true, 31, &x) < 1e-3);
    CHECK(general_gradient_error(false, 32, &x) < 1e-3);
    x.window_left = 2, x.window_right = 1;
    CHECK(general_gradient_error(false, 33, &x) < 1e-3);
}
TEST(attention_general_cpu_window_and_alibi_are_their_biases) {
    const GeneralShape s{1, 5, 7, 2, 2, 8, false, 0.3};
    std::mt19937_64 rng(41);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> q(5 * 2 * 8), k(7 * 2 * 8), v(k.size()), out1(q.size()), out2(q.size()), lse1(10), lse2(10);
    for (auto* t : {&q, &k, &v}) for (auto& e : *t) e = dist(rng);
    std::vector<float> bias(2 * 5 * 7);   // (1, NH, T, Tk)
    GeneralExtras mod, biased;
    mod.window_left = 1, mod.window_right = 0, mod.alibi = {0.25f, 0.5f};
    for (int h = 0; h < 2; h++) for (int i = 0; i < 5; i++) for (int j = 0; j < 7; j++) {
        const int d = i + 7 - 5 - j;   // the bottom-right diagonal's offset
        bias[(h * 5 + i) * 7 + j] = d > 1 || d < 0 ? -INFINITY : -mod.alibi[h] * (float)std::abs(d);
    }
    biased.bias = bias.data(), biased.bias_h = 5 * 7, biased.bias_q = 7;
    attention_forward_cpu_general(out1.data(), lse1.data(), q.data(), k.data(), v.data(), s, false, &mod);
    attention_forward_cpu_general(out2.data(), lse2.data(), q.data(), k.data(), v.data(), s, false, &biased);
    double err = 0.0;
    for (size_t i = 0; i < out1.size(); i++) err = std::fmax(err, std::fabs(out1[i] - out2[i]));
    for (size_t i = 0; i < lse1.size(); i++) err = std::fmax(err, std::fabs(lse1[i] - lse2[i]));
    CHECK(err < 1e-6);
}

TEST(round_to_fp16_is_ieee_half) {   // the naive fp16 computation's rounding: 11 significant bits, ties to even
    CHECK(round_to_fp16(1.0f) == 1.0f);
    CHECK(round_to_fp16(1.0f + 1.0f / 4096) == 1.0f);                      // below half a step (2^-10)
    CHECK(round_to_fp16(1.0f + 3.0f / 2048) == 1.0f + 2.0f / 1024);        // a tie: to the even 1 + 2^-9
    CHECK(round_to_fp16(1.0f + 1.0f / 2048) == 1.0f);                      // a tie: to the even 1
    CHECK(round_to_fp16(-3.14159265f) == -3.140625f);
    CHECK(round_to_fp16(65504.0f) == 65504.0f);                            // the largest half
    CHECK(std::isinf(round_to_fp16(65520.0f)) && round_to_fp16(65519.0f) == 65504.0f);
    CHECK(round_to_fp16(std::ldexp(1.0f, -24)) == std::ldexp(1.0f, -24));  // the smallest subnormal
    CHECK(round_to_fp16(std::ldexp(1.0f, -26)) == 0.0f);
    CHECK(round_to_fp16(std::ldexp(3.0f, -25)) == std::ldexp(1.0f, -23));  // 1.5 subnormal steps: a tie, to even 2
}
