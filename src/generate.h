/*
Generation's host-side logic, CUDA-free so the CPU tests check it (tests/test_generate.cpp): generate_gpt2cu's flags,
the prompt batch (right-padded, one length per sequence), the position rules the KV-cache kernels follow, and the
full-recompute path's forward length.

Positions. lengths[b] counts sequence b's tokens so far (prompt + generated). Prefill runs all sequences padded to the
longest prompt Tp and writes K, V of every row t to cache slot t, the padded ones included; the logits of sequence b
are those of row lengths[b] - 1. A decode step then feeds each sequence's newest token, at position lengths[b] - 1,
writes its K, V to that slot (overwriting padding, if any) and attends over keys 0..lengths[b]-1: a padded slot is
overwritten before any query can see it.
*/
#pragma once
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>
#include "config.h"
#include "utils.h"

#ifdef __CUDACC__
#define GENERATE_HD __host__ __device__
#else
#define GENERATE_HD
#endif

// ----------------------------------------------------------------------------
// position rules (src/kvcache.cuh's kernels and the attention's seqlens_k contract)

// the position (and cache slot) of a sequence's newest token
GENERATE_HD inline int newest_position(int length) { return length - 1; }
// the cache slot of row t of the Tq newest tokens (decode: Tq = 1, slot length - 1)
GENERATE_HD inline int kv_cache_slot(int length, int Tq, int t) { return length - Tq + t; }
// query i of the T new ones sees key j iff j <= i + seqlen_k - T (seqlen_k: the sequence's keys, the new ones included)
GENERATE_HD inline bool kv_key_visible(int i, int j, int T, int seqlen_k) { return j <= i + seqlen_k - T; }

// A paged KV cache (-pg): one pool of pages of page_size positions for every sequence, each sequence's positions in
// the pages its row of the block table (B, pages_per_seq) names. The pages are handed out in the order the sequences
// reach them (the prompts' at the prefill, then one more whenever a sequence's newest token starts a page), as an
// allocator serving the batch would, so a sequence's pages are scattered through the pool and the pool holds what the
// sequences use (each sequence its own length + new_tokens positions, rounded up to a page), not B times the longest.
struct PagedKVPlan {
    int page_size, pages_per_seq, pages;
    std::vector<int> block_table;   // (B, pages_per_seq); entries past a sequence's pages are 0 (never read)
};
inline PagedKVPlan paged_kv_plan(const std::vector<int>& lengths, int new_tokens, int page_size) {
    const int B = (int)lengths.size();
    PagedKVPlan plan{page_size, 0, 0, {}};
    if (page_size < 1) return plan;   // no pages: contiguous caches
    auto pages_for = [&](int positions) { return (positions + page_size - 1) / page_size; };
    for (int len : lengths) plan.pages_per_seq = std::max(plan.pages_per_seq, pages_for(len + new_tokens));
    plan.block_table.assign((size_t)B * plan.pages_per_seq, 0);
    std::vector<int> held(B, 0);
    auto grow = [&](int b, int positions) {   // sequence b now holds positions 0 .. positions - 1
        for (; held[b] < pages_for(positions); held[b]++) plan.block_table[(size_t)b * plan.pages_per_seq + held[b]] = plan.pages++;
    };
    for (int b = 0; b < B; b++) grow(b, lengths[b]);
    for (int step = 1; step <= new_tokens; step++)
        for (int b = 0; b < B; b++) grow(b, lengths[b] + step);
    return plan;
}

// The full-recompute path runs the forward over every sequence up to the longest, rounded up to 64 positions (fewer
// distinct shapes), at most the allocated T.
inline int recompute_run_T(int longest, int T_alloc) {
    int run_T = (longest + 63) / 64 * 64;
    return run_T < T_alloc ? run_T : T_alloc;
}

// ----------------------------------------------------------------------------
// prompts

// B sequences right-padded to the longest prompt: tokens (B, Tp) row-major, lengths (B)
struct PromptBatch {
    int B = 0, Tp = 0;
    std::vector<int> tokens;
    std::vector<int> lengths;
};

// Sequence b gets prompts[b % prompts.size()] (prompts repeat to fill B; B = 0: one sequence per prompt), padded with
// pad. Every prompt must be non-empty (generation from nothing starts at <|endoftext|>: the caller passes that token).
inline std::string prompt_batch(const std::vector<std::vector<int>>& prompts, int B, int pad, PromptBatch* out) {
    if (prompts.empty()) return "no prompts";
    if (B == 0) B = (int)prompts.size();
    if (B < (int)prompts.size())
        return strfmt("-b %d is smaller than the number of prompts (%zu): every prompt needs a sequence", B, prompts.size());
    int Tp = 0;
    for (size_t i = 0; i < prompts.size(); i++) {
        if (prompts[i].empty()) return strfmt("prompt %zu is empty", i);
        Tp = std::max(Tp, (int)prompts[i].size());
    }
    out->B = B;
    out->Tp = Tp;
    out->tokens.assign((size_t)B * Tp, pad);
    out->lengths.resize(B);
    for (int b = 0; b < B; b++) {
        const std::vector<int>& p = prompts[b % prompts.size()];
        std::copy(p.begin(), p.end(), out->tokens.begin() + (size_t)b * Tp);
        out->lengths[b] = (int)p.size();
    }
    return "";
}

// the lines of a prompt file, one prompt each; '\r' before the newline dropped, empty lines skipped
inline std::string read_prompt_lines(const char* path, std::vector<std::string>* lines) {
    FILE* fp = fopen(path, "rb");
    if (!fp) return strfmt("prompt file '%s' could not be opened", path);
    lines->clear();
    std::string line;
    int c;
    while ((c = fgetc(fp)) != EOF) {
        if (c != '\n') { line.push_back((char)c); continue; }
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (!line.empty()) lines->push_back(line);
        line.clear();
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) lines->push_back(line);
    fclose(fp);
    if (lines->empty()) return strfmt("prompt file '%s' has no prompt (one per line)", path);
    return "";
}

// ----------------------------------------------------------------------------
// generate_gpt2cu's flags

typedef struct {
    const char* model;        // -e   llm.c model file, or dN (random init from -s)
    const char* prompt;       // -p   prompt text (neither -p nor -pf: one sequence from <|endoftext|>)
    const char* prompt_file;  // -pf  one prompt per line
    const char* tiktoken;     // -tk  gpt2.tiktoken rank file; default: gpt2_tokenizer.bin
    int new_tokens;           // -n   new tokens per sequence
    int top_k;                // -k   0: the whole vocabulary
    float temperature;        // -T
    int seed;                 // -s   sampling coins (and the init of a dN model)
    int B;                    // -b   0: one sequence per prompt
    int greedy;               // -g   1: argmax
    int kv_cache;             // -kv  0: the whole forward again for every token (the baseline)
    int cuda_graph;           // -cg  1: a decode step replays as one CUDA graph
    int warmup;               // -w   1: one untimed prefill + two decode steps first
    int check;                // -cmp 1: KV cache and full recompute in lockstep, compared; exit 1 on a mismatch
    float check_tol;          // -ct  -cmp's bound on max |logit difference|
    int print_ids;            // -ids 1: print each sequence's new token ids
    int quiet;                // -q   1: no text, only the timing lines
    int page_size;            // -pg  0: contiguous caches (B, longest prompt + new tokens); N: one pool of N-position pages
} GenerateConfig;

inline void generate_config_defaults(GenerateConfig* c) {
    c->model = nullptr;
    c->prompt = nullptr;
    c->prompt_file = nullptr;
    c->tiktoken = nullptr;
    c->new_tokens = 256;
    c->top_k = 40;
    c->temperature = 0.8f;
    c->seed = 42;
    c->B = 0;
    c->greedy = 0;
    c->kv_cache = 1;
    c->cuda_graph = 1;
    c->warmup = 1;
    c->check = 0;
    c->check_tol = 0.1f;
    c->print_ids = 0;
    c->quiet = 0;
    c->page_size = 0;
}

inline const char* generate_usage() {
    return
        "Usage:   ./generate_gpt2cu -e model.bin [options]\n"
        "Options:\n"
        "  -e <string>  model: an llm.c model file (e.g. from train_gpt2cu -o), or dN for a random init (required)\n"
        "  -p <string>  prompt text (default: none; without -p and -pf one sequence starts from <|endoftext|>)\n"
        "  -pf <string> file with one prompt per line: a batch of prompts (right-padded, each decodes from its own length)\n"
        "  -tk <string> tokenizer from a tiktoken rank file such as gpt2.tiktoken (default: gpt2_tokenizer.bin)\n"
        "  -n <int>     new tokens per sequence (default = 256)\n"
        "  -k <int>     top-k, 0 = the whole vocabulary (default = 40)\n"
        "  -T <float>   temperature (default = 0.8)\n"
        "  -s <int>     seed of the sampling coins (and of a dN init) (default = 42)\n"
        "  -b <int>     batch size; prompts repeat to fill it (default = one sequence per prompt)\n"
        "  -g <int>     1: greedy (argmax) (default = 0)\n"
        "  -kv <int>    0: no KV cache, the whole forward again for every token (default = 1)\n"
        "  -cg <int>    0: launch a decode step's kernels one by one instead of one CUDA graph (default = 1)\n"
        "  -w <int>     0: no untimed warmup (prefill + two decode steps) before the timed run (default = 1)\n"
        "  -cmp <int>   1: run the KV cache and the full recompute in lockstep on the same tokens, compare their logits,\n"
        "               tokens and the GPU sampler against a CPU reference; exit 1 on a mismatch (default = 0)\n"
        "  -ct <float>  -cmp's bound on max |logit difference| (default = 0.1)\n"
        "  -ids <int>   1: print each sequence's new token ids (default = 0)\n"
        "  -q <int>     1: print no text, only the timing lines (default = 0)\n"
        "  -pg <int>    N: a paged KV cache, one pool of N-position pages that each sequence takes as it grows\n"
        "               (the pool holds each sequence's own length); 0: contiguous caches (default = 0)\n";
}

inline std::string generate_config_parse(GenerateConfig* c, int argc, char** argv) {
    for (int i = 1; i < argc; i += 2) {
        const char* flag = argv[i];
        if (flag[0] != '-' || strlen(flag) < 2 || strlen(flag) > 4) return strfmt("unknown argument '%s'", flag);
        if (i + 1 >= argc) return strfmt("flag %s needs a value", flag);
        const char* v = argv[i + 1];
        const char* f = flag + 1;
        bool ok = true;
        if (!strcmp(f, "e")) c->model = v;
        else if (!strcmp(f, "p")) c->prompt = v;
        else if (!strcmp(f, "pf")) c->prompt_file = v;
        else if (!strcmp(f, "tk")) c->tiktoken = v;
        else if (!strcmp(f, "n")) ok = parse_int_arg(v, &c->new_tokens);
        else if (!strcmp(f, "k")) ok = parse_int_arg(v, &c->top_k);
        else if (!strcmp(f, "T")) ok = parse_float_arg(v, &c->temperature);
        else if (!strcmp(f, "s")) ok = parse_int_arg(v, &c->seed);
        else if (!strcmp(f, "b")) ok = parse_int_arg(v, &c->B);
        else if (!strcmp(f, "g")) ok = parse_int_arg(v, &c->greedy);
        else if (!strcmp(f, "kv")) ok = parse_int_arg(v, &c->kv_cache);
        else if (!strcmp(f, "cg")) ok = parse_int_arg(v, &c->cuda_graph);
        else if (!strcmp(f, "w")) ok = parse_int_arg(v, &c->warmup);
        else if (!strcmp(f, "cmp")) ok = parse_int_arg(v, &c->check);
        else if (!strcmp(f, "ct")) ok = parse_float_arg(v, &c->check_tol);
        else if (!strcmp(f, "ids")) ok = parse_int_arg(v, &c->print_ids);
        else if (!strcmp(f, "q")) ok = parse_int_arg(v, &c->quiet);
        else if (!strcmp(f, "pg")) ok = parse_int_arg(v, &c->page_size);
        else return strfmt("unknown flag '%s'", flag);
        if (!ok) return strfmt("flag %s: '%s' is not a valid number", flag, v);
    }
    return "";
}

inline std::string generate_config_check(const GenerateConfig& c) {
    if (!c.model) return "-e <model> is required (an llm.c model file, or dN for a random init)";
    if (c.prompt && c.prompt_file) return "-p and -pf exclude each other";
    if (c.new_tokens < 1) return strfmt("-n %d: at least 1 new token", c.new_tokens);
    if (c.top_k < 0) return strfmt("-k %d must be >= 0 (0: the whole vocabulary)", c.top_k);
    if (!c.greedy && !(c.temperature > 0.0f)) return strfmt("-T %g must be > 0 (greedy: -g 1)", c.temperature);
    if (c.B < 0) return strfmt("-b %d must be >= 0", c.B);
    if (c.page_size < 0) return strfmt("-pg %d must be >= 0 (0: contiguous caches)", c.page_size);
    if (c.page_size > 0 && !c.kv_cache) return "-pg pages the KV cache: it needs -kv 1";
    for (int flag : {c.greedy, c.kv_cache, c.cuda_graph, c.warmup, c.check, c.print_ids, c.quiet})
        if (flag != 0 && flag != 1) return "-g, -kv, -cg, -w, -cmp, -ids and -q take 0 or 1";
    if (!(c.check_tol > 0.0f)) return strfmt("-ct %g must be > 0", c.check_tol);
    return "";
}

// the cache capacity: the longest prompt and every new token must fit the model's positions
inline std::string generate_check_length(int Tp, int new_tokens, const GPT2Config& m) {
    if (Tp + new_tokens > m.max_seq_len)
        return strfmt("the longest prompt (%d tokens) + -n %d = %d exceeds the model's %d positions", Tp, new_tokens,
                      Tp + new_tokens, m.max_seq_len);
    return "";
}
