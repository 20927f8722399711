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
