/*
Token shard loader, CUDA-free. Reads llm.c token shards (header of 256 int32: magic 20240520,
version 1, ntok; then ntok uint16 GPT-2 ids) matched by a glob pattern, in sorted order.

A batch is B*T+1 consecutive tokens: inputs are the first B*T, targets the same shifted by one.
With P processes, sample i of a shard for rank r starts at token (i*P + r)*B*T, so the processes
read disjoint slices of every shard (llm.c's layout). Optional shuffling permutes the shard order
once per epoch and the samples inside each shard; the permutations are derived from
(seed, epoch, shard), so a position (epoch, shard, sample) is all that exact resume needs.

Every shard is validated at init (magic, version, size = header + 2*ntok, enough tokens for one
sample per process); every batch checks its token ids against the vocab. Errors are returned
as strings; the caller exits.
*/
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#include <glob.h>
#include "utils.h"
#include "rand.h"

#define DATA_HEADER_INTS 256
#define DATA_MAGIC 20240520
#define DATA_VERSION 1

typedef struct {
    // layout
    int process_rank, num_processes;
    size_t B, T;
    int vocab_size;
    // shards
    std::vector<std::string> files;
    std::vector<size_t> file_ntok;
    // position
    int epoch;
    size_t current_shard_idx;      // index into shard_order
    size_t current_sample_idx;     // index into sample_order
    // shuffling
    int should_shuffle;
    uint32_t seed;
    std::vector<int> shard_order;  // (num shards) which file is read n-th this epoch
    std::vector<int> sample_order; // (samples in the current shard)
    // the current shard
    FILE* tokens_file;
    size_t shard_num_samples;
    // one batch
    uint16_t* buffer;              // (B*T+1)
    int* inputs;                   // (B, T)
    int* targets;                  // (B, T)
} DataLoader;

// Reads and checks one shard's header. Returns "" and sets *ntok, or an error naming the file.
inline std::string data_shard_check(const char* path, size_t min_tokens, size_t* ntok) {
    FILE* fp = fopen(path, "rb");
    if (fp == nullptr) return strfmt("token file '%s' could not be opened: %s", path, strerror(errno));
    int header[DATA_HEADER_INTS];
    size_t got = fread(header, sizeof(int), DATA_HEADER_INTS, fp);
    fseek(fp, 0, SEEK_END);
    long long size = ftell(fp);
    fclose(fp);
    if (got != DATA_HEADER_INTS) return strfmt("token file '%s' is truncated: %lld bytes, shorter than its 1024-byte header", path, size);
    if (header[0] != DATA_MAGIC)
        return strfmt("token file '%s' has bad magic %d (expected %d, an llm.c GPT-2 token shard)", path, header[0], DATA_MAGIC);
    if (header[1] != DATA_VERSION)
        return strfmt("token file '%s' has version %d (expected %d: uint16 GPT-2 tokens)", path, header[1], DATA_VERSION);
    if (header[2] < 0) return strfmt("token file '%s' has a negative token count %d", path, header[2]);
    long long expected = (long long)DATA_HEADER_INTS * sizeof(int) + 2LL * header[2];
    if (size != expected)
        return strfmt("token file '%s' is %lld bytes but its header says %d tokens (%lld bytes): truncated or corrupt",
                      path, size, header[2], expected);
    if ((size_t)header[2] < min_tokens)
        return strfmt("token file '%s' has %d tokens, fewer than the %zu one batch needs (B*T*processes + 1)", path, header[2], min_tokens);
    *ntok = (size_t)header[2];
    return "";
}

inline void dataloader_prepare_epoch(DataLoader* loader) {
    int n = (int)loader->files.size();
    loader->shard_order.resize(n);
    if (loader->should_shuffle) {
        mt19937_state rng;
        mt19937_init(&rng, loader->seed + 7919u * (uint32_t)loader->epoch);
        mt19937_permutation(&rng, loader->shard_order.data(), n);
    } else {
        for (int i = 0; i < n; i++) loader->shard_order[i] = i;
    }
}

inline std::string dataloader_load_shard(DataLoader* loader) {
    if (loader->tokens_file) fclose(loader->tokens_file);
    int file_idx = loader->shard_order[loader->current_shard_idx];
    const char* path = loader->files[file_idx].c_str();
    loader->tokens_file = fopen(path, "rb");
    if (loader->tokens_file == nullptr) return strfmt("token file '%s' could not be opened: %s", path, strerror(errno));
    size_t ntok = loader->file_ntok[file_idx];
    // each sample needs B*T+1 tokens, the extra one for the last target
    loader->shard_num_samples = (ntok - 1) / (loader->num_processes * loader->B * loader->T);
    loader->sample_order.resize(loader->shard_num_samples);
    if (loader->should_shuffle) {
        mt19937_state rng;
        mt19937_init(&rng, loader->seed + 7919u * (uint32_t)loader->epoch + 104729u * (uint32_t)file_idx + 1u);
        mt19937_permutation(&rng, loader->sample_order.data(), (int)loader->shard_num_samples);
    } else {
        for (size_t i = 0; i < loader->shard_num_samples; i++) loader->sample_order[i] = (int)i;
    }
    return "";
}

inline std::string dataloader_init(DataLoader* loader, const char* pattern, size_t B, size_t T,
                                   int process_rank, int num_processes, int should_shuffle, int vocab_size, uint32_t seed) {
    loader->process_rank = process_rank;
    loader->num_processes = num_processes;
    loader->B = B;
    loader->T = T;
    loader->vocab_size = vocab_size;
    loader->should_shuffle = should_shuffle;
    loader->seed = seed;
    loader->tokens_file = nullptr;
    loader->buffer = nullptr;
    loader->inputs = nullptr;
    loader->targets = nullptr;
    loader->files.clear();
    loader->file_ntok.clear();

    glob_t glob_result;
    int glob_status = glob(pattern, 0, nullptr, &glob_result);
    if (glob_status != 0 || glob_result.gl_pathc == 0) {
        if (glob_status == 0) globfree(&glob_result);
        return strfmt("no token file matches '%s' (prepare the data first, e.g. python3 scripts/prepro_tinyshakespeare.py)", pattern);
    }
    for (size_t i = 0; i < glob_result.gl_pathc; i++) loader->files.push_back(glob_result.gl_pathv[i]);
    globfree(&glob_result);

    size_t min_tokens = (size_t)num_processes * B * T + 1;
    for (const std::string& f : loader->files) {
        size_t ntok = 0;
        std::string err = data_shard_check(f.c_str(), min_tokens, &ntok);
        if (!err.empty()) return err;
        loader->file_ntok.push_back(ntok);
    }
    loader->buffer = (uint16_t*)mallocCheck((B * T + 1) * sizeof(uint16_t));
    loader->inputs = (int*)mallocCheck(B * T * sizeof(int));
    loader->targets = (int*)mallocCheck(B * T * sizeof(int));
    loader->epoch = 0;
    loader->current_shard_idx = 0;
    loader->current_sample_idx = 0;
    dataloader_prepare_epoch(loader);
    return dataloader_load_shard(loader);
}

// Moves to (epoch, shard, sample): used by reset (0, 0, 0) and by resume.
inline std::string dataloader_seek(DataLoader* loader, int epoch, size_t shard_idx, size_t sample_idx) {
    if (shard_idx >= loader->files.size())
        return strfmt("data position: shard %zu but only %zu shards match the pattern", shard_idx, loader->files.size());
    loader->epoch = epoch;
    loader->current_shard_idx = shard_idx;
    dataloader_prepare_epoch(loader);
    std::string err = dataloader_load_shard(loader);
    if (!err.empty()) return err;
    if (sample_idx > loader->shard_num_samples)
        return strfmt("data position: sample %zu but the shard has %zu samples", sample_idx, loader->shard_num_samples);
    loader->current_sample_idx = sample_idx;
    return "";
}

inline std::string dataloader_reset(DataLoader* loader) { return dataloader_seek(loader, 0, 0, 0); }

inline std::string dataloader_advance_shard(DataLoader* loader) {
    loader->current_shard_idx++;
    if (loader->current_shard_idx >= loader->files.size()) {
        loader->current_shard_idx = 0;
        loader->epoch++;
        dataloader_prepare_epoch(loader);
    }
    loader->current_sample_idx = 0;
    return dataloader_load_shard(loader);
}

// Fills loader->inputs / loader->targets with the next batch.
inline std::string dataloader_next_batch(DataLoader* loader) {
    if (loader->current_sample_idx >= loader->shard_num_samples) {
        std::string err = dataloader_advance_shard(loader);
        if (!err.empty()) return err;
    }
    size_t B = loader->B, T = loader->T;
    size_t sample = (size_t)loader->sample_order[loader->current_sample_idx];
    size_t token_offset = (sample * loader->num_processes + loader->process_rank) * B * T;
    long long byte_offset = (long long)DATA_HEADER_INTS * sizeof(int) + (long long)token_offset * sizeof(uint16_t);
    const char* path = loader->files[loader->shard_order[loader->current_shard_idx]].c_str();
    if (fseeko(loader->tokens_file, byte_offset, SEEK_SET) != 0) return strfmt("token file '%s': seek failed", path);
    if (fread(loader->buffer, sizeof(uint16_t), B * T + 1, loader->tokens_file) != B * T + 1)
        return strfmt("token file '%s': short read at token %zu (file changed or truncated?)", path, token_offset);
    for (size_t i = 0; i < B * T + 1; i++) {
        if ((int)loader->buffer[i] >= loader->vocab_size)
            return strfmt("token file '%s': token id %d at position %zu is >= the vocab size %d",
                          path, (int)loader->buffer[i], token_offset + i, loader->vocab_size);
    }
    for (size_t i = 0; i < B * T; i++) {
        loader->inputs[i] = (int)loader->buffer[i];
        loader->targets[i] = (int)loader->buffer[i + 1];
    }
    loader->current_sample_idx++;
    return "";
}

// number of batches in one pass over all shards (for this process)
inline size_t dataloader_num_batches(const DataLoader* loader) {
    size_t n = 0;
    for (size_t ntok : loader->file_ntok) n += (ntok - 1) / (loader->num_processes * loader->B * loader->T);
    return n;
}

inline void dataloader_free(DataLoader* loader) {
    if (loader->tokens_file) fclose(loader->tokens_file);
    loader->tokens_file = nullptr;
    free(loader->buffer);
    free(loader->inputs);
    free(loader->targets);
    loader->buffer = nullptr;
    loader->inputs = loader->targets = nullptr;
}
