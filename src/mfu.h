/*
Model FLOPs utilization, CUDA-free. FLOPs per token follow llm.c (train_gpt2.cu gpt2_estimate_mfu):
    6*N + 6*L*C*T    (N = all parameters incl. the padded wte; 6LCT = the attention matmuls, causal)
nanoGPT counts 12*L*C*T for attention instead, so MFU from the two is not comparable.
Peak dense bf16 tensor-core TFLOP/s by device name (vendor datasheets, no sparsity). Unknown GPUs
get -1 and MFU is printed as n/a; tok/s is always printed.
*/
#pragma once
#include <cstring>
#include <cstddef>

typedef struct {
    const char* name_contains;  // matched against cudaDeviceProp::name, first hit wins
    double bf16_tflops;
} PeakFlopsEntry;

static const PeakFlopsEntry PEAK_FLOPS_TABLE[] = {
    {"H200 NVL", 835.0},
    {"H200", 989.4},             // H200 SXM: same tensor cores and clocks as H100 SXM
    {"GH200", 989.4},
    {"H100 NVL", 835.0},
    {"H100 PCIe", 756.5},
    {"H100", 989.4},             // "NVIDIA H100 80GB HBM3" (SXM)
    {"H800", 989.4},
    {"B200", 2250.0},
    {"A100", 312.0},
    {"A800", 312.0},
    {"A10G", 70.0},
    {"A10", 125.0},
    {"L40S", 362.1},
    {"L40", 181.0},
    {"L4", 121.0},
    {"RTX 4090", 165.2},
    {"RTX 3090", 71.0},
};

// peak bf16 FLOP/s of the named device, or -1 if unknown
inline double get_peak_bf16_flops(const char* device_name) {
    for (const PeakFlopsEntry& e : PEAK_FLOPS_TABLE) {
        if (strstr(device_name, e.name_contains) != nullptr) return e.bf16_tflops * 1e12;
    }
    return -1.0;
}

inline double gpt2_flops_per_token(size_t num_parameters, int L, int C, int T) {
    return 6.0 * (double)num_parameters + 6.0 * (double)L * (double)C * (double)T;
}

// fraction of peak achieved (0..1), or -1 if the peak is unknown
inline double estimate_mfu(double flops_per_token, double tokens_per_second, const char* device_name) {
    double peak = get_peak_bf16_flops(device_name);
    if (peak <= 0.0) return -1.0;
    return flops_per_token * tokens_per_second / peak;
}
