/*
GPT-2 training in CUDA C++, bf16, on flashgpt's own fused flash attention (src/attention.cuh).
One translation unit, in llm.c's shape: the model (parameters, activations, forward, backward,
AdamW update, checkpoints, inference with a KV cache) first, then main() behind #ifndef TESTING, so
test_gpt2.cu, profile/profile_gpt2.cu and generate_gpt2.cu include this file and run exactly the
training code.

  make train_gpt2cu && ./train_gpt2cu -e d12 -b 4 -t 1024 -x 100
*/
#ifndef FLASHGPT_TRAIN_GPT2_CU   // gpt2_programs.cu includes this file first, then the programs that include it again
#define FLASHGPT_TRAIN_GPT2_CU
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <ctime>
#include <string>
#include <vector>
#include <sys/stat.h>
// CUDA-free helpers (the CPU tests compile these with g++)
#include "utils.h"            // defines: fopenCheck, freadCheck, fwriteCheck, mallocCheck, strfmt, exit_on_error
#include "rand.h"             // defines: mt19937_init, mt19937_normal_fill, mt19937_permutation, random_f32
#include "config.h"           // defines: GPT2Config, TrainConfig, train_config_parse/check, fill_in_parameter_sizes
#include "memory_plan.h"      // defines: fill_in_activation_sizes, MemoryPlan, memory_plan, memory_plan_largest_B
#include "dataloader.h"       // defines: DataLoader, dataloader_init, dataloader_next_batch, dataloader_seek
#include "tokenizer.h"        // defines: Tokenizer, tokenizer_init, tokenizer_decode, safe_printf
#include "schedulers.h"       // defines: LearningRateScheduler, get_learning_rate
#include "logger.h"           // defines: Logger, logger_log_train/val, OutlierDetector
#include "mfu.h"              // defines: get_peak_bf16_flops, gpt2_flops_per_token, estimate_mfu
#include "checkpoint.h"       // defines: model/state headers, write_file_atomic, find_latest_checkpoint_step
// CUDA: one header per layer
#include "common.cuh"         // defines: cudaCheck, floatX, ceil_div, device_props, NvtxRange
#include "cuda_utils.cuh"     // defines: x128, load128/store128, warp/block reductions, reduce_partials_add
#include "encoder.cuh"        // defines: encoder_forward, encoder_backward, build_token_buckets, document_starts
#include "layernorm.cuh"      // defines: layernorm_forward, layernorm_backward
#include "matmul.cuh"         // defines: matmul_forward, matmul_backward, bias_backward (cuBLASLt)
#include "gelu.cuh"           // defines: gelu_forward, gelu_backward_inplace
#include "matmul_hopper.cuh"  // defines: matmul_backward_dgelu_hopper (the MLP's backward through GELU, sm_90a)
#include "fp8.cuh"            // defines: Fp8Scale, fp8_cast, layernorm_forward_fp8, fp8_update_scales, matmul_fp8 (-fp8)
#include "attention.cuh"      // declares: attention_forward, attention_backward (flash attention, out + LSE; build/attention.a)
#include "fused_classifier.cuh" // defines: fused_classifier, accumulate_loss
#include "global_norm.cuh"    // defines: global_norm
#include "adamw.cuh"          // defines: adamw_update
#include "kvcache.cuh"        // defines: kv_cache_append, embed_newest_tokens, gather_newest_rows (incremental inference)
#include "sampler.cuh"        // defines: sample_tokens (greedy, or top-k + temperature, on the GPU)
#include "distributed.h"      // defines: resolve_ranks, rendezvous_fs / rendezvous_tcp (the NCCL id), zero1_shard
#ifdef FLASHGPT_NCCL
#include <nccl.h>
#endif

// GPT-2's <|endoftext|>: the token shards begin every document with it (document masking, -dm 1)
constexpr int kEndOfText = 50256;

static cudaStream_t main_stream;

// ----------------------------------------------------------------------------
// data parallelism (-pn > 1, one process per GPU): after the last micro-step the gradients and the loss are averaged
// over the ranks with NCCL (bf16 gradients, as llm.c), so every rank takes the same update; rank 0 writes the model,
// logs and prints, every rank its own optimizer state. A rank that dies, or NCCL reporting an error, makes the others
// leave with a message after at most multi_gpu.timeout_s (-pt; wait_stream), never hang.

struct MultiGpu {
    int world = 1, rank = 0;
    int zero_stage = 0;         // -z 1: this rank keeps the AdamW moments and master weights of its shard only
    double timeout_s = 300.0;   // -pt: how long a rank waits for the others before it gives up
#ifdef FLASHGPT_NCCL
    ncclComm_t comm = nullptr;
    float* barrier = nullptr;   // one float, all-reduced as a barrier
#endif
};
static MultiGpu multi_gpu;

#ifdef FLASHGPT_NCCL
inline void nccl_check(ncclResult_t r, const char* what) {
    if (r == ncclSuccess || r == ncclInProgress) return;
    fprintf(stderr, "[rank %d] NCCL %s failed: %s\n", multi_gpu.rank, what, ncclGetErrorString(r));
    exit(EXIT_FAILURE);
}

// a non-blocking communicator's call may return before it is issued (ncclInProgress); the next call waits for that
void nccl_wait_issued(const char* what) {
    ncclResult_t state = ncclInProgress;
    const auto t0 = std::chrono::steady_clock::now();
    while (state == ncclInProgress) {
        nccl_check(ncclCommGetAsyncError(multi_gpu.comm, &state), "ncclCommGetAsyncError");
        if (state == ncclInProgress && seconds_since(t0) > multi_gpu.timeout_s) {
            fprintf(stderr, "[rank %d] NCCL %s did not finish within %.0f s: another rank died or stalled; aborting\n",
                    multi_gpu.rank, what, multi_gpu.timeout_s);
            ncclCommAbort(multi_gpu.comm);
            exit(EXIT_FAILURE);
        }
    }
    nccl_check(state, what);
}

void multi_gpu_init(const char* init_method, const char* fs_dir, const char* tcp) {
    ncclUniqueId id;
    if (multi_gpu.rank == 0) nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    static_assert(sizeof(id) == kRendezvousBytes, "the NCCL id is 128 bytes");
    std::string err;
    if (!strcmp(init_method, "fs")) {
        err = rendezvous_fs(fs_dir, multi_gpu.rank, (unsigned char*)&id, multi_gpu.timeout_s);
    } else {
        std::string host, spec = tcp ? tcp : "";
        int port = 0;
        if (spec.empty()) {   // torchrun: its own store holds MASTER_PORT, so rank 0 listens on the next one
            const char *addr = getenv("MASTER_ADDR"), *mport = getenv("MASTER_PORT");
            if (!addr || !mport) exit_on_error("-pi tcp needs -ps HOST:PORT, or MASTER_ADDR and MASTER_PORT in the environment");
            spec = strfmt("%s:%d", addr, atoi(mport) + 1);
        }
        exit_on_error(parse_host_port(spec, &host, &port));
        err = rendezvous_tcp(host, port, multi_gpu.rank, multi_gpu.world, (unsigned char*)&id, multi_gpu.timeout_s);
    }
    if (!err.empty()) exit_on_error(strfmt("[rank %d] %s", multi_gpu.rank, err.c_str()));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;   // calls return at once: wait_stream polls for errors and the timeout instead of hanging
    nccl_check(ncclCommInitRankConfig(&multi_gpu.comm, multi_gpu.world, id, multi_gpu.rank, &config), "ncclCommInitRank");
    nccl_wait_issued("ncclCommInitRank");
    if (multi_gpu.rank == 0 && !strcmp(init_method, "fs")) rendezvous_fs_clear(fs_dir);   // every rank has joined
    cudaCheck(cudaMalloc(&multi_gpu.barrier, sizeof(float)));
}
#endif

// cudaEventSynchronize, bounded with several ranks: polls the event and NCCL's error state; on an error, or after
// multi_gpu.timeout_s (a rank died), aborts the communicator and exits with a message
void wait_event(cudaEvent_t event) {
#ifdef FLASHGPT_NCCL
    if (multi_gpu.world > 1) {
        const auto t0 = std::chrono::steady_clock::now();
        for (;;) {
            const cudaError_t q = cudaEventQuery(event);
            if (q == cudaSuccess) return;
            if (q != cudaErrorNotReady) cudaCheck(q);
            ncclResult_t state = ncclSuccess;
            ncclCommGetAsyncError(multi_gpu.comm, &state);
            const bool late = seconds_since(t0) > multi_gpu.timeout_s;
            if ((state != ncclSuccess && state != ncclInProgress) || late) {
                fprintf(stderr, "[rank %d] %s: another rank died or stalled; aborting\n", multi_gpu.rank,
                        late ? strfmt("no progress in %.0f s", multi_gpu.timeout_s).c_str() : ncclGetErrorString(state));
                ncclCommAbort(multi_gpu.comm);
                exit(EXIT_FAILURE);
            }
            std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
    }
#endif
    cudaCheck(cudaEventSynchronize(event));
}

// everything queued on the stream so far is done (wait_event's bounds)
void wait_stream(cudaStream_t stream) {
    static cudaEvent_t queued = nullptr;
    if (!queued) cudaCheck(cudaEventCreateWithFlags(&queued, cudaEventDisableTiming));
    cudaCheck(cudaEventRecord(queued, stream));
    wait_event(queued);
}

// averages n elements over the ranks in place (no-op on one)
void multi_gpu_average(void* data, size_t n, bool bf16, cudaStream_t stream) {
#ifdef FLASHGPT_NCCL
    if (multi_gpu.world > 1) {
        nccl_check(ncclAllReduce(data, data, n, bf16 ? ncclBfloat16 : ncclFloat, ncclAvg, multi_gpu.comm, stream), "ncclAllReduce");
        nccl_wait_issued("ncclAllReduce");
    }
#endif
}

// x (one float) summed over the ranks in place
void multi_gpu_sum(float* x, cudaStream_t stream) {
#ifdef FLASHGPT_NCCL
    if (multi_gpu.world > 1) {
        nccl_check(ncclAllReduce(x, x, 1, ncclFloat, ncclSum, multi_gpu.comm, stream), "ncclAllReduce");
        nccl_wait_issued("ncclAllReduce");
    }
#endif
}

// ZeRO-1: rank r receives the ranks' mean of shard r of the n bf16 gradients (one reduce per shard, rooted at its
// owner: the shards may differ in size, which a reduce-scatter does not allow); and the updated shards of the
// parameters go back to every rank (one broadcast per shard)
void multi_gpu_reduce_shards(floatX* grads, size_t n, cudaStream_t stream) {
#ifdef FLASHGPT_NCCL
    nccl_check(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < multi_gpu.world; r++) {
        const Shard s = zero1_shard(n, multi_gpu.world, r);
        if (s.size) nccl_check(ncclReduce(grads + s.offset, grads + s.offset, s.size, ncclBfloat16, ncclAvg, r, multi_gpu.comm, stream), "ncclReduce");
    }
    nccl_check(ncclGroupEnd(), "ncclGroupEnd");
    nccl_wait_issued("the shards' ncclReduce");
#endif
}
void multi_gpu_gather_shards(floatX* params, size_t n, cudaStream_t stream) {
#ifdef FLASHGPT_NCCL
    if (multi_gpu.world < 2) return;
    nccl_check(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < multi_gpu.world; r++) {
        const Shard s = zero1_shard(n, multi_gpu.world, r);
        if (s.size) nccl_check(ncclBroadcast(params + s.offset, params + s.offset, s.size, ncclBfloat16, r, multi_gpu.comm, stream), "ncclBroadcast");
    }
    nccl_check(ncclGroupEnd(), "ncclGroupEnd");
    nccl_wait_issued("the shards' ncclBroadcast");
#endif
}

// every rank has got here (checkpoints: rank 0 marks one DONE only once every rank has written its state)
void multi_gpu_barrier() {
#ifdef FLASHGPT_NCCL
    if (multi_gpu.world > 1) {
        multi_gpu_average(multi_gpu.barrier, 1, false, main_stream);
        wait_stream(main_stream);
    }
#endif
}

// ----------------------------------------------------------------------------
// parameters: 16 tensors in one contiguous bf16 buffer, in llm.c's checkpoint order

typedef struct {
    floatX* wte;       // (Vp, C)
    floatX* wpe;       // (maxT, C)
    floatX* ln1w;      // (L, C)
    floatX* ln1b;      // (L, C)
    floatX* qkvw;      // (L, 3C, C)
    floatX* qkvb;      // (L, 3C)
    floatX* attprojw;  // (L, C, C)
    floatX* attprojb;  // (L, C)
    floatX* ln2w;      // (L, C)
    floatX* ln2b;      // (L, C)
    floatX* fcw;       // (L, 4C, C)
    floatX* fcb;       // (L, 4C)
    floatX* fcprojw;   // (L, C, 4C)
    floatX* fcprojb;   // (L, C)
    floatX* lnfw;      // (C)
    floatX* lnfb;      // (C)
} ParameterTensors;
static_assert(sizeof(ParameterTensors) == NUM_PARAMETER_TENSORS * sizeof(floatX*), "one pointer per tensor");

void point_parameters(ParameterTensors* params, floatX* memory, const size_t* sizes) {
    floatX** ptrs = (floatX**)params;  // the struct is 16 pointers in PARAMETER_NAMES order
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        ptrs[i] = memory;
        memory += sizes[i];
    }
}

// ----------------------------------------------------------------------------
// activations saved for the backward. N = B*T; per-layer tensors are (L, N, ...).

typedef struct {
    floatX* encoded;    // (N, C)
    floatX* ln1;        // (L, N, C); (N, C) with recompute >= 2
    float* ln1_mean;    // (L, N)
    float* ln1_rstd;    // (L, N)
    floatX* qkv;        // (L, N, 3C) = (L, B, T, 3, NH, HS)
    floatX* atty;       // (L, N, C)  attention output (B, T, NH, HS)
    float* lse;         // (L, B, NH, T) attention log-sum-exp: all attention saves besides atty
    floatX* residual2;  // (L, N, C)  residual after attention
    floatX* ln2;        // (L, N, C); (N, C) with recompute >= 2
    float* ln2_mean;    // (L, N)
    float* ln2_rstd;    // (L, N)
    floatX* fch;        // (L, N, 4C) pre-GELU
    floatX* fch_gelu;   // (L, N, 4C); (N, 4C) with recompute >= 1
    floatX* residual3;  // (L, N, C)  residual after the MLP
    floatX* lnf;        // (N, C)
    float* lnf_mean;    // (N)
    float* lnf_rstd;    // (N)
    float* losses;      // (N)
    floatX* output;     // (N, Vp) logits, then dlogits in place
} ActivationTensors;

typedef struct {
    GPT2Config config;
    // weights
    size_t param_sizes[NUM_PARAMETER_TENSORS];
    size_t num_parameters;
    ParameterTensors params;
    floatX* params_memory;
    ParameterTensors grads;
    floatX* grads_memory;
    float* m_memory;            // AdamW first moment (shard.size: num_parameters unless ZeRO-1)
    float* v_memory;            // AdamW second moment (shard.size)
    float* master_weights;      // fp32 copy of the shard's weights, or null (-w 0)
    Shard shard;                // the parameters this rank updates: all, or its ZeRO-1 shard (src/distributed.h)
    int use_master_weights;
    int stochastic_rounding;    // bf16 weights after an update: 1 stochastic (the default, as llm.c), 0 to nearest
    uint32_t rounding_seed;     // stochastic rounding's random bits hash (rounding_seed, step, element)
    int document_masking;       // -dm 1: attention within each document of a sequence (doc_start from the inputs)
    // activations, allocated for B, T (smaller B, T may run through the same buffers)
    int B, T;
    int recompute;              // 0, 1 (GELU), 2 (GELU + layernorms)
    int gelu_fusion;            // 0, 1 (forward), 2 (forward + backward) into the cuBLASLt epilogue
    ActivationTensors acts;
    MemoryPlan memory_plan;     // what gpt2_allocate_state allocates, in src/memory_plan.h's terms
    // backward buffers
    floatX* dresidual;          // (N, C) gradient of the residual stream
    floatX* dbtc;               // (N, C)
    floatX* dbt4c;              // (N, 4C) also holds dqkv (N, 3C)
    void* attention_scratch;    // attention_backward_scratch_bytes
    float* reduce_scratch;      // fp32 partial sums of the column reductions and the norm
    // inputs: device copies and pinned staging (the host may run one micro-step ahead)
    int* inputs;                // (N)
    int* targets;               // (N)
    int* doc_start;             // (N) each position's document start (-dm 1), from the inputs on the GPU
    int* buckets;               // (2N+1 + N) token buckets for the dwte backward
    int* inputs_pinned;
    int* targets_pinned;
    int* buckets_pinned;
    cudaEvent_t inputs_copied, buckets_copied, step_read;   // step_read: loss and norm are in readback_pinned
    std::vector<int> bucket_host, bucket_counts;
    int num_buckets;
    // scalars on the GPU, read back once per step
    float* accumulated_loss;    // (1) mean loss of the step
    float* norm;                // (1) global grad norm
    float* readback_pinned;     // (2) host copy of loss, norm
    float mean_loss;
    float grad_norm;
    uint64_t rng_state;         // sampling coins (saved in checkpoints)
    // -fp8 1 or 2 (gpt2_enable_fp8): each block's four linears through FP8 matmuls, gradients in E5M2 (1) or E4M3 (2)
    int fp8;
    Fp8Scale* fp8_scales;       // (L, kFp8Slots), then the amax history (L, kFp8Slots, kFp8History) floats: one allocation
    float* fp8_history;
    int fp8_updates;            // scale updates so far; 0: the next step calibrates (bf16 matmuls, the casts record amax)
} GPT2;

// ----------------------------------------------------------------------------
// building the model

void gpt2_setup_parameters(GPT2* model, const GPT2Config& config) {
    model->config = config;
    fill_in_parameter_sizes(model->param_sizes, config);
    model->num_parameters = count_parameters(config);
    cudaCheck(cudaMalloc(&model->params_memory, model->num_parameters * sizeof(floatX)));
    point_parameters(&model->params, model->params_memory, model->param_sizes);
    model->grads_memory = nullptr;
    model->m_memory = model->v_memory = model->master_weights = nullptr;
    model->B = model->T = 0;
    model->rng_state = 13371337ull;
}

// host fp32 weights -> bf16 on the GPU (round to nearest even)
void gpt2_upload_parameters(GPT2* model, const float* host_fp32) {
    size_t n = model->num_parameters;
    floatX* tmp = (floatX*)mallocCheck(n * sizeof(floatX));
    for (size_t i = 0; i < n; i++) tmp[i] = __float2bfloat16(host_fp32[i]);
    cudaCheck(cudaMemcpy(model->params_memory, tmp, n * sizeof(floatX), cudaMemcpyHostToDevice));
    free(tmp);
}

// GPT-2's init: N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)), biases 0, layernorms 1/0, wte pad rows 0
void gpt2_build_from_random(GPT2* model, const GPT2Config& config, uint32_t seed) {
    gpt2_setup_parameters(model, config);
    float* host = (float*)mallocCheck(model->num_parameters * sizeof(float));
    mt19937_state rng;
    mt19937_init(&rng, seed);
    float residual_std = 0.02f / sqrtf(2.0f * config.num_layers);
    size_t offset = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        float* p = host + offset;
        size_t n = model->param_sizes[i];
        const char* name = PARAMETER_NAMES[i];
        if (!strcmp(name, "ln1w") || !strcmp(name, "ln2w") || !strcmp(name, "lnfw")) {
            for (size_t j = 0; j < n; j++) p[j] = 1.0f;
        } else if (parameter_gets_weight_decay(i)) {  // the 2D tensors
            bool residual = !strcmp(name, "attprojw") || !strcmp(name, "fcprojw");
            mt19937_normal_fill(&rng, p, n, 0.0f, residual ? residual_std : 0.02f);
        } else {
            for (size_t j = 0; j < n; j++) p[j] = 0.0f;
        }
        offset += n;
    }
    size_t C = config.channels;
    for (size_t j = (size_t)config.vocab_size * C; j < (size_t)config.padded_vocab_size * C; j++) host[j] = 0.0f;
    gpt2_upload_parameters(model, host);
    free(host);
}

// llm.c model file (version 5, bf16). The caller validated it with model_file_check.
void gpt2_build_from_checkpoint(GPT2* model, const char* path) {
    GPT2Config config;
    exit_on_error(model_file_check(path, &config));
    gpt2_setup_parameters(model, config);
    FILE* fp = fopenCheck(path, "rb");
    fseek(fp, CKPT_HEADER_INTS * sizeof(int), SEEK_SET);
    floatX* tmp = (floatX*)mallocCheck(model->num_parameters * sizeof(floatX));
    freadCheck(tmp, sizeof(floatX), model->num_parameters, fp);
    fcloseCheck(fp);
    cudaCheck(cudaMemcpy(model->params_memory, tmp, model->num_parameters * sizeof(floatX), cudaMemcpyHostToDevice));
    free(tmp);
}

// the kernels' scratch at (B, T), the memory plan's ScratchBytesFn: the attention backward's statistics (and its
// fp32 dQ accumulator where the path uses one); the fp32 partial sums of the column reductions and the grad norm
size_t gpt2_attention_scratch_bytes(const GPT2Config& c, int B, int T) {
    return attention_backward_scratch_bytes(B, T, c.num_heads, c.channels / c.num_heads);
}
size_t gpt2_reduce_scratch_floats(const GPT2Config& c, int B, int T) {
    int N = B * T, C = c.channels;
    return std::max({layernorm_backward_scratch_floats(N, C), bias_backward_scratch_floats(N, C),
                     bias_backward_scratch_floats(N, 3 * C), bias_backward_scratch_floats(N, 4 * C), (size_t)GLOBAL_NORM_BLOCKS,
                     (size_t)B * ceil_div(T, 16) * 3 * C,     // the attention's dqkv sums
                     (size_t)matmul_dgelu_partial_rows(N) * 4 * C});   // the Hopper DGELU matmul's dfch sums
}
size_t gpt2_scratch_bytes(const GPT2Config& c, int B, int T) {
    return gpt2_attention_scratch_bytes(c, B, T) + gpt2_reduce_scratch_floats(c, B, T) * sizeof(float);
}

// a device pointer of the activation table and the element size its type implies
struct DeviceSlot { void** ptr; size_t elem_bytes; };
template <class T> DeviceSlot device_slot(T*& p) { return {(void**)&p, sizeof(T)}; }

// Everything that depends on B, T and the run options: activations, grads, optimizer state.
// The sizes are src/memory_plan.h's, so the plan printed at start is what this allocates.
void gpt2_allocate_state(GPT2* model, int B, int T, int recompute, int gelu_fusion, int use_master_weights) {
    const GPT2Config& c = model->config;
    model->B = B;
    model->T = T;
    model->recompute = recompute;
    model->gelu_fusion = gelu_fusion;
    model->use_master_weights = use_master_weights;
    model->stochastic_rounding = 1;
    model->document_masking = 0;
    model->rounding_seed = 0;
    model->fp8 = 0;
    model->fp8_scales = nullptr;
    model->fp8_history = nullptr;
    model->fp8_updates = 0;
    const bool zero1 = multi_gpu.zero_stage == 1;
    model->memory_plan = memory_plan(c, B, T, recompute, use_master_weights, gpt2_scratch_bytes, zero1 ? multi_gpu.world : 1);
    size_t N = (size_t)B * T;
    size_t n = model->num_parameters;
    model->shard = zero1 ? zero1_shard(n, multi_gpu.world, multi_gpu.rank) : Shard{0, n, n};
    const size_t ns = model->shard.size, off = model->shard.offset;

    cudaCheck(cudaMalloc(&model->grads_memory, n * sizeof(floatX)));
    point_parameters(&model->grads, model->grads_memory, model->param_sizes);
    cudaCheck(cudaMemset(model->grads_memory, 0, n * sizeof(floatX)));
    cudaCheck(cudaMalloc(&model->m_memory, std::max(ns, (size_t)1) * sizeof(float)));
    cudaCheck(cudaMalloc(&model->v_memory, std::max(ns, (size_t)1) * sizeof(float)));
    cudaCheck(cudaMemset(model->m_memory, 0, ns * sizeof(float)));
    cudaCheck(cudaMemset(model->v_memory, 0, ns * sizeof(float)));
    model->master_weights = nullptr;
    if (use_master_weights) {
        cudaCheck(cudaMalloc(&model->master_weights, std::max(ns, (size_t)1) * sizeof(float)));
        floatX* tmp = (floatX*)mallocCheck(std::max(ns, (size_t)1) * sizeof(floatX));
        float* tmpf = (float*)mallocCheck(std::max(ns, (size_t)1) * sizeof(float));
        cudaCheck(cudaMemcpy(tmp, model->params_memory + off, ns * sizeof(floatX), cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < ns; i++) tmpf[i] = __bfloat162float(tmp[i]);
        cudaCheck(cudaMemcpy(model->master_weights, tmpf, ns * sizeof(float), cudaMemcpyHostToDevice));
        free(tmp);
        free(tmpf);
    }

    // activations and backward buffers: one cudaMalloc each (16-byte alignment for the vector loads and cuBLASLt),
    // in fill_in_activation_sizes' order
    ActivationTensors& a = model->acts;
    DeviceSlot slots[] = {device_slot(a.encoded), device_slot(a.ln1), device_slot(a.ln1_mean), device_slot(a.ln1_rstd),
                          device_slot(a.qkv), device_slot(a.atty), device_slot(a.lse), device_slot(a.residual2),
                          device_slot(a.ln2), device_slot(a.ln2_mean), device_slot(a.ln2_rstd), device_slot(a.fch),
                          device_slot(a.fch_gelu), device_slot(a.residual3), device_slot(a.lnf), device_slot(a.lnf_mean),
                          device_slot(a.lnf_rstd), device_slot(a.losses), device_slot(a.output),
                          device_slot(model->dresidual), device_slot(model->dbtc), device_slot(model->dbt4c)};
    static_assert(sizeof(slots) / sizeof(slots[0]) == NUM_ACTIVATION_TENSORS, "one device pointer per activation tensor");
    TensorSize sizes[NUM_ACTIVATION_TENSORS];
    fill_in_activation_sizes(sizes, c, B, T, recompute);
    for (int i = 0; i < NUM_ACTIVATION_TENSORS; i++) {
        if (slots[i].elem_bytes != sizes[i].elem_bytes)
            exit_on_error(strfmt("activation %s: the table says %zu-byte elements, its pointer %zu", ACTIVATION_NAMES[i],
                                 sizes[i].elem_bytes, slots[i].elem_bytes));
        cudaCheck(cudaMalloc(slots[i].ptr, sizes[i].bytes()));
    }
    size_t attention_scratch = gpt2_attention_scratch_bytes(c, B, T);
    cudaCheck(cudaMalloc(&model->attention_scratch, std::max(attention_scratch, (size_t)16)));
    cudaCheck(cudaMalloc(&model->reduce_scratch, gpt2_reduce_scratch_floats(c, B, T) * sizeof(float)));

    // inputs (input_bytes in the plan)
    size_t bucket_ints = token_bucket_ints(N);
    cudaCheck(cudaMalloc(&model->inputs, N * sizeof(int)));
    cudaCheck(cudaMalloc(&model->targets, N * sizeof(int)));
    cudaCheck(cudaMalloc(&model->doc_start, N * sizeof(int)));
    cudaCheck(cudaMalloc(&model->buckets, bucket_ints * sizeof(int)));
    cudaCheck(cudaMallocHost(&model->inputs_pinned, N * sizeof(int)));
    cudaCheck(cudaMallocHost(&model->targets_pinned, N * sizeof(int)));
    cudaCheck(cudaMallocHost(&model->buckets_pinned, bucket_ints * sizeof(int)));
    cudaCheck(cudaEventCreateWithFlags(&model->inputs_copied, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&model->buckets_copied, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&model->step_read, cudaEventDisableTiming));
    cudaCheck(cudaEventRecord(model->inputs_copied, main_stream));
    cudaCheck(cudaEventRecord(model->buckets_copied, main_stream));
    cudaCheck(cudaMalloc(&model->accumulated_loss, sizeof(float)));
    cudaCheck(cudaMalloc(&model->norm, sizeof(float)));
    cudaCheck(cudaMemset(model->accumulated_loss, 0, sizeof(float)));
    cudaCheck(cudaMemset(model->norm, 0, sizeof(float)));
    cudaCheck(cudaMallocHost(&model->readback_pinned, 2 * sizeof(float)));
    model->mean_loss = -1.0f;
    model->grad_norm = -1.0f;
}

void gpt2_free(GPT2* model) {
    ActivationTensors& a = model->acts;
    void* device_ptrs[] = {model->params_memory, model->grads_memory, model->m_memory, model->v_memory, model->master_weights,
                           a.encoded, a.ln1, a.ln1_mean, a.ln1_rstd, a.qkv, a.atty, a.lse, a.residual2, a.ln2, a.ln2_mean,
                           a.ln2_rstd, a.fch, a.fch_gelu, a.residual3, a.lnf, a.lnf_mean, a.lnf_rstd, a.losses, a.output,
                           model->dresidual, model->dbtc, model->dbt4c, model->attention_scratch,
                           model->reduce_scratch, model->inputs, model->targets, model->doc_start, model->buckets,
                           model->accumulated_loss, model->norm, model->fp8_scales};
    for (void* p : device_ptrs) cudaCheck(cudaFree(p));
    cudaCheck(cudaFreeHost(model->inputs_pinned));
    cudaCheck(cudaFreeHost(model->targets_pinned));
    cudaCheck(cudaFreeHost(model->buckets_pinned));
    cudaCheck(cudaFreeHost(model->readback_pinned));
    cudaCheck(cudaEventDestroy(model->inputs_copied));
    cudaCheck(cudaEventDestroy(model->buckets_copied));
    cudaCheck(cudaEventDestroy(model->step_read));
}

// ----------------------------------------------------------------------------
// FP8 (-fp8 1, 2): the four linears of every block run their forward, dinp and dweight matmuls on FP8 operands (E4M3;
// the gradients E5M2, or E4M3 with -fp8 2) with per-tensor delayed scaling (src/fp8.cuh); the lm head, the attention,
// the layernorms' arithmetic and the optimizer stay as they are. An operand is cast just before its matmul into the
// logits' memory, which no layer reads: the forward writes the logits after the last layer, and the backward has
// consumed them before the first. Some producers write FP8 themselves instead: ln1 and ln2 come out of their layernorm
// in FP8 (fp8_layernorms), the fc matmul writes gelu(.) for fcproj, atty's forward cast keeps its transpose for the
// backward, the MLP's DGELU kernel writes dfch and gelu(fch), the attention's backward dqkv, and the layernorms'
// backward dresidual (the projections' dout; fp8_transpose adds its transpose) as the backward's matmuls read them.
// A layer's four weights are cast in one launch as the layer starts, in the forward and again in the backward (6 bytes
// a parameter a step), so their FP8 copies cost no memory.

enum Fp8Linear { kFp8Qkv, kFp8Attproj, kFp8Fc, kFp8Fcproj, kFp8Linears };
// a layer's slots: the linears' inputs (x), then their weights, then their output gradients
constexpr int kFp8Slots = 3 * kFp8Linears;
inline int fp8_x_slot(int linear) { return linear; }
inline int fp8_w_slot(int linear) { return kFp8Linears + linear; }
inline int fp8_dout_slot(int linear) { return 2 * kFp8Linears + linear; }

size_t gpt2_fp8_state_bytes(const GPT2* model) {
    const size_t slots = (size_t)model->config.num_layers * kFp8Slots;
    return slots * sizeof(Fp8Scale) + slots * kFp8History * sizeof(float);
}

// The logits' memory under -fp8: the casts of one linear (at the largest: the backward's dout both ways and x
// transposed), then a layer's four weights (row-major in the forward, transposed in the backward; fp8_layer_weight),
// then dresidual in FP8 both ways, from the layernorm backward that wrote it to the projection's matmuls that read it.
inline size_t fp8_aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }
size_t gpt2_fp8_scratch_bytes(size_t N, size_t C) { return fp8_aligned(3 * N * 4 * C) + fp8_aligned(12 * C * C) + 2 * N * C; }
struct Fp8Regions { uint8_t *casts, *weights, *dresidual8; };
Fp8Regions fp8_regions(GPT2* model) {
    const size_t N = (size_t)model->B * model->T, C = model->config.channels;
    uint8_t* base = reinterpret_cast<uint8_t*>(model->acts.output);
    return {base, base + fp8_aligned(3 * N * 4 * C), base + fp8_aligned(3 * N * 4 * C) + fp8_aligned(12 * C * C)};
}

inline bool fp8_grads_e5m2(const GPT2* model) { return model->fp8 == 1; }

// after gpt2_allocate_state; before gpt2_load_state, which restores the scales where the checkpoint has them.
// mode 1: the gradients in E5M2, mode 2: in E4M3 like the rest
void gpt2_enable_fp8(GPT2* model, int mode = 1) {
    const GPT2Config& c = model->config;
    const cudaDeviceProp& props = device_props();
    const size_t N = (size_t)model->B * model->T;
    if (!fp8_supported()) exit_on_error(strfmt("-fp8 1 needs FP8 tensor cores (sm_89+); this GPU is sm_%d%d", props.major, props.minor));
    if (N % 16 != 0 || c.channels % 16 != 0)
        exit_on_error(strfmt("-fp8 1 needs B*T and C multiples of 16 (cuBLASLt's FP8 leading dimensions): B*T=%zu C=%d", N, c.channels));
    if (gpt2_fp8_scratch_bytes(N, c.channels) > N * c.padded_vocab_size * sizeof(floatX))
        exit_on_error("-fp8 1: the casts' scratch does not fit the logits' memory");
    const int slots = c.num_layers * kFp8Slots;
    cudaCheck(cudaMalloc(&model->fp8_scales, gpt2_fp8_state_bytes(model)));
    model->fp8_history = reinterpret_cast<float*>(model->fp8_scales + slots);
    std::vector<Fp8Scale> init(slots);
    for (int i = 0; i < slots; i++) init[i] = fp8_scale_init(/*e5m2=*/mode == 1 && i % kFp8Slots >= fp8_dout_slot(0));
    cudaCheck(cudaMemcpy(model->fp8_scales, init.data(), slots * sizeof(Fp8Scale), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemset(model->fp8_history, 0, (size_t)slots * kFp8History * sizeof(float)));
    model->fp8 = mode;
    model->fp8_updates = 0;
}

// the scales of the next step, from this step's amax (every rank's largest: the ranks cast alike)
void gpt2_fp8_update_scales(GPT2* model) {
    const int slots = model->config.num_layers * kFp8Slots;
#ifdef FLASHGPT_NCCL
    if (multi_gpu.world > 1) {   // every field but amax is equal on every rank; non-negative floats order as their bits
        nccl_check(ncclAllReduce(model->fp8_scales, model->fp8_scales, (size_t)slots * sizeof(Fp8Scale) / 4, ncclUint32, ncclMax,
                                 multi_gpu.comm, main_stream), "ncclAllReduce");
        nccl_wait_issued("ncclAllReduce");
    }
#endif
    fp8_update_scales(model->fp8_scales, model->fp8_history, slots, model->fp8_updates, main_stream);
    model->fp8_updates++;
}

// bump allocation in the casts' region, 256-byte aligned
struct Fp8Scratch {
    uint8_t* next;
    uint8_t* take(size_t bytes) { uint8_t* p = next; next += fp8_aligned(bytes); return p; }
};
// the forward's: the linear's x, then the next linear's x where this one writes it in FP8 (the MLP's GELU)
struct Fp8ForwardScratch { uint8_t *x8, *next_x8; };
Fp8ForwardScratch fp8_forward_scratch(GPT2* model) {
    const size_t N = (size_t)model->B * model->T, C = model->config.channels;
    Fp8Scratch scratch{fp8_regions(model).casts};
    Fp8ForwardScratch f;
    f.x8 = scratch.take(N * 4 * C);
    f.next_x8 = scratch.take(N * 4 * C);
    return f;
}

// layer l's four weights in FP8 (E4M3) into the weights' region, in one launch: row-major for the forward's matmuls,
// transposed for the backward's dinp. The calibrating step records their amax only.
void fp8_cast_weights(GPT2* model, int l, bool transposed) {
    const int C = model->config.channels;
    const ParameterTensors& p = model->params;
    uint8_t* region = model->fp8_updates > 0 ? fp8_regions(model).weights : nullptr;   // none: calibrating
    const floatX* w[kFp8Linears] = {p.qkvw, p.attprojw, p.fcw, p.fcprojw};
    Fp8CastJobs jobs = {};
    for (int i = 0; i < kFp8Linears; i++) {
        const Fp8LayerWeight lw = fp8_layer_weight(i, C);
        uint8_t* dst = region ? region + lw.offset : nullptr;
        jobs.job[i] = {transposed ? nullptr : dst, transposed ? dst : nullptr, w[i] + (size_t)l * lw.out * lw.in, lw.out, lw.in,
                       model->fp8_scales + l * kFp8Slots + fp8_w_slot(i)};
    }
    fp8_cast_batch(jobs, kFp8Linears, /*e5m2=*/false, main_stream);
}

// whether the forward's ln1 and ln2 come out of the layernorm in FP8 (-fp8 with scales, each layer's kept: -r <= 1):
// row-major into the forward's scratch for the linear after it, transposed into the first half of the layer's ln1 /
// ln2 memory for that linear's dweight in the backward (no bf16 copy, no casts). The second half of ln1's then holds
// atty transposed, which its forward cast writes beside the row-major copy, for attprojw's gradient.
bool fp8_layernorms(const GPT2* model, int N) {
    return model->fp8 && model->fp8_updates > 0 && model->recompute < 2 && layernorm_forward_fp8_fits(N, model->config.channels);
}

static void fp8_matmul_check(bool ran, const char* what, int m, int n, int k) {
    if (!ran) exit_on_error(strfmt("-fp8 1: cuBLASLt has no FP8 algorithm for the %s (m=%d n=%d k=%d)", what, m, n, k));
}

// out (N, OC) = x (N, K) @ w (OC, K)^T + bias [+ residual] [gelu_pre: out = gelu(.), gelu_pre the pre-GELU values]:
// matmul_forward's contract, in FP8 where -fp8 1 has scales. The forward matmuls accumulate in the tensor cores alone
// (fast accumulation, as Transformer Engine's forward does); the backward's promote into fp32.
// x8: x already in FP8 (at the slot's scale), from the matmul before. out8 (with gelu_pre): out goes to out8 in FP8
// instead, at the scale of the next linear's input, with its amax: returns whether it did (cuBLASLt may have no such
// kernel, and the calibrating step writes bf16). x8T_keep: x's cast also writes x transposed there, for the backward.
// The layer's weights are in FP8 already (fp8_cast_weights).
bool linear_forward(GPT2* model, int layer, int linear, floatX* out, const floatX* x, const floatX* w, const floatX* bias,
                    const floatX* residual, int N, int K, int OC, floatX* gelu_pre, const uint8_t* x8 = nullptr,
                    uint8_t* out8 = nullptr, uint8_t* x8T_keep = nullptr) {
    if (!model->fp8) {
        matmul_forward(out, x, w, bias, residual, N, K, OC, gelu_pre, main_stream);
        return false;
    }
    Fp8Scale* s = model->fp8_scales + layer * kFp8Slots;
    const bool on = model->fp8_updates > 0;   // else calibrating: the casts only record amax
    const Fp8ForwardScratch scratch = fp8_forward_scratch(model);
    if (!on || !x8) fp8_cast(on ? scratch.x8 : nullptr, on ? x8T_keep : nullptr, x, N, K, s + fp8_x_slot(linear), false, main_stream);
    const uint8_t* w8 = fp8_regions(model).weights + fp8_layer_weight(linear, model->config.channels).offset;
    if (!on) {
        matmul_forward(out, x, w, bias, residual, N, K, OC, gelu_pre, main_stream);
        return false;
    }
    if (!x8) x8 = scratch.x8;
    const float* w_scale = &s[fp8_w_slot(linear)].scale_inv;
    const float* x_scale = &s[fp8_x_slot(linear)].scale_inv;
    // column-major out^T (OC, N) = (w8 as (K, OC))^T (x8 as (K, N))
    if (out8) {
        Fp8Scale* next = s + fp8_x_slot(linear + 1);
        if (matmul_fp8(out8, w8, CUDA_R_8F_E4M3, x8, CUDA_R_8F_E4M3, w_scale, x_scale, residual, bias, gelu_pre, OC, N, K,
                       true, main_stream, CUDA_R_8F_E4M3, &next->scale, &next->matmul_amax)) {
            fp8_fold_amax(next, main_stream);
            return true;
        }
    }
    fp8_matmul_check(matmul_fp8(out, w8, CUDA_R_8F_E4M3, x8, CUDA_R_8F_E4M3, w_scale, x_scale, residual, bias, gelu_pre,
                                OC, N, K, true, main_stream), "forward", OC, N, K);
    return false;
}

// dinp (N, K) = dout (N, OC) @ w; dweight (OC, K) += dout^T @ x; dbias (OC) += dout.sum(0) (dinp and dbias may be
// null): matmul_backward's contract without its GELU epilogue, in FP8 where -fp8 1 has scales
// x8T: x already transposed in FP8 (the layernorm, or the MLP's DGELU kernel, wrote it). dout8: dout already in FP8,
// (N, OC) row-major then (OC, N) transposed (the attention's backward, the DGELU kernel or the layernorm's backward
// wrote it; with scales only). The layer's weights are in FP8 already, transposed (fp8_cast_weights).
void linear_backward(GPT2* model, int layer, int linear, floatX* dinp, floatX* dweight, floatX* dbias, float* reduce_scratch,
                     const floatX* dout, const floatX* x, const floatX* w, int N, int K, int OC, const uint8_t* x8T = nullptr,
                     const uint8_t* dout8_given = nullptr) {
    if (!model->fp8) {
        matmul_backward(dinp, dweight, dbias, reduce_scratch, dout, x, w, N, K, OC, nullptr, main_stream);
        return;
    }
    Fp8Scale* s = model->fp8_scales + layer * kFp8Slots;
    const bool on = model->fp8_updates > 0;
    const bool e5m2 = fp8_grads_e5m2(model);
    const cudaDataType_t dout_type = e5m2 ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3;
    Fp8Scratch scratch{fp8_regions(model).casts};
    const uint8_t *dout8 = dout8_given, *dout8T = dout8_given ? dout8_given + (size_t)N * OC : nullptr;
    if (!dout8_given) {
        uint8_t *q = on && dinp ? scratch.take((size_t)N * OC) : nullptr, *qT = on ? scratch.take((size_t)N * OC) : nullptr;
        fp8_cast(q, qT, dout, N, OC, s + fp8_dout_slot(linear), e5m2, main_stream);
        dout8 = q;
        dout8T = qT;
    }
    uint8_t* x8T_cast = on && !x8T ? scratch.take((size_t)N * K) : nullptr;
    const uint8_t* w8T = fp8_regions(model).weights + fp8_layer_weight(linear, model->config.channels).offset;
    if (!on || !x8T) fp8_cast(nullptr, x8T_cast, x, N, K, s + fp8_x_slot(linear), false, main_stream);
    if (!x8T) x8T = x8T_cast;
    if (!on) {
        matmul_backward(dinp, dweight, dbias, reduce_scratch, dout, x, w, N, K, OC, nullptr, main_stream);
        return;
    }
    if (dbias) bias_backward(dbias, reduce_scratch, dout, N, OC, main_stream);
    const float* w_scale = &s[fp8_w_slot(linear)].scale_inv;
    const float* x_scale = &s[fp8_x_slot(linear)].scale_inv;
    const float* dout_scale = &s[fp8_dout_slot(linear)].scale_inv;
    // column-major dinp^T (K, N) = (w8T as (OC, K))^T (dout8 as (OC, N))
    if (dinp) fp8_matmul_check(matmul_fp8(dinp, w8T, CUDA_R_8F_E4M3, dout8, dout_type, w_scale, dout_scale, nullptr, nullptr,
                                          nullptr, K, N, OC, false, main_stream), "dinp", K, N, OC);
    // column-major dweight^T (K, OC) += (x8T as (N, K))^T (dout8T as (N, OC))
    fp8_matmul_check(matmul_fp8(dweight, x8T, CUDA_R_8F_E4M3, dout8T, dout_type, x_scale, dout_scale, dweight, nullptr,
                                nullptr, K, OC, N, false, main_stream), "dweight", K, OC, N);
}

// ----------------------------------------------------------------------------
// forward: inputs (B, T) host token ids -> logits in acts.output (B, T, Vp).
// targets (B, T) may be null (sampling); they are copied now for the loss later.

void gpt2_forward(GPT2* model, const int* inputs, const int* targets, int B, int T) {
    NVTX_RANGE_FN();
    const GPT2Config& cfg = model->config;
    if (B > model->B || T > model->T) {
        fprintf(stderr, "gpt2_forward: B=%d T=%d exceeds the allocated B=%d T=%d\n", B, T, model->B, model->T);
        exit(EXIT_FAILURE);
    }
    int L = cfg.num_layers, C = cfg.channels, NH = cfg.num_heads, HS = C / NH, Vp = cfg.padded_vocab_size;
    int N = B * T;
    size_t NA = (size_t)model->B * model->T;  // per-layer stride: the allocated size
    // the previous micro-step's copy must have left the pinned buffers before they are refilled
    cudaCheck(cudaEventSynchronize(model->inputs_copied));
    memcpy(model->inputs_pinned, inputs, N * sizeof(int));
    cudaCheck(cudaMemcpyAsync(model->inputs, model->inputs_pinned, N * sizeof(int), cudaMemcpyHostToDevice, main_stream));
    if (targets) {
        memcpy(model->targets_pinned, targets, N * sizeof(int));
        cudaCheck(cudaMemcpyAsync(model->targets, model->targets_pinned, N * sizeof(int), cudaMemcpyHostToDevice, main_stream));
    }
    cudaCheck(cudaEventRecord(model->inputs_copied, main_stream));
    const int* doc_start = model->document_masking ? model->doc_start : nullptr;   // for the attention: -dm 1
    if (doc_start) document_starts(model->doc_start, model->inputs, B, T, kEndOfText, main_stream);

    ParameterTensors p = model->params;
    ActivationTensors a = model->acts;
    encoder_forward(a.encoded, model->inputs, p.wte, p.wpe, B, T, C, main_stream);
    const bool ln_fp8 = fp8_layernorms(model, N);
    uint8_t* ln8 = ln_fp8 ? fp8_forward_scratch(model).x8 : nullptr;   // a layernorm's FP8 output, row-major
    // a layernorm in front of layer l's `linear`: with ln_fp8, FP8 out (row-major into ln8, transposed into out's memory)
    // at that linear's input scale
    auto layernorm = [&](floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* w, const floatX* b, int l, int linear) {
        if (ln_fp8) layernorm_forward_fp8(ln8, reinterpret_cast<uint8_t*>(out), mean, rstd, inp, w, b, N, C,
                                          model->fp8_scales + l * kFp8Slots + fp8_x_slot(linear), main_stream);
        else layernorm_forward(out, mean, rstd, inp, w, b, N, C, main_stream);
    };
    layernorm(a.ln1, a.ln1_mean, a.ln1_rstd, a.encoded, p.ln1w, p.ln1b, 0, kFp8Qkv);
    floatX* residual = a.encoded;
    for (int l = 0; l < L; l++) {
        NvtxRange layer_range("forward layer", l);
        size_t ln_off = model->recompute >= 2 ? 0 : l * NA * C;
        size_t gelu_off = model->recompute >= 1 ? 0 : l * NA * 4 * C;
        floatX* ln1 = a.ln1 + ln_off;                  // (N, C), computed by the previous layer's last layernorm
        floatX* qkv = a.qkv + l * NA * 3 * C;          // (N, 3C)
        floatX* atty = a.atty + l * NA * C;            // (N, C)
        float* lse = a.lse + l * NA * NH;              // (B, NH, T)
        floatX* residual2 = a.residual2 + l * NA * C;  // (N, C)
        floatX* ln2 = a.ln2 + ln_off;                  // (N, C)
        floatX* fch = a.fch + l * NA * 4 * C;          // (N, 4C)
        floatX* fch_gelu = a.fch_gelu + gelu_off;      // (N, 4C)
        floatX* residual3 = a.residual3 + l * NA * C;  // (N, C)
        if (model->fp8) fp8_cast_weights(model, l, /*transposed=*/false);

        // qkv = ln1 @ qkvw^T + qkvb; attention; x = x + attproj(atty) (the add in the matmul's epilogue); ln2 = layernorm(x)
        linear_forward(model, l, kFp8Qkv, qkv, ln1, p.qkvw + (size_t)l * 3 * C * C, p.qkvb + l * 3 * C, nullptr, N, C, 3 * C, nullptr, ln8);
        attention_forward(atty, lse, qkv, B, T, NH, HS, main_stream, doc_start);
        // with the FP8 layernorms, ln1's memory (2 bytes an element) holds ln1 transposed in FP8, then atty transposed
        uint8_t* atty8T = ln_fp8 ? reinterpret_cast<uint8_t*>(ln1) + (size_t)N * C : nullptr;
        linear_forward(model, l, kFp8Attproj, residual2, atty, p.attprojw + (size_t)l * C * C, p.attprojb + l * C, residual, N, C, C,
                       nullptr, nullptr, nullptr, atty8T);
        layernorm(ln2, a.ln2_mean + l * NA, a.ln2_rstd + l * NA, residual2, p.ln2w + l * C, p.ln2b + l * C, l, kFp8Fc);
        // MLP: fch = ln2 @ fcw^T + fcb; x = x + gelu(fch) @ fcprojw^T + fcprojb
        // -fp8 1 with the GELU in the epilogue and recomputed for the backward (-r >= 1): the fc matmul writes gelu(fch)
        // in FP8 for fcproj directly, no bf16 copy
        uint8_t* gelu8 = model->fp8 && model->recompute >= 1 ? fp8_forward_scratch(model).next_x8 : nullptr;
        bool gelu8_written = false;
        if (model->gelu_fusion >= 1) {
            gelu8_written = linear_forward(model, l, kFp8Fc, fch_gelu, ln2, p.fcw + (size_t)l * 4 * C * C, p.fcb + l * 4 * C, nullptr,
                                           N, C, 4 * C, fch, ln8, gelu8);
        } else {
            linear_forward(model, l, kFp8Fc, fch, ln2, p.fcw + (size_t)l * 4 * C * C, p.fcb + l * 4 * C, nullptr, N, C, 4 * C, nullptr, ln8);
            gelu_forward(fch_gelu, fch, (size_t)N * 4 * C, main_stream);
        }
        linear_forward(model, l, kFp8Fcproj, residual3, fch_gelu, p.fcprojw + (size_t)l * C * 4 * C, p.fcprojb + l * C, residual2,
                       N, 4 * C, C, nullptr, gelu8_written ? gelu8 : nullptr);
        // the next layernorm: the next layer's ln1, or lnf after the last layer
        if (l + 1 < L) {
            size_t next_ln_off = model->recompute >= 2 ? 0 : (l + 1) * NA * C;
            layernorm(a.ln1 + next_ln_off, a.ln1_mean + (l + 1) * NA, a.ln1_rstd + (l + 1) * NA, residual3, p.ln1w + (l + 1) * C,
                      p.ln1b + (l + 1) * C, l + 1, kFp8Qkv);
        } else {
            layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, residual3, p.lnfw, p.lnfb, N, C, main_stream);
        }
        residual = residual3;
    }
    // logits = lnf @ wte^T (tied weights, no bias)
    matmul_forward_lm_head(a.output, a.lnf, p.wte, N, C, Vp, main_stream);
}

// loss only (validation): adds mean loss * loss_scale to accumulated_loss
void gpt2_validate(GPT2* model, int B, int T, float loss_scale) {
    const GPT2Config& cfg = model->config;
    int N = B * T;
    fused_classifier(model->acts.output, model->acts.losses, model->targets, 0.0f, N, cfg.vocab_size,
                     cfg.padded_vocab_size, /*write_dlogits=*/false, main_stream);
    accumulate_loss(model->accumulated_loss, model->acts.losses, N, loss_scale / N, main_stream);
}

// ----------------------------------------------------------------------------
// backward: after gpt2_forward with targets. Accumulates into the grads (zeroed by gpt2_zero_grad).

void gpt2_zero_grad(GPT2* model) {
    cudaCheck(cudaMemsetAsync(model->grads_memory, 0, model->num_parameters * sizeof(floatX), main_stream));
    cudaCheck(cudaMemsetAsync(model->accumulated_loss, 0, sizeof(float), main_stream));
}

void gpt2_backward(GPT2* model, const int* inputs, int grad_accum_steps) {
    NVTX_RANGE_FN();
    const GPT2Config& cfg = model->config;
    int B = model->B, T = model->T, N = B * T;
    int L = cfg.num_layers, C = cfg.channels, NH = cfg.num_heads, HS = C / NH, V = cfg.vocab_size, Vp = cfg.padded_vocab_size;
    size_t NA = (size_t)N;
    ParameterTensors p = model->params, g = model->grads;
    ActivationTensors a = model->acts;
    float* scratch = model->reduce_scratch;
    const bool ln_fp8 = fp8_layernorms(model, N);   // as the forward: ln1 and ln2 hold their FP8 transposes
    // -fp8 with scales: each layernorm backward writes dresidual in FP8 too, at the scale of the dout of the projection
    // before it (layer l's attproj, or layer l's fcproj after layer l + 1's ln1 and after lnf), and fp8_transpose
    // adds its transpose: the projection's matmuls read both, and no cast reads dresidual back
    const bool fp8_scaled = model->fp8 && model->fp8_updates > 0;   // -fp8 past its calibrating step
    uint8_t* dres8 = fp8_scaled ? fp8_regions(model).dresidual8 : nullptr;   // (N, C), then (C, N)
    Fp8Copy dres8_out;
    auto dres8_for = [&](int l, int linear) -> const Fp8Copy* {
        Fp8Scale* slot = model->fp8_scales + l * kFp8Slots + fp8_dout_slot(linear);
        dres8_out = {dres8, &slot->scale, &slot->amax, fp8_grads_e5m2(model)};
        return fp8_scaled ? &dres8_out : nullptr;
    };
    auto dres8_transpose = [&](const Fp8Copy* f8) { if (f8) fp8_transpose(dres8 + NA * C, dres8, N, C, main_stream); };

    // token buckets for the deterministic dwte backward, built on the host while the GPU works
    model->num_buckets = build_token_buckets(model->bucket_host, model->bucket_counts, inputs, N, V);
    cudaCheck(cudaEventSynchronize(model->buckets_copied));
    memcpy(model->buckets_pinned, model->bucket_host.data(), model->bucket_host.size() * sizeof(int));
    cudaCheck(cudaMemcpyAsync(model->buckets, model->buckets_pinned, model->bucket_host.size() * sizeof(int),
                              cudaMemcpyHostToDevice, main_stream));
    cudaCheck(cudaEventRecord(model->buckets_copied, main_stream));

    // loss and dlogits in one pass; the objective is the mean over all B*T*grad_accum_steps tokens
    float dloss = 1.0f / (float)(N * grad_accum_steps);
    fused_classifier(a.output, a.losses, model->targets, dloss, N, V, Vp, /*write_dlogits=*/true, main_stream);
    accumulate_loss(model->accumulated_loss, a.losses, N, dloss, main_stream);

    // classifier: dlnf = dlogits @ wte; dwte += dlogits^T @ lnf
    matmul_backward(model->dbtc, g.wte, nullptr, scratch, a.output, a.lnf, p.wte, N, C, Vp, nullptr, main_stream);
    cudaCheck(cudaMemsetAsync(model->dresidual, 0, NA * C * sizeof(floatX), main_stream));
    // the residual stream's gradient: the last layer's fcproj takes it as dout, so its bias gradient is summed here
    const Fp8Copy* lnf_dres8 = dres8_for(L - 1, kFp8Fcproj);
    layernorm_backward(model->dresidual, g.lnfw, g.lnfb, scratch, model->dbtc, a.residual3 + (L - 1) * NA * C, p.lnfw,
                       a.lnf_mean, a.lnf_rstd, N, C, main_stream, g.fcprojb + (L - 1) * C, lnf_dres8);
    dres8_transpose(lnf_dres8);

    for (int l = L - 1; l >= 0; l--) {
        NvtxRange layer_range("backward layer", l);
        size_t ln_off = model->recompute >= 2 ? 0 : l * NA * C;
        size_t gelu_off = model->recompute >= 1 ? 0 : l * NA * 4 * C;
        floatX* residual = l == 0 ? a.encoded : a.residual3 + (l - 1) * NA * C;
        floatX* ln1 = a.ln1 + ln_off;
        float* ln1_mean = a.ln1_mean + l * NA;
        float* ln1_rstd = a.ln1_rstd + l * NA;
        floatX* qkv = a.qkv + l * NA * 3 * C;
        floatX* atty = a.atty + l * NA * C;
        float* lse = a.lse + l * NA * NH;
        floatX* residual2 = a.residual2 + l * NA * C;
        floatX* ln2 = a.ln2 + ln_off;
        float* ln2_mean = a.ln2_mean + l * NA;
        float* ln2_rstd = a.ln2_rstd + l * NA;
        floatX* fch = a.fch + l * NA * 4 * C;
        floatX* fch_gelu = a.fch_gelu + gelu_off;
        floatX* dresidual = model->dresidual;  // (N, C) gradient w.r.t. the residual stream, accumulated
        floatX* dbtc = model->dbtc;
        floatX* dbt4c = model->dbt4c;
        if (model->fp8) fp8_cast_weights(model, l, /*transposed=*/true);

        // recompute what was not kept (deterministic: the same kernels on the same inputs)
        if (model->recompute >= 2) {
            layernorm_forward(ln1, nullptr, nullptr, residual, p.ln1w + l * C, p.ln1b + l * C, N, C, main_stream);
            layernorm_forward(ln2, nullptr, nullptr, residual2, p.ln2w + l * C, p.ln2b + l * C, N, C, main_stream);
        }
        // MLP projection: dfch = (dresidual @ fcprojw) * gelu'(fch). On Hopper (-ge 2) one kernel does that, writes the
        // recomputed gelu(fch) for fcprojw's gradient, and sums dfch over each 64 rows for fcb's gradient. fcprojb's
        // gradient is already summed, by the layernorm backward that wrote dresidual.
        // -fp8 with scales and -r >= 1: the kernel multiplies FP8 operands (dresidual both ways in the gradient format,
        // whose transpose fcprojw's gradient reads too, and fcprojw transposed, both cast already), and writes
        // dfch in FP8 instead, both ways, into dbt4c's memory (fc's dinp and dweight read it) with its amax, and gelu(fch)
        // transposed into fch_gelu's (fcprojw's gradient; its amax is the forward's, where the fc matmul wrote it)
        const floatX* fcprojw = p.fcprojw + (size_t)l * C * 4 * C;
        const bool fp8_outputs = fp8_scaled && model->recompute >= 1 && model->gelu_fusion >= 2 &&
                                 matmul_dgelu_hopper_supported(N, 4 * C, C, /*fp8=*/true);   // else the casts below would be for nothing
        uint8_t* dfch8 = reinterpret_cast<uint8_t*>(dbt4c);   // (N, 4C), then (4C, N)
        uint8_t* gelu8T = reinterpret_cast<uint8_t*>(fch_gelu);
        DgeluFp8Out f8 = {};
        if (fp8_outputs) {
            Fp8Scale* s = model->fp8_scales + l * kFp8Slots;
            Fp8Scale *dfch_slot = s + fp8_dout_slot(kFp8Fc), *gelu_slot = s + fp8_x_slot(kFp8Fcproj);
            Fp8Scale *dres_slot = s + fp8_dout_slot(kFp8Fcproj), *w_slot = s + fp8_w_slot(kFp8Fcproj);
            const uint8_t* fcprojw8T = fp8_regions(model).weights + fp8_layer_weight(kFp8Fcproj, C).offset;
            f8 = {dfch8, dfch8 + (size_t)N * 4 * C, gelu8T, &dfch_slot->scale, &gelu_slot->scale, &dfch_slot->amax, fp8_grads_e5m2(model),
                  dres8, fcprojw8T, &dres_slot->scale_inv, &w_slot->scale_inv};
        }
        const bool dgelu_fused = model->gelu_fusion >= 2 &&
            matmul_backward_dgelu_hopper(dbt4c, model->recompute >= 1 ? fch_gelu : nullptr, scratch, dresidual, fcprojw, fch, N, 4 * C, C,
                                         main_stream, fp8_outputs ? &f8 : nullptr);
        if (dgelu_fused) {
            reduce_partials_add(g.fcb + l * 4 * C, nullptr, scratch, matmul_dgelu_partial_rows(N), 4 * C, main_stream);
            linear_backward(model, l, kFp8Fcproj, nullptr, g.fcprojw + (size_t)l * C * 4 * C, nullptr, scratch, dresidual,
                            fch_gelu, fcprojw, N, 4 * C, C, fp8_outputs ? gelu8T : nullptr, dres8);
        } else {
            if (model->recompute >= 1) gelu_forward(fch_gelu, fch, (size_t)N * 4 * C, main_stream);
            if (model->gelu_fusion >= 2) {   // cuBLASLt's DGELU epilogue: bf16 (-fp8 1 takes the Hopper kernel's path above)
                matmul_backward(dbt4c, g.fcprojw + (size_t)l * C * 4 * C, nullptr, scratch, dresidual, fch_gelu, fcprojw,
                                N, 4 * C, C, fch, main_stream);
            } else {
                linear_backward(model, l, kFp8Fcproj, dbt4c, g.fcprojw + (size_t)l * C * 4 * C, nullptr, scratch, dresidual,
                                fch_gelu, fcprojw, N, 4 * C, C, nullptr, dres8);
                gelu_backward_inplace(dbt4c, fch, (size_t)N * 4 * C, main_stream);
            }
        }
        // MLP up: dln2 = dfch @ fcw
        linear_backward(model, l, kFp8Fc, dbtc, g.fcw + (size_t)l * 4 * C * C, dgelu_fused ? nullptr : g.fcb + l * 4 * C, scratch,
                        dbt4c, ln2, p.fcw + (size_t)l * 4 * C * C, N, C, 4 * C, ln_fp8 ? reinterpret_cast<const uint8_t*>(ln2) : nullptr,
                        fp8_outputs ? dfch8 : nullptr);
        const Fp8Copy* ln2_dres8 = dres8_for(l, kFp8Attproj);
        layernorm_backward(dresidual, g.ln2w + l * C, g.ln2b + l * C, scratch, dbtc, residual2, p.ln2w + l * C,
                           ln2_mean, ln2_rstd, N, C, main_stream, g.attprojb + l * C, ln2_dres8);
        dres8_transpose(ln2_dres8);
        // attention projection: datty = dresidual @ attprojw (attprojb's gradient summed just above)
        linear_backward(model, l, kFp8Attproj, dbtc, g.attprojw + (size_t)l * C * C, nullptr, scratch, dresidual, atty,
                        p.attprojw + (size_t)l * C * C, N, C, C, ln_fp8 ? reinterpret_cast<const uint8_t*>(ln1) + (size_t)N * C : nullptr,
                        dres8);
        // attention: dqkv (N, 3C) into dbt4c, from out + lse only. Where it can, the attention also sums dqkv over each
        // 16 tokens: those partials give the qkv bias gradient without another pass over dqkv. -fp8 with scales, where
        // it can: dqkv comes out in FP8 instead, both ways, into dbt4c's memory (the qkv linear's backward reads it so,
        // with no cast), its amax into the qkv linear's gradient slot
        const bool dqkv_fp8 = fp8_scaled && attention_backward_writes_dqkv8(T, HS, model->document_masking);
        uint8_t* dqkv8 = reinterpret_cast<uint8_t*>(dbt4c);   // (N, 3C), then (3C, N)
        Fp8Copy dqkv8_out = {};
        if (dqkv_fp8) {
            Fp8Scale* slot = model->fp8_scales + l * kFp8Slots + fp8_dout_slot(kFp8Qkv);
            dqkv8_out = {dqkv8, &slot->scale, &slot->amax, fp8_grads_e5m2(model)};
        }
        const bool qkvb_summed = attention_backward(dbt4c, model->attention_scratch, dbtc, qkv, atty, lse, B, T, NH, HS, main_stream,
                                                    model->document_masking ? model->doc_start : nullptr, scratch,
                                                    dqkv_fp8 ? &dqkv8_out : nullptr);
        if (qkvb_summed) reduce_partials_add(g.qkvb + l * 3 * C, nullptr, scratch, B * ceil_div(T, 16), 3 * C, main_stream);
        // qkv: dln1 = dqkv @ qkvw
        linear_backward(model, l, kFp8Qkv, dbtc, g.qkvw + (size_t)l * 3 * C * C, qkvb_summed ? nullptr : g.qkvb + l * 3 * C, scratch,
                        dbt4c, ln1, p.qkvw + (size_t)l * 3 * C * C, N, C, 3 * C, ln_fp8 ? reinterpret_cast<const uint8_t*>(ln1) : nullptr,
                        dqkv_fp8 ? dqkv8 : nullptr);
        const Fp8Copy* ln1_dres8 = l > 0 ? dres8_for(l - 1, kFp8Fcproj) : nullptr;
        layernorm_backward(dresidual, g.ln1w + l * C, g.ln1b + l * C, scratch, dbtc, residual, p.ln1w + l * C,
                           ln1_mean, ln1_rstd, N, C, main_stream, l > 0 ? g.fcprojb + (l - 1) * C : nullptr, ln1_dres8);
        dres8_transpose(ln1_dres8);
    }
    encoder_backward(g.wte, g.wpe, model->dresidual, model->buckets, model->num_buckets, B, T, C, main_stream);
}

// global norm of the grads (stays on the GPU), and the copies of loss and norm to the host, queued:
// gpt2_read_step waits for them. The update may be queued in between (adamw skips a non-finite step itself).
void gpt2_queue_step_end(GPT2* model) {
    multi_gpu_average(model->accumulated_loss, 1, false, main_stream);
    if (multi_gpu.zero_stage == 1 && multi_gpu.world > 1) {
        // ZeRO-1: each rank gets the ranks' mean of its own shard only, and the norm sums the shards' squares
        multi_gpu_reduce_shards(model->grads_memory, model->num_parameters, main_stream);
        global_norm(model->norm, model->reduce_scratch, model->grads_memory + model->shard.offset, model->shard.size, main_stream, true);
        multi_gpu_sum(model->norm, main_stream);
        sqrt_in_place_kernel<<<1, 1, 0, main_stream>>>(model->norm);
        cudaCheck(cudaGetLastError());
    } else {
        multi_gpu_average(model->grads_memory, model->num_parameters, true, main_stream);   // data parallel: the ranks' mean
        global_norm(model->norm, model->reduce_scratch, model->grads_memory, model->num_parameters, main_stream);
    }
    if (model->fp8) gpt2_fp8_update_scales(model);   // the step's casts are done; the next step's scales
    cudaCheck(cudaMemcpyAsync(&model->readback_pinned[0], model->accumulated_loss, sizeof(float), cudaMemcpyDeviceToHost, main_stream));
    cudaCheck(cudaMemcpyAsync(&model->readback_pinned[1], model->norm, sizeof(float), cudaMemcpyDeviceToHost, main_stream));
    cudaCheck(cudaEventRecord(model->step_read, main_stream));
}

void gpt2_read_step(GPT2* model) {
    wait_event(model->step_read);
    model->mean_loss = model->readback_pinned[0];
    model->grad_norm = model->readback_pinned[1];
}

void gpt2_finish_step(GPT2* model) {
    gpt2_queue_step_end(model);
    gpt2_read_step(model);
}

// t: the step number counted from 1 (bias correction)
void gpt2_update(GPT2* model, float learning_rate, float beta1, float beta2, float eps, float weight_decay,
                 float max_norm, int t) {
    // the tensors' offsets relative to this rank's first parameter (all of them unless ZeRO-1)
    const size_t off = model->shard.offset;
    AdamWTensorTable table;
    table.offsets[0] = 0;
    size_t end = 0;
    for (int i = 0; i < NUM_PARAMETER_TENSORS; i++) {
        end += model->param_sizes[i];
        table.offsets[i + 1] = end > off ? end - off : 0;
        table.weight_decay[i] = parameter_gets_weight_decay(i) ? weight_decay : 0.0f;
    }
    if (model->shard.size > 0)
        adamw_update(model->params_memory + off, model->master_weights, model->grads_memory + off, model->m_memory, model->v_memory,
                     model->shard.size, table, model->norm, model->accumulated_loss, max_norm, learning_rate, beta1, beta2, t, eps,
                     model->stochastic_rounding, model->rounding_seed, main_stream, off);
    if (multi_gpu.zero_stage == 1) multi_gpu_gather_shards(model->params_memory, model->num_parameters, main_stream);
}

// ----------------------------------------------------------------------------
// checkpoints: model_%08d.bin + state_%08d_%05d.bin + DONE_%08d (see src/checkpoint.h)

template <class T>
std::vector<T> device_to_host(const T* device, size_t n) {
    std::vector<T> host(n);
    cudaCheck(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
}

void gpt2_write_model(GPT2* model, const char* path) {
    int header[CKPT_HEADER_INTS];
    model_header_fill(header, model->config);
    std::vector<floatX> params = device_to_host(model->params_memory, model->num_parameters);
    exit_on_error(write_file_atomic(path, {{header, sizeof(header)}, {params.data(), params.size() * sizeof(floatX)}}));
}

void gpt2_write_checkpoint(GPT2* model, const char* dir, int step, const DataLoader* loader) {
    NVTX_RANGE_FN();
    cudaCheck(cudaDeviceSynchronize());
    if (multi_gpu.rank == 0) gpt2_write_model(model, checkpoint_model_path(dir, step).c_str());
    TrainState s;
    s.num_processes = loader->num_processes;
    s.process_rank = loader->process_rank;
    s.use_master_weights = model->use_master_weights;
    s.shuffle = loader->should_shuffle;
    s.step = step;
    s.rng_state = model->rng_state;
    s.shard_idx = loader->current_shard_idx;
    s.sample_idx = loader->current_sample_idx;
    s.epoch = loader->epoch;
    s.num_parameters = model->num_parameters;
    s.fp8_updates = model->fp8 ? model->fp8_updates : 0;
    s.fp8_mode = model->fp8;
    s.fp8_state_bytes = model->fp8 ? gpt2_fp8_state_bytes(model) : 0;
    int header[CKPT_HEADER_INTS];
    state_header_fill(header, s);
    size_t n = model->shard.size;   // ZeRO-1: this rank's shard of the optimizer state
    std::vector<float> m = device_to_host(model->m_memory, n), v = device_to_host(model->v_memory, n), master;
    std::vector<FileChunk> chunks = {{header, sizeof(header)}, {m.data(), n * sizeof(float)}, {v.data(), n * sizeof(float)}};
    if (model->use_master_weights) {
        master = device_to_host(model->master_weights, n);
        chunks.push_back({master.data(), n * sizeof(float)});
    }
    std::vector<uint8_t> fp8_state;
    if (model->fp8) {
        fp8_state = device_to_host(reinterpret_cast<const uint8_t*>(model->fp8_scales), s.fp8_state_bytes);
        chunks.push_back({fp8_state.data(), fp8_state.size()});
    }
    exit_on_error(write_file_atomic(checkpoint_state_path(dir, step, s.process_rank).c_str(), chunks));
    multi_gpu_barrier();   // every rank's state is on disk before the checkpoint counts as done
    if (multi_gpu.rank == 0) exit_on_error(write_file_atomic(checkpoint_done_path(dir, step).c_str(), {}));
}

// Validates a state file against the model; returns the state (the optimizer moments are loaded).
TrainState gpt2_load_state(GPT2* model, const char* path, int num_processes, int process_rank) {
    FILE* fp = fopen(path, "rb");
    if (fp == nullptr) exit_on_error(strfmt("state file '%s' could not be opened: %s", path, strerror(errno)));
    int header[CKPT_HEADER_INTS];
    if (fread(header, sizeof(int), CKPT_HEADER_INTS, fp) != CKPT_HEADER_INTS) exit_on_error(strfmt("state file '%s' is truncated", path));
    TrainState s;
    exit_on_error(state_header_parse(header, path, &s));
    size_t n = model->shard.size;   // ZeRO-1: this rank's shard of the optimizer state
    exit_on_error(state_check_compatible(s, path, model->num_parameters, num_processes, process_rank, model->use_master_weights, n));
    std::vector<float> buf(n);
    float* targets[3] = {model->m_memory, model->v_memory, model->master_weights};
    for (int k = 0; k < 2 + model->use_master_weights; k++) {
        freadCheck(buf.data(), sizeof(float), n, fp);
        cudaCheck(cudaMemcpy(targets[k], buf.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    }
    // the FP8 scales: restored where this run has -fp8 in the same mode (none: ignored); a state without them, or of
    // the other mode, calibrates afresh
    if (model->fp8 && s.fp8_state_bytes > 0 && s.fp8_mode == model->fp8) {
        if (s.fp8_state_bytes != gpt2_fp8_state_bytes(model))
            exit_on_error(strfmt("state file '%s' has %zu bytes of FP8 scaling state, this model %zu", path, s.fp8_state_bytes,
                                 gpt2_fp8_state_bytes(model)));
        std::vector<uint8_t> fp8_state(s.fp8_state_bytes);
        freadCheck(fp8_state.data(), 1, fp8_state.size(), fp);
        cudaCheck(cudaMemcpy(model->fp8_scales, fp8_state.data(), fp8_state.size(), cudaMemcpyHostToDevice));
        model->fp8_updates = s.fp8_updates;
    }
    fcloseCheck(fp);
    model->rng_state = s.rng_state;
    return s;
}

// ----------------------------------------------------------------------------
// inference with a KV cache (src/kvcache.cuh): the prompts go through the normal forward once (prefill), which leaves
// every layer's K and V in the caches; then each step runs the layers on each sequence's newest token only (B rows)
// and attends over the cache. Sampling runs on the GPU (src/sampler.cuh), so a step needs nothing from the host and
// the host reads back only the B sampled tokens.

typedef struct {
    int B, Tp, Tmax;            // slots (sequences at once), prefill rows per sequence (the longest prompt), cache capacity
    int gelu_fusion;
    SamplerSettings sampler;
    int stop_token;             // a sequence freezes after sampling it (-1: none)
    // per layer K and V (null without a KV cache: the full-recompute path uses only the sampler state): contiguous
    // (L, B, Tmax, NH, HS), or paged (L, pages, page_size, NH, HS) with block_table (B, pages_per_seq), the pool's
    // pages and the sink (generate.h's GenerateSchedule)
    floatX* k_cache;
    floatX* v_cache;
    size_t cache_positions;     // per layer: B * Tmax, or pages * page_size
    int page_size, pages_per_seq;   // page_size 0: contiguous
    int* block_table;
    // one layer's activations for up to B * Tp rows (prefill); a decode step uses the first B rows
    floatX* residual;           // (B*Tp, C) the residual stream, updated in place
    floatX* ln;                 // (B*Tp, C) ln1, ln2, then lnf
    floatX* qkv;                // (B*Tp, 3C) = (B, Tp, 3, NH, HS)
    floatX* atty;               // (B*Tp, C)
    float* lse;                 // (B, NH, Tp) prefill attention's, unused after
    floatX* fch;                // (B*Tp, 4C) pre-GELU
    floatX* fch_gelu;           // (B*Tp, 4C)
    floatX* lnf_newest;         // (B, C) lnf of each sequence's newest prompt token
    int* prompt_tokens;         // (B, Tp)
    // sampler state
    floatX* logits;             // (B, Vp) of each sequence's newest token
    int* history;               // (B, Tmax) prompt + generated tokens
    int* lengths;               // (B) tokens so far per sequence: seqlens_k of the next decode step
    int* limits;                // (B) the length at which a sequence freezes (prompt + n, or at its stop token)
    int* coin_ids;              // (B) the request each row serves: its sampling coins' stream
    int* next_tokens;           // (B) the tokens the last sampler call picked
    int* next_pinned;           // (2, B) host copies of next_tokens, double-buffered
    int* first_pinned;          // (B) host: the token of a request's own prefill (gpt2_generate)
    cudaEvent_t next_copied[2];
    int use_graph;              // a decode step (+ sampling) replays as one CUDA graph
    int eager_steps;            // decode steps run eagerly so far; the graph is captured after the first
    cudaGraphExec_t decode_graph;
} GPT2Inference;

template <class T> void cuda_alloc(T** p, size_t n) { cudaCheck(cudaMalloc(p, std::max(n, (size_t)1) * sizeof(T))); }

// B slots, prompts of up to Tp tokens, Tmax positions in all (prompt + new tokens). kv_cache false: only the
// sampler state (the full-recompute path runs gpt2_forward on the model's own activations). schedule (optional): with
// a page size, the caches as its pool of pages and the sink instead of B rows of Tmax positions. Every row starts idle.
void gpt2_inference_allocate(GPT2Inference* inf, const GPT2Config& c, int B, int Tp, int Tmax, bool kv_cache,
                             int gelu_fusion, const SamplerSettings& sampler, int stop_token, bool use_graph,
                             const GenerateSchedule* schedule = nullptr) {
    memset(inf, 0, sizeof(*inf));
    inf->B = B;
    inf->Tp = Tp;
    inf->Tmax = Tmax;
    inf->gelu_fusion = gelu_fusion;
    inf->sampler = sampler;
    inf->stop_token = stop_token;
    inf->use_graph = use_graph;
    size_t L = c.num_layers, C = c.channels, NH = c.num_heads, N = (size_t)B * Tp;
    const bool paged = schedule && schedule->page_size;
    if (kv_cache) {
        inf->cache_positions = paged ? (size_t)(schedule->pool_pages + 1) * schedule->page_size : (size_t)B * Tmax;
        cuda_alloc(&inf->k_cache, L * inf->cache_positions * C);
        cuda_alloc(&inf->v_cache, L * inf->cache_positions * C);
        // finite keys and values wherever an idle row reads
        cudaCheck(cudaMemset(inf->k_cache, 0, L * inf->cache_positions * C * sizeof(floatX)));
        cudaCheck(cudaMemset(inf->v_cache, 0, L * inf->cache_positions * C * sizeof(floatX)));
        if (paged) {
            inf->page_size = schedule->page_size;
            inf->pages_per_seq = schedule->pages_per_seq;
            cuda_alloc(&inf->block_table, schedule->block_table.size());
            cudaCheck(cudaMemcpy(inf->block_table, schedule->block_table.data(), schedule->block_table.size() * sizeof(int),
                                 cudaMemcpyHostToDevice));
        }
        cuda_alloc(&inf->residual, N * C);
        cuda_alloc(&inf->ln, N * C);
        cuda_alloc(&inf->qkv, N * 3 * C);
        cuda_alloc(&inf->atty, N * C);
        cuda_alloc(&inf->lse, N * NH);
        cuda_alloc(&inf->fch, N * 4 * C);
        cuda_alloc(&inf->fch_gelu, N * 4 * C);
        cuda_alloc(&inf->lnf_newest, (size_t)B * C);
        cuda_alloc(&inf->prompt_tokens, N);
    }
    cuda_alloc(&inf->logits, (size_t)B * c.padded_vocab_size);
    cuda_alloc(&inf->history, (size_t)B * Tmax);
    cuda_alloc(&inf->lengths, (size_t)B);
    cuda_alloc(&inf->limits, (size_t)B);
    cuda_alloc(&inf->coin_ids, (size_t)B);
    cuda_alloc(&inf->next_tokens, (size_t)B);
    // idle rows: one token (id 0) at position 0, frozen
    cudaCheck(cudaMemset(inf->history, 0, (size_t)B * Tmax * sizeof(int)));
    cudaCheck(cudaMemset(inf->limits, 0, (size_t)B * sizeof(int)));
    cudaCheck(cudaMemset(inf->coin_ids, 0, (size_t)B * sizeof(int)));
    const std::vector<int> ones(B, 1);
    cudaCheck(cudaMemcpy(inf->lengths, ones.data(), B * sizeof(int), cudaMemcpyHostToDevice));
    cudaCheck(cudaMallocHost(&inf->next_pinned, 2 * B * sizeof(int)));
    cudaCheck(cudaMallocHost(&inf->first_pinned, B * sizeof(int)));
    for (int i = 0; i < 2; i++) cudaCheck(cudaEventCreateWithFlags(&inf->next_copied[i], cudaEventDisableTiming));
}

void gpt2_inference_free(GPT2Inference* inf) {
    void* device_ptrs[] = {inf->k_cache, inf->v_cache, inf->block_table, inf->residual, inf->ln, inf->qkv,
                           inf->atty, inf->lse, inf->fch, inf->fch_gelu, inf->lnf_newest,
                           inf->prompt_tokens, inf->logits, inf->history, inf->lengths, inf->limits, inf->coin_ids,
                           inf->next_tokens};
    for (void* p : device_ptrs) cudaCheck(cudaFree(p));  // cudaFree(nullptr) is a no-op
    cudaCheck(cudaFreeHost(inf->next_pinned));
    cudaCheck(cudaFreeHost(inf->first_pinned));
    for (int i = 0; i < 2; i++) cudaCheck(cudaEventDestroy(inf->next_copied[i]));
    if (inf->decode_graph) cudaCheck(cudaGraphExecDestroy(inf->decode_graph));
}

// The layers on B * Tq rows; inf->residual holds the embeddings and ends with the residual stream, inf->ln with lnf.
// The kernels are gpt2_forward's, so a row's arithmetic is the training forward's; only the attention differs:
//   prefill (Tq = Tp): causal self-attention over the rows, and every row's k, v into cache slots 0..Tp-1
//   decode (Tq = 1): each row's k, v into its sequence's slot lengths[b] - 1, then attention over the cache
void gpt2_inference_layers(const GPT2* model, GPT2Inference* inf, int Tq, bool prefill) {
    const GPT2Config& cfg = model->config;
    const int L = cfg.num_layers, C = cfg.channels, NH = cfg.num_heads, HS = C / NH, B = inf->B, N = B * Tq;
    const ParameterTensors& p = model->params;
    const size_t cache_layer = inf->cache_positions * C;
    const KVCacheLayout layout = {inf->page_size ? inf->pages_per_seq * inf->page_size : inf->Tmax, inf->block_table,
                                  inf->pages_per_seq, inf->page_size};
    layernorm_forward(inf->ln, nullptr, nullptr, inf->residual, p.ln1w, p.ln1b, N, C, main_stream);   // no backward: no statistics
    for (int l = 0; l < L; l++) {
        NvtxRange layer_range(prefill ? "prefill layer" : "decode layer", l);
        floatX* k_cache = inf->k_cache + l * cache_layer;
        floatX* v_cache = inf->v_cache + l * cache_layer;
        // qkv = ln1 @ qkvw^T + qkvb; k, v into the cache; attention
        matmul_forward(inf->qkv, inf->ln, p.qkvw + (size_t)l * 3 * C * C, p.qkvb + l * 3 * C, nullptr, N, C, 3 * C, nullptr, main_stream);
        if (prefill) {
            kv_cache_append(k_cache, v_cache, inf->qkv, inf->lengths, /*prefill=*/true, layout, B, Tq, C, main_stream);
            attention_forward(inf->atty, inf->lse, inf->qkv, B, Tq, NH, HS, main_stream);
        } else {
            // the contiguous cache gets the new k, v here; the paged one from the attention call itself (below)
            if (!inf->page_size) kv_cache_append(k_cache, v_cache, inf->qkv, inf->lengths, /*prefill=*/false, layout, B, 1, C, main_stream);
            AttentionForwardParams a;
            a.q = inf->qkv;  // the Q part of the fused (B, 1, 3, NH, HS) qkv
            a.k = k_cache;
            a.v = v_cache;
            a.out = inf->atty;
            a.lse = nullptr;
            a.q_st = fused_qkv_strides(1, NH, HS);
            a.k_st = a.v_st = bthd_strides(layout.Tmax, NH, HS);
            a.o_st = bthd_strides(1, NH, HS);
            a.B = B; a.T = 1; a.Tk = layout.Tmax; a.NH = NH; a.NH_kv = NH; a.HS = HS;
            a.causal = true;
            a.scale = 1.0f / sqrtf((float)HS);
            if (inf->page_size) {
                // the pages (a page's stride as the batch stride, the block table to find them), the newest token's
                // k, v appended by the attention kernel (read from qkv, written to its page): no append kernel
                AttentionKVCache kv = {};
                kv.seqlens = inf->lengths;
                kv.seqlens_count_new = true;
                kv.block_table = inf->block_table, kv.block_table_batch = inf->pages_per_seq, kv.page_size = inf->page_size;
                kv.k_new = inf->qkv + C, kv.v_new = inf->qkv + 2 * C, kv.T_new = 1;
                kv.k_new_st = kv.v_new_st = fused_qkv_strides(1, NH, HS);
                a.k_st = a.v_st = bthd_strides(inf->page_size, NH, HS);
                attention_forward_kvcache(a, kv, main_stream);
            } else {
                attention_forward_kvcache(a, inf->lengths, main_stream);
            }
        }
        // x = x + attproj(atty) (in place, the add in the matmul's epilogue); ln2 = layernorm(x)
        matmul_forward(inf->residual, inf->atty, p.attprojw + (size_t)l * C * C, p.attprojb + l * C, inf->residual, N, C, C,
                       nullptr, main_stream);
        layernorm_forward(inf->ln, nullptr, nullptr, inf->residual, p.ln2w + l * C, p.ln2b + l * C, N, C, main_stream);
        // MLP, GELU fused into the matmul or not, as the training forward
        if (inf->gelu_fusion >= 1) {
            matmul_forward(inf->fch_gelu, inf->ln, p.fcw + (size_t)l * 4 * C * C, p.fcb + l * 4 * C, nullptr, N, C, 4 * C, inf->fch,
                           main_stream);
        } else {
            matmul_forward(inf->fch, inf->ln, p.fcw + (size_t)l * 4 * C * C, p.fcb + l * 4 * C, nullptr, N, C, 4 * C, nullptr,
                           main_stream);
            gelu_forward(inf->fch_gelu, inf->fch, (size_t)N * 4 * C, main_stream);
        }
        // x = x + mlp (in place); the next layer's ln1, or lnf after the last layer
        matmul_forward(inf->residual, inf->fch_gelu, p.fcprojw + (size_t)l * C * 4 * C, p.fcprojb + l * C, inf->residual, N, 4 * C, C,
                       nullptr, main_stream);
        const floatX* ln_w = l + 1 < L ? p.ln1w + (l + 1) * C : p.lnfw;
        const floatX* ln_b = l + 1 < L ? p.ln1b + (l + 1) * C : p.lnfb;
        layernorm_forward(inf->ln, nullptr, nullptr, inf->residual, ln_w, ln_b, N, C, main_stream);
    }
}

// The rows start over from the prompts (B, Tp) on the host, right-padded, and their lengths (B): on the GPU history's
// first Tp columns, lengths, the limits (length + new_tokens) and the coins of requests first_request, first_request + 1..
// (pageable sources: each copy has read its source when it returns)
void gpt2_inference_start(GPT2Inference* inf, const int* prompts, const int* lengths, int new_tokens, int first_request) {
    const int B = inf->B, Tp = inf->Tp;
    std::vector<int> limits(B), coin_ids(B);
    for (int b = 0; b < B; b++) limits[b] = lengths[b] + new_tokens, coin_ids[b] = first_request + b;
    cudaCheck(cudaMemcpy2DAsync(inf->history, inf->Tmax * sizeof(int), prompts, Tp * sizeof(int), Tp * sizeof(int), B,
                                cudaMemcpyHostToDevice, main_stream));
    cudaCheck(cudaMemcpyAsync(inf->lengths, lengths, B * sizeof(int), cudaMemcpyHostToDevice, main_stream));
    cudaCheck(cudaMemcpyAsync(inf->limits, limits.data(), B * sizeof(int), cudaMemcpyHostToDevice, main_stream));
    cudaCheck(cudaMemcpyAsync(inf->coin_ids, coin_ids.data(), B * sizeof(int), cudaMemcpyHostToDevice, main_stream));
}

// Prefill: the rows start over from the prompts (as gpt2_inference_start); the prompts through the layers fill the
// caches, and inf->logits gets the logits of each sequence's last prompt token.
void gpt2_prefill(GPT2* model, GPT2Inference* inf, const int* prompts, const int* lengths, int new_tokens, int first_request) {
    NVTX_RANGE_FN();
    const GPT2Config& cfg = model->config;
    const int B = inf->B, Tp = inf->Tp, C = cfg.channels;
    gpt2_inference_start(inf, prompts, lengths, new_tokens, first_request);
    cudaCheck(cudaMemcpyAsync(inf->prompt_tokens, prompts, (size_t)B * Tp * sizeof(int), cudaMemcpyHostToDevice, main_stream));
    encoder_forward(inf->residual, inf->prompt_tokens, model->params.wte, model->params.wpe, B, Tp, C, main_stream);
    gpt2_inference_layers(model, inf, Tp, /*prefill=*/true);
    // logits = lnf @ wte^T, for row lengths[b] - 1 of each sequence only
    gather_newest_rows(inf->lnf_newest, inf->ln, inf->lengths, B, Tp, C, main_stream);
    matmul_forward(inf->logits, inf->lnf_newest, model->params.wte, nullptr, nullptr, B, C, cfg.padded_vocab_size, nullptr, main_stream);
}

// Decode: each sequence's newest token (history[b, lengths[b] - 1]) through the layers -> inf->logits
void gpt2_decode(GPT2* model, GPT2Inference* inf) {
    NVTX_RANGE_FN();
    const GPT2Config& cfg = model->config;
    const int B = inf->B, C = cfg.channels;
    embed_newest_tokens(inf->residual, inf->history, inf->lengths, model->params.wte, model->params.wpe, B, inf->Tmax, C, main_stream);
    gpt2_inference_layers(model, inf, 1, /*prefill=*/false);
    matmul_forward(inf->logits, inf->ln, model->params.wte, nullptr, nullptr, B, C, cfg.padded_vocab_size, nullptr, main_stream);
}

// inf->logits -> the next token of each sequence, appended to it (history, lengths) and in next_tokens
void gpt2_sample_next(const GPT2* model, GPT2Inference* inf) {
    sample_tokens(inf->next_tokens, inf->history, inf->lengths, inf->limits, inf->coin_ids, inf->logits, inf->B,
                  model->config.vocab_size, model->config.padded_vocab_size, inf->Tmax, inf->sampler, inf->stop_token,
                  /*advance=*/true, main_stream);
}

// One decode step and its sampling. With use_graph the first step runs eagerly (lazy kernel loading, cuBLASLt's
// heuristics, the decode attention's scratch, which it allocates on first use) and the second is captured as a CUDA
// graph, which every later step replays: one launch instead of about ten per layer, and no host work per matmul.
// Relaxed capture mode: cudaFuncSetAttribute and the like may run while the step is captured.
void gpt2_decode_step(GPT2* model, GPT2Inference* inf) {
    if (!inf->use_graph || inf->eager_steps < 1) {
        gpt2_decode(model, inf);
        gpt2_sample_next(model, inf);
        inf->eager_steps++;
        return;
    }
    if (!inf->decode_graph) {
        cudaGraph_t graph;
        cudaCheck(cudaStreamBeginCapture(main_stream, cudaStreamCaptureModeRelaxed));
        gpt2_decode(model, inf);
        gpt2_sample_next(model, inf);
        cudaCheck(cudaStreamEndCapture(main_stream, &graph));
        cudaCheck(cudaGraphInstantiate(&inf->decode_graph, graph, 0));
        cudaCheck(cudaGraphDestroy(graph));
    }
    cudaCheck(cudaGraphLaunch(inf->decode_graph, main_stream));
}

double now_seconds() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// the copy of next_tokens into pinned slot i % 2, and the host's wait for it
void gpt2_next_tokens_copy(GPT2Inference* inf, int i) {
    cudaCheck(cudaMemcpyAsync(inf->next_pinned + (i % 2) * inf->B, inf->next_tokens, inf->B * sizeof(int),
                              cudaMemcpyDeviceToHost, main_stream));
    cudaCheck(cudaEventRecord(inf->next_copied[i % 2], main_stream));
}
const int* gpt2_next_tokens_wait(GPT2Inference* inf, int i) {
    cudaCheck(cudaEventSynchronize(inf->next_copied[i % 2]));
    return inf->next_pinned + (i % 2) * inf->B;
}

// Row b of inf as a one-sequence GPT2Inference over the same buffers, for the prefill of a request admitted into
// that slot: prompt_len rows, the slot's cache rows (contiguous) or its row of the block table (paged), its logits and
// sampler state.
GPT2Inference gpt2_inference_row(const GPT2Inference& inf, int b, int prompt_len, int C, int Vp) {
    GPT2Inference row = inf;
    row.B = 1;
    row.Tp = prompt_len;
    row.use_graph = 0;
    row.decode_graph = nullptr;
    if (inf.block_table) {
        row.block_table += (size_t)b * inf.pages_per_seq;
    } else if (inf.k_cache) {
        row.k_cache += (size_t)b * inf.Tmax * C;
        row.v_cache += (size_t)b * inf.Tmax * C;
    }
    row.logits += (size_t)b * Vp;
    row.history += (size_t)b * inf.Tmax;
    row.lengths += b, row.limits += b, row.coin_ids += b, row.next_tokens += b;
    return row;
}

struct GenerateTimes {
    double prefill_s, decode_s;
    int first_tokens, tokens, steps;   // tokens of the opening prefill, all new tokens, decode steps
};

// Serves batch's requests through inf's slots as the schedule s (generate.h) admits them, each up to s->new_tokens
// new tokens; on_token(request, token) gets every request's tokens in order as they arrive.
// When the requests fit in the slots and the pool they prefill together (padded to the longest); otherwise each prefills alone
// into the slot that takes it, so a request's arithmetic does not depend on when or beside what it runs (a decode step
// computes every row alike). The host reads step k's tokens after it has queued step k + 1, so the GPU never waits
// for the host. A request that ends at step k was already frozen on the GPU by its limit or stop token; its slot
// takes the next request, whose prefill goes after step k + 1 and whose first decode is step k + 2, its prefill's
// token read beside that step's. The prefill's time ends when the opening tokens are on the host.
template <class OnToken>
GenerateTimes gpt2_generate(GPT2* model, GPT2Inference* inf, GenerateSchedule* s, const PromptBatch& batch, OnToken on_token) {
    NVTX_RANGE_FN();
    const int S = inf->B, C = model->config.channels, Vp = model->config.padded_vocab_size, pps = inf->pages_per_seq;
    auto sync_row = [&](int b) {   // the slot's row of the block table to the GPU
        if (inf->block_table)
            cudaCheck(cudaMemcpyAsync(inf->block_table + (size_t)b * pps, s->block_table.data() + (size_t)b * pps, pps * sizeof(int),
                                      cudaMemcpyHostToDevice, main_stream));
    };
    auto admit_alone = [&](int b, int first_step) {
        if (!schedule_admit(s, b)) return;
        GenerateSlot& slot = s->slot[b];
        slot.first_step = first_step;
        slot.first_pinned = first_step > 0;
        sync_row(b);
        const int r = slot.request;
        GPT2Inference row = gpt2_inference_row(*inf, b, batch.lengths[r], C, Vp);
        gpt2_prefill(model, &row, batch.tokens.data() + (size_t)r * batch.Tp, &batch.lengths[r], s->new_tokens, r);
        gpt2_sample_next(model, &row);
        if (slot.first_pinned)
            cudaCheck(cudaMemcpyAsync(inf->first_pinned + b, inf->next_tokens + b, sizeof(int), cudaMemcpyDeviceToHost, main_stream));
    };
    double t0 = now_seconds(), t1 = t0;
    if (schedule_all_at_once(*s)) {
        for (int b = 0; b < batch.B; b++) schedule_admit(s, b);
        for (int b = 0; b < S; b++) sync_row(b);
        gpt2_prefill(model, inf, batch.tokens.data(), batch.lengths.data(), s->new_tokens, 0);
        gpt2_sample_next(model, inf);
    } else {
        for (int b = 0; b < S; b++) admit_alone(b, 0);
    }
    gpt2_next_tokens_copy(inf, 0);
    GenerateTimes times = {};
    auto take = [&](int b, int token) {
        if (token < 0) exit_on_error(strfmt("slot %d: a running request's row is frozen", b));
        on_token(s->slot[b].request, token);
        times.tokens++;
        schedule_token(s, b, token);
    };
    int queued = 0, processed = -1;
    while (true) {
        bool need = false;
        for (int b = 0; b < S; b++) need = need || schedule_needs_step(*s, b, queued + 1);
        if (need) {
            gpt2_decode_step(model, inf);
            gpt2_next_tokens_copy(inf, ++queued);
        }
        if (processed == queued) break;
        const int k = ++processed;
        const int* next = gpt2_next_tokens_wait(inf, k);
        for (int b = 0; b < S; b++) {
            const GenerateSlot& slot = s->slot[b];
            if (slot.request < 0 || slot.ended || k < slot.first_step) continue;
            if (k == slot.first_step && slot.first_pinned) take(b, inf->first_pinned[b]);
            if (!slot.ended) take(b, next[b]);
        }
        if (k == 0) times.first_tokens = times.tokens, t1 = now_seconds();
        for (int b = 0; b < S; b++) {
            if (s->slot[b].request < 0 || !s->slot[b].ended) continue;
            schedule_release(s, b);
            sync_row(b);
            // until the slot's next request: length 1 and frozen, so its row's attention reads one key
            static const int idle_length = 1, idle_limit = 0;
            cudaCheck(cudaMemcpyAsync(inf->lengths + b, &idle_length, sizeof(int), cudaMemcpyHostToDevice, main_stream));
            cudaCheck(cudaMemcpyAsync(inf->limits + b, &idle_limit, sizeof(int), cudaMemcpyHostToDevice, main_stream));
        }
        for (int b = 0; b < S; b++) if (s->slot[b].request < 0) admit_alone(b, queued + 1);
    }
    times.prefill_s = t1 - t0;
    times.decode_s = now_seconds() - t1;
    times.steps = queued;
    return times;
}

// Training's periodic sample: gen_T - 1 tokens after <|endoftext|>, one sequence through the KV cache, drawn from
// the whole softmax (temperature 1, no top-k). The coins' seed is drawn from model->rng_state, which checkpoints save.
void gpt2_sample(GPT2* model, const Tokenizer* tokenizer, int gen_T) {
    const GPT2Config& cfg = model->config;
    gen_T = std::min(gen_T, cfg.max_seq_len);
    if (gen_T < 2) return;
    SamplerSettings sampler = {/*greedy=*/0, /*top_k=*/0, /*temperature=*/1.0f, random_u32(&model->rng_state)};
    PromptBatch batch;
    exit_on_error(prompt_batch({{tokenizer->eot_token}}, 1, tokenizer->eot_token, &batch));
    GenerateSchedule schedule;
    exit_on_error(generate_schedule_init(&schedule, batch.lengths, 1, gen_T - 1, /*stop_token=*/-1, /*page_size=*/0, 0));
    GPT2Inference inf;
    gpt2_inference_allocate(&inf, cfg, /*B=*/1, /*Tp=*/1, /*Tmax=*/gen_T, /*kv_cache=*/true, model->gelu_fusion, sampler,
                            /*stop_token=*/-1, /*use_graph=*/false);
    printf("generating:\n---\n");
    gpt2_generate(model, &inf, &schedule, batch, [&](int, int token) {
        if (tokenizer->init_ok) safe_printf(tokenizer_decode(tokenizer, token));
        else printf("%d ", token);
        fflush(stdout);
    });
    printf("\n---\n");
    gpt2_inference_free(&inf);
}

// mean loss over the first max_batches batches of the loader
float gpt2_validation_loss(GPT2* model, DataLoader* loader, int max_batches) {
    NVTX_RANGE_FN();
    exit_on_error(dataloader_reset(loader));
    int num_batches = (int)std::min((size_t)max_batches, dataloader_num_batches(loader));
    cudaCheck(cudaMemsetAsync(model->accumulated_loss, 0, sizeof(float), main_stream));
    for (int i = 0; i < num_batches; i++) {
        exit_on_error(dataloader_next_batch(loader));
        gpt2_forward(model, loader->inputs, loader->targets, model->B, model->T);
        gpt2_validate(model, model->B, model->T, 1.0f / num_batches);
    }
    multi_gpu_average(model->accumulated_loss, 1, false, main_stream);   // every rank's slice of the validation set
    wait_stream(main_stream);
    float loss;
    cudaCheck(cudaMemcpy(&loss, model->accumulated_loss, sizeof(float), cudaMemcpyDeviceToHost));
    return loss;
}

// device memory in use (by every process on the GPU), and the GPU's total
size_t device_used_bytes(size_t* total_bytes = nullptr) {
    size_t free_bytes, total;
    cudaCheck(cudaMemGetInfo(&free_bytes, &total));
    if (total_bytes) *total_bytes = total;
    return total - free_bytes;
}

// Prints the memory plan of the run's flags against the free device memory: call it after common_start (the CUDA
// context and the cuBLASLt workspace exist) and before the model allocates anything. Returns "" if B fits, else
// the error that names the largest B that does.
std::string print_memory_plan(const GPT2Config& config, const TrainConfig& cfg) {
    size_t free_bytes, total_bytes;
    cudaCheck(cudaMemGetInfo(&free_bytes, &total_bytes));
    size_t budget = memory_budget(free_bytes);
    const int shards = cfg.zero_stage == 1 ? cfg.num_processes : 1;   // ZeRO-1: the optimizer state split over the ranks
    MemoryPlan plan = memory_plan(config, cfg.B, cfg.T, cfg.recompute, cfg.use_master_weights, gpt2_scratch_bytes, shards);
    int largest_B = memory_plan_largest_B(config, cfg.T, cfg.recompute, cfg.use_master_weights, gpt2_scratch_bytes, budget, shards);
    int largest_B_r2 = cfg.recompute < 2 ? memory_plan_largest_B(config, cfg.T, 2, cfg.use_master_weights, gpt2_scratch_bytes, budget, shards) : -1;
    printf("+-----------------------------------------------------------------------\n");
    printf("%s", memory_plan_report(plan, config, free_bytes, largest_B).c_str());
    return memory_plan_check(plan, free_bytes, largest_B, largest_B_r2);
}

// after gpt2_allocate_state: the plan's parts, and what the device has in use now
void print_memory_use(const GPT2* model, size_t used_before_model) {
    const MemoryPlan& p = model->memory_plan;
    size_t total_bytes, used = device_used_bytes(&total_bytes);
    printf("| memory: params %s, grads %s, AdamW m+v %s, master weights %s, activations %s (%s a sequence), "
           "scratch %s, inputs %s\n", mib_str(p.param_bytes).c_str(), mib_str(p.grad_bytes).c_str(), mib_str(p.adamw_bytes).c_str(),
           mib_str(p.master_bytes).c_str(), mib_str(p.activation_bytes).c_str(), mib_str(p.per_sequence_bytes).c_str(),
           mib_str(p.scratch_bytes).c_str(), mib_str(p.input_bytes).c_str());
    printf("| device memory in use: %s of %s (%s before the model + the plan's %s)\n", mib_str(used).c_str(),
           mib_str(total_bytes).c_str(), mib_str(used_before_model).c_str(), mib_str(p.total_bytes()).c_str());
}

void common_start() {
    const cudaDeviceProp& props = device_props();
    exit_on_error(gpu_check_compute_capability(props.major, props.minor, props.name));
    cudaCheck(cudaStreamCreate(&main_stream));
    matmul_setup();
}

void common_free() {
    matmul_teardown();
    cudaCheck(cudaStreamDestroy(main_stream));
}

// ----------------------------------------------------------------------------
// main training loop
#ifndef TESTING

int main(int argc, char** argv) {
    TrainConfig cfg;
    train_config_defaults(&cfg);
    for (int i = 1; i < argc; i++) if (!strcmp(argv[i], "--help")) { printf("%s", train_usage()); return 0; }
    std::string err = train_config_parse(&cfg, argc, argv);
    if (!err.empty()) exit_on_error(err + " (./train_gpt2cu --help lists the flags)");
    // ranks: -pn / -pr, else torchrun's or Slurm's environment; -pn 0 (the default) means "from the environment"
    RankInfo ranks;
    exit_on_error(resolve_ranks(&ranks, cfg.num_processes, cfg.process_rank));
    cfg.num_processes = ranks.world;
    cfg.process_rank = ranks.rank;
    exit_on_error(train_config_check(&cfg));
    if (ranks.world > 1 && ranks.rank == 0 && !strcmp(cfg.init_method, "fs")) rendezvous_fs_clear(cfg.init_fs_dir);   // an old run's id
    multi_gpu.world = ranks.world;
    multi_gpu.rank = ranks.rank;
    multi_gpu.zero_stage = cfg.zero_stage;
    multi_gpu.timeout_s = cfg.multi_gpu_timeout;
    if (ranks.world > 1) {   // this rank's GPU; only rank 0 prints (errors go to stderr on every rank)
        int devices = 0;
        cudaCheck(cudaGetDeviceCount(&devices));
        cudaCheck(cudaSetDevice(ranks.local_rank % std::max(devices, 1)));
        if (ranks.rank > 0 && !freopen("/dev/null", "w", stdout)) exit_on_error("could not silence stdout on rank > 0");
    }

    // model sizes: from -e (descriptor or file); when resuming, from the checkpoint, which must agree with -e
    GPT2Config model_config;
    bool from_file = !is_model_descriptor(cfg.load_filename);
    exit_on_error(from_file ? model_file_check(cfg.load_filename, &model_config)
                            : parse_model_descriptor(cfg.load_filename, &model_config));
    int resume_step = cfg.resume ? find_latest_checkpoint_step(cfg.output_log_dir) : -1;
    std::string resume_model = resume_step >= 0 ? checkpoint_model_path(cfg.output_log_dir, resume_step) : "";
    if (resume_step >= 0) {
        GPT2Config ckpt_config;
        exit_on_error(model_file_check(resume_model.c_str(), &ckpt_config));
        if (!model_config_equal(ckpt_config, model_config))
            exit_on_error(strfmt("checkpoint '%s' is %s but -e %s is %s", resume_model.c_str(), model_config_str(ckpt_config).c_str(),
                                 cfg.load_filename, model_config_str(model_config).c_str()));
    } else if (cfg.resume) {
        printf("-y 1: no complete checkpoint (DONE_*) in %s, starting from scratch\n", cfg.output_log_dir);
    }
    exit_on_error(train_config_check_model(cfg, model_config));
    int C = model_config.channels, NH = model_config.num_heads;
    if (cfg.memory_plan_only) {  // -pm 1: the plan for these flags, whether or not B fits; no data is read
        common_start();
        std::string fit = print_memory_plan(model_config, cfg);
        printf("+-----------------------------------------------------------------------\n%s%s", fit.c_str(), fit.empty() ? "" : "\n");
        common_free();
        return 0;
    }

    // data (every shard is validated here, before anything is written)
    DataLoader train_loader, val_loader;
    exit_on_error(dataloader_init(&train_loader, cfg.train_data_pattern, cfg.B, cfg.T, cfg.process_rank, cfg.num_processes,
                                  cfg.shuffle, model_config.vocab_size, (uint32_t)cfg.seed));
    bool run_val = cfg.val_loss_every > 0;
    if (run_val) exit_on_error(dataloader_init(&val_loader, cfg.val_data_pattern, cfg.B, cfg.T, cfg.process_rank,
                                               cfg.num_processes, 0, model_config.vocab_size, (uint32_t)cfg.seed));
    exit_on_error(dataloader_next_batch(&train_loader));  // token ids of the first batch checked before anything is written
    exit_on_error(dataloader_reset(&train_loader));
    int grad_accum_steps = cfg.total_batch_size / (cfg.B * cfg.T * cfg.num_processes);
    int train_num_batches = cfg.max_steps > 0 ? cfg.max_steps : (int)(dataloader_num_batches(&train_loader) / grad_accum_steps);
    // the GPU (after the file checks, so those work on any machine)
    const cudaDeviceProp& props = device_props();
    exit_on_error(gpu_check_compute_capability(props.major, props.minor, props.name));
    if (cfg.gelu_fusion < 0) cfg.gelu_fusion = gelu_fusion_default(props.major);
    const char* attention_why = attention_unsupported_reason(cfg.B, cfg.T, NH, C / NH);
    if (attention_why) exit_on_error(strfmt("attention does not support B=%d T=%d NH=%d HS=%d: %s", cfg.B, cfg.T, NH, C / NH, attention_why));
    Tokenizer tokenizer;
    std::string tok_err = tokenizer_init(&tokenizer, "gpt2_tokenizer.bin");
    if (!tok_err.empty()) printf("warning: %s; samples print token ids\n", tok_err.c_str());

    // GPU and model; a B that does not fit stops here, before any allocation of the model
    common_start();
#ifdef FLASHGPT_NCCL
    if (multi_gpu.world > 1) {
        multi_gpu_init(cfg.init_method, cfg.init_fs_dir, cfg.init_tcp);
        printf("| data parallel over NCCL: %d ranks (-pi %s), gradients averaged in bf16 after each step\n", multi_gpu.world, cfg.init_method);
    }
#endif
    size_t used_before_model = device_used_bytes();
    exit_on_error(print_memory_plan(model_config, cfg));
    GPT2 model;
    if (resume_step >= 0) gpt2_build_from_checkpoint(&model, resume_model.c_str());
    else if (from_file) gpt2_build_from_checkpoint(&model, cfg.load_filename);
    else gpt2_build_from_random(&model, model_config, (uint32_t)cfg.seed);
    gpt2_allocate_state(&model, cfg.B, cfg.T, cfg.recompute, cfg.gelu_fusion, cfg.use_master_weights);
    if (cfg.fp8) gpt2_enable_fp8(&model, cfg.fp8);
    model.stochastic_rounding = cfg.stochastic_rounding;
    model.rounding_seed = (uint32_t)cfg.seed;
    model.document_masking = cfg.document_masking;
    int start_step = 0;
    if (resume_step >= 0) {
        std::string state_path = checkpoint_state_path(cfg.output_log_dir, resume_step, cfg.process_rank);
        TrainState s = gpt2_load_state(&model, state_path.c_str(), cfg.num_processes, cfg.process_rank);
        if (s.shuffle != train_loader.should_shuffle) exit_on_error(strfmt("state file '%s' has shuffle=%d but the run has -sf %d",
                                                                           state_path.c_str(), s.shuffle, train_loader.should_shuffle));
        exit_on_error(dataloader_seek(&train_loader, s.epoch, s.shard_idx, s.sample_idx));
        start_step = s.step;
    }
    if (cfg.output_log_dir) mkdir(cfg.output_log_dir, 0755);
    Logger logger;
    logger_init(&logger, multi_gpu.rank == 0 ? cfg.output_log_dir : nullptr, resume_step >= 0);
    LearningRateScheduler lr_scheduler;
    lr_scheduler_init(&lr_scheduler, cfg.lr_scheduler_type, cfg.learning_rate, cfg.warmup_iterations, train_num_batches,
                      cfg.final_learning_rate_frac);

    // the configuration
    int HS = C / NH;
    double flops_per_token = gpt2_flops_per_token(model.num_parameters, model_config.num_layers, C, cfg.T);
    printf("+-----------------------------------------------------------------------\n");
    printf("| device: %s (sm_%d%d, %d SMs), bf16, peak %.0f TFLOP/s%s\n", props.name, props.major, props.minor,
           props.multiProcessorCount, std::max(0.0, get_peak_bf16_flops(props.name) / 1e12),
           get_peak_bf16_flops(props.name) > 0 ? "" : " (unknown: MFU not shown)");
    printf("| model: %s, %s, %zu parameters (padded vocab)\n", resume_step >= 0 ? resume_model.c_str() : cfg.load_filename,
           model_config_str(model_config).c_str(), model.num_parameters);
    if (cfg.document_masking) printf("| attention: document masking (-dm 1): the mma.sync kernels with per-row document starts (HS=%d)\n", HS);
    else printf("| attention: forward %s, backward %s\n", attention_forward_path_name(HS), attention_backward_path_name(HS));   // the names give HS
    printf("| train: %s (%zu shards, %zu batches/epoch, shuffle %d), val: %s\n", cfg.train_data_pattern, train_loader.files.size(),
           dataloader_num_batches(&train_loader), train_loader.should_shuffle, run_val ? cfg.val_data_pattern : "off");
    printf("| B=%d T=%d total batch %d tokens = %d micro-steps; steps %d (from %d)\n", cfg.B, cfg.T, cfg.total_batch_size,
           grad_accum_steps, train_num_batches, start_step);
    printf("| lr %g, warmup %d, %s decay to %g x lr, weight decay %g, grad clip %g\n", cfg.learning_rate,
           cfg.warmup_iterations, cfg.lr_scheduler_type, cfg.final_learning_rate_frac, cfg.weight_decay, cfg.grad_clip);
    printf("| recompute %d, gelu fusion %d, master weights %d, stochastic rounding %d, seed %d, output %s\n", cfg.recompute,
           cfg.gelu_fusion, cfg.use_master_weights, cfg.stochastic_rounding, cfg.seed, cfg.output_log_dir ? cfg.output_log_dir : "none");
    if (cfg.fp8) printf("| FP8 (-fp8 %d): the blocks' linears on E4M3 (gradients %s), delayed scaling over %d steps%s\n", cfg.fp8,
                        cfg.fp8 == 1 ? "E5M2" : "E4M3", kFp8History,
                        model.fp8_updates > 0 ? ", scales from the checkpoint" : "; the first step calibrates in bf16");
    printf("| MFU counts 6*N + 6*L*C*T = %.1f MFLOP per token (llm.c's formula; nanoGPT's 12*L*C*T differs)\n", flops_per_token / 1e6);
    print_memory_use(&model, used_before_model);
    printf("+-----------------------------------------------------------------------\n");

    OutlierDetector loss_outliers, norm_outliers;
    outlier_detector_init(&loss_outliers);
    outlier_detector_init(&norm_outliers);
    double total_time = 0.0, prev_read = -1.0;   // prev_read: when the host had the previous step's loss
    int timed_steps = 0;
    for (int step = start_step; step <= train_num_batches; step++) {
        bool last_step = step == train_num_batches;
        bool paused = false;   // validation, sampling or a checkpoint ran before this step
        if (run_val && (step % cfg.val_loss_every == 0 || last_step)) {
            paused = true;
            float val_loss = gpt2_validation_loss(&model, &val_loader, cfg.val_max_steps);
            printf("val loss %f\n", val_loss);
            logger_log_val(&logger, step, val_loss);
        }
        if (cfg.sample_every > 0 && step > 0 && (step % cfg.sample_every == 0 || last_step)) {
            paused = true;
            gpt2_sample(&model, &tokenizer, cfg.gen_T);
        }
        if (cfg.checkpoint_every > 0 && step > start_step && (step % cfg.checkpoint_every == 0 || last_step)) {
            paused = true;
            gpt2_write_checkpoint(&model, cfg.output_log_dir, step, &train_loader);
            printf("wrote checkpoint %s\n", checkpoint_model_path(cfg.output_log_dir, step).c_str());
            int old = step - cfg.checkpoints_keep * cfg.checkpoint_every;  // -nk: drop the one that fell out of the window
            if (cfg.checkpoints_keep > 0 && old > 0 && !(cfg.major_checkpoint_every > 0 && old % cfg.major_checkpoint_every == 0)) {
                if (multi_gpu.rank == 0) {   // the marker first: the rest is then ignored
                    remove(checkpoint_done_path(cfg.output_log_dir, old).c_str());
                    remove(checkpoint_model_path(cfg.output_log_dir, old).c_str());
                }
                remove(checkpoint_state_path(cfg.output_log_dir, old, cfg.process_rank).c_str());
            }
        }
        if (last_step) break;

        // a step lasts from the previous step's read to its own (the previous update runs inside it), or from here
        // after a pause
        const double t0 = paused || prev_read < 0 ? now_seconds() : prev_read;
        gpt2_zero_grad(&model);
        for (int micro_step = 0; micro_step < grad_accum_steps; micro_step++) {
            if (!(cfg.overfit_single_batch && (step > 0 || micro_step > 0))) exit_on_error(dataloader_next_batch(&train_loader));
            gpt2_forward(&model, train_loader.inputs, train_loader.targets, cfg.B, cfg.T);
            gpt2_backward(&model, train_loader.inputs, grad_accum_steps);
        }
        gpt2_queue_step_end(&model);
        // The update is queued before the host waits for the loss and norm, so the next step's launches reach the GPU
        // while it runs the update (adamw skips a step whose loss or norm is not finite by itself). With -sl / -sg the
        // outliers' z-scores decide, so the host waits first.
        const float lr = get_learning_rate(&lr_scheduler, step);
        const bool outliers_decide = cfg.skip_update_lossz > 0 || cfg.skip_update_gradz > 0;
        if (!outliers_decide) gpt2_update(&model, lr, 0.9f, 0.95f, 1e-8f, cfg.weight_decay, cfg.grad_clip, step + 1);
        gpt2_read_step(&model);
        const double loss_z = outlier_detector_update(&loss_outliers, model.mean_loss);
        const double norm_z = outlier_detector_update(&norm_outliers, model.grad_norm);
        bool skip = !std::isfinite(model.mean_loss) || !std::isfinite(model.grad_norm);
        if (outliers_decide) {
            skip = skip || (cfg.skip_update_lossz > 0 && loss_z > cfg.skip_update_lossz) ||
                   (cfg.skip_update_gradz > 0 && norm_z > cfg.skip_update_gradz);
            if (!skip) gpt2_update(&model, lr, 0.9f, 0.95f, 1e-8f, cfg.weight_decay, cfg.grad_clip, step + 1);
        }
        prev_read = now_seconds();
        const double dt = prev_read - t0;
        if (step > start_step) { total_time += dt; timed_steps++; }  // the first step warms up cuBLASLt
        // throughput in total and, over several GPUs, per GPU; MFU is each GPU's share against its own peak
        const double tok_per_s = cfg.total_batch_size / dt, tok_per_gpu = tok_per_s / cfg.num_processes;
        const double mfu = estimate_mfu(flops_per_token, tok_per_gpu, props.name);
        printf("step %4d/%d | loss %7.6f (%+.2fz)| norm %6.4f (%+.2fz)| lr %.2e | %.2f ms | %s | %.0f tok/s%s%s\n", step + 1,
               train_num_batches, model.mean_loss, loss_z, model.grad_norm, norm_z, lr, dt * 1000,
               mfu > 0 ? strfmt("%.1f%% bf16 MFU%s", 100 * mfu, cfg.num_processes > 1 ? " a GPU" : "").c_str() : "MFU n/a", tok_per_s,
               cfg.num_processes > 1 ? strfmt(" (%.0f a GPU)", tok_per_gpu).c_str() : "", skip ? " (update skipped)" : "");
        logger_log_train(&logger, step, model.mean_loss, lr, model.grad_norm);
    }
    wait_stream(main_stream);   // the last update
    if (timed_steps > 0) {
        const double tok_per_s = (double)cfg.total_batch_size * timed_steps / total_time;
        printf("average over %d steps: %.2f ms/step, %.0f tok/s%s\n", timed_steps, 1000 * total_time / timed_steps, tok_per_s,
               cfg.num_processes > 1 ? strfmt(" (%.0f a GPU)", tok_per_s / cfg.num_processes).c_str() : "");
    }
    // nothing is freed during training, so this is the run's peak; the remainder is what the plan does not count
    size_t total_bytes, used_after = device_used_bytes(&total_bytes);
    printf("device memory in use after the last step: %s of %s (before the model %s, plan %s, unplanned %+.1f MiB)\n",
           mib_str(used_after).c_str(), mib_str(total_bytes).c_str(), mib_str(used_before_model).c_str(),
           mib_str(model.memory_plan.total_bytes()).c_str(),
           ((double)used_after - (double)used_before_model - (double)model.memory_plan.total_bytes()) / 1048576.0);

    dataloader_free(&train_loader);
    if (run_val) dataloader_free(&val_loader);
    tokenizer_free(&tokenizer);
    gpt2_free(&model);
    common_free();
    return 0;
}
#endif
#endif  // FLASHGPT_TRAIN_GPT2_CU
