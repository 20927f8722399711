// CPU tests of src/memory_plan.h: the activation table against a closed form worked out by hand, the plan's
// sums, and the largest B that fits (monotone in the budget, exact at the boundary), and the messages.
#include <algorithm>
#include <cstring>
#include <string>
#include "test.h"
#include "memory_plan.h"

// A stand-in for train_gpt2.cu's gpt2_scratch_bytes with the same shape: a part linear in B (the attention's
// per-row statistics, rows padded to 128) and a part that stops growing (the column reductions' partial sums).
static size_t fake_scratch_bytes(const GPT2Config& c, int B, int T) {
    size_t rows = (size_t)B * c.num_heads * ((T + 127) / 128 * 128);
    size_t partial_rows = std::min((size_t)B * T, (size_t)4096);
    return 2 * rows * sizeof(float) + partial_rows * 4 * c.channels * sizeof(float);
}

// Bytes per token of the activation table, summed by hand from train_gpt2.cu's tensors (L layers, C, NH, Vp):
//   per layer: ln1 2C, qkv 6C, atty 2C, residual2 2C, ln2 2C, fch 8C, residual3 2C (24C bf16 bytes),
//              ln1/ln2 mean and rstd 16, lse 4 NH
//   once:      encoded 2C, fch_gelu 8C, lnf 2C, dresidual 2C, dbtc 2C, dbt4c 8C (24C),
//              lnf mean and rstd 8, losses 4, logits 2 Vp
// -r 0 keeps L GELU outputs instead of one, -r 2 one ln1 and one ln2 instead of L each.
static size_t bytes_per_token(const GPT2Config& c, int recompute) {
    size_t L = c.num_layers, C = c.channels, NH = c.num_heads, Vp = c.padded_vocab_size;
    size_t b = L * (24 * C + 16 + 4 * NH) + 24 * C + 12 + 2 * Vp;
    if (recompute == 0) b += (L - 1) * 8 * C;
    if (recompute == 2) b -= (L - 1) * 4 * C;
    return b;
}

TEST(memory_activation_table_matches_the_hand_sum) {
    GPT2Config c;
    CHECK(parse_model_descriptor("d12", &c) == "");
    // d12, -r 1: 12 * (24*768 + 16 + 48) + 24*768 + 12 + 2*50304 = 341004 bytes a token
    CHECK(bytes_per_token(c, 1) == 341004);
    CHECK(activation_bytes(c, 1, 1024, 1) == 341004ull * 1024);
    for (const char* d : {"d12", "d24", "d36", "d48"}) {
        CHECK(parse_model_descriptor(d, &c) == "");
        for (int r = 0; r <= 2; r++)
            for (int B : {1, 3, 64})
                for (int T : {64, 1024}) CHECK(activation_bytes(c, B, T, r) == bytes_per_token(c, r) * B * T);
    }
    TensorSize sizes[NUM_ACTIVATION_TENSORS];
    CHECK(parse_model_descriptor("d24", &c) == "");
    fill_in_activation_sizes(sizes, c, 2, 1024, 1);
    CHECK(sizes[ACT_LSE].count == 24ull * 2 * 16 * 1024 && sizes[ACT_LSE].elem_bytes == 4);   // (L, B, NH, T) fp32
    CHECK(sizes[ACT_OUTPUT].count == 2ull * 1024 * 50304 && sizes[ACT_OUTPUT].elem_bytes == 2);
    CHECK(sizes[ACT_FCH_GELU].count == 2ull * 1024 * 4 * 1024);                                // one copy with -r 1
    CHECK(!strcmp(ACTIVATION_NAMES[ACT_DBT4C], "dbt4c"));
}

TEST(memory_plan_sums) {
    GPT2Config c;
    CHECK(parse_model_descriptor("d24", &c) == "");
    // d24: wte 50304*1024 + wpe 1024*1024 + 24 * (12*1024^2 + 13*1024) + lnf 2*1024
    const size_t n = 354871296;
    CHECK(count_parameters(c) == n);
    MemoryPlan p = memory_plan(c, 8, 1024, 1, 1, fake_scratch_bytes);
    CHECK(p.param_bytes == 2 * n && p.grad_bytes == 2 * n && p.adamw_bytes == 8 * n && p.master_bytes == 4 * n);
    CHECK(p.fixed_bytes() == 16 * n);
    CHECK(p.per_sequence_bytes == bytes_per_token(c, 1) * 1024);
    CHECK(p.activation_bytes == 8 * p.per_sequence_bytes);
    CHECK(p.scratch_bytes == fake_scratch_bytes(c, 8, 1024));
    CHECK(p.input_bytes == (6ull * 8192 + 1) * 4 + 8);   // inputs, targets, document starts, buckets (3N + 1) as ints; loss and norm
    CHECK(p.total_bytes() == 16 * n + p.activation_bytes + p.scratch_bytes + p.input_bytes);
    CHECK(memory_plan(c, 8, 1024, 1, 0, fake_scratch_bytes).total_bytes() == p.total_bytes() - 4 * n);   // -w 0
    const MemoryPlan z = memory_plan(c, 8, 1024, 1, 1, fake_scratch_bytes, 4);   // ZeRO-1 over 4 ranks: a quarter of the optimizer state
    CHECK(z.adamw_bytes == 8 * (n / 4) && z.master_bytes == 4 * (n / 4) && z.fixed_bytes() == 4 * n + 12 * (n / 4));
    CHECK(parse_model_descriptor("d12", &c) == "");
    CHECK(memory_plan(c, 1, 1024, 1, 1, fake_scratch_bytes).fixed_bytes() == 16ull * 124475904);
}

TEST(memory_largest_B_is_exact_at_the_boundary) {
    GPT2Config c;
    for (const char* d : {"d12", "d48"}) {
        CHECK(parse_model_descriptor(d, &c) == "");
        auto total = [&](int B) { return memory_plan(c, B, 1024, 1, 1, fake_scratch_bytes).total_bytes(); };
        for (int B : {1, 2, 3, 7, 64, 100, 1000}) {
            CHECK(memory_plan_largest_B(c, 1024, 1, 1, fake_scratch_bytes, total(B)) == B);
            CHECK(memory_plan_largest_B(c, 1024, 1, 1, fake_scratch_bytes, total(B) - 1) == B - 1);
            CHECK(memory_plan_largest_B(c, 1024, 1, 1, fake_scratch_bytes, total(B + 1) - 1) == B);
        }
        CHECK(memory_plan_largest_B(c, 1024, 1, 1, fake_scratch_bytes, 0) == 0);
    }
    // a budget past every int B: the search stops where B * T would leave an int
    CHECK(parse_model_descriptor("d12", &c) == "");
    CHECK(memory_plan_largest_B(c, 1024, 1, 1, fake_scratch_bytes, (size_t)-1) == 2147483647 / 1024);
}

TEST(memory_largest_B_is_monotone) {
    GPT2Config c;
    CHECK(parse_model_descriptor("d24", &c) == "");
    const size_t gib = (size_t)1 << 30;
    int prev = 0;
    for (size_t budget = 0; budget <= 80 * gib; budget += gib / 4) {
        int B = memory_plan_largest_B(c, 1024, 1, 1, fake_scratch_bytes, budget);
        CHECK(B >= prev);
        CHECK(B == 0 || memory_plan(c, B, 1024, 1, 1, fake_scratch_bytes).total_bytes() <= budget);
        CHECK(memory_plan(c, B + 1, 1024, 1, 1, fake_scratch_bytes).total_bytes() > budget);
        prev = B;
    }
    CHECK(prev > 0);
    // more recompute keeps less, so at least as many sequences fit
    for (int r = 0; r < 2; r++)
        CHECK(memory_plan_largest_B(c, 1024, r, 1, fake_scratch_bytes, 40 * gib) <=
              memory_plan_largest_B(c, 1024, r + 1, 1, fake_scratch_bytes, 40 * gib));
}

TEST(memory_plan_messages) {
    GPT2Config c;
    CHECK(parse_model_descriptor("d48", &c) == "");
    const size_t gib = (size_t)1 << 30, free_bytes = 40 * gib;
    size_t budget = memory_budget(free_bytes);
    CHECK(budget == free_bytes - kMemoryReserveBytes && memory_budget(kMemoryReserveBytes / 2) == 0);
    int largest = memory_plan_largest_B(c, 1024, 1, 1, fake_scratch_bytes, budget);
    int largest_r2 = memory_plan_largest_B(c, 1024, 2, 1, fake_scratch_bytes, budget);
    CHECK(largest > 0 && largest_r2 > largest);
    MemoryPlan too_big = memory_plan(c, largest + 1, 1024, 1, 1, fake_scratch_bytes);
    std::string err = memory_plan_check(too_big, free_bytes, largest, largest_r2);
    printf("  message: %s\n", err.c_str());
    CHECK(err.find(strfmt("-b %d does not fit", largest + 1)) != std::string::npos);
    CHECK(err.find(strfmt("the largest B that fits is %d", largest)) != std::string::npos);
    CHECK(err.find(strfmt("with -r 2 it is %d", largest_r2)) != std::string::npos);
    CHECK(memory_plan_check(memory_plan(c, largest, 1024, 1, 1, fake_scratch_bytes), free_bytes, largest, largest_r2) == "");
    CHECK(memory_plan_check(memory_plan(c, 1, 1024, 1, 1, fake_scratch_bytes), gib, 0, -1).find("not even -b 1") != std::string::npos);
    std::string report = memory_plan_report(too_big, c, free_bytes, largest);
    CHECK(report.find(strfmt("largest B that fits: %d\n", largest)) != std::string::npos);
    CHECK(report.find("a sequence") != std::string::npos && report.find("L=48 C=1600 NH=25") != std::string::npos);
}
