/*
Configuration, CUDA-free: the model's sizes (GPT2Config, parameter order and sizes as in llm.c's
checkpoint format) and the run's settings (TrainConfig, parsed from llm.c's flags).
Validation functions return an error string ("" when fine) instead of exiting, so the CPU tests
can check them; train_gpt2.cu passes every result to exit_on_error.
*/
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include "utils.h"

// ----------------------------------------------------------------------------
// model sizes

typedef struct {
    int max_seq_len;        // maxT, 1024 for GPT-2
    int vocab_size;         // V, 50257
    int padded_vocab_size;  // Vp, V rounded up to 128 (50304): wte rows >= V are zero
    int num_layers;         // L
    int num_heads;          // NH
    int channels;           // C
} GPT2Config;

#define NUM_PARAMETER_TENSORS 16
// llm.c's parameter order; the checkpoint and the debug state store tensors back to back in it
static const char* const PARAMETER_NAMES[NUM_PARAMETER_TENSORS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};

inline void fill_in_parameter_sizes(size_t* sizes, const GPT2Config& c) {
    size_t Vp = c.padded_vocab_size, C = c.channels, maxT = c.max_seq_len, L = c.num_layers;
    sizes[0] = Vp * C;          // wte
    sizes[1] = maxT * C;        // wpe
    sizes[2] = L * C;           // ln1w
    sizes[3] = L * C;           // ln1b
    sizes[4] = L * 3 * C * C;   // qkvw
    sizes[5] = L * 3 * C;       // qkvb
    sizes[6] = L * C * C;       // attprojw
    sizes[7] = L * C;           // attprojb
    sizes[8] = L * C;           // ln2w
    sizes[9] = L * C;           // ln2b
    sizes[10] = L * 4 * C * C;  // fcw
    sizes[11] = L * 4 * C;      // fcb
    sizes[12] = L * C * 4 * C;  // fcprojw
    sizes[13] = L * C;          // fcprojb
    sizes[14] = C;              // lnfw
    sizes[15] = C;              // lnfb
}

inline size_t count_parameters(const GPT2Config& c) {
    size_t sizes[NUM_PARAMETER_TENSORS], n = 0;
    fill_in_parameter_sizes(sizes, c);
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) n += sizes[i];
    return n;
}

// weight decay applies to the 2D tensors only (embeddings and matmul weights), as llm.c and nanoGPT
inline bool parameter_gets_weight_decay(int i) {
    return i == 0 || i == 1 || i == 4 || i == 6 || i == 10 || i == 12;
}

// "d12", "d24", "d36", "d48" (or "gpt2:dN"): GPT-2 124M/350M/774M/1558M sizes
inline std::string parse_model_descriptor(const char* desc, GPT2Config* c) {
    const char* d = desc;
    if (strncmp(d, "gpt2:", 5) == 0) d += 5;
    if (d[0] != 'd') return strfmt("model descriptor '%s' is not of the form dN (d12, d24, d36, d48)", desc);
    char* end = nullptr;
    long depth = strtol(d + 1, &end, 10);
    if (end == d + 1 || *end != '\0') return strfmt("model descriptor '%s' is not of the form dN (d12, d24, d36, d48)", desc);
    c->max_seq_len = 1024;
    c->vocab_size = 50257;
    c->padded_vocab_size = 50304;
    c->num_layers = (int)depth;
    switch (depth) {
        case 12: c->channels = 768;  c->num_heads = 12; break;
        case 24: c->channels = 1024; c->num_heads = 16; break;
        case 36: c->channels = 1280; c->num_heads = 20; break;
        case 48: c->channels = 1600; c->num_heads = 25; break;
        default: return strfmt("model descriptor '%s': depth must be 12, 24, 36 or 48", desc);
    }
    return "";
}

// a descriptor names a random init; anything else is a checkpoint path
inline bool is_model_descriptor(const char* s) {
    return (s[0] == 'd' && s[1] >= '0' && s[1] <= '9') || strncmp(s, "gpt2:", 5) == 0;
}

inline std::string model_config_check(const GPT2Config& c) {
    if (c.num_layers < 1 || c.num_heads < 1 || c.channels < 1 || c.max_seq_len < 1 || c.vocab_size < 1)
        return strfmt("model sizes must be positive (L=%d NH=%d C=%d maxT=%d V=%d)",
                      c.num_layers, c.num_heads, c.channels, c.max_seq_len, c.vocab_size);
    if (c.channels % c.num_heads != 0) return strfmt("C=%d is not divisible by NH=%d", c.channels, c.num_heads);
    if (c.channels % 8 != 0) return strfmt("C=%d must be a multiple of 8 (16-byte vector loads)", c.channels);
    if (c.padded_vocab_size < c.vocab_size || c.padded_vocab_size % 8 != 0)
        return strfmt("padded vocab %d must be >= vocab %d and a multiple of 8", c.padded_vocab_size, c.vocab_size);
    return "";
}

inline bool model_config_equal(const GPT2Config& a, const GPT2Config& b) {
    return a.max_seq_len == b.max_seq_len && a.vocab_size == b.vocab_size && a.padded_vocab_size == b.padded_vocab_size &&
           a.num_layers == b.num_layers && a.num_heads == b.num_heads && a.channels == b.channels;
}

inline std::string model_config_str(const GPT2Config& c) {
    return strfmt("L=%d NH=%d C=%d maxT=%d V=%d Vp=%d", c.num_layers, c.num_heads, c.channels,
                  c.max_seq_len, c.vocab_size, c.padded_vocab_size);
}

// ----------------------------------------------------------------------------
// run settings: llm.c's flags and defaults (llm.c:train_gpt2.cu error_usage), plus -sd seed and -sf shuffle

typedef struct {
    const char* train_data_pattern;   // -i
    const char* val_data_pattern;     // -j
    const char* load_filename;        // -e  checkpoint path, or dN for a random init
    const char* output_log_dir;       // -o  main.log + checkpoints; nullptr = none
    int checkpoint_every;             // -n  0 = never
    int checkpoints_keep;             // -nk 0 = keep all
    int major_checkpoint_every;       // -nm 0 = none; these are never deleted
    int resume;                       // -y  1 = resume from the latest checkpoint in -o
    int B;                            // -b  micro-batch size
    int T;                            // -t  sequence length
    int total_batch_size;             // -d  tokens per optimizer step; -1 = B*T*num_processes
    int max_steps;                    // -x  -1 = one epoch of the training data
    float learning_rate;              // -l
    int warmup_iterations;            // -u
    float final_learning_rate_frac;   // -q
    float weight_decay;               // -c
    const char* lr_scheduler_type;    // -k  cosine | linear | constant
    float grad_clip;                  // -gc (1.0 as llm.c; <= 0 disables)
    int val_loss_every;               // -v
    int val_max_steps;                // -m
    int sample_every;                 // -s
    int gen_T;                        // -g  tokens to sample
    int hellaswag_eval;               // -h  not supported yet: 1 is an error
    int recompute;                    // -r  0 none, 1 recompute GELU, 2 GELU + layernorms
    int zero_stage;                   // -z  0: every rank keeps all optimizer state; 1: its shard (ZeRO-1)
    int use_master_weights;           // -w
    int stochastic_rounding;          // -sr 1: bf16 weights rounded stochastically from the update (llm.c), 0: to nearest
    int document_masking;             // -dm 1: attention stops at <|endoftext|>: each token sees its own document only
    int gelu_fusion;                  // -ge 0 separate GELU kernels, 1 GELU in the matmul epilogue (fwd), 2 fwd + bwd
    int overfit_single_batch;         // -a
    int shuffle;                      // -sf shuffle the training data (default 1 unless -a 1)
    int seed;                         // -sd init and shuffle seed
    float skip_update_lossz;          // -sl 0 = off
    float skip_update_gradz;          // -sg 0 = off
    int num_processes;                // -pn (0: from the launcher's environment, else 1; see src/distributed.h)
    int process_rank;                 // -pr
    const char* init_method;          // -pi fs | tcp: how rank 0 hands the NCCL id to the others
    const char* init_fs_dir;          // -pf DIR (fs)
    const char* init_tcp;             // -ps HOST:PORT (tcp; default MASTER_ADDR:MASTER_PORT + 1)
    int multi_gpu_timeout;            // -pt seconds a rank waits for the others before it exits with an error
    int memory_plan_only;             // -pm 1: print the memory plan (src/memory_plan.h) and exit
    int fp8;                          // -fp8 1 (2): the blocks' linear layers through FP8 matmuls, gradients E5M2 (E4M3) (src/fp8.cuh; sm_89+)
} TrainConfig;

inline void train_config_defaults(TrainConfig* c) {
    c->train_data_pattern = "dev/data/tinyshakespeare/tiny_shakespeare_train.bin";
    c->val_data_pattern = "dev/data/tinyshakespeare/tiny_shakespeare_val.bin";
    c->load_filename = "d12";
    c->output_log_dir = nullptr;
    c->checkpoint_every = 0;
    c->checkpoints_keep = 0;
    c->major_checkpoint_every = 0;
    c->resume = 0;
    c->B = 4;
    c->T = 1024;
    c->total_batch_size = -1;
    c->max_steps = -1;
    c->learning_rate = 3e-4f;
    c->warmup_iterations = 0;
    c->final_learning_rate_frac = 1.0f;
    c->weight_decay = 0.0f;
    c->lr_scheduler_type = "cosine";
    c->grad_clip = 1.0f;
    c->val_loss_every = 20;
    c->val_max_steps = 20;
    c->sample_every = 20;
    c->gen_T = 64;
    c->hellaswag_eval = 0;
    c->recompute = 1;
    c->zero_stage = 0;
    c->use_master_weights = 1;
    c->stochastic_rounding = 1;
    c->document_masking = 0;
    c->gelu_fusion = -1;  // -1: per GPU, resolved once the GPU is known (gelu_fusion_default)
    c->overfit_single_batch = 0;
    c->shuffle = -1;  // -1: decided in train_config_check (1 unless overfitting one batch)
    c->seed = 42;
    c->skip_update_lossz = 0.0f;
    c->skip_update_gradz = 0.0f;
    c->num_processes = 0;
    c->process_rank = 0;
    c->init_method = "fs";
    c->init_fs_dir = ".";
    c->init_tcp = nullptr;
    c->multi_gpu_timeout = 300;
    c->memory_plan_only = 0;
    c->fp8 = 0;
}

// -ge -1 (the default): GELU fused into the matmuls (2: cuBLASLt's forward epilogue, matmul_hopper.cuh's backward)
// on Hopper, where d12 trains faster with it than with -ge 0 or 1 (dev/cuda/RESULTS.md); llm.c's
// default 0 elsewhere
inline int gelu_fusion_default(int cc_major) { return cc_major >= 9 ? 2 : 0; }

inline const char* train_usage() {
    return
        "Usage:   ./train_gpt2cu [options]\n"
        "Options:\n"
        "  -i <string> train data filename pattern (default = dev/data/tinyshakespeare/tiny_shakespeare_train.bin)\n"
        "  -j <string> val data filename pattern (default = dev/data/tinyshakespeare/tiny_shakespeare_val.bin)\n"
        "  -e <string> model: a checkpoint .bin, or dN (d12, d24, d36, d48) for a random init (default = d12)\n"
        "  -o <string> output log dir (default = none)\n"
        "  -n <int>    write a checkpoint every N steps (default = 0, never)\n"
        "  -nk <int>   keep only the last N checkpoints (default = 0, all)\n"
        "  -nm <int>   major checkpoint every N steps, never deleted (default = 0)\n"
        "  -y <int>    resume from the latest checkpoint in -o (default = 0)\n"
        "  -b <int>    (per-GPU, micro) batch size B (default = 4)\n"
        "  -t <int>    sequence length T (default = 1024)\n"
        "  -d <int>    total desired batch size in tokens (default = B*T*num_processes)\n"
        "  -x <int>    max steps of optimization (default = -1, one epoch)\n"
        "  -l <float>  learning rate (default = 3e-4)\n"
        "  -u <int>    learning rate warmup iterations (default = 0)\n"
        "  -q <float>  learning rate decay: final fraction, at end of training (default = 1.0, no decay)\n"
        "  -c <float>  weight decay (default = 0.0)\n"
        "  -k <string> learning rate scheduler: cosine, linear, constant (default = cosine)\n"
        "  -gc <float> clip the gradient to this global norm, <= 0 disables (default = 1.0)\n"
        "  -v <int>    val loss every how many steps (default = 20)\n"
        "  -m <int>    val max batches (default = 20)\n"
        "  -s <int>    sample every how many steps (default = 20)\n"
        "  -g <int>    number of tokens to sample (default = 64)\n"
        "  -h <int>    HellaSwag eval (not supported yet; default = 0)\n"
        "  -r <int>    recompute: 0 none, 1 GELU, 2 GELU + layernorm (default = 1)\n"
        "  -z <int>    ZeRO stage: 0, or 1 (the optimizer state sharded over the ranks) (default = 0)\n"
        "  -w <int>    keep fp32 master weights (default = 1)\n"
        "  -sr <int>   round the bf16 weights stochastically after each update, 0: to nearest (default = 1)\n"
        "  -dm <int>   document masking: attention stops at each <|endoftext|> in a sequence (default = 0)\n"
        "  -ge <int>   GELU fusion into the matmuls: 0 off, 1 forward, 2 forward + backward (default = 2 on sm_90+, else 0)\n"
        "  -a <int>    overfit a single batch (default = 0)\n"
        "  -sf <int>   shuffle the training data (default = 1, 0 with -a 1)\n"
        "  -sd <int>   seed for init and shuffling (default = 42)\n"
        "  -sl <float> skip the update if the loss z-score exceeds this (default = 0, off)\n"
        "  -sg <float> skip the update if the grad-norm z-score exceeds this (default = 0, off)\n"
        "  -pn <int>   number of processes, one per GPU (default: torchrun's / Slurm's environment, else 1)\n"
        "  -pr <int>   rank of this process (default: from the environment, else 0)\n"
        "  -pi <str>   how the ranks meet: fs (a file in -pf) or tcp (-ps) (default = fs)\n"
        "  -pf <str>   fs: a directory every rank sees (default = .)\n"
        "  -ps <str>   tcp: rank 0's HOST:PORT (default = MASTER_ADDR:MASTER_PORT+1)\n"
        "  -pt <int>   seconds a rank waits for the others (rendezvous, NCCL) before it exits with an error (default = 300)\n"
        "  -pm <int>   1: print the memory plan (bytes per sequence, total, largest B that fits) and exit (default = 0)\n"
        "  -fp8 <int>  1: each block's four linear layers run their matmuls in FP8 (E4M3, E5M2 gradients; delayed\n"
        "              per-tensor scaling), forward and backward, on sm_89+; 2: the gradients in E4M3 too (default = 0, bf16)\n";
}

// strict number parsing: the whole argument must be a number
inline bool parse_int_arg(const char* s, int* out) {
    char* end = nullptr;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || errno != 0 || v < -2147483647L || v > 2147483647L) return false;
    *out = (int)v;
    return true;
}
inline bool parse_float_arg(const char* s, float* out) {
    char* end = nullptr;
    float v = strtof(s, &end);
    if (end == s || *end != '\0') return false;
    *out = v;
    return true;
}

// Parses llm.c-style "-flag value" pairs into c (which holds the defaults). Returns "" or an error.
inline std::string train_config_parse(TrainConfig* c, int argc, char** argv) {
    for (int i = 1; i < argc; i += 2) {
        const char* flag = argv[i];
        if (flag[0] != '-' || strlen(flag) < 2 || strlen(flag) > 4) return strfmt("unknown argument '%s'", flag);
        if (i + 1 >= argc) return strfmt("flag %s needs a value", flag);
        const char* v = argv[i + 1];
        const char* f = flag + 1;
        bool ok = true;
        if (!strcmp(f, "i")) c->train_data_pattern = v;
        else if (!strcmp(f, "j")) c->val_data_pattern = v;
        else if (!strcmp(f, "e")) c->load_filename = v;
        else if (!strcmp(f, "o")) c->output_log_dir = v;
        else if (!strcmp(f, "k")) c->lr_scheduler_type = v;
        else if (!strcmp(f, "n")) ok = parse_int_arg(v, &c->checkpoint_every);
        else if (!strcmp(f, "nk")) ok = parse_int_arg(v, &c->checkpoints_keep);
        else if (!strcmp(f, "nm")) ok = parse_int_arg(v, &c->major_checkpoint_every);
        else if (!strcmp(f, "y")) ok = parse_int_arg(v, &c->resume);
        else if (!strcmp(f, "b")) ok = parse_int_arg(v, &c->B);
        else if (!strcmp(f, "t")) ok = parse_int_arg(v, &c->T);
        else if (!strcmp(f, "d")) ok = parse_int_arg(v, &c->total_batch_size);
        else if (!strcmp(f, "x")) ok = parse_int_arg(v, &c->max_steps);
        else if (!strcmp(f, "l")) ok = parse_float_arg(v, &c->learning_rate);
        else if (!strcmp(f, "u")) ok = parse_int_arg(v, &c->warmup_iterations);
        else if (!strcmp(f, "q")) ok = parse_float_arg(v, &c->final_learning_rate_frac);
        else if (!strcmp(f, "c")) ok = parse_float_arg(v, &c->weight_decay);
        else if (!strcmp(f, "gc")) ok = parse_float_arg(v, &c->grad_clip);
        else if (!strcmp(f, "v")) ok = parse_int_arg(v, &c->val_loss_every);
        else if (!strcmp(f, "m")) ok = parse_int_arg(v, &c->val_max_steps);
        else if (!strcmp(f, "s")) ok = parse_int_arg(v, &c->sample_every);
        else if (!strcmp(f, "g")) ok = parse_int_arg(v, &c->gen_T);
        else if (!strcmp(f, "h")) ok = parse_int_arg(v, &c->hellaswag_eval);
        else if (!strcmp(f, "r")) ok = parse_int_arg(v, &c->recompute);
        else if (!strcmp(f, "z")) ok = parse_int_arg(v, &c->zero_stage);
        else if (!strcmp(f, "w")) ok = parse_int_arg(v, &c->use_master_weights);
        else if (!strcmp(f, "sr")) ok = parse_int_arg(v, &c->stochastic_rounding);
        else if (!strcmp(f, "dm")) ok = parse_int_arg(v, &c->document_masking);
        else if (!strcmp(f, "ge")) ok = parse_int_arg(v, &c->gelu_fusion);
        else if (!strcmp(f, "a")) ok = parse_int_arg(v, &c->overfit_single_batch);
        else if (!strcmp(f, "sf")) ok = parse_int_arg(v, &c->shuffle);
        else if (!strcmp(f, "sd")) ok = parse_int_arg(v, &c->seed);
        else if (!strcmp(f, "sl")) ok = parse_float_arg(v, &c->skip_update_lossz);
        else if (!strcmp(f, "sg")) ok = parse_float_arg(v, &c->skip_update_gradz);
        else if (!strcmp(f, "pn")) ok = parse_int_arg(v, &c->num_processes);
        else if (!strcmp(f, "pr")) ok = parse_int_arg(v, &c->process_rank);
        else if (!strcmp(f, "pm")) ok = parse_int_arg(v, &c->memory_plan_only);
        else if (!strcmp(f, "fp8")) ok = parse_int_arg(v, &c->fp8);
        else if (!strcmp(f, "pt")) ok = parse_int_arg(v, &c->multi_gpu_timeout);
        else if (!strcmp(f, "pi")) c->init_method = v;
        else if (!strcmp(f, "pf")) c->init_fs_dir = v;
        else if (!strcmp(f, "ps")) c->init_tcp = v;
        else if (!strcmp(f, "f")) { int ignored; ok = parse_int_arg(v, &ignored); }  // llm.c's tf32 switch: bf16-only here
        else return strfmt("unknown flag '%s'", flag);
        if (!ok) return strfmt("flag %s: '%s' is not a valid number", flag, v);
    }
    return "";
}

// Checks that need only the flags. Fills the derived defaults (total batch, shuffle).
inline std::string train_config_check(TrainConfig* c) {
    if (c->B < 1) return strfmt("batch size -b %d must be >= 1", c->B);
    if (c->T < 1) return strfmt("sequence length -t %d must be >= 1", c->T);
    if (c->num_processes == 0) c->num_processes = 1;   // (main resolves 0 from the environment first)
    if (c->num_processes < 1 || c->process_rank < 0 || c->process_rank >= c->num_processes)
        return strfmt("-pn %d -pr %d: the rank must be in 0..pn-1", c->num_processes, c->process_rank);
#ifndef FLASHGPT_NCCL
    if (c->num_processes > 1) return strfmt("-pn %d: this build has no NCCL (the Makefile found no nccl.h): one process only", c->num_processes);
#endif
    if (strcmp(c->init_method, "fs") != 0 && strcmp(c->init_method, "tcp") != 0) return strfmt("-pi %s: fs or tcp", c->init_method);
    if (c->zero_stage != 0 && c->zero_stage != 1) return strfmt("-z %d: ZeRO stage 0 or 1", c->zero_stage);
    if (c->multi_gpu_timeout < 1) return strfmt("-pt %d: the timeout must be >= 1 second", c->multi_gpu_timeout);
    long long tokens_per_micro = (long long)c->B * c->T * c->num_processes;
    if (c->total_batch_size == -1) c->total_batch_size = (int)tokens_per_micro;
    if (c->total_batch_size < 1) return strfmt("total batch size -d %d must be >= 1", c->total_batch_size);
    if (c->total_batch_size % tokens_per_micro != 0)
        return strfmt("total batch size -d %d is not divisible by B*T*processes = %d*%d*%d = %lld",
                      c->total_batch_size, c->B, c->T, c->num_processes, tokens_per_micro);
    if (c->recompute < 0 || c->recompute > 2) return strfmt("-r %d: recompute must be 0, 1 or 2", c->recompute);
    if (c->fp8 < 0 || c->fp8 > 2) return strfmt("-fp8 %d: 0 (bf16), 1 or 2 (FP8, gradients E5M2 or E4M3)", c->fp8);
    if (c->gelu_fusion < -1 || c->gelu_fusion > 2) return strfmt("-ge %d: gelu fusion must be 0, 1 or 2", c->gelu_fusion);
    if (c->use_master_weights != 0 && c->use_master_weights != 1) return "-w must be 0 or 1";
    if (c->stochastic_rounding != 0 && c->stochastic_rounding != 1) return "-sr must be 0 or 1";
    if (c->document_masking != 0 && c->document_masking != 1) return "-dm must be 0 or 1";
    if (c->memory_plan_only != 0 && c->memory_plan_only != 1) return "-pm must be 0 or 1";
    if (c->hellaswag_eval != 0) return "-h 1: HellaSwag eval is not supported yet";
    if (c->resume && c->output_log_dir == nullptr) return "-y 1 needs -o <dir> (the checkpoints to resume from)";
    if (c->checkpoint_every > 0 && c->output_log_dir == nullptr) return "-n needs -o <dir> to write checkpoints into";
    if (strcmp(c->lr_scheduler_type, "cosine") && strcmp(c->lr_scheduler_type, "linear") && strcmp(c->lr_scheduler_type, "constant"))
        return strfmt("-k %s: scheduler must be cosine, linear or constant", c->lr_scheduler_type);
    if (c->final_learning_rate_frac < 0.0f || c->final_learning_rate_frac > 1.0f)
        return strfmt("-q %g: final learning rate fraction must be in [0, 1]", c->final_learning_rate_frac);
    if (c->shuffle == -1) c->shuffle = c->overfit_single_batch ? 0 : 1;
    return "";
}

// Checks that need the model's sizes.
inline std::string train_config_check_model(const TrainConfig& c, const GPT2Config& m) {
    if (c.T > m.max_seq_len)
        return strfmt("sequence length -t %d is larger than the model's max sequence length %d", c.T, m.max_seq_len);
    return "";
}

// bf16 tensor cores and cp.async need Ampere or newer
inline std::string gpu_check_compute_capability(int major, int minor, const char* name) {
    if (major < 8)
        return strfmt("GPU '%s' has compute capability %d.%d; flashgpt needs sm_80 or newer (bf16 tensor cores)", name, major, minor);
    return "";
}
