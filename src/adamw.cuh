/*
AdamW over all parameters in one launch (they are one contiguous buffer), fp32 moments,
optional fp32 master weights, decoupled weight decay on the 2D tensors only.
    g = grad * clip_scale,  clip_scale = min(1, max_norm / norm)   (norm read from the GPU)
    m = beta1 m + (1-beta1) g;  v = beta2 v + (1-beta2) g^2
    p -= lr * (m / (1-beta1^t) / (sqrt(v / (1-beta2^t)) + eps) + wd * p)      [torch.optim.AdamW]
The bf16 copy of a parameter is the master weight rounded stochastically (default, as llm.c; -sr 0: to nearest).
Rounding to nearest loses every update smaller than half a bf16 ulp of the weight, and without master weights
(-w 0) those losses add up step after step; stochastic rounding rounds up with probability (p - down) / ulp, so the
bf16 weight equals p in expectation. Its random bits hash (seed, step, element): deterministic, and a resumed run
rounds as the uninterrupted one did.
Each thread finds its tensor in a 16-entry table to know its weight decay: "multi-tensor" in one kernel.
*/
#pragma once
#include <cstring>         // memcpy: the bits of a float
#include "cuda_utils.cuh"
#include "config.h"

// 32 well-mixed bits of x (a murmur3-style finaliser): the random source of stochastic rounding
__host__ __device__ inline uint32_t hash_u32(uint32_t x) {
    x ^= x >> 16; x *= 0x7feb352du;
    x ^= x >> 15; x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

// the random bits of stochastic rounding: element i of the update whose step seed is adamw_step_seed(seed, t)
__host__ __device__ inline uint32_t rounding_bits(uint32_t step_seed, size_t i) {
    return hash_u32((uint32_t)i ^ hash_u32(step_seed + (uint32_t)(i >> 32)));
}
inline uint32_t adamw_step_seed(uint32_t seed, int t) { return hash_u32(seed ^ hash_u32((uint32_t)t)); }

// x rounded to one of its two bf16 neighbours, up (away from zero) with probability = the dropped 16 bits / 2^16:
// adding 16 random bits below the kept ones and truncating does exactly that. Infinity and NaN pass through.
__host__ __device__ inline floatX round_bf16_stochastic(float x, uint32_t random) {
    uint32_t bits;
    memcpy(&bits, &x, 4);
    if ((bits & 0x7f800000u) != 0x7f800000u) bits += random & 0xffffu;
    const unsigned short hi = (unsigned short)(bits >> 16);
    floatX out;
    memcpy(&out, &hi, 2);
    return out;
}

typedef struct {
    size_t offsets[NUM_PARAMETER_TENSORS + 1];  // prefix sums of the tensor sizes
    float weight_decay[NUM_PARAMETER_TENSORS];
} AdamWTensorTable;

// params (n) bf16, master (n) fp32 or null, grads (n) bf16, m/v (n) fp32; norm (1) device; index_base: params[0]'s
// index in the whole parameter buffer (a ZeRO-1 shard rounds with the bits the whole update would use)
__global__ void adamw_kernel(floatX* params, float* master, const floatX* grads, float* m_memory, float* v_memory,
                             size_t n, AdamWTensorTable table, const float* norm, float max_norm,
                             float learning_rate, float beta1, float beta2, float beta1_correction,
                             float beta2_correction, float eps, bool stochastic_rounding, uint32_t step_seed,
                             size_t index_base) {
    float clip_scale = 1.0f;
    if (max_norm > 0.0f) {
        float gn = *norm;
        if (gn > max_norm) clip_scale = max_norm / gn;
    }
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        int t = 0;
        while (i >= table.offsets[t + 1]) t++;
        float wd = table.weight_decay[t];
        float g = __bfloat162float(grads[i]) * clip_scale;
        float m = beta1 * m_memory[i] + (1.0f - beta1) * g;
        float v = beta2 * v_memory[i] + (1.0f - beta2) * g * g;
        m_memory[i] = m;
        v_memory[i] = v;
        float p = master ? master[i] : __bfloat162float(params[i]);
        float update = (m / beta1_correction) / (sqrtf(v / beta2_correction) + eps) + wd * p;
        p -= learning_rate * update;
        params[i] = stochastic_rounding ? round_bf16_stochastic(p, rounding_bits(step_seed, index_base + i)) : __float2bfloat16(p);
        if (master) master[i] = p;
    }
}

void adamw_update(floatX* params, float* master, const floatX* grads, float* m_memory, float* v_memory, size_t n,
                  const AdamWTensorTable& table, const float* norm, float max_norm, float learning_rate, float beta1,
                  float beta2, int t, float eps, bool stochastic_rounding, uint32_t seed, cudaStream_t stream,
                  size_t index_base = 0) {
    NVTX_RANGE_FN();
    float beta1_correction = 1.0f - powf(beta1, (float)t);
    float beta2_correction = 1.0f - powf(beta2, (float)t);
    const int block_size = 512;
    int num_blocks = std::min((int)ceil_div(n, (size_t)block_size), device_props().multiProcessorCount * 8);
    adamw_kernel<<<num_blocks, block_size, 0, stream>>>(params, master, grads, m_memory, v_memory, n, table, norm, max_norm,
                                                        learning_rate, beta1, beta2, beta1_correction, beta2_correction, eps,
                                                        stochastic_rounding, adamw_step_seed(seed, t), index_base);
    cudaCheck(cudaGetLastError());
}
