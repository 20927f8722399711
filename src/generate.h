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
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
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

// ----------------------------------------------------------------------------
// serving: requests through slots

// generate_gpt2cu serves requests (one per prompt, each up to n new tokens) from S slots, the rows of every decode
// step. When every request fits in a slot (and in the pool) they all start together; otherwise (-b S below the number
// of prompts, or -pp below their pages) the first ones start and each slot takes the next request of the queue when
// its own ends, at the stop token or after n new tokens (continuous batching). A slot between requests idles: the
// decode step still computes its row (one key long), which changes nothing (src/sampler.cuh freezes a row at its
// limit).
// A paged cache (-pg) is one pool of pages: a request reserves the pages of its prompt + n positions at admission and
// returns them at its end, and waits in the queue (first come, first served) until the pool has them, so the pool
// holds what the running requests can reach, not S times the longest. Pages come off a free list shuffled once, as
// a long-running server's pool is, so a sequence's pages lie anywhere in it. An idle slot's row of the block table
// names the sink, one page past the pool that no request owns, so its writes land nowhere that matters.
struct GenerateSlot {
    int request = -1;          // -1: idle
    int generated = 0;         // new tokens the host has seen
    int first_step = 0;        // the step whose tokens begin the request (0: the opening prefill)
    bool first_pinned = false; // admitted during the run: its prefill's token arrives beside that step's
    bool ended = false;
    std::vector<int> pages;
};
struct GenerateSchedule {
    int slots = 0, new_tokens = 0, stop_token = -1;   // stop_token -1: none
    int page_size = 0, pages_per_seq = 0, pool_pages = 0, sink_page = 0;   // page_size 0: contiguous caches
    std::vector<int> lengths;       // each request's prompt length
    std::vector<int> free_pages;    // a stack
    std::vector<int> block_table;   // (slots, pages_per_seq)
    std::vector<GenerateSlot> slot;
    int next_request = 0, ended_requests = 0, pages_in_use = 0, peak_pages_in_use = 0;
};

inline int schedule_pages_for(const GenerateSchedule& s, int request) {
    return (s.lengths[request] + s.new_tokens + s.page_size - 1) / s.page_size;
}

// prompt_lengths: one per request; pool_pages 0: the pages of the S largest requests (none waits for pages)
inline std::string generate_schedule_init(GenerateSchedule* s, const std::vector<int>& prompt_lengths, int slots,
                                          int new_tokens, int stop_token, int page_size, int pool_pages) {
    *s = GenerateSchedule();
    s->slots = slots, s->new_tokens = new_tokens, s->stop_token = stop_token, s->page_size = page_size;
    s->lengths = prompt_lengths;
    s->slot.assign(slots, GenerateSlot());
    if (page_size < 1) return "";
    std::vector<int> need(prompt_lengths.size());
    for (size_t r = 0; r < need.size(); r++) need[r] = schedule_pages_for(*s, (int)r);
    std::vector<int> largest = need;
    std::sort(largest.begin(), largest.end(), std::greater<int>());
    s->pages_per_seq = largest[0];
    if (pool_pages == 0)
        for (int i = 0; i < slots && i < (int)largest.size(); i++) pool_pages += largest[i];
    if (pool_pages < largest[0])
        return strfmt("-pp %d: the longest request needs %d pages of %d positions", pool_pages, largest[0], page_size);
    s->pool_pages = pool_pages, s->sink_page = pool_pages;
    s->free_pages.resize(pool_pages);
    for (int i = 0; i < pool_pages; i++) s->free_pages[i] = i;
    uint32_t x = 2463534242u;   // xorshift32: a fixed shuffle
    for (int i = pool_pages - 1; i > 0; i--) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        std::swap(s->free_pages[i], s->free_pages[x % (uint32_t)(i + 1)]);
    }
    s->block_table.assign((size_t)slots * s->pages_per_seq, s->sink_page);
    return "";
}

// whether every request runs from the start (and may prefill together): they fit in the slots, and in the pool
inline bool schedule_all_at_once(const GenerateSchedule& s) {
    if (s.lengths.size() > (size_t)s.slots) return false;
    int pages = 0;
    for (size_t r = 0; s.page_size && r < s.lengths.size(); r++) pages += schedule_pages_for(s, (int)r);
    return pages <= s.pool_pages;
}

// the queue's next request into idle slot b, if the pool has its pages; false leaves everything as it was
inline bool schedule_admit(GenerateSchedule* s, int b) {
    if (s->next_request >= (int)s->lengths.size() || s->slot[b].request >= 0) return false;
    GenerateSlot& sl = s->slot[b];
    if (s->page_size) {
        const int need = schedule_pages_for(*s, s->next_request);
        if (need > (int)s->free_pages.size()) return false;
        for (int i = 0; i < need; i++) {
            sl.pages.push_back(s->free_pages.back());
            s->free_pages.pop_back();
            s->block_table[(size_t)b * s->pages_per_seq + i] = sl.pages.back();
        }
        s->pages_in_use += need;
        s->peak_pages_in_use = std::max(s->peak_pages_in_use, s->pages_in_use);
    }
    sl.request = s->next_request++;
    sl.generated = 0, sl.first_step = 0, sl.first_pinned = false, sl.ended = false;
    return true;
}

// slot b's request has ended: its pages back to the pool, its row to the sink
inline void schedule_release(GenerateSchedule* s, int b) {
    GenerateSlot& sl = s->slot[b];
    for (int page : sl.pages) s->free_pages.push_back(page);
    s->pages_in_use -= (int)sl.pages.size();
    sl.pages.clear();
    if (s->page_size) {
        auto row = s->block_table.begin() + (size_t)b * s->pages_per_seq;
        std::fill(row, row + s->pages_per_seq, s->sink_page);
    }
    sl.request = -1;
}

// one new token of slot b's request; true when it ends the request (the stop token, or the n-th)
inline bool schedule_token(GenerateSchedule* s, int b, int token) {
    GenerateSlot& sl = s->slot[b];
    sl.generated++;
    sl.ended = token == s->stop_token || sl.generated == s->new_tokens;
    s->ended_requests += sl.ended;
    return sl.ended;
}

// whether slot b's request may still produce a token at step `step` (its n-th not yet reached by the step before)
inline bool schedule_needs_step(const GenerateSchedule& s, int b, int step) {
    const GenerateSlot& sl = s.slot[b];
    if (sl.request < 0 || sl.ended) return false;
    if (step <= sl.first_step) return true;
    return (step - sl.first_step) + (sl.first_pinned ? 1 : 0) < s.new_tokens;
}

// The full-recompute path runs the forward over every sequence up to the longest, rounded up to 64 positions (fewer
// distinct shapes), at most the allocated T.
inline int recompute_run_T(int longest, int T_alloc) {
    int run_T = (longest + 63) / 64 * 64;
    return run_T < T_alloc ? run_T : T_alloc;
}

// ----------------------------------------------------------------------------
// prompts

// B requests right-padded to the longest prompt: tokens (B, Tp) row-major, lengths (B); slots: how many run at once
struct PromptBatch {
    int B = 0, Tp = 0, slots = 0;
    std::vector<int> tokens;
    std::vector<int> lengths;
};

// Request b gets prompts[b % prompts.size()], padded with pad. slots (-b) 0: one request per prompt, all at once; at
// least the number of prompts: that many requests, the prompts repeating to fill them, all at once; fewer: one
// request per prompt, served by that many slots. Every prompt must be non-empty (generation from nothing starts at
// <|endoftext|>: the caller passes that token).
inline std::string prompt_batch(const std::vector<std::vector<int>>& prompts, int slots, int pad, PromptBatch* out) {
    if (prompts.empty()) return "no prompts";
    const int P = (int)prompts.size();
    const int B = std::max(slots, P);
    if (slots == 0 || slots > P) slots = B;
    int Tp = 0;
    for (int i = 0; i < P; i++) {
        if (prompts[i].empty()) return strfmt("prompt %d is empty", i);
        Tp = std::max(Tp, (int)prompts[i].size());
    }
    out->B = B;
    out->Tp = Tp;
    out->slots = slots;
    out->tokens.assign((size_t)B * Tp, pad);
    out->lengths.resize(B);
    for (int b = 0; b < B; b++) {
        const std::vector<int>& p = prompts[b % P];
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
    int B;                    // -b   slots: 0 one per prompt; more: the prompts repeat; fewer: a queue (prompt_batch)
    int greedy;               // -g   1: argmax
    int kv_cache;             // -kv  0: the whole forward again for every token (the baseline)
    int cuda_graph;           // -cg  1: a decode step replays as one CUDA graph
    int warmup;               // -w   1: one untimed prefill + two decode steps first
    int check;                // -cmp 1: KV cache and full recompute in lockstep, compared; exit 1 on a mismatch
    float check_tol;          // -ct  -cmp's bound on max |logit difference|
    int print_ids;            // -ids 1: print each sequence's new token ids
    int quiet;                // -q   1: no text, only the timing lines
    int page_size;            // -pg  0: contiguous caches (B, longest prompt + new tokens); N: one pool of N-position pages
    int pool_pages;           // -pp  the pool's pages; 0: the pages of the -b largest requests
    int stop_token;           // -eos a request ends at this token; -1: never early; -2 (default): <|endoftext|>
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
    c->pool_pages = 0;
    c->stop_token = -2;
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
        "  -b <int>     slots: sequences decoded at once. At least the number of prompts: that many sequences, the\n"
        "               prompts repeating to fill them; fewer: a queue of one request per prompt, each slot taking the\n"
        "               next when its request ends (continuous batching) (default = one slot per prompt)\n"
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
        "               (the pool holds each sequence's own length); 0: contiguous caches (default = 0)\n"
        "  -pp <int>    -pg's pool in pages; a request waits until the pool has its prompt + n positions\n"
        "               (default = 0: the pages of the -b largest requests)\n"
        "  -eos <int>   the token that ends a request before its n new tokens; -1: none (default: <|endoftext|>)\n";
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
        else if (!strcmp(f, "pp")) ok = parse_int_arg(v, &c->pool_pages);
        else if (!strcmp(f, "eos")) ok = parse_int_arg(v, &c->stop_token);
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
    if (c.pool_pages < 0 || (c.pool_pages > 0 && c.page_size == 0))
        return strfmt("-pp %d: a pool of pages needs -pg", c.pool_pages);
    if (c.stop_token < -2) return strfmt("-eos %d: a token id, or -1 for none", c.stop_token);
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
