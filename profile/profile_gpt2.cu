/*
One complete training step of GPT-2 (d12 unless -e names another depth; random init, random tokens) under
NVTX ranges per phase and per layer, for nsys / ncu. Includes train_gpt2.cu (TESTING), so it profiles the
training code.

  make profile_gpt2cu && ./profile_gpt2cu [B=24] [T=1024] [-e d12] [-fp8 1] [--timeline step.csv]
  nsys profile -t cuda,nvtx -o gpt2_step ./profile_gpt2cu
  ncu --set full --import-source yes -o gpt2_step ./profile_gpt2cu      (needs GPU perf-counter permission)
  bash profile/ncu_step.sh 64 1024      (per-kernel and per-phase tables; see profile/README.md)
The first step (cuBLASLt heuristics, lazy module loading) is a warmup; the profiled one is between
cudaProfilerStart/Stop, so `nsys --capture-range=cudaProfilerApi` records only it. -fp8 1 (or 2) profiles an FP8
step: its first step calibrates the scales in bf16 and is a warmup too.
--timeline FILE records the profiled step with CUPTI (profile/timeline.h: every kernel, memcpy and memset
with its GPU start and end, nothing serialised) and writes it as CSV for profile/step_timeline.py, which
draws it; that is the route where nsys does not run.
*/
#define TESTING
#include "../train_gpt2.cu"
#include <cuda_profiler_api.h>
#include "timeline.h"         // defines: timeline_start, timeline_stop (CUPTI activity records -> CSV)

int main(int argc, char** argv) {
    std::vector<const char*> positional;
    const char* timeline_path = nullptr;
    const char* descriptor = "d12";
    int fp8 = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--timeline") && i + 1 < argc) timeline_path = argv[++i];
        else if (!strcmp(argv[i], "-e") && i + 1 < argc) descriptor = argv[++i];
        else if (!strcmp(argv[i], "-fp8") && i + 1 < argc) fp8 = atoi(argv[++i]);
        else if (argv[i][0] == '-') exit_on_error(strfmt("unknown argument '%s'; usage: ./profile_gpt2cu [B] [T] [-e dNN] [-fp8 1] [--timeline FILE]", argv[i]));
        else positional.push_back(argv[i]);
    }
    int B = positional.size() > 0 ? atoi(positional[0]) : 24;
    int T = positional.size() > 1 ? atoi(positional[1]) : 1024;
    common_start();
    GPT2Config config;
    exit_on_error(parse_model_descriptor(descriptor, &config));
    const char* why = attention_unsupported_reason(B, T, config.num_heads, config.channels / config.num_heads);
    if (why) exit_on_error(strfmt("attention: %s", why));
    GPT2 model;
    gpt2_build_from_random(&model, config, 42);
    gpt2_allocate_state(&model, B, T, /*recompute=*/1, gelu_fusion_default(device_props().major), /*use_master_weights=*/1);
    if (fp8) gpt2_enable_fp8(&model, fp8);
    std::vector<int> x(B * T), y(B * T);
    mt19937_state rng;
    mt19937_init(&rng, 1337);
    for (int i = 0; i < B * T; i++) { x[i] = mt19937_u32(&rng) % config.vocab_size; y[i] = mt19937_u32(&rng) % config.vocab_size; }

    cudaEvent_t start, stop;
    cudaCheck(cudaEventCreate(&start));
    cudaCheck(cudaEventCreate(&stop));
    const int profiled = fp8 ? 2 : 1;   // after the warmup, and for FP8 after the calibration
    for (int step = 0; step <= profiled; step++) {
        if (step == profiled && timeline_path) exit_on_error(timeline_start());
        if (step == profiled) { cudaCheck(cudaProfilerStart()); cudaCheck(cudaEventRecord(start, main_stream)); }
        NvtxRange step_range("step", step);
        gpt2_zero_grad(&model);
        { NvtxRange r("forward"); gpt2_forward(&model, x.data(), y.data(), B, T); }
        { NvtxRange r("backward"); gpt2_backward(&model, x.data(), 1); }
        { NvtxRange r("norm"); gpt2_queue_step_end(&model); }
        { NvtxRange r("update"); gpt2_update(&model, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, step + 1); }   // queued as training does
        gpt2_read_step(&model);
        if (step == profiled) { cudaCheck(cudaEventRecord(stop, main_stream)); cudaCheck(cudaProfilerStop()); }
        cudaCheck(cudaStreamSynchronize(main_stream));
    }
    if (timeline_path) exit_on_error(timeline_stop(timeline_path));
    float ms;
    cudaCheck(cudaEventElapsedTime(&ms, start, stop));
    printf("%s%s B=%d T=%d: one step %.2f ms%s, %.0f tok/s, loss %.4f, norm %.4f\n", descriptor, fp8 ? " FP8" : "", B, T, ms,
           timeline_path ? " (traced by CUPTI)" : "",
           B * T / (ms / 1000), model.mean_loss, model.grad_norm);
    gpt2_free(&model);
    common_free();
    return 0;
}
