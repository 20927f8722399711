/*
Seeded random numbers, CUDA-free.
- mt19937: the Mersenne Twister (as llm.c and PyTorch's CPU generator use), for weight init and
  for the data loader's shuffles. Written here from the published algorithm (Matsumoto & Nishimura).
- xorshift64*: a one-word generator for sampling coins; its whole state (one uint64) fits in the
  checkpoint header, which is what exact resume needs.
*/
#pragma once
#include <cstdint>
#include <cmath>

#define MT_N 624
#define MT_M 397

typedef struct {
    uint32_t state[MT_N];
    int index;
} mt19937_state;

inline void mt19937_init(mt19937_state* s, uint32_t seed) {
    s->state[0] = seed;
    for (int i = 1; i < MT_N; i++) {
        s->state[i] = 1812433253u * (s->state[i - 1] ^ (s->state[i - 1] >> 30)) + (uint32_t)i;
    }
    s->index = MT_N;
}

// regenerate all 624 words at once (the "twist")
inline void mt19937_twist(mt19937_state* s) {
    for (int i = 0; i < MT_N; i++) {
        uint32_t y = (s->state[i] & 0x80000000u) | (s->state[(i + 1) % MT_N] & 0x7fffffffu);
        uint32_t next = s->state[(i + MT_M) % MT_N] ^ (y >> 1);
        if (y & 1u) next ^= 0x9908b0dfu;
        s->state[i] = next;
    }
    s->index = 0;
}

inline uint32_t mt19937_u32(mt19937_state* s) {
    if (s->index >= MT_N) mt19937_twist(s);
    uint32_t y = s->state[s->index++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

// uniform in [0, 1) with 24 bits of mantissa
inline float mt19937_uniform(mt19937_state* s) {
    return (mt19937_u32(s) >> 8) * (1.0f / 16777216.0f);
}

// n standard-normal samples times std (Box-Muller on pairs of uniforms)
inline void mt19937_normal_fill(mt19937_state* s, float* out, size_t n, float mean, float std) {
    for (size_t i = 0; i < n; i += 2) {
        float u1 = 1.0f - mt19937_uniform(s);   // (0, 1], so log is finite
        float u2 = mt19937_uniform(s);
        float r = sqrtf(-2.0f * logf(u1));
        out[i] = mean + std * r * cosf(2.0f * (float)M_PI * u2);
        if (i + 1 < n) out[i + 1] = mean + std * r * sinf(2.0f * (float)M_PI * u2);
    }
}

// Fisher-Yates: data[0..n) becomes a random permutation of 0..n-1
inline void mt19937_permutation(mt19937_state* s, int* data, int n) {
    for (int i = 0; i < n; i++) data[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(mt19937_u32(s) % (uint32_t)(i + 1));
        int tmp = data[i]; data[i] = data[j]; data[j] = tmp;
    }
}

// ----------------------------------------------------------------------------
// xorshift64*: state is one uint64 (never 0)

inline uint32_t random_u32(uint64_t* state) {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return (uint32_t)((*state * 0x2545F4914F6CDD1Dull) >> 32);
}
inline float random_f32(uint64_t* state) {  // [0, 1)
    return (random_u32(state) >> 8) * (1.0f / 16777216.0f);
}
