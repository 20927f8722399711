/*
flashgpt fused causal attention (PROVISIONAL: API only, kernels being written).

Public API (what train_gpt2.cu calls):
  attention_check_supported(B, T, NH, HS)        exits with a clear message if unsupported
  attention_unsupported_reason(B, T, NH, HS)     nullptr if supported, else why not
  attention_forward_path_name(HS) / attention_backward_path_name(HS)
  attention_forward(out, lse, qkv, B, T, NH, HS, stream)
      qkv (B, T, 3, NH, HS) bf16 -> out (B, T, NH, HS) bf16, lse (B, NH, T) fp32
  attention_backward_scratch_bytes(B, T, NH, HS)
  attention_backward(dqkv, scratch, dout, qkv, out, lse, B, T, NH, HS, stream)
      writes (overwrites) all of dqkv (B, T, 3, NH, HS) bf16
*/
#pragma once
#include "common.cuh"

const char* attention_unsupported_reason(int B, int T, int NH, int HS) {
    if (HS != 64 && HS != 128) return "head size must be 64 or 128";
    if (B < 1 || T < 1 || NH < 1) return "B, T and NH must be >= 1";
    return nullptr;
}
void attention_check_supported(int B, int T, int NH, int HS) {
    const char* why = attention_unsupported_reason(B, T, NH, HS);
    if (why) { fprintf(stderr, "attention: unsupported shape B=%d T=%d NH=%d HS=%d: %s\n", B, T, NH, HS, why); exit(EXIT_FAILURE); }
}
const char* attention_forward_path_name(int HS) { return "provisional"; }
const char* attention_backward_path_name(int HS) { return "provisional"; }
void attention_forward(floatX* out, float* lse, const floatX* qkv, int B, int T, int NH, int HS, cudaStream_t stream) {
    fprintf(stderr, "attention_forward: not implemented yet\n"); exit(EXIT_FAILURE);
}
size_t attention_backward_scratch_bytes(int B, int T, int NH, int HS) { return 0; }
void attention_backward(floatX* dqkv, void* scratch, const floatX* dout, const floatX* qkv, const floatX* out,
                        const float* lse, int B, int T, int NH, int HS, cudaStream_t stream) {
    fprintf(stderr, "attention_backward: not implemented yet\n"); exit(EXIT_FAILURE);
}
