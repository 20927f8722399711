/*
THE harness shared by every dev/cuda file (attention_forward.cu, attention_backward.cu, attention_general.cu, and the
layer kernels' fused_classifier.cu, layernorm.cu and matmul.cu, which take its inputs, poisoning, timing and command
line). The layer harnesses define DEV_CUDA_NO_ATTENTION first: they then take no attention flags and link nothing of
build/attention.a. The GPU attention references are dev/cuda/gpu_reference.h's.

  - CUDA error checks (cudaCheck from src/common.cuh) and a check after every launch
  - fresh random inputs every run (seeded from the clock unless --seed), randn or randn*scale
  - output poisoning (0xFF bytes = NaN in bf16 and fp32) before every validated launch, so an
    element the kernel never wrote shows up as non-finite
  - the FlashAttention pass rule (reference.h; the GPU references are in gpu_reference.h)
  - timing with CUDA events: warm-up, median and min of many repeats, inputs rotated over
    several buffer sets so the L2 never holds them, TFLOP/s, RESULT lines for scripts/

Command line shared by the dev binaries:
  ./attention_forward N|N,M,..|all [--check] [--no-bench] [-b B] [-t T] [-n NH] [-d HS] [--scale S]
                            [--seed S] [--repeats R] [--shapes bench] [--cfg NAME,NAME..] [--first-config]
                            [--sync-each] [--trace] [--schedule static|dynamic] [--pdl 0|1]
                            [--section-heads N]
  N|N,M|all  one variant, a comma list of variants, or every variant
  --check    validate on the acceptance validation set (7 shapes x input scale 1 and 8), no timing
  --no-bench validate the given shape only
  --shapes bench   validate + time on the benchmark shapes (kBenchShapes; the slow naive variant is not timed there)
  --cfg      only the configs with these exact names (variants with a single config always run); nothing else is
             validated, so nothing else is timed
  --first-config  only each variant's first config (make test: one config per variant), and variants other than 0
                  only on one validation shape (2 x 1000 x 12 x 64)
  --sync-each  synchronise after every timed launch, as sdpa_anchor.py times PyTorch (default: back to back)
  --trace    also print every timed launch's ms in launch order (a TIMES line): is a slow median a few slow
             launches, one of the rotated input sets, or a slowdown over time?
  --schedule static|dynamic  force the persistent Hopper kernels' round-robin or claimed schedule (A/B runs;
             by default src picks by T, see claimed_schedule)
  --pdl 0|1  programmatic dependent launch of the Hopper backward's kernels off / on (default on)
  --section-heads N  the persistent Hopper kernels' heads per section (A/B runs; by default src picks by the
             operands' size, see persistent_section_heads)
*/
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>
#include <cublas_v2.h>
#ifdef DEV_CUDA_NO_ATTENTION
#include "src/common.cuh"
#else
#include "src/attention.cuh"
#endif
#include "dev/cuda/reference.h"

// ----------------------------------------------------------------------------
// shapes and command line

struct Shape { int B, T, NH, HS; };

// the acceptance validation set of the attention issues: big GPT-2 shapes, ragged T, T = 1, tiny B*NH, HS 128
static const Shape kValidationShapes[] = {
    {64, 1024, 12, 64}, {8, 1024, 12, 64}, {2, 1000, 12, 64}, {1, 1, 1, 64},
    {1, 17, 1, 64}, {4, 4096, 16, 128}, {3, 333, 5, 128},
};
// the benchmark shapes of the attention issues: GPT-2 124M training (B=64) and a small batch, long T, HS 128
static const Shape kBenchShapes[] = { {64, 1024, 12, 64}, {8, 1024, 12, 64}, {4, 4096, 12, 64}, {1, 16384, 12, 64}, {4, 8192, 16, 128} };

struct HarnessArgs {
    std::vector<int> variants;   // empty = all
    bool wants(int variant) const { return variants.empty() || std::find(variants.begin(), variants.end(), variant) != variants.end(); }
    std::vector<std::string> configs;   // empty = all
    bool first_config = false;          // only config 0 of each variant
    bool wants_config(int num_configs, int cfg, const char* name) const {
        if (first_config) return cfg == 0;
        return num_configs == 1 || configs.empty() || std::find(configs.begin(), configs.end(), name) != configs.end();
    }
    // --first-config (make test): the shipped variant 0 on every validation shape, the others on one, the ragged
    // 2 x 1000 x 12 x 64 (the rest is make test-all's)
    bool wants_shape(int variant, const Shape& s) const {
        const Shape& one = kValidationShapes[2];
        return !first_config || variant == 0 || (s.B == one.B && s.T == one.T && s.NH == one.NH && s.HS == one.HS);
    }
    bool check = false;          // the validation set, no timing
    bool bench = true;
    bool bench_shapes = false;   // time on kBenchShapes
    Shape shape = {8, 1024, 12, 64};
    float scale = 1.0f;          // input scale (8 stresses the softmax max)
    uint64_t seed = 0;           // 0: from the clock (fresh inputs every run)
    int repeats = 30;
};

// --sync-each: time_kernel synchronises after every timed launch (the anchor script's protocol)
inline bool& timing_sync_each() { static bool sync_each = false; return sync_each; }
// --trace: time_kernel prints the launches' times in launch order before sorting them
inline bool& timing_trace() { static bool trace = false; return trace; }

inline std::vector<std::string> split_commas(const std::string& list) {
    std::vector<std::string> parts;
    for (size_t start = 0; start <= list.size();) {
        size_t comma = list.find(',', start);
        if (comma == std::string::npos) comma = list.size();
        parts.push_back(list.substr(start, comma - start));
        start = comma + 1;
    }
    return parts;
}

inline HarnessArgs parse_harness_args(int argc, char** argv) {
    HarnessArgs a;
    if (argc < 2) { fprintf(stderr, "usage: %s N|all [--check] [--no-bench] [-b B] [-t T] [-n NH] [-d HS] [--scale S] [--seed S] [--repeats R] [--shapes bench] [--cfg NAME,..] [--first-config] [--sync-each] [--trace] [--schedule static|dynamic] [--pdl 0|1] [--section-heads N]\n", argv[0]); exit(EXIT_FAILURE); }
    if (strcmp(argv[1], "all") != 0)
        for (const std::string& v : split_commas(argv[1])) a.variants.push_back(atoi(v.c_str()));
    for (int i = 2; i < argc; i++) {
        std::string f = argv[i];
        auto next = [&]() { if (i + 1 >= argc) { fprintf(stderr, "missing value after %s\n", f.c_str()); exit(EXIT_FAILURE); } return argv[++i]; };
        if (f == "--check") { a.check = true; a.bench = false; }
        else if (f == "--no-bench") a.bench = false;
        else if (f == "-b") a.shape.B = atoi(next());
        else if (f == "-t") a.shape.T = atoi(next());
        else if (f == "-n") a.shape.NH = atoi(next());
        else if (f == "-d") a.shape.HS = atoi(next());
        else if (f == "--scale") a.scale = (float)atof(next());
        else if (f == "--seed") a.seed = strtoull(next(), nullptr, 10);
        else if (f == "--repeats") a.repeats = atoi(next());
        else if (f == "--cfg") a.configs = split_commas(next());
        else if (f == "--first-config") a.first_config = true;
#ifndef DEV_CUDA_NO_ATTENTION
        else if (f == "--schedule") {
            const std::string v = next();
            if (v != "static" && v != "dynamic") { fprintf(stderr, "--schedule takes static or dynamic\n"); exit(EXIT_FAILURE); }
            attention_tuning().schedule = v == "static" ? AttentionTuning::kRoundRobin : AttentionTuning::kClaimed;
        }
        else if (f == "--pdl") attention_tuning().pdl = atoi(next()) != 0;
        else if (f == "--section-heads") attention_tuning().section_heads = atoi(next());
#endif
        else if (f == "--sync-each") timing_sync_each() = true;
        else if (f == "--trace") timing_trace() = true;
        else if (f == "--shapes") { if (strcmp(next(), "bench") != 0) { fprintf(stderr, "--shapes takes 'bench'\n"); exit(EXIT_FAILURE); } a.bench_shapes = true; }
        else { fprintf(stderr, "unknown flag %s\n", f.c_str()); exit(EXIT_FAILURE); }
    }
    if (a.seed == 0) a.seed = (uint64_t)std::chrono::high_resolution_clock::now().time_since_epoch().count();
    return a;
}

// the shapes and input scales a run covers: the validation set at x1 and x8 (--check), the benchmark
// shapes (--shapes bench), or the one shape given
inline std::vector<Shape> harness_shapes(const HarnessArgs& a) {
    if (a.check) return std::vector<Shape>(std::begin(kValidationShapes), std::end(kValidationShapes));
    if (a.bench_shapes) return std::vector<Shape>(std::begin(kBenchShapes), std::end(kBenchShapes));
    return {a.shape};
}
inline std::vector<float> harness_scales(const HarnessArgs& a) { return a.check ? std::vector<float>{1.0f, 8.0f} : std::vector<float>{a.scale}; }

inline double attention_forward_flops(const Shape& s) {   // causal: half of 4*B*NH*T*T*HS
    return 4.0 * s.B * s.NH * (double)s.T * s.T * s.HS / 2.0;
}

// ----------------------------------------------------------------------------
// host <-> device helpers

// randn * scale in bf16, on every core: chunk c (1M elements) draws from its own generator, seeded by one draw of rng
// and c, so the values depend on the seed alone, not on the thread count (a 64x12x1024 qkv is 150M draws)
inline void fill_randn_bf16(std::vector<floatX>& h, float scale, std::mt19937_64& rng) {
    constexpr size_t kChunk = 1 << 20;
    const uint64_t base = rng();
    const size_t chunks = (h.size() + kChunk - 1) / kChunk;
    auto fill_chunks = [&](size_t first, size_t step) {
        for (size_t c = first; c < chunks; c += step) {
            std::mt19937_64 chunk_rng(base + 0x9E3779B97F4A7C15ull * (c + 1));
            std::normal_distribution<float> dist(0.0f, 1.0f);
            for (size_t i = c * kChunk; i < std::min(h.size(), (c + 1) * kChunk); i++) h[i] = __float2bfloat16(dist(chunk_rng) * scale);
        }
    };
    const size_t threads = std::min<size_t>(chunks, std::max(1u, std::thread::hardware_concurrency()));
    std::vector<std::thread> pool;
    for (size_t t = 1; t < threads; t++) pool.emplace_back(fill_chunks, t, threads);
    fill_chunks(0, threads);
    for (std::thread& t : pool) t.join();
}
inline std::vector<float> to_float(const std::vector<floatX>& h) {
    std::vector<float> f(h.size());
    for (size_t i = 0; i < h.size(); i++) f[i] = __bfloat162float(h[i]);
    return f;
}
template <class T> T* device_alloc(size_t n) { T* p; cudaCheck(cudaMalloc(&p, n * sizeof(T))); return p; }
template <class T> void to_device(T* d, const std::vector<T>& h) { cudaCheck(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice)); }
template <class T> std::vector<T> from_device(const T* d, size_t n) {
    std::vector<T> h(n);
    cudaCheck(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}
// 0xFF bytes: NaN in both bf16 and fp32, so anything left unwritten fails validation
inline void poison(void* d, size_t bytes) { cudaCheck(cudaMemset(d, 0xFF, bytes)); }

// turns a flat index of one of the three layouts into readable coordinates for error messages
struct Describe {
    enum Layout { BTHD, QKV, LSE };
    Shape s; Layout layout;
    void operator()(size_t i, char* buf) const {
        size_t HS = s.HS, NH = s.NH, T = s.T;
        if (layout == LSE) snprintf(buf, 128, "(b=%zu, h=%zu, t=%zu)", i / (NH * T), i / T % NH, i % T);
        else if (layout == QKV) snprintf(buf, 128, "(b=%zu, t=%zu, %c, h=%zu, d=%zu)", i / (T * 3 * NH * HS), i / (3 * NH * HS) % T,
                                      "qkv"[i / (NH * HS) % 3], i / HS % NH, i % HS);
        else snprintf(buf, 128, "(b=%zu, t=%zu, h=%zu, d=%zu)", i / (T * NH * HS), i / (NH * HS) % T, i / HS % NH, i % HS);
    }
};


// ----------------------------------------------------------------------------
// timing: CUDA events around each repeat on the launch stream; `launch(i)` runs repeat i and is
// expected to rotate over input sets (see num_rotating_sets). Returns {median, min} in ms.

struct Timing { float median_ms, min_ms; };

template <class Launch>
Timing time_kernel(Launch launch, int repeats, cudaStream_t stream, int warmup = 3) {
    for (int i = 0; i < warmup; i++) launch(i);
    cudaCheck(cudaGetLastError());
    cudaCheck(cudaStreamSynchronize(stream));
    std::vector<cudaEvent_t> ev(2 * repeats);
    for (auto& e : ev) cudaCheck(cudaEventCreate(&e));
    for (int i = 0; i < repeats; i++) {
        cudaCheck(cudaEventRecord(ev[2 * i], stream));
        launch(warmup + i);
        cudaCheck(cudaEventRecord(ev[2 * i + 1], stream));
        if (timing_sync_each()) cudaCheck(cudaStreamSynchronize(stream));
    }
    cudaCheck(cudaGetLastError());
    cudaCheck(cudaStreamSynchronize(stream));
    std::vector<float> ms(repeats);
    for (int i = 0; i < repeats; i++) cudaCheck(cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
    for (auto& e : ev) cudaCheck(cudaEventDestroy(e));
    if (timing_trace()) {
        printf("TIMES");
        for (float t : ms) printf(" %.4f", t);
        printf("\n");
    }
    std::sort(ms.begin(), ms.end());
    return {ms[repeats / 2], ms[0]};
}

// how many copies of a working set of `bytes` make the rotation exceed 3x the L2
inline int num_rotating_sets(size_t bytes) {
    size_t l2 = (size_t)device_props().l2CacheSize;
    return (int)std::min<size_t>(8, std::max<size_t>(1, (3 * l2 + bytes - 1) / bytes));
}

inline std::string git_commit() {
#ifdef GIT_COMMIT
    return sizeof(GIT_COMMIT) > 1 ? GIT_COMMIT : "unknown";
#else
    return "unknown";
#endif
}

inline void print_device_banner() {
    const cudaDeviceProp& p = device_props();
    printf("device: %s (sm_%d%d, %d SMs, L2 %d MB) | commit %s\n", p.name, p.major, p.minor, p.multiProcessorCount,
           p.l2CacheSize >> 20, git_commit().c_str());
}

// The layer harnesses (fused_classifier.cu, layernorm.cu) size their runs with flags of their own (-n rows, -v
// vocabulary, -c channels): each listed flag's value is read here, the rest go to parse_harness_args. Prints the
// device banner and the seed.
inline HarnessArgs parse_layer_harness_args(int argc, char** argv, std::initializer_list<std::pair<const char*, int*>> sizes) {
    std::vector<char*> rest = {argv[0]};
    for (int i = 1; i < argc; i++) {
        bool taken = false;
        for (const auto& size : sizes)
            if (!strcmp(argv[i], size.first) && i + 1 < argc) { *size.second = atoi(argv[++i]); taken = true; break; }
        if (!taken) rest.push_back(argv[i]);
    }
    HarnessArgs args = parse_harness_args((int)rest.size(), rest.data());
    print_device_banner();
    printf("seed %llu\n", (unsigned long long)args.seed);
    return args;
}

// ----------------------------------------------------------------------------
// shared resources for variants (variant files allocate nothing themselves)

inline cublasHandle_t cublas_handle() {
    static cublasHandle_t handle = nullptr;
    if (!handle) {
        if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) { fprintf(stderr, "cublasCreate failed\n"); exit(EXIT_FAILURE); }
    }
    return handle;
}
#ifndef cublasCheck   // src/matmul.cuh has its own
#define cublasCheck(status) do { cublasStatus_t s_ = (status); if (s_ != CUBLAS_STATUS_SUCCESS) { \
    fprintf(stderr, "[cuBLAS ERROR] %d at %s:%d\n", (int)s_, __FILE__, __LINE__); exit(EXIT_FAILURE); } } while (0)
#endif

// one device workspace, grown on demand, for variants that need scratch (e.g. the materialized baseline)
inline void* harness_workspace(size_t bytes) {
    static void* ptr = nullptr;
    static size_t size = 0;
    return grow_device_buffer(ptr, size, bytes);
}
