/*
CPU tests of the forward reference and of the validation rule (dev/cuda/reference.h).
The reference is what every GPU kernel is finally judged by, so it is checked here against
formulas worked out independently, and the rule is checked to FAIL on wrong outputs.
*/
#include <cmath>
#include <random>
#include <vector>
#include "test.h"
#include "dev/cuda/reference.h"

static std::vector<float> random_qkv(int B, int T, int NH, int HS, float scale, unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<float> qkv((size_t)B * T * 3 * NH * HS);
    for (auto& x : qkv) x = round_to_bf16(dist(rng));
    return qkv;
}

// the direct formula: build the full T x T causal score matrix, softmax it, multiply by V
static void direct_forward(std::vector<double>& out, std::vector<double>& lse, const std::vector<float>& qkv, int B, int T, int NH, int HS) {
    out.assign((size_t)B * T * NH * HS, 0.0);
    lse.assign((size_t)B * NH * T, 0.0);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            std::vector<long double> S((size_t)T * T, -INFINITY);
            for (int i = 0; i < T; i++)
                for (int j = 0; j <= i; j++) {
                    long double dot = 0;
                    for (int d = 0; d < HS; d++) dot += (long double)qkv[qkv_index(b, i, 0, h, d, T, NH, HS)] * qkv[qkv_index(b, j, 1, h, d, T, NH, HS)];
                    S[(size_t)i * T + j] = dot / std::sqrt((long double)HS);
                }
            for (int i = 0; i < T; i++) {
                long double z = 0;   // no max subtraction: fine for the modest logits used here
                for (int j = 0; j <= i; j++) z += std::exp(S[(size_t)i * T + j]);
                lse[lse_index(b, h, i, T, NH)] = (double)std::log(z);
                for (int d = 0; d < HS; d++) {
                    long double acc = 0;
                    for (int j = 0; j <= i; j++) acc += std::exp(S[(size_t)i * T + j]) / z * qkv[qkv_index(b, j, 2, h, d, T, NH, HS)];
                    out[bthd_index(b, i, h, d, T, NH, HS)] = (double)acc;
                }
            }
        }
}

TEST(forward_reference_matches_direct_formula) {
    for (int HS : {64, 128}) {
        const int B = 2, T = 13, NH = 3;
        std::vector<float> qkv = random_qkv(B, T, NH, HS, 1.0f, 1234 + HS);
        std::vector<float> out((size_t)B * T * NH * HS), lse((size_t)B * NH * T);
        attention_forward_cpu(out.data(), lse.data(), qkv.data(), B, T, NH, HS);
        std::vector<double> out_d, lse_d;
        direct_forward(out_d, lse_d, qkv, B, T, NH, HS);
        for (size_t i = 0; i < out.size(); i++) CHECK(std::fabs(out[i] - out_d[i]) < 1e-5);
        for (size_t i = 0; i < lse.size(); i++) CHECK(std::fabs(lse[i] - lse_d[i]) < 1e-5);
    }
}

TEST(forward_reference_first_row_is_v0_and_lse_is_its_score) {
    // causal: row 0 sees only key 0, so out[0] = v[0] exactly and lse[0] = scale * q0.k0
    const int B = 1, T = 4, NH = 2, HS = 64;
    std::vector<float> qkv = random_qkv(B, T, NH, HS, 3.0f, 7);
    std::vector<float> out((size_t)B * T * NH * HS), lse((size_t)B * NH * T);
    attention_forward_cpu(out.data(), lse.data(), qkv.data(), B, T, NH, HS);
    for (int h = 0; h < NH; h++) {
        double dot = 0;
        for (int d = 0; d < HS; d++) {
            CHECK(out[bthd_index(0, 0, h, d, T, NH, HS)] == qkv[qkv_index(0, 0, 2, h, d, T, NH, HS)]);
            dot += (double)qkv[qkv_index(0, 0, 0, h, d, T, NH, HS)] * qkv[qkv_index(0, 0, 1, h, d, T, NH, HS)];
        }
        CHECK(std::fabs(lse[lse_index(0, h, 0, T, NH)] - dot / 8.0) < 1e-4);
    }
}

TEST(forward_reference_is_stable_for_huge_logits) {
    // inputs x 40: logits in the thousands would overflow exp() without the max subtraction
    const int B = 1, T = 33, NH = 1, HS = 64;
    std::vector<float> qkv = random_qkv(B, T, NH, HS, 40.0f, 99);
    std::vector<float> out((size_t)B * T * NH * HS), lse((size_t)B * NH * T);
    attention_forward_cpu(out.data(), lse.data(), qkv.data(), B, T, NH, HS);
    for (float x : out) CHECK(std::isfinite(x));
    for (float x : lse) CHECK(std::isfinite(x));
}

TEST(forward_reference_uniform_scores_average_v) {
    // q = 0 makes every score 0: out[t] is the mean of v[0..t] and lse[t] = log(t + 1)
    const int B = 1, T = 9, NH = 1, HS = 64;
    std::vector<float> qkv = random_qkv(B, T, NH, HS, 1.0f, 5);
    for (int t = 0; t < T; t++) for (int d = 0; d < HS; d++) qkv[qkv_index(0, t, 0, 0, d, T, NH, HS)] = 0.0f;
    std::vector<float> out((size_t)T * HS), lse(T);
    attention_forward_cpu(out.data(), lse.data(), qkv.data(), B, T, NH, HS);
    for (int t = 0; t < T; t++) {
        CHECK(std::fabs(lse[t] - std::log((double)t + 1)) < 1e-6);
        for (int d = 0; d < HS; d++) {
            double mean = 0;
            for (int j = 0; j <= t; j++) mean += qkv[qkv_index(0, j, 2, 0, d, T, NH, HS)];
            CHECK(std::fabs(out[bthd_index(0, t, 0, d, T, NH, HS)] - mean / (t + 1)) < 1e-6);
        }
    }
}

// the harness's rule must pass the reference itself, pass a bf16-rounded copy, and fail wrong outputs
TEST(validation_rule_catches_wrong_outputs) {
    const int B = 2, T = 40, NH = 2, HS = 64;
    std::vector<float> qkv = random_qkv(B, T, NH, HS, 1.0f, 11);
    size_t n = (size_t)B * T * NH * HS;
    std::vector<float> ref(n), lse(B * NH * T), naive(n), naive_lse(B * NH * T);
    attention_forward_cpu(ref.data(), lse.data(), qkv.data(), B, T, NH, HS);
    attention_forward_cpu(naive.data(), naive_lse.data(), qkv.data(), B, T, NH, HS, /*round_like_bf16=*/true);
    auto describe = [](size_t i, char* buf) { snprintf(buf, 128, "[%zu]", i); };
    CHECK(fa_rule_check("out", ref.data(), ref.data(), naive.data(), n, describe, false));
    std::vector<float> rounded(n);
    for (size_t i = 0; i < n; i++) rounded[i] = round_to_bf16(ref[i]);
    CHECK(fa_rule_check("out", rounded.data(), ref.data(), naive.data(), n, describe, false));

    std::vector<float> wrong = rounded;   // one element off by 5%
    wrong[n / 3] *= 1.05f;
    wrong[n / 3] += 0.05f;
    CHECK(!fa_rule_check("out", wrong.data(), ref.data(), naive.data(), n, describe, false));
    wrong = rounded;                      // one element never written (poison = NaN)
    wrong[n - 1] = NAN;
    CHECK(!fa_rule_check("out", wrong.data(), ref.data(), naive.data(), n, describe, false));
    std::vector<float> leaky = ref;       // a layout bug: one row holds its neighbour's output
    for (int d = 0; d < HS; d++) leaky[bthd_index(1, 5, 1, d, T, NH, HS)] = ref[bthd_index(1, 6, 1, d, T, NH, HS)];
    CHECK(!fa_rule_check("out", leaky.data(), ref.data(), naive.data(), n, describe, false));

    std::vector<float> lse_wrong = lse;   // LSE: exact passes, off by 1e-3 fails, NaN fails
    CHECK(lse_check(lse.data(), lse.data(), lse.size(), describe, false));
    lse_wrong[7] += 1e-3f * std::fmax(1.0f, std::fabs(lse[7]));
    CHECK(!lse_check(lse_wrong.data(), lse.data(), lse.size(), describe, false));
    lse_wrong = lse; lse_wrong[0] = NAN;
    CHECK(!lse_check(lse_wrong.data(), lse.data(), lse.size(), describe, false));
}
