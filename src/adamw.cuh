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
The kernel changes nothing where the step's loss or gradient norm is not finite: it reads both on the GPU, so the
host need not wait for them before it launches the update.
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

// one element: m and v updated in place, the new weight returned
__device__ __forceinline__ float adamw_element(float g, float& m, float& v, float p, float wd, float learning_rate, float beta1,
                                               float beta2, float beta1_correction, float beta2_correction, float eps) {
    m = beta1 * m + (1.0f - beta1) * g;
    v = beta2 * v + (1.0f - beta2) * g * g;
    float update = (m / beta1_correction) / (sqrtf(v / beta2_correction) + eps) + wd * p;
    return p - learning_rate * update;
}

// params (n) bf16, master (n) fp32 or null, grads (n) bf16, m/v (n) fp32; norm, loss (1) device; index_base: params[0]'s
// index in the whole parameter buffer (a ZeRO-1 shard rounds with the bits the whole update would use).
// Each thread takes chunks of 8 elements (16-byte bf16 and 2 x 16-byte fp32 accesses; every pointer is 16-byte
// aligned: the tensors and the ZeRO-1 shards start at multiples of 8 elements) and finds the chunk's tensor once;
// the last n % 8 elements go one by one. The arithmetic is the same per element either way.
__global__ void adamw_kernel(floatX* params, float* master, const floatX* grads, float* m_memory, float* v_memory,
                             size_t n, AdamWTensorTable table, const float* norm, const float* loss, float max_norm,
                             float learning_rate, float beta1, float beta2, float beta1_correction,
                             float beta2_correction, float eps, bool stochastic_rounding, uint32_t step_seed,
                             size_t index_base) {
    const float gn = *norm;
    if (!isfinite(gn) || !isfinite(*loss)) return;   // the step is skipped: a non-finite update would poison the weights
    float clip_scale = 1.0f;
    if (max_norm > 0.0f && gn > max_norm) clip_scale = max_norm / gn;
    const size_t stride = (size_t)gridDim.x * blockDim.x, chunks = n / X128_SIZE;
    for (size_t chunk = (size_t)blockIdx.x * blockDim.x + threadIdx.x; chunk < chunks; chunk += stride) {
        const size_t i0 = chunk * X128_SIZE;
        int t = 0;
        while (i0 >= table.offsets[t + 1]) t++;
        const x128 g = load128cs(grads + i0);
        float4 m4[2] = {__ldcs(reinterpret_cast<const float4*>(m_memory + i0)), __ldcs(reinterpret_cast<const float4*>(m_memory + i0) + 1)};
        float4 v4[2] = {__ldcs(reinterpret_cast<const float4*>(v_memory + i0)), __ldcs(reinterpret_cast<const float4*>(v_memory + i0) + 1)};
        float4 p4[2];
        x128 pb;
        if (master) { p4[0] = __ldcs(reinterpret_cast<const float4*>(master + i0)); p4[1] = __ldcs(reinterpret_cast<const float4*>(master + i0) + 1); }
        else pb = load128cs(params + i0);
        float* m = reinterpret_cast<float*>(m4);
        float* v = reinterpret_cast<float*>(v4);
        float* p = reinterpret_cast<float*>(p4);
        x128 out;
        #pragma unroll
        for (int e = 0; e < X128_SIZE; e++) {
            const size_t i = i0 + e;
            while (i >= table.offsets[t + 1]) t++;   // a tensor boundary inside the chunk
            const float p_old = master ? p[e] : pb.f(e);
            const float p_new = adamw_element(g.f(e) * clip_scale, m[e], v[e], p_old, table.weight_decay[t], learning_rate, beta1,
                                              beta2, beta1_correction, beta2_correction, eps);
            p[e] = p_new;
            out.v[e] = stochastic_rounding ? round_bf16_stochastic(p_new, rounding_bits(step_seed, index_base + i)) : __float2bfloat16(p_new);
        }
        __stcs(reinterpret_cast<float4*>(m_memory + i0), m4[0]); __stcs(reinterpret_cast<float4*>(m_memory + i0) + 1, m4[1]);
        __stcs(reinterpret_cast<float4*>(v_memory + i0), v4[0]); __stcs(reinterpret_cast<float4*>(v_memory + i0) + 1, v4[1]);
        if (master) { __stcs(reinterpret_cast<float4*>(master + i0), p4[0]); __stcs(reinterpret_cast<float4*>(master + i0) + 1, p4[1]); }
        store128cs(params + i0, out);
    }
    for (size_t i = chunks * X128_SIZE + (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        int t = 0;
        while (i >= table.offsets[t + 1]) t++;
        float m = m_memory[i], v = v_memory[i];
        const float p_new = adamw_element(__bfloat162float(grads[i]) * clip_scale, m, v, master ? master[i] : __bfloat162float(params[i]),
                                          table.weight_decay[t], learning_rate, beta1, beta2, beta1_correction, beta2_correction, eps);
        m_memory[i] = m;
        v_memory[i] = v;
        params[i] = stochastic_rounding ? round_bf16_stochastic(p_new, rounding_bits(step_seed, index_base + i)) : __float2bfloat16(p_new);
        if (master) master[i] = p_new;
    }
}

void adamw_update(floatX* params, float* master, const floatX* grads, float* m_memory, float* v_memory, size_t n,
                  const AdamWTensorTable& table, const float* norm, const float* loss, float max_norm, float learning_rate, float beta1,
                  float beta2, int t, float eps, bool stochastic_rounding, uint32_t seed, cudaStream_t stream,
                  size_t index_base = 0) {
    NVTX_RANGE_FN();
    float beta1_correction = 1.0f - powf(beta1, (float)t);
    float beta2_correction = 1.0f - powf(beta2, (float)t);
    const int block_size = 256;
    int num_blocks = std::min((int)ceil_div(ceil_div(n, (size_t)X128_SIZE), (size_t)block_size), device_props().multiProcessorCount * 16);
    adamw_kernel<<<num_blocks, block_size, 0, stream>>>(params, master, grads, m_memory, v_memory, n, table, norm, loss, max_norm,
                                                        learning_rate, beta1, beta2, beta1_correction, beta2_correction, eps,
                                                        stochastic_rounding, adamw_step_seed(seed, t), index_base);
    cudaCheck(cudaGetLastError());
}
