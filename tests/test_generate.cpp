// CPU tests of generation's host-side logic: src/generate.h (generate_gpt2cu's flags, the prompt batch, the position
// rules of the KV-cache kernels checked against direct attention on a toy model) and src/sampler.h (the rules the
// GPU sampler follows and their CPU reference).
#include <algorithm>
#include <cmath>
#include "test.h"
#include "test_train_helpers.h"
#include "generate.h"
#include "sampler.h"

// float -> bf16 bits, round to nearest even (finite values)
static uint16_t to_bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static std::vector<uint16_t> bf16_row(const std::vector<float>& values) {
    std::vector<uint16_t> row;
    for (float v : values) row.push_back(to_bf16_bits(v));
    return row;
}

// ----------------------------------------------------------------------------
// flags

static std::string parse(std::vector<const char*> args, GenerateConfig* c) {
    generate_config_defaults(c);
    args.insert(args.begin(), "generate_gpt2cu");
    std::string err = generate_config_parse(c, (int)args.size(), const_cast<char**>(args.data()));
    return err.empty() ? generate_config_check(*c) : err;
}

TEST(generate_config_parses_flags) {
    GenerateConfig c;
    CHECK(parse({"-e", "m.bin"}, &c) == "");
    CHECK(c.new_tokens == 256 && c.top_k == 40 && c.temperature == 0.8f && c.kv_cache == 1 && c.cuda_graph == 1 && c.B == 0);
    CHECK(parse({"-e", "m.bin", "-p", "hi", "-n", "10", "-k", "5", "-T", "0.5", "-s", "3", "-b", "4", "-g", "1", "-kv", "0",
                 "-cg", "0", "-w", "0", "-cmp", "1", "-ct", "0.2", "-ids", "1", "-q", "1", "-tk", "r.tiktoken"}, &c) == "");
    CHECK(!strcmp(c.model, "m.bin") && !strcmp(c.prompt, "hi") && !strcmp(c.tiktoken, "r.tiktoken"));
    CHECK(c.new_tokens == 10 && c.top_k == 5 && c.temperature == 0.5f && c.seed == 3 && c.B == 4 && c.greedy == 1);
    CHECK(c.kv_cache == 0 && c.cuda_graph == 0 && c.warmup == 0 && c.check == 1 && c.check_tol == 0.2f);
    CHECK(c.print_ids == 1 && c.quiet == 1 && c.page_size == 0);
    CHECK(parse({"-e", "d12", "-pf", "prompts.txt", "-g", "1", "-T", "0"}, &c) == "");  // greedy ignores -T
    CHECK(parse({"-e", "m.bin", "-pg", "256"}, &c) == "" && c.page_size == 256);
    CHECK(c.pool_pages == 0 && c.stop_token == -2);   // the pool of the -b largest requests; <|endoftext|> ends one
    CHECK(parse({"-e", "m.bin", "-pg", "16", "-pp", "40", "-eos", "-1"}, &c) == "" && c.pool_pages == 40 && c.stop_token == -1);
    CHECK(parse({"-e", "m.bin", "-eos", "198"}, &c) == "" && c.stop_token == 198);
}

TEST(generate_config_rejects_bad_flags) {
    GenerateConfig c;
    std::vector<std::vector<const char*>> bad = {
        {}, {"-e"}, {"-e", "m.bin", "-z", "1"}, {"-e", "m.bin", "-n", "abc"}, {"-e", "m.bin", "-n", "0"},
        {"-e", "m.bin", "-k", "-1"}, {"-e", "m.bin", "-T", "0"}, {"-e", "m.bin", "-b", "-2"}, {"-e", "m.bin", "-kv", "2"},
        {"-e", "m.bin", "-p", "a", "-pf", "f"}, {"-e", "m.bin", "-ct", "0"}, {"e", "m.bin"}, {"-e", "m.bin", "-pg", "-1"},
        {"-e", "m.bin", "-pg", "16", "-kv", "0"}, {"-e", "m.bin", "-pp", "8"}, {"-e", "m.bin", "-pg", "16", "-pp", "-1"},
        {"-e", "m.bin", "-eos", "-3"}};
    for (auto& args : bad) {
        std::string err = parse(args, &c);
        if (err.empty()) fprintf(stderr, "  accepted: %zu args starting %s\n", args.size(), args.empty() ? "-" : args[0]);
        CHECK(!err.empty());
    }
    GPT2Config m;
    CHECK(parse_model_descriptor("d12", &m) == "");
    CHECK(generate_check_length(24, 1000, m) == "");
    CHECK(generate_check_length(24, 1001, m) != "");
}

// The serving loop's host side, driven as gpt2_generate drives it, one token per running request per step (the stop
// token drawn at random): every request ends after n tokens or at its stop token; the queue is served first come,
// first served; a running request holds the pages of its prompt + n positions, no page is held twice, a freed page
// is reused; an idle slot's row names the sink; the pool's default holds the S largest requests.
static void check_serving(const std::vector<int>& lengths, int slots, int n, int page_size, int pool_pages, uint32_t seed) {
    const int stop = 7;
    GenerateSchedule s;
    CHECK(generate_schedule_init(&s, lengths, slots, n, stop, page_size, pool_pages) == "");
    if (pool_pages == 0) {
        std::vector<int> need;
        for (int len : lengths) need.push_back((len + n + page_size - 1) / page_size);
        std::sort(need.begin(), need.end(), std::greater<int>());
        int sum = 0;
        for (int i = 0; i < slots && i < (int)need.size(); i++) sum += need[i];
        CHECK(s.pool_pages == sum);
    }
    std::vector<int> generated(lengths.size(), 0), admitted_order;
    bool reused = false;
    std::vector<bool> ever_used(s.pool_pages, false);
    uint32_t x = seed;
    auto admit_idle = [&]() {
        for (int b = 0; b < slots; b++)
            if (s.slot[b].request < 0 && schedule_admit(&s, b)) admitted_order.push_back(s.slot[b].request);
    };
    admit_idle();
    for (int step = 0; s.ended_requests < (int)lengths.size(); step++) {
        CHECK(step < 100000);
        if (step >= 100000) return;
        std::vector<int> owner(s.pool_pages + 1, -1);
        for (int b = 0; b < slots; b++) {
            const GenerateSlot& sl = s.slot[b];
            const int* row = &s.block_table[(size_t)b * s.pages_per_seq];
            if (sl.request < 0) {
                for (int i = 0; i < s.pages_per_seq; i++) CHECK(row[i] == s.sink_page);
                continue;
            }
            CHECK((int)sl.pages.size() == (lengths[sl.request] + n + page_size - 1) / page_size);
            for (int i = 0; i < (int)sl.pages.size(); i++) {
                CHECK(row[i] == sl.pages[i] && row[i] >= 0 && row[i] < s.pool_pages && owner[row[i]] == -1);
                owner[row[i]] = b;
                if (ever_used[row[i]] && step > 0 && sl.generated == 0) reused = true;
            }
        }
        for (int b = 0; b < slots; b++) {
            if (s.slot[b].request < 0) continue;
            x ^= x << 13, x ^= x >> 17, x ^= x << 5;
            const int r = s.slot[b].request, token = x % 16 == 0 ? stop : 100 + (int)(x % 50);
            generated[r]++;
            const bool ended = schedule_token(&s, b, token);
            CHECK(ended == (token == stop || generated[r] == n));
        }
        for (int b = 0; b < slots; b++) {
            if (s.slot[b].request < 0) continue;
            for (int page : s.slot[b].pages) ever_used[page] = true;
            if (s.slot[b].ended) schedule_release(&s, b);
        }
        admit_idle();
    }
    for (size_t r = 0; r < lengths.size(); r++) CHECK(generated[r] >= 1 && generated[r] <= n);
    for (size_t i = 0; i < admitted_order.size(); i++) CHECK(admitted_order[i] == (int)i);
    CHECK((int)admitted_order.size() == (int)lengths.size());
    CHECK(s.pages_in_use == 0 && (int)s.free_pages.size() == s.pool_pages && s.peak_pages_in_use <= s.pool_pages);
    if ((int)lengths.size() > slots) CHECK(reused);
}

TEST(serving_schedule_admits_releases_and_reuses_pages) {
    std::vector<int> lengths;
    uint32_t x = 12345;
    for (int r = 0; r < 40; r++) { x ^= x << 13, x ^= x >> 17, x ^= x << 5; lengths.push_back(1 + (int)(x % 90)); }
    check_serving(lengths, 8, 20, 16, 0, 1);      // a queue, the default pool
    check_serving(lengths, 8, 20, 16, 9, 2);      // a pool of one long request: admissions wait for pages
    check_serving(lengths, 40, 20, 16, 0, 3);     // every request at once
    check_serving(lengths, 3, 1, 1, 0, 4);        // one new token, pages of one position
    check_serving({5, 17, 1, 32}, 4, 20, 256, 0, 5);
    GenerateSchedule s;
    CHECK(generate_schedule_init(&s, {5, 17, 1, 32}, 2, 20, -1, 16, 3) != "");   // 52 positions need 4 pages of 16
    CHECK(generate_schedule_init(&s, {5, 17}, 2, 20, -1, 0, 0) == "" && s.pool_pages == 0 && s.block_table.empty());
    // all at once: as many requests as slots, and (paged) a pool that holds them all
    CHECK(schedule_all_at_once(s));
    CHECK(generate_schedule_init(&s, {5, 17, 1, 32}, 4, 20, -1, 16, 0) == "" && schedule_all_at_once(s));   // 2+3+2+4 pages
    CHECK(generate_schedule_init(&s, {5, 17, 1, 32}, 4, 20, -1, 16, 10) == "" && !schedule_all_at_once(s));
    CHECK(generate_schedule_init(&s, {5, 17, 1, 32}, 3, 20, -1, 0, 0) == "" && !schedule_all_at_once(s));
    // the pool's order is shuffled: a request's pages are not one run
    CHECK(generate_schedule_init(&s, {200}, 1, 56, -1, 16, 0) == "" && schedule_admit(&s, 0));
    int runs = 0;
    for (size_t i = 1; i < s.slot[0].pages.size(); i++) runs += s.slot[0].pages[i] == s.slot[0].pages[i - 1] + 1;
    CHECK(runs < 4);
}

// a step is needed while a running request has tokens to come: n from the opening prefill (step 0), then one a step;
// a request admitted later has its prefill's token and one more at its first step
TEST(serving_schedule_steps_follow_the_tokens) {
    GenerateSchedule s;
    CHECK(generate_schedule_init(&s, {3, 4}, 1, 5, -1, 0, 0) == "");
    CHECK(schedule_admit(&s, 0));
    CHECK(schedule_needs_step(s, 0, 1) && schedule_needs_step(s, 0, 4) && !schedule_needs_step(s, 0, 5));
    for (int i = 0; i < 4; i++) CHECK(!schedule_token(&s, 0, 1));
    CHECK(schedule_token(&s, 0, 1) && !schedule_needs_step(s, 0, 2));
    schedule_release(&s, 0);
    CHECK(schedule_admit(&s, 0) && s.slot[0].request == 1 && !schedule_admit(&s, 0));
    s.slot[0].first_step = 5, s.slot[0].first_pinned = true;
    CHECK(schedule_needs_step(s, 0, 5) && schedule_needs_step(s, 0, 8) && !schedule_needs_step(s, 0, 9));
}

// ----------------------------------------------------------------------------
// prompts

TEST(prompt_batch_pads_right_and_repeats_prompts) {
    PromptBatch batch;
    CHECK(prompt_batch({{1, 2, 3}, {4}, {5, 6}}, 0, 99, &batch) == "");
    CHECK(batch.B == 3 && batch.Tp == 3 && batch.slots == 3);
    CHECK((batch.tokens == std::vector<int>{1, 2, 3, 4, 99, 99, 5, 6, 99}));
    CHECK((batch.lengths == std::vector<int>{3, 1, 2}));
    CHECK(prompt_batch({{7, 8}, {9}}, 5, 0, &batch) == "");   // -b 5: the prompts repeat
    CHECK(batch.B == 5 && batch.Tp == 2 && batch.slots == 5);
    CHECK((batch.lengths == std::vector<int>{2, 1, 2, 1, 2}));
    CHECK((batch.tokens == std::vector<int>{7, 8, 9, 0, 7, 8, 9, 0, 7, 8}));
    CHECK(prompt_batch({{1}, {2}, {3}}, 2, 0, &batch) == "");  // fewer slots than prompts: a queue of 3 requests
    CHECK(batch.B == 3 && batch.slots == 2 && (batch.lengths == std::vector<int>{1, 1, 1}));
    CHECK(prompt_batch({{1}, {}}, 0, 0, &batch) != "");        // an empty prompt
    CHECK(prompt_batch({}, 0, 0, &batch) != "");
}

TEST(prompt_file_one_prompt_per_line) {
    std::string dir = test_tmpdir(), path = dir + "/prompts.txt";
    std::string text = "First prompt\r\n\nSecond, with spaces  \n\nthird";
    write_bytes(path, text.data(), text.size());
    std::vector<std::string> lines;
    CHECK(read_prompt_lines(path.c_str(), &lines) == "");
    CHECK((lines == std::vector<std::string>{"First prompt", "Second, with spaces  ", "third"}));
    write_bytes(path, "\n\n", 2);
    CHECK(read_prompt_lines(path.c_str(), &lines) != "");
    CHECK(read_prompt_lines((dir + "/missing.txt").c_str(), &lines) != "");
    test_rmdir(dir);
}

TEST(recompute_forward_length_rounds_up_to_64) {
    CHECK(recompute_run_T(1, 1024) == 64 && recompute_run_T(64, 1024) == 64 && recompute_run_T(65, 1024) == 128);
    CHECK(recompute_run_T(1000, 1024) == 1024 && recompute_run_T(90, 100) == 100);
}

// ----------------------------------------------------------------------------
// the KV cache's position rules on a toy one-head attention: q, k, v of a token depend on its id and position, so a
// wrong position, a padded key seen, or a slot read before it is written (NaN) changes the output

static const int kToyD = 4;
static void toy_qkv(int token, int pos, double* q, double* k, double* v) {
    for (int d = 0; d < kToyD; d++) {
        q[d] = sin(0.37 * token + 0.11 * pos + d);
        k[d] = cos(0.23 * token - 0.07 * pos + 2 * d);
        v[d] = sin(0.05 * token * (d + 1) + 0.3 * pos);
    }
}
// softmax(q . k_j) v_j over the keys given
static void toy_attend(const double* q, const std::vector<const double*>& ks, const std::vector<const double*>& vs, double* out) {
    double m = -1e300;
    std::vector<double> s(ks.size());
    for (size_t j = 0; j < ks.size(); j++) {
        s[j] = 0.0;
        for (int d = 0; d < kToyD; d++) s[j] += q[d] * ks[j][d];
        m = std::max(m, s[j]);
    }
    double sum = 0.0;
    for (int d = 0; d < kToyD; d++) out[d] = 0.0;
    for (size_t j = 0; j < ks.size(); j++) {
        double p = exp(s[j] - m);
        sum += p;
        for (int d = 0; d < kToyD; d++) out[d] += p * vs[j][d];
    }
    for (int d = 0; d < kToyD; d++) out[d] /= sum;
}
// the reference: the sequence alone, no cache, no padding: the output of its last position
static void toy_full(const std::vector<int>& seq, double* out) {
    int n = (int)seq.size();
    std::vector<double> q(n * kToyD), k(n * kToyD), v(n * kToyD);
    for (int i = 0; i < n; i++) toy_qkv(seq[i], i, &q[i * kToyD], &k[i * kToyD], &v[i * kToyD]);
    std::vector<const double*> ks, vs;
    for (int j = 0; j < n; j++) { ks.push_back(&k[j * kToyD]); vs.push_back(&v[j * kToyD]); }
    toy_attend(&q[(n - 1) * kToyD], ks, vs, out);
}

TEST(kv_cache_positions_match_full_attention) {
    const int pad = 50256, new_tokens = 6;
    PromptBatch batch;
    CHECK(prompt_batch({{11, 12, 13, 14, 15}, {21, 22}, {31}, {41, 42, 43}}, 0, pad, &batch) == "");
    const int B = batch.B, Tp = batch.Tp, Tmax = Tp + new_tokens;
    // caches start as NaN: a slot read before it is written poisons the output
    std::vector<double> k_cache((size_t)B * Tmax * kToyD, NAN), v_cache((size_t)B * Tmax * kToyD, NAN);
    std::vector<int> history((size_t)B * Tmax, -1), lengths = batch.lengths;
    double q[kToyD], out[kToyD], ref[kToyD];
    // prefill: every row t (padding included) at position t into slot t; the newest row of b is lengths[b] - 1
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < Tp; t++) {
            history[b * Tmax + t] = batch.tokens[b * Tp + t];
            toy_qkv(batch.tokens[b * Tp + t], t, q, &k_cache[(b * Tmax + t) * kToyD], &v_cache[(b * Tmax + t) * kToyD]);
        }
    }
    for (int b = 0; b < B; b++) {
        const int i = newest_position(lengths[b]);
        toy_qkv(history[b * Tmax + i], i, q, ref, ref);
        std::vector<const double*> ks, vs;
        for (int j = 0; j <= i; j++) { ks.push_back(&k_cache[(b * Tmax + j) * kToyD]); vs.push_back(&v_cache[(b * Tmax + j) * kToyD]); }
        toy_attend(q, ks, vs, out);  // causal self-attention of row i
        toy_full(std::vector<int>(history.begin() + b * Tmax, history.begin() + b * Tmax + lengths[b]), ref);
        for (int d = 0; d < kToyD; d++) CHECK(fabs(out[d] - ref[d]) < 1e-12);
    }
    // decode: append a token (as the sampler does), write its k, v to its slot, attend over the visible keys
    for (int step = 0; step < new_tokens - 1; step++) {
        for (int b = 0; b < B; b++) history[b * Tmax + lengths[b]++] = 100 + 10 * b + step;
        for (int b = 0; b < B; b++) {
            const int pos = newest_position(lengths[b]), slot = kv_cache_slot(lengths[b], 1, 0);
            CHECK(slot == pos);
            toy_qkv(history[b * Tmax + pos], pos, q, &k_cache[(b * Tmax + slot) * kToyD], &v_cache[(b * Tmax + slot) * kToyD]);
            std::vector<const double*> ks, vs;
            for (int j = 0; j < Tmax; j++) {
                if (!kv_key_visible(0, j, 1, lengths[b])) continue;
                ks.push_back(&k_cache[(b * Tmax + j) * kToyD]);
                vs.push_back(&v_cache[(b * Tmax + j) * kToyD]);
            }
            CHECK((int)ks.size() == lengths[b]);
            toy_attend(q, ks, vs, out);
            toy_full(std::vector<int>(history.begin() + b * Tmax, history.begin() + b * Tmax + lengths[b]), ref);
            for (int d = 0; d < kToyD; d++) CHECK(fabs(out[d] - ref[d]) < 1e-12);
        }
    }
    // the prefill rule with Tq rows: the newest Tq tokens' slots end at the newest position
    CHECK(kv_cache_slot(10, 3, 0) == 7 && kv_cache_slot(10, 3, 2) == newest_position(10));
    CHECK(kv_key_visible(2, 9, 3, 10) && !kv_key_visible(0, 8, 3, 10) && kv_key_visible(0, 7, 3, 10));
}

// ----------------------------------------------------------------------------
// sampler rules

TEST(sampler_order_key_sorts_like_values) {
    std::vector<uint16_t> finite;
    for (uint32_t bits = 0; bits < 65536; bits++) {
        float f = bf16_bits_to_float((uint16_t)bits);
        if (!std::isnan(f)) finite.push_back((uint16_t)bits);
    }
    std::sort(finite.begin(), finite.end(), [](uint16_t a, uint16_t b) { return bf16_order_key(a) < bf16_order_key(b); });
    for (size_t i = 1; i < finite.size(); i++) CHECK(bf16_bits_to_float(finite[i - 1]) <= bf16_bits_to_float(finite[i]));
    CHECK(bf16_order_key(to_bf16_bits(-1.0f)) < bf16_order_key(to_bf16_bits(0.0f)));
    CHECK(bf16_order_key(to_bf16_bits(1.0f)) < bf16_order_key(to_bf16_bits(1.0078125f)));
}

TEST(sampler_greedy_picks_the_lowest_id_among_equal_maxima) {
    std::vector<uint16_t> row = bf16_row({1.0f, 3.0f, -2.0f, 3.0f, 2.0f});
    CHECK(sampler_argmax(row.data(), 5) == 1);
    SamplerSettings s = {1, 0, 1.0f, 0};
    CHECK(sampler_reference_pick(row.data(), 5, s, 0.99f) == 1);
    CHECK(sampler_pick_consistent(row.data(), 5, s, 0.5f, 1) && !sampler_pick_consistent(row.data(), 5, s, 0.5f, 3));
}

TEST(sampler_topk_keeps_the_k_largest_and_their_ties) {
    std::vector<uint16_t> row = bf16_row({5.0f, 1.0f, 4.0f, 4.0f, 3.0f, -2.0f});
    const int V = 6;
    CHECK(sampler_topk_threshold_key(row.data(), V, 1) == bf16_order_key(row[0]));
    CHECK(sampler_topk_threshold_key(row.data(), V, 2) == bf16_order_key(row[2]));  // 5, 4, 4 kept: the tie stays
    CHECK(sampler_topk_threshold_key(row.data(), V, 3) == bf16_order_key(row[2]));
    CHECK(sampler_topk_threshold_key(row.data(), V, 4) == bf16_order_key(row[4]));
    CHECK(sampler_topk_threshold_key(row.data(), V, 0) == 0 && sampler_topk_threshold_key(row.data(), V, 6) == 0);
    SamplerSettings s = {0, 2, 1.0f, 0};
    std::vector<double> cdf = sampler_reference_cdf(row.data(), V, s);
    double p5 = 1.0 / (1.0 + 2.0 * exp(-1.0));
    CHECK(fabs(cdf[0] - p5) < 1e-12 && cdf[1] == cdf[0] && fabs(cdf[3] - 1.0) < 1e-12 && cdf[5] == cdf[3]);
    for (float coin : {0.0f, 0.3f, 0.6f, 0.9f, 0.999f}) {
        int pick = sampler_reference_pick(row.data(), V, s, coin);
        CHECK(pick == 0 || pick == 2 || pick == 3);
        CHECK(sampler_pick_consistent(row.data(), V, s, coin, pick));
        CHECK(!sampler_pick_consistent(row.data(), V, s, coin, 4));  // not among the top 2 (+ ties)
    }
}

TEST(sampler_frequencies_follow_softmax_over_topk) {
    const int V = 20, top_k = 5, N = 100000;
    const float temperature = 0.7f;
    std::vector<float> values;
    for (int i = 0; i < V; i++) values.push_back(2.0f * sinf(1.7f * i));
    std::vector<uint16_t> row = bf16_row(values);
    // independent expectation: softmax(l / T) over the 5 largest
    std::vector<int> order(V);
    for (int i = 0; i < V; i++) order[i] = i;
    std::sort(order.begin(), order.end(), [&](int a, int b) { return bf16_bits_to_float(row[a]) > bf16_bits_to_float(row[b]); });
    std::vector<double> expected(V, 0.0);
    double sum = 0.0;
    for (int r = 0; r < top_k; r++) sum += expected[order[r]] = exp(bf16_bits_to_float(row[order[r]]) / temperature);
    for (double& e : expected) e /= sum;
    SamplerSettings s = {0, top_k, temperature, 0};
    std::vector<int> count(V, 0);
    for (int i = 0; i < N; i++) count[sampler_reference_pick(row.data(), V, s, (i + 0.5f) / N)]++;  // coins on a grid
    for (int i = 0; i < V; i++) CHECK(fabs((double)count[i] / N - expected[i]) <= 2.0 / N);
    // top-k 1 is greedy
    SamplerSettings s1 = {0, 1, temperature, 0};
    for (float coin : {0.1f, 0.5f, 0.9f}) CHECK(sampler_reference_pick(row.data(), V, s1, coin) == sampler_argmax(row.data(), V));
}

TEST(sampler_coin_is_deterministic_and_uniform) {
    CHECK(sampler_coin(42, 3, 17) == sampler_coin(42, 3, 17));
    CHECK(sampler_coin(42, 3, 17) != sampler_coin(42, 4, 17) && sampler_coin(42, 3, 17) != sampler_coin(42, 3, 18));
    CHECK(sampler_coin(42, 3, 17) != sampler_coin(43, 3, 17));
    const int N = 1 << 16;
    double mean = 0.0;
    int below_tenth = 0;
    for (int i = 0; i < N; i++) {
        float c = sampler_coin(7, i % 64, i / 64);
        CHECK(c >= 0.0f && c < 1.0f);
        mean += c;
        below_tenth += c < 0.1f;
    }
    mean /= N;
    CHECK(fabs(mean - 0.5) < 0.01 && fabs((double)below_tenth / N - 0.1) < 0.01);
}
