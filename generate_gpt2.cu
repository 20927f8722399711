/*
Text generation from a GPT-2 checkpoint with a KV cache. Includes train_gpt2.cu (TESTING), so it runs the training
code's model: gpt2_prefill / gpt2_decode_step / gpt2_generate and the KV-cache and sampler kernels they call
(src/kvcache.cuh, src/sampler.cuh).

  make generate_gpt2cu
  ./generate_gpt2cu -e model.bin -p "prompt" -n 256 -k 40 -T 0.8 -s 42        one prompt
  ./generate_gpt2cu -e model.bin -pf prompts.txt -g 1                         one prompt per line, greedy
  ./generate_gpt2cu -e model.bin -p "prompt" -b 64 -n 1000 -q 1               64 samples of one prompt, timings only
  ./generate_gpt2cu -e model.bin -pf prompts.txt -g 1 -n 64 -cmp 1            KV cache vs full recompute, checked
  ./generate_gpt2cu -e model.bin -pf prompts.txt -pg 256                      a paged KV cache: one pool of pages
  ./generate_gpt2cu -e model.bin -pf prompts.txt -b 16 -pg 256 -pp 64         16 slots serve the prompts from a queue

Every request ends at <|endoftext|> (-eos) or after -n new tokens. When the prompts fit in the -b slots they run
together: right-padded to the longest and prefilled at once, each sequence then decoding from its own length. With
more prompts than slots, the slots serve them as a queue (continuous batching): each request prefills alone into the
slot that frees first and the decode steps carry whatever runs. -pg N keeps the caches in one pool of N-position
pages: a request holds the pages of its own prompt + n positions while it runs (-pp caps the pool; requests wait for
pages), not B times the longest; its tokens are the contiguous cache's. -kv 0 recomputes the whole forward for every
new token, the baseline the KV cache is measured against. Prints the text of every request, then the prefill's and
the decode's time and tokens/s and one RESULT line.
*/
#define TESTING
#include "train_gpt2.cu"

// ----------------------------------------------------------------------------
// the full-recompute path

// Logits of each sequence's newest token by gpt2_forward over all B sequences up to the longest so far
// (recompute_run_T), into inf->logits. tokens (B, Tmax) and lengths (B) on the host; inf->lengths holds the same.
void gpt2_recompute_logits(GPT2* model, GPT2Inference* inf, const std::vector<int>& tokens, const std::vector<int>& lengths) {
    const GPT2Config& cfg = model->config;
    const int B = inf->B, Tmax = inf->Tmax, NH = cfg.num_heads, HS = cfg.channels / NH;
    int run_T = recompute_run_T(*std::max_element(lengths.begin(), lengths.end()), model->T);
    if (attention_unsupported_reason(B, run_T, NH, HS)) run_T = model->T;
    std::vector<int> inputs((size_t)B * run_T);
    for (int b = 0; b < B; b++)
        std::copy(tokens.begin() + (size_t)b * Tmax, tokens.begin() + (size_t)b * Tmax + run_T, inputs.begin() + (size_t)b * run_T);
    gpt2_forward(model, inputs.data(), nullptr, B, run_T);
    gather_newest_rows(inf->logits, model->acts.output, inf->lengths, B, run_T, cfg.padded_vocab_size, main_stream);
}

// the host's copy of the sequences, (B, Tmax) padded with pad, and their lengths
void host_sequences(const PromptBatch& batch, int Tmax, int pad, std::vector<int>* tokens, std::vector<int>* lengths) {
    tokens->assign((size_t)batch.B * Tmax, pad);
    for (int b = 0; b < batch.B; b++)
        std::copy(batch.tokens.begin() + (size_t)b * batch.Tp, batch.tokens.begin() + (size_t)(b + 1) * batch.Tp,
                  tokens->begin() + (size_t)b * Tmax);
    *lengths = batch.lengths;
}

// n new tokens a sequence by full recompute: every step is a whole forward and a host round trip (its input is the
// host's token matrix). The first step counts as the prefill. A sequence that has sampled the stop token is frozen
// (its row's -1 is skipped); the steps go on until every sequence has ended.
template <class OnToken>
GenerateTimes gpt2_generate_recompute(GPT2* model, GPT2Inference* inf, const PromptBatch& batch, int n, int pad,
                                      OnToken on_token) {
    std::vector<int> tokens, lengths;
    host_sequences(batch, inf->Tmax, pad, &tokens, &lengths);
    double t0 = now_seconds(), t1 = t0;
    GenerateTimes times = {};
    gpt2_inference_start(inf, tokens.data(), lengths.data(), n, 0);
    std::vector<bool> ended(batch.B, false);
    for (int i = 0; i < n && std::count(ended.begin(), ended.end(), false) > 0; i++) {
        gpt2_recompute_logits(model, inf, tokens, lengths);
        gpt2_sample_next(model, inf);
        gpt2_next_tokens_copy(inf, i);
        const int* next = gpt2_next_tokens_wait(inf, i);
        for (int b = 0; b < batch.B; b++) {
            if (next[b] < 0) continue;
            tokens[(size_t)b * inf->Tmax + lengths[b]++] = next[b];
            on_token(b, next[b]);
            times.tokens++;
            ended[b] = next[b] == inf->stop_token;
        }
        if (i == 0) t1 = now_seconds(), times.first_tokens = times.tokens;
        else times.steps++;
    }
    times.prefill_s = t1 - t0;
    times.decode_s = now_seconds() - t1;
    return times;
}

// ----------------------------------------------------------------------------
// -cmp 1: the KV cache against the full recompute

// Both paths step by step on the same tokens: each step the KV cache's logits (prefill, then decode) and the full
// recompute's, of the same sequences, are compared, and both paths are fed the recompute path's token, so their
// contexts never part and the free-running KV path's tokens equal the recompute path's up to the first step listed
// here as a token difference. Checks, every step and sequence:
//   max |logit difference| <= tol (bf16 activations through different matmul shapes and attention kernels)
//   greedy: the KV path's token equals the recompute path's; where it does not, the recompute path's own logits must
//     put the two within 2 tol of each other, listed as "near tie"
//   sampled: differing picks are listed (near tie: the coin within the cdf shift logits within tol can cause) but do
//     not fail the check: with the random-init test model's flat logits the top-k boundary and the coin move with
//     differences far inside the bound
//   the GPU sampler's pick on either path's logits agrees with the CPU reference (src/sampler.h) on the same logits
// Returns the process exit code: 0 if everything holds.
int gpt2_check_kv_cache(GPT2* model, const PromptBatch& batch, int n, const SamplerSettings& sampler, float tol, int pad,
                        int page_size) {
    const GPT2Config& cfg = model->config;
    const int B = batch.B, Tmax = batch.Tp + n, V = cfg.vocab_size, Vp = cfg.padded_vocab_size;
    GPT2Inference inf;
    GenerateSchedule schedule;   // every sequence at once, in lockstep: no stop token
    exit_on_error(generate_schedule_init(&schedule, batch.lengths, B, n, /*stop_token=*/-1, page_size, 0));
    for (int b = 0; b < B; b++) schedule_admit(&schedule, b);
    gpt2_inference_allocate(&inf, cfg, B, batch.Tp, Tmax, /*kv_cache=*/true, model->gelu_fusion, sampler, /*stop_token=*/-1,
                            /*use_graph=*/false, &schedule);
    int* kv_next;
    cuda_alloc(&kv_next, B);
    std::vector<int> tokens, lengths;
    host_sequences(batch, Tmax, pad, &tokens, &lengths);
    std::vector<uint16_t> kv_rows((size_t)B * Vp), full_rows((size_t)B * Vp);
    std::vector<int> kv_pick(B), full_pick(B);
    // sampled: logits within tol move every weight exp((l - max) / T) by a factor within exp(+-2 tol / T), so a cdf
    // value c by at most (exp(4 tol / T) - 1) c (1 - c) <= (exp(4 tol / T) - 1) / 4
    const double cdf_slack = sampler.greedy ? 0.0 : (exp(4.0 * tol / sampler.temperature) - 1.0) / 4.0;
    double worst = 0.0;
    int worst_step = 0, worst_b = 0, differences = 0, near_ties = 0, failures = 0, sampler_mismatches = 0;
    for (int i = 0; i < n; i++) {
        if (i == 0) gpt2_prefill(model, &inf, batch.tokens.data(), batch.lengths.data(), n, 0);
        else gpt2_decode(model, &inf);
        sample_tokens(kv_next, inf.history, inf.lengths, inf.limits, inf.coin_ids, inf.logits, B, V, Vp, Tmax, sampler,
                      /*stop_token=*/-1, /*advance=*/false, main_stream);
        cudaCheck(cudaMemcpyAsync(kv_rows.data(), inf.logits, kv_rows.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost, main_stream));
        cudaCheck(cudaMemcpyAsync(kv_pick.data(), kv_next, B * sizeof(int), cudaMemcpyDeviceToHost, main_stream));
        gpt2_recompute_logits(model, &inf, tokens, lengths);
        gpt2_sample_next(model, &inf);   // appends the recompute path's token: the KV path's next input too
        cudaCheck(cudaMemcpyAsync(full_rows.data(), inf.logits, full_rows.size() * sizeof(uint16_t), cudaMemcpyDeviceToHost, main_stream));
        cudaCheck(cudaMemcpyAsync(full_pick.data(), inf.next_tokens, B * sizeof(int), cudaMemcpyDeviceToHost, main_stream));
        cudaCheck(cudaStreamSynchronize(main_stream));
        for (int b = 0; b < B; b++) {
            const uint16_t* kv = &kv_rows[(size_t)b * Vp];
            const uint16_t* full = &full_rows[(size_t)b * Vp];
            for (int v = 0; v < V; v++) {
                double d = fabs((double)bf16_bits_to_float(kv[v]) - (double)bf16_bits_to_float(full[v]));
                if (d > worst) { worst = d; worst_step = i; worst_b = b; }
            }
            const float coin = sampler_coin(sampler.seed, b, lengths[b]);
            for (int path = 0; path < 2; path++) {
                const uint16_t* rows = path ? full : kv;
                int pick = path ? full_pick[b] : kv_pick[b];
                if (!sampler_pick_consistent(rows, V, sampler, coin, pick)) {
                    sampler_mismatches++;
                    printf("sampler mismatch: sequence %d new token %d, %s logits: GPU picked %d, the CPU reference %d\n", b, i,
                           path ? "recompute" : "KV-cache", pick, sampler_reference_pick(rows, V, sampler, coin));
                }
            }
            if (kv_pick[b] != full_pick[b]) {
                differences++;
                double gap = bf16_bits_to_float(full[full_pick[b]]) - bf16_bits_to_float(full[kv_pick[b]]);
                bool near = sampler.greedy ? gap <= 2.0 * tol
                                           : sampler_pick_consistent(full, V, sampler, coin, kv_pick[b], cdf_slack);
                near_ties += near;
                failures += !near;
                printf("%s: sequence %d new token %d: KV cache %d, recompute %d (recompute logits %.4f vs %.4f)\n",
                       near ? "near tie" : "token difference", b, i, kv_pick[b], full_pick[b],
                       bf16_bits_to_float(full[full_pick[b]]), bf16_bits_to_float(full[kv_pick[b]]));
            }
            tokens[(size_t)b * Tmax + lengths[b]++] = full_pick[b];
        }
    }
    bool logits_ok = worst <= tol;
    printf("check: %d sequences x %d new tokens (%s), KV cache vs full recompute on the same tokens\n", B, n,
           sampler.greedy ? "greedy" : strfmt("top-k %d, temperature %g", sampler.top_k, sampler.temperature).c_str());
    printf("  max |logit difference| %.4f (sequence %d, new token %d) <= %.4f: %s (%.0f%% of the bound)\n", worst, worst_b,
           worst_step, tol, logits_ok ? "ok" : "FAILED", 100.0 * worst / tol);
    printf("  tokens: %s, %d near ties, %d differences beyond the bound%s\n", differences == 0 ? "identical" : "differ", near_ties,
           failures, sampler.greedy ? "" : " (sampled: listed, not failed)");
    printf("  GPU sampler vs CPU reference: %d mismatches of %d picks\n", sampler_mismatches, 2 * B * n);
    bool ok = logits_ok && (failures == 0 || !sampler.greedy) && sampler_mismatches == 0;
    printf("check %s\n", ok ? "passed" : "FAILED");
    cudaCheck(cudaFree(kv_next));
    gpt2_inference_free(&inf);
    return ok ? 0 : 1;
}

// ----------------------------------------------------------------------------

int main(int argc, char** argv) {
    GenerateConfig cfg;
    generate_config_defaults(&cfg);
    for (int i = 1; i < argc; i++) if (!strcmp(argv[i], "--help")) { printf("%s", generate_usage()); return 0; }
    std::string err = generate_config_parse(&cfg, argc, argv);
    if (err.empty()) err = generate_config_check(cfg);
    if (!err.empty()) exit_on_error(err + " (./generate_gpt2cu --help lists the flags)");

    GPT2Config model_config;
    bool from_file = !is_model_descriptor(cfg.model);
    exit_on_error(from_file ? model_file_check(cfg.model, &model_config) : parse_model_descriptor(cfg.model, &model_config));
    Tokenizer tokenizer;
    std::string tok_err = cfg.tiktoken ? tokenizer_init_tiktoken(&tokenizer, cfg.tiktoken) : tokenizer_init(&tokenizer, "gpt2_tokenizer.bin");
    if (!tok_err.empty() && (cfg.prompt || cfg.prompt_file))
        exit_on_error(tok_err + " (the prompts need the tokenizer: gpt2_tokenizer.bin from scripts/prepro_tinyshakespeare.py, or -tk gpt2.tiktoken)");
    if (!tok_err.empty()) printf("warning: %s; the output is token ids\n", tok_err.c_str());

    // prompts -> token ids; an empty prompt (or none) is <|endoftext|>
    std::vector<std::string> texts;
    if (cfg.prompt_file) exit_on_error(read_prompt_lines(cfg.prompt_file, &texts));
    else texts.push_back(cfg.prompt ? cfg.prompt : "");
    std::vector<std::vector<int>> prompts(texts.size());
    for (size_t i = 0; i < texts.size(); i++) {
        if (!texts[i].empty()) exit_on_error(tokenizer_encode(&tokenizer, texts[i].data(), texts[i].size(), &prompts[i]));
        if (prompts[i].empty()) prompts[i].push_back(tokenizer.eot_token);
    }
    const int pad = tokenizer.eot_token;
    PromptBatch batch;
    exit_on_error(prompt_batch(prompts, cfg.B, pad, &batch));
    exit_on_error(generate_check_length(batch.Tp, cfg.new_tokens, model_config));
    const int B = batch.B, S = batch.slots, n = cfg.new_tokens, Tmax = batch.Tp + n;
    const int C = model_config.channels, NH = model_config.num_heads;
    if (S < B && (!cfg.kv_cache || cfg.check))
        exit_on_error(strfmt("-b %d serves %d prompts from a queue: that needs the KV cache, without -kv 0 and -cmp 1", S, B));
    if (const char* why = attention_unsupported_reason(S, batch.Tp, NH, C / NH))
        exit_on_error(strfmt("attention does not support B=%d T=%d NH=%d HS=%d: %s", S, batch.Tp, NH, C / NH, why));
    // -cmp runs every sequence in lockstep to n tokens: no stop token there
    const int stop_token = cfg.check ? -1 : cfg.stop_token == -2 ? tokenizer.eot_token : cfg.stop_token;

    common_start();
    const cudaDeviceProp& props = device_props();
    GPT2 model;
    if (from_file) gpt2_build_from_checkpoint(&model, cfg.model);
    else gpt2_build_from_random(&model, model_config, (uint32_t)cfg.seed);
    model.gelu_fusion = gelu_fusion_default(props.major);
    SamplerSettings sampler = {cfg.greedy, cfg.top_k, cfg.temperature, (uint64_t)(uint32_t)cfg.seed};
    int prompt_tokens = 0;
    for (int len : batch.lengths) prompt_tokens += len;
    printf("| device: %s | model: %s, %s\n", props.name, cfg.model, model_config_str(model_config).c_str());
    printf("| %d requests, prompts %d..%d tokens, up to %d new tokens each%s, %s, %s%s\n", B,
           *std::min_element(batch.lengths.begin(), batch.lengths.end()), batch.Tp, n,
           stop_token >= 0 ? strfmt(" (ending at token %d)", stop_token).c_str() : "",
           cfg.greedy ? "greedy" : strfmt("top-k %d, temperature %g, seed %d", cfg.top_k, cfg.temperature, cfg.seed).c_str(),
           cfg.kv_cache ? "KV cache" : "full recompute", cfg.kv_cache ? (cfg.cuda_graph ? " (decode step as a CUDA graph)" : " (eager)") : "");

    GPT2Inference inf;
    GenerateTimes times;
    GenerateSchedule schedule;
    auto new_schedule = [&](int new_tokens) {
        exit_on_error(generate_schedule_init(&schedule, batch.lengths, S, new_tokens, stop_token, cfg.page_size, cfg.pool_pages));
    };
    new_schedule(n);
    const bool serving = !schedule_all_at_once(schedule);
    printf("| %s\n", serving ? strfmt("%d slots serve the requests from a queue, each prefilling alone (continuous batching)", S).c_str()
                             : strfmt("all %d at once, prefilled together padded to %d", B, batch.Tp).c_str());
    if (cfg.check) {
        // the recompute path's activations hold all Tmax positions
        gpt2_allocate_state(&model, B, Tmax, /*recompute=*/1, model.gelu_fusion, /*use_master_weights=*/0);
        int rc = gpt2_check_kv_cache(&model, batch, n, sampler, cfg.check_tol, pad, cfg.page_size);
        tokenizer_free(&tokenizer);
        gpt2_free(&model);
        common_free();
        return rc;
    }

    // generation; one request prints as it goes, several at the end
    std::vector<std::vector<int>> generated(B);
    const bool stream_text = B == 1 && !cfg.quiet;
    auto on_token = [&](int r, int token) {
        generated[r].push_back(token);
        if (stream_text) {
            if (tokenizer.init_ok) safe_printf(tokenizer_decode(&tokenizer, token));
            else printf("%d ", token);
            fflush(stdout);
        }
    };
    auto no_token = [](int, int) {};
    auto print_prompt = [&](int b) {
        for (int t = 0; t < batch.lengths[b]; t++) {
            int tok = batch.tokens[(size_t)b * batch.Tp + t];
            if (tokenizer.init_ok) safe_printf(tokenizer_decode(&tokenizer, tok));
            else printf("%d ", tok);
        }
    };
    if (stream_text) { printf("---\n"); print_prompt(0); fflush(stdout); }
    if (cfg.kv_cache) {
        gpt2_inference_allocate(&inf, model_config, S, batch.Tp, Tmax, /*kv_cache=*/true, model.gelu_fusion, sampler, stop_token,
                                cfg.cuda_graph, &schedule);
        const double cache_mb = 2.0 * model_config.num_layers * inf.cache_positions * C * sizeof(floatX) / 1e6;
        if (cfg.page_size) printf("| paged KV cache: %d pages of %d positions and the sink, %.1f MB (contiguous: %.1f MB)\n",
                                  schedule.pool_pages, cfg.page_size, cache_mb, 2.0 * model_config.num_layers * S * Tmax * C * sizeof(floatX) / 1e6);
        if (cfg.warmup) {   // the same (still unused) schedule's pool and block table, three tokens a request
            schedule.new_tokens = std::min(n, 3);
            gpt2_generate(&model, &inf, &schedule, batch, no_token);
            new_schedule(n);
        }
        times = gpt2_generate(&model, &inf, &schedule, batch, on_token);
        if (cfg.page_size) printf("| pages in use at most: %d of %d\n", schedule.peak_pages_in_use, schedule.pool_pages);
    } else {
        gpt2_allocate_state(&model, B, Tmax, /*recompute=*/1, model.gelu_fusion, /*use_master_weights=*/0);
        gpt2_inference_allocate(&inf, model_config, B, batch.Tp, Tmax, /*kv_cache=*/false, model.gelu_fusion, sampler, stop_token, false);
        if (cfg.warmup) gpt2_generate_recompute(&model, &inf, batch, std::min(n, 1), pad, no_token);
        times = gpt2_generate_recompute(&model, &inf, batch, n, pad, on_token);
    }
    if (stream_text) printf("\n---\n");
    if (!cfg.quiet && !stream_text) {
        for (int b = 0; b < B; b++) {
            printf("--- sequence %d (%d prompt tokens)\n", b, batch.lengths[b]);
            print_prompt(b);
            for (int tok : generated[b]) {
                if (tokenizer.init_ok) safe_printf(tokenizer_decode(&tokenizer, tok));
                else printf("%d ", tok);
            }
            printf("\n");
        }
        printf("---\n");
    }
    if (cfg.print_ids) {
        for (int b = 0; b < B; b++) {
            printf("ids %d:", b);
            for (int tok : generated[b]) printf(" %d", tok);
            printf("\n");
        }
    }
    const double decode_tokens = times.tokens - times.first_tokens, total_s = times.prefill_s + times.decode_s;
    printf("prefill: %d prompt tokens of %s in %.2f ms, %.0f tok/s (first new tokens included)\n", prompt_tokens,
           serving ? strfmt("the first %d requests", S).c_str() : strfmt("B=%d x T=%d padded", B, batch.Tp).c_str(),
           1e3 * times.prefill_s, prompt_tokens / times.prefill_s);
    printf("decode: %d steps, %.0f tokens in %.2f ms, %.3f ms/step, %.0f tok/s%s\n", times.steps, decode_tokens,
           1e3 * times.decode_s, times.steps ? 1e3 * times.decode_s / times.steps : 0.0,
           times.steps ? decode_tokens / times.decode_s : 0.0, serving ? " (the later requests' prefills included)" : "");
    printf("all: %d requests, %d new tokens in %.2f ms, %.0f tok/s\n", B, times.tokens, 1e3 * total_s, times.tokens / total_s);
    printf("RESULT generate kv=%d graph=%d pg=%d B=%d prompt=%d new=%d prefill_ms=%.3f decode_ms=%.3f decode_tok_s=%.1f total_tok_s=%.1f "
           "slots=%d tokens=%d steps=%d\n",
           cfg.kv_cache, cfg.kv_cache && cfg.cuda_graph, cfg.page_size, B, batch.Tp, n, 1e3 * times.prefill_s, 1e3 * times.decode_s,
           times.steps ? decode_tokens / times.decode_s : 0.0, times.tokens / total_s, S, times.tokens, times.steps);

    gpt2_inference_free(&inf);
    tokenizer_free(&tokenizer);
    if (cfg.kv_cache) cudaCheck(cudaFree(model.params_memory));  // the KV path allocates no training state
    else gpt2_free(&model);
    common_free();
    return 0;
}
