/*
Checkpoint files, CUDA-free: headers, validation, atomic writes. train_gpt2.cu moves the tensors
between GPU and host; everything about the files themselves lives here.

model_%08d.bin (llm.c format): int32 header[256] = magic 20240326, version 5 (all bf16; 3 = fp32,
  which this bf16-only build refuses), maxT, V, L, NH, C, Vp; then the 16 tensors in llm.c order.
state_%08d_%05d.bin (llm.c layout): int32 header[256] = magic 20240527, version 1, num_processes,
  rank, use_master_weights, shuffle, [10] step, uint64 at [20] sampling rng; size_t at [30] shard
  index and [32] sample index; ours adds [34] epoch and size_t [36] number of parameters (so a
  state of another model size is refused), [40] FP8 scale updates so far, [41] the -fp8 mode and
  size_t [42] the FP8 scaling state's bytes (0 without -fp8). Then fp32 m, fp32 v, fp32 master weights (if used),
  the FP8 scaling state (src/fp8.cuh's Fp8Scale array, then its amax history).
DONE_%08d: empty marker written last; a checkpoint without it is incomplete and is ignored.
Every file is written to "<path>.tmp" and renamed, so a kill during a save leaves the old files.
*/
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>
#include <dirent.h>
#include <unistd.h>
#include "utils.h"
#include "config.h"

#define MODEL_MAGIC 20240326
#define MODEL_VERSION_FP32 3
#define MODEL_VERSION_BF16 5
#define STATE_MAGIC 20240527
#define STATE_VERSION 1
#define CKPT_HEADER_INTS 256

inline void model_header_fill(int* header, const GPT2Config& c) {
    memset(header, 0, CKPT_HEADER_INTS * sizeof(int));
    header[0] = MODEL_MAGIC;
    header[1] = MODEL_VERSION_BF16;
    header[2] = c.max_seq_len;
    header[3] = c.vocab_size;
    header[4] = c.num_layers;
    header[5] = c.num_heads;
    header[6] = c.channels;
    header[7] = c.padded_vocab_size;
}

// Validates a model header and fills *c. `path` is only for the messages.
inline std::string model_header_parse(const int* header, const char* path, GPT2Config* c) {
    if (header[0] != MODEL_MAGIC)
        return strfmt("model file '%s' has bad magic %d (expected %d, an llm.c model checkpoint)", path, header[0], MODEL_MAGIC);
    if (header[1] == MODEL_VERSION_FP32)
        return strfmt("model file '%s' is fp32 (version 3); this build is bf16-only and needs version 5 (e.g. gpt2_124M_bf16.bin)", path);
    if (header[1] != MODEL_VERSION_BF16)
        return strfmt("model file '%s' has unsupported version %d (expected 5, bf16)", path, header[1]);
    c->max_seq_len = header[2];
    c->vocab_size = header[3];
    c->num_layers = header[4];
    c->num_heads = header[5];
    c->channels = header[6];
    c->padded_vocab_size = header[7];
    std::string err = model_config_check(*c);
    if (!err.empty()) return strfmt("model file '%s': %s", path, err.c_str());
    return "";
}

// Reads the header of a model file and checks the file's size against it.
inline std::string model_file_check(const char* path, GPT2Config* c) {
    FILE* fp = fopen(path, "rb");
    if (fp == nullptr) return strfmt("model file '%s' could not be opened: %s", path, strerror(errno));
    int header[CKPT_HEADER_INTS];
    size_t got = fread(header, sizeof(int), CKPT_HEADER_INTS, fp);
    fclose(fp);
    if (got != CKPT_HEADER_INTS) return strfmt("model file '%s' is truncated (no full header)", path);
    std::string err = model_header_parse(header, path, c);
    if (!err.empty()) return err;
    long long expected = (long long)sizeof(header) + 2LL * (long long)count_parameters(*c);
    long long size = file_size_bytes(path);
    if (size != expected)
        return strfmt("model file '%s' is %lld bytes, expected %lld for %s in bf16: truncated or corrupt",
                      path, size, expected, model_config_str(*c).c_str());
    return "";
}

typedef struct {
    int num_processes, process_rank;
    int use_master_weights;
    int shuffle;
    int step;
    uint64_t rng_state;
    size_t shard_idx, sample_idx;
    int epoch;
    size_t num_parameters;
    int fp8_updates;          // -fp8: the scales' updates so far (0: the next step calibrates)
    int fp8_mode;             // -fp8 1 or 2 (the gradients' format); 0 without
    size_t fp8_state_bytes;   // the FP8 scaling state after the optimizer's arrays; 0 without -fp8
} TrainState;

inline void state_header_fill(int* header, const TrainState& s) {
    memset(header, 0, CKPT_HEADER_INTS * sizeof(int));
    header[0] = STATE_MAGIC;
    header[1] = STATE_VERSION;
    header[2] = s.num_processes;
    header[3] = s.process_rank;
    header[4] = s.use_master_weights;
    header[5] = s.shuffle;
    header[10] = s.step;
    memcpy(&header[20], &s.rng_state, sizeof(uint64_t));
    memcpy(&header[30], &s.shard_idx, sizeof(size_t));
    memcpy(&header[32], &s.sample_idx, sizeof(size_t));
    header[34] = s.epoch;
    memcpy(&header[36], &s.num_parameters, sizeof(size_t));
    header[40] = s.fp8_updates;
    header[41] = s.fp8_mode;
    memcpy(&header[42], &s.fp8_state_bytes, sizeof(size_t));
}

inline std::string state_header_parse(const int* header, const char* path, TrainState* s) {
    if (header[0] != STATE_MAGIC) return strfmt("state file '%s' has bad magic %d (expected %d)", path, header[0], STATE_MAGIC);
    if (header[1] != STATE_VERSION) return strfmt("state file '%s' has unsupported version %d (expected %d)", path, header[1], STATE_VERSION);
    s->num_processes = header[2];
    s->process_rank = header[3];
    s->use_master_weights = header[4];
    s->shuffle = header[5];
    s->step = header[10];
    memcpy(&s->rng_state, &header[20], sizeof(uint64_t));
    memcpy(&s->shard_idx, &header[30], sizeof(size_t));
    memcpy(&s->sample_idx, &header[32], sizeof(size_t));
    s->epoch = header[34];
    memcpy(&s->num_parameters, &header[36], sizeof(size_t));
    s->fp8_updates = header[40];
    s->fp8_mode = header[41];
    memcpy(&s->fp8_state_bytes, &header[42], sizeof(size_t));
    return "";
}

// Checks a state against the run about to use it. Returns "" or why they do not fit.
// state_elements: the floats of each state array in the file (ZeRO-1: the rank's shard; 0 = num_parameters)
inline std::string state_check_compatible(const TrainState& s, const char* path, size_t num_parameters,
                                          int num_processes, int process_rank, int use_master_weights,
                                          size_t state_elements = 0) {
    if (state_elements == 0) state_elements = num_parameters;
    if (s.num_parameters != num_parameters)
        return strfmt("state file '%s' is for a model of %zu parameters, this model has %zu", path, s.num_parameters, num_parameters);
    if (s.num_processes != num_processes || s.process_rank != process_rank)
        return strfmt("state file '%s' was written by rank %d of %d processes, this is rank %d of %d",
                      path, s.process_rank, s.num_processes, process_rank, num_processes);
    if (s.use_master_weights != use_master_weights)
        return strfmt("state file '%s' has use_master_weights=%d but the run has -w %d", path, s.use_master_weights, use_master_weights);
    long long expected = (long long)CKPT_HEADER_INTS * sizeof(int) + (long long)state_elements * sizeof(float) * (2 + use_master_weights)
                         + (long long)s.fp8_state_bytes;
    long long size = file_size_bytes(path);
    if (size != expected) return strfmt("state file '%s' is %lld bytes, expected %lld: truncated or corrupt", path, size, expected);
    return "";
}

// Writes the chunks to path.tmp, flushes them to disk, then renames over path.
struct FileChunk { const void* data; size_t bytes; };
inline std::string write_file_atomic(const char* path, const std::vector<FileChunk>& chunks) {
    std::string tmp = std::string(path) + ".tmp";
    FILE* fp = fopen(tmp.c_str(), "wb");
    if (fp == nullptr) return strfmt("could not create '%s': %s", tmp.c_str(), strerror(errno));
    for (const FileChunk& c : chunks) {
        if (c.bytes > 0 && fwrite(c.data, 1, c.bytes, fp) != c.bytes) {
            fclose(fp);
            remove(tmp.c_str());
            return strfmt("short write to '%s': %s", tmp.c_str(), strerror(errno));
        }
    }
    if (fflush(fp) != 0 || fsync(fileno(fp)) != 0) {
        fclose(fp);
        remove(tmp.c_str());
        return strfmt("could not flush '%s': %s", tmp.c_str(), strerror(errno));
    }
    fclose(fp);
    if (rename(tmp.c_str(), path) != 0) return strfmt("could not rename '%s' to '%s': %s", tmp.c_str(), path, strerror(errno));
    return "";
}

inline std::string checkpoint_model_path(const char* dir, int step) { return strfmt("%s/model_%08d.bin", dir, step); }
inline std::string checkpoint_state_path(const char* dir, int step, int rank) { return strfmt("%s/state_%08d_%05d.bin", dir, step, rank); }
inline std::string checkpoint_done_path(const char* dir, int step) { return strfmt("%s/DONE_%08d", dir, step); }

// highest step with a DONE marker in dir, or -1
inline int find_latest_checkpoint_step(const char* dir) {
    DIR* d = opendir(dir);
    if (d == nullptr) return -1;
    int best = -1;
    struct dirent* entry;
    while ((entry = readdir(d)) != nullptr) {
        int step;
        char extra;
        if (sscanf(entry->d_name, "DONE_%8d%c", &step, &extra) == 1 && strlen(entry->d_name) == 13 && step > best) best = step;
    }
    closedir(d);
    return best;
}
