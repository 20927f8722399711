/*
Next-token sampling rules, CUDA-free: what src/sampler.cuh's kernel computes on the GPU, written once here as
host/device helpers plus a CPU reference that the CPU tests check and generate_gpt2cu's -cmp mode compares the GPU
sampler against.

  greedy        the largest logit; on equal logits the lowest token id
  top-k         keep every logit >= the k-th largest (ties at the boundary all kept, as nanoGPT's
                logits[logits < v[-1]] = -inf); k = 0 or k >= V keeps the whole vocabulary
  temperature   p_i = exp((l_i - max) / temperature) over the kept logits, normalised
  the coin      u in [0, 1) from a hash of (seed, sequence, position): the token is the first i (in id order) whose
                cumulative p reaches above u. The coin depends on nothing else, so a run is reproducible from its seed
                and a sequence's coins do not depend on the others in the batch.
Logits are bf16 (the classifier matmul's output); the top-k threshold works on their 16-bit patterns mapped to keys
that sort like the values (bf16_order_key), so it is exact and needs no sort.
*/
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#ifdef __CUDACC__
#define SAMPLER_HD __host__ __device__
#else
#define SAMPLER_HD
#endif

struct SamplerSettings {
    int greedy;          // 1: argmax (top_k and temperature unused)
    int top_k;           // 0: the whole vocabulary
    float temperature;   // > 0
    uint64_t seed;
};

// A bf16 bit pattern -> a key with key(a) < key(b) iff a < b (for non-NaN a, b; -0 sorts just below +0):
// positive values get the sign bit set, negative ones are bit-flipped.
SAMPLER_HD inline uint32_t bf16_order_key(uint16_t bits) {
    return (bits & 0x8000u) ? (~(uint32_t)bits & 0xffffu) : ((uint32_t)bits | 0x8000u);
}

// splitmix64's finaliser: every input bit reaches every output bit
SAMPLER_HD inline uint64_t sampler_mix64(uint64_t x) {
    x ^= x >> 30; x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27; x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

SAMPLER_HD inline float bf16_bits_to_float(uint16_t bits) {
    uint32_t u = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

// the coin of sequence b choosing the token at position pos, uniform in [0, 1) on a 2^-24 grid
SAMPLER_HD inline float sampler_coin(uint64_t seed, int b, int pos) {
    uint64_t h = sampler_mix64(seed + 0x9e3779b97f4a7c15ull * (uint64_t)(b + 1));
    h = sampler_mix64(h ^ (0xc2b2ae3d27d4eb4full * (uint64_t)(pos + 1)));
    return (float)(h >> 40) * (1.0f / 16777216.0f);
}

// ----------------------------------------------------------------------------
// CPU reference (fp64 probabilities), over the bf16 logits given as their bit patterns


// the smallest key top-k keeps (0: all)
inline uint32_t sampler_topk_threshold_key(const uint16_t* logits, int V, int top_k) {
    if (top_k <= 0 || top_k >= V) return 0;
    std::vector<uint32_t> count(65536, 0);
    for (int i = 0; i < V; i++) count[bf16_order_key(logits[i])]++;
    long long seen = 0;
    for (int key = 65535; key >= 0; key--) {
        seen += count[key];
        if (seen >= top_k) return (uint32_t)key;
    }
    return 0;
}

inline int sampler_argmax(const uint16_t* logits, int V) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (bf16_order_key(logits[i]) > bf16_order_key(logits[best])) best = i;
    return best;
}

// normalised cumulative probabilities of the kept tokens (0 weight for the others): cdf[i] = P(token <= i)
inline std::vector<double> sampler_reference_cdf(const uint16_t* logits, int V, const SamplerSettings& s) {
    uint32_t threshold = sampler_topk_threshold_key(logits, V, s.top_k);
    double max_logit = bf16_bits_to_float(logits[sampler_argmax(logits, V)]);
    std::vector<double> cdf(V);
    double sum = 0.0;
    for (int i = 0; i < V; i++) {
        if (bf16_order_key(logits[i]) >= threshold) sum += exp((bf16_bits_to_float(logits[i]) - max_logit) / s.temperature);
        cdf[i] = sum;
    }
    for (double& c : cdf) c /= sum;
    return cdf;
}

// the token the rules pick with this coin
inline int sampler_reference_pick(const uint16_t* logits, int V, const SamplerSettings& s, float coin) {
    if (s.greedy) return sampler_argmax(logits, V);
    std::vector<double> cdf = sampler_reference_cdf(logits, V, s);
    for (int i = 0; i < V; i++) if (cdf[i] > coin) return i;
    for (int i = V - 1; i > 0; i--) if (cdf[i] > cdf[i - 1]) return i;  // coin at 1 after rounding: the last kept
    return 0;
}

// Whether pick agrees with the rules: greedy exactly; sampled, pick is a kept token whose cdf interval contains the
// coin to within tol (the GPU sums fp32 exponentials in another order, so a coin within tol of a boundary may land on
// either side)
inline bool sampler_pick_consistent(const uint16_t* logits, int V, const SamplerSettings& s, float coin, int pick,
                                    double tol = 1e-4) {
    if (pick < 0 || pick >= V) return false;
    if (s.greedy) return pick == sampler_argmax(logits, V);
    if (bf16_order_key(logits[pick]) < sampler_topk_threshold_key(logits, V, s.top_k)) return false;
    std::vector<double> cdf = sampler_reference_cdf(logits, V, s);
    double lo = pick > 0 ? cdf[pick - 1] : 0.0, hi = cdf[pick];
    return coin >= lo - tol && coin <= hi + tol;
}
