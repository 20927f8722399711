/*
Common helpers shared by every CUDA file of flashgpt: error checking, the bf16 activation
type, small math helpers and NVTX ranges. No kernels live here.
*/
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <nvtx3/nvToolsExt.h>

// ----------------------------------------------------------------------------
// error checking: every CUDA call goes through cudaCheck, every launch is followed by
// cudaCheck(cudaGetLastError()).

inline void cuda_check(cudaError_t error, const char* file, int line) {
    if (error != cudaSuccess) {
        fprintf(stderr, "[CUDA ERROR] at file %s:%d:\n%s\n", file, line, cudaGetErrorString(error));
        exit(EXIT_FAILURE);
    }
}
#define cudaCheck(err) (cuda_check(err, __FILE__, __LINE__))

// ----------------------------------------------------------------------------
// precision: activations and parameters are bf16 (flashgpt is bf16-only, as llm.c's default).

typedef __nv_bfloat16 floatX;
#define PRECISION_MODE "BF16"

template <class T>
__host__ __device__ constexpr T ceil_div(T dividend, T divisor) {
    return (dividend + divisor - 1) / divisor;
}

// ----------------------------------------------------------------------------
// device properties, read once

inline const cudaDeviceProp& device_props() {
    static cudaDeviceProp props;
    static bool loaded = false;
    if (!loaded) {
        int device;
        cudaCheck(cudaGetDevice(&device));
        cudaCheck(cudaGetDeviceProperties(&props, device));
        loaded = true;
    }
    return props;
}

// A device buffer grown on demand (the old one freed, so no kernel may still use it): scratch whose size depends on
// the call. `buf` and `capacity` are the caller's (static) state.
inline void* grow_device_buffer(void*& buf, size_t& capacity, size_t bytes) {
    if (bytes > capacity) {
        if (buf) cudaCheck(cudaFree(buf));
        cudaCheck(cudaMalloc(&buf, bytes));
        capacity = bytes;
    }
    return buf;
}

// ----------------------------------------------------------------------------
// An FP8 copy that a kernel writes beside its bf16 output (train_gpt2.cu's -fp8), so that no cast reads the output
// back: the bf16 values times *scale, saturated to E5M2 or E4M3 as src/fp8.cuh's cast would, and the largest |bf16
// value| atomically into *amax as float bits (non-negative floats order as their bits). Each producer says where in q
// the copy lies.

struct Fp8Copy {
    uint8_t* q;
    const float* scale;
    unsigned int* amax;
    bool e5m2;   // E5M2, else E4M3
};

// ----------------------------------------------------------------------------
// NVTX range that closes at the end of the scope: NvtxRange r("attention_forward");

class NvtxRange {
public:
    explicit NvtxRange(const char* name) { nvtxRangePush(name); }
    NvtxRange(const char* prefix, int index) {
        char name[128];
        snprintf(name, sizeof(name), "%s %d", prefix, index);
        nvtxRangePush(name);
    }
    ~NvtxRange() { nvtxRangePop(); }
};
#define NVTX_RANGE_FN() NvtxRange nvtx_range_fn(__FUNCTION__)
