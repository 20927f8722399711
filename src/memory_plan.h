/*
The device memory a training run needs, CUDA-free so the CPU tests check the arithmetic
(tests/test_train_memory.cpp). train_gpt2.cu allocates from the same table (gpt2_allocate_state walks
fill_in_activation_sizes), prints the plan at start and refuses a micro-batch B that does not fit,
naming the largest B that does.

  for any B:  bf16 params, bf16 grads, fp32 AdamW m and v, fp32 master weights (-w 1)
  for B:      the activations saved for the backward and the backward's buffers, all (B*T, ...), so
              exactly B times their size at B = 1; the kernels' scratch (attention backward, column
              reductions), whose size the CUDA side owns and passes in; the token ids and the two
              fp32 scalars read back each step
*/
#pragma once
#include <string>
#include "config.h"
#include "utils.h"

// ----------------------------------------------------------------------------
// activations and backward buffers, in the order gpt2_allocate_state allocates them

enum ActivationIndex {
    ACT_ENCODED, ACT_LN1, ACT_LN1_MEAN, ACT_LN1_RSTD, ACT_QKV, ACT_ATTY, ACT_LSE, ACT_RESIDUAL2, ACT_LN2,
    ACT_LN2_MEAN, ACT_LN2_RSTD, ACT_FCH, ACT_FCH_GELU, ACT_RESIDUAL3, ACT_LNF, ACT_LNF_MEAN, ACT_LNF_RSTD,
    ACT_LOSSES, ACT_OUTPUT, ACT_DRESIDUAL, ACT_DBTC, ACT_DBT4C, NUM_ACTIVATION_TENSORS
};
static const char* const ACTIVATION_NAMES[NUM_ACTIVATION_TENSORS] = {
    "encoded", "ln1", "ln1_mean", "ln1_rstd", "qkv", "atty", "lse", "residual2", "ln2",
    "ln2_mean", "ln2_rstd", "fch", "fch_gelu", "residual3", "lnf", "lnf_mean", "lnf_rstd",
    "losses", "output", "dresidual", "dbtc", "dbt4c"};

struct TensorSize {
    size_t count;       // elements
    size_t elem_bytes;  // 2 (bf16) or 4 (fp32)
    size_t bytes() const { return count * elem_bytes; }
};

// N = B*T. recompute >= 1 keeps one (N, 4C) GELU output instead of L (the backward recomputes it);
// recompute >= 2 also keeps one (N, C) ln1 and ln2 instead of L.
inline void fill_in_activation_sizes(TensorSize* sizes, const GPT2Config& c, int B, int T, int recompute) {
    size_t N = (size_t)B * T, L = c.num_layers, C = c.channels, NH = c.num_heads, Vp = c.padded_vocab_size;
    size_t ln_copies = recompute >= 2 ? 1 : L, gelu_copies = recompute >= 1 ? 1 : L;
    const size_t bf16 = 2, fp32 = 4;
    sizes[ACT_ENCODED] = {N * C, bf16};
    sizes[ACT_LN1] = {ln_copies * N * C, bf16};
    sizes[ACT_LN1_MEAN] = {L * N, fp32};
    sizes[ACT_LN1_RSTD] = {L * N, fp32};
    sizes[ACT_QKV] = {L * N * 3 * C, bf16};
    sizes[ACT_ATTY] = {L * N * C, bf16};
    sizes[ACT_LSE] = {L * N * NH, fp32};          // (L, B, NH, T): all the attention saves besides atty
    sizes[ACT_RESIDUAL2] = {L * N * C, bf16};
    sizes[ACT_LN2] = {ln_copies * N * C, bf16};
    sizes[ACT_LN2_MEAN] = {L * N, fp32};
    sizes[ACT_LN2_RSTD] = {L * N, fp32};
    sizes[ACT_FCH] = {L * N * 4 * C, bf16};
    sizes[ACT_FCH_GELU] = {gelu_copies * N * 4 * C, bf16};
    sizes[ACT_RESIDUAL3] = {L * N * C, bf16};
    sizes[ACT_LNF] = {N * C, bf16};
    sizes[ACT_LNF_MEAN] = {N, fp32};
    sizes[ACT_LNF_RSTD] = {N, fp32};
    sizes[ACT_LOSSES] = {N, fp32};
    sizes[ACT_OUTPUT] = {N * Vp, bf16};           // logits, then dlogits in place
    sizes[ACT_DRESIDUAL] = {N * C, bf16};
    sizes[ACT_DBTC] = {N * C, bf16};
    sizes[ACT_DBT4C] = {N * 4 * C, bf16};         // also holds dqkv (N, 3C)
}

inline size_t activation_bytes(const GPT2Config& c, int B, int T, int recompute) {
    TensorSize sizes[NUM_ACTIVATION_TENSORS];
    fill_in_activation_sizes(sizes, c, B, T, recompute);
    size_t total = 0;
    for (int i = 0; i < NUM_ACTIVATION_TENSORS; i++) total += sizes[i].bytes();
    return total;
}

// the dwte backward's token buckets for N positions: at most N distinct tokens, N + 1 offsets, N positions
inline size_t token_bucket_ints(size_t N) { return 2 * N + 1 + N; }

// inputs (N) + targets (N) + token buckets, as ints, and the step's mean loss and grad norm (fp32)
inline size_t input_bytes(size_t N) { return (3 * N + token_bucket_ints(N)) * sizeof(int) + 2 * sizeof(float); }   // + document starts

// ----------------------------------------------------------------------------
// the plan

// bytes of kernel scratch for (B, T); train_gpt2.cu's gpt2_scratch_bytes asks the kernels' headers
typedef size_t (*ScratchBytesFn)(const GPT2Config& c, int B, int T);

// Device memory the plan leaves unclaimed for what it cannot count: kernel code the CUDA runtime loads on first
// use (cuBLASLt's too), cudaMalloc's rounding of large buffers to whole pages, and the attention's small schedule
// counters. The cuBLASLt workspace and the CUDA context are allocated before the plan reads the free memory.
constexpr size_t kMemoryReserveBytes = (size_t)512 << 20;

struct MemoryPlan {
    int B, T, recompute, use_master_weights;
    size_t param_bytes;          // bf16 weights
    size_t grad_bytes;           // bf16 grads
    size_t adamw_bytes;          // fp32 m and v
    size_t master_bytes;         // fp32 master weights, 0 with -w 0
    size_t per_sequence_bytes;   // activations + backward buffers at B = 1
    size_t activation_bytes;     // the same at B: B * per_sequence_bytes
    size_t scratch_bytes;        // kernel scratch at B
    size_t input_bytes;          // token ids and scalars at B
    size_t fixed_bytes() const { return param_bytes + grad_bytes + adamw_bytes + master_bytes; }
    size_t total_bytes() const { return fixed_bytes() + activation_bytes + scratch_bytes + input_bytes; }
};

// shards > 1: ZeRO-1, this rank keeps 1 / shards of the AdamW moments and master weights (src/distributed.h)
inline MemoryPlan memory_plan(const GPT2Config& c, int B, int T, int recompute, int use_master_weights,
                              ScratchBytesFn scratch_bytes, int shards = 1) {
    size_t n = count_parameters(c), n_shard = (n + shards - 1) / shards;
    MemoryPlan p;
    p.B = B;
    p.T = T;
    p.recompute = recompute;
    p.use_master_weights = use_master_weights;
    p.param_bytes = n * 2;
    p.grad_bytes = n * 2;
    p.adamw_bytes = n_shard * 2 * sizeof(float);
    p.master_bytes = use_master_weights ? n_shard * sizeof(float) : 0;
    p.per_sequence_bytes = activation_bytes(c, 1, T, recompute);
    p.activation_bytes = activation_bytes(c, B, T, recompute);
    p.scratch_bytes = scratch_bytes(c, B, T);
    p.input_bytes = input_bytes((size_t)B * T);
    return p;
}

// what the plan may use of free_bytes
inline size_t memory_budget(size_t free_bytes) { return free_bytes > kMemoryReserveBytes ? free_bytes - kMemoryReserveBytes : 0; }

// The largest B whose plan fits in budget bytes, 0 if not even B = 1 does. The total grows with B (the
// activations and inputs linearly, the scratch never shrinks), so doubling then bisecting finds the boundary.
// B * T stays within an int (the kernels take N = B * T as one).
inline int memory_plan_largest_B(const GPT2Config& c, int T, int recompute, int use_master_weights,
                                 ScratchBytesFn scratch_bytes, size_t budget, int shards = 1) {
    auto fits = [&](int B) { return memory_plan(c, B, T, recompute, use_master_weights, scratch_bytes, shards).total_bytes() <= budget; };
    const int max_B = 2147483647 / T;
    if (!fits(1)) return 0;
    int lo = 1, hi = 2;                       // fits(lo); hi is the first candidate not yet known to fit
    while (hi <= max_B && fits(hi)) { lo = hi; hi = hi > max_B / 2 ? max_B + 1 : 2 * hi; }
    if (hi > max_B) hi = max_B + 1;
    while (hi - lo > 1) {                     // fits(lo), !fits(hi) (or hi past max_B)
        int mid = lo + (hi - lo) / 2;
        if (fits(mid)) lo = mid; else hi = mid;
    }
    return lo;
}

inline std::string mib_str(size_t bytes) { return strfmt("%.1f MiB", bytes / 1048576.0); }

// The lines train_gpt2cu prints at start (and -pm 1 alone). largest_B from memory_plan_largest_B on the same
// budget; scripts/run_big_models.sh reads "largest B that fits: N".
inline std::string memory_plan_report(const MemoryPlan& p, const GPT2Config& c, size_t free_bytes, int largest_B) {
    std::string s = strfmt("| memory plan: L=%d C=%d NH=%d, T=%d, recompute %d, master weights %d\n", c.num_layers,
                           c.channels, c.num_heads, p.T, p.recompute, p.use_master_weights);
    s += strfmt("|   for any B: params %s + grads %s + AdamW m+v %s + master weights %s = %s\n", mib_str(p.param_bytes).c_str(),
                mib_str(p.grad_bytes).c_str(), mib_str(p.adamw_bytes).c_str(), mib_str(p.master_bytes).c_str(),
                mib_str(p.fixed_bytes()).c_str());
    s += strfmt("|   activations %s a sequence; B=%d: activations %s + kernel scratch %s + inputs %s\n",
                mib_str(p.per_sequence_bytes).c_str(), p.B, mib_str(p.activation_bytes).c_str(),
                mib_str(p.scratch_bytes).c_str(), mib_str(p.input_bytes).c_str());
    s += strfmt("|   total at B=%d: %s; free device memory %s, of which %s stays in reserve\n", p.B,
                mib_str(p.total_bytes()).c_str(), mib_str(free_bytes).c_str(), mib_str(kMemoryReserveBytes).c_str());
    s += strfmt("|   largest B that fits: %d\n", largest_B);
    return s;
}

// "" if the plan fits the budget, else the message train_gpt2cu exits with. largest_B_r2: the largest B with
// -r 2 (asked only when the run's recompute is lower; -1 to leave it out).
inline std::string memory_plan_check(const MemoryPlan& p, size_t free_bytes, int largest_B, int largest_B_r2) {
    if (p.total_bytes() <= memory_budget(free_bytes)) return "";
    std::string s = strfmt("-b %d does not fit in device memory: the run needs %s and %s is free (%s kept in reserve); ",
                           p.B, mib_str(p.total_bytes()).c_str(), mib_str(free_bytes).c_str(), mib_str(kMemoryReserveBytes).c_str());
    if (largest_B == 0) s += strfmt("not even -b 1 fits at T=%d", p.T);
    else s += strfmt("the largest B that fits is %d (-b %d; -d adds gradient accumulation for a larger total batch)", largest_B, largest_B);
    if (largest_B_r2 > largest_B) s += strfmt("; with -r 2 it is %d", largest_B_r2);
    return s;
}
