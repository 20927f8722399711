/*
The matmuls of one GPT-2 training step, each timed with every algorithm cuBLASLt's heuristic offers for it (up to
16), to see whether its first pick, the one training runs, is the fastest. Shapes and epilogues are those of
train_gpt2.cu's matmul_forward / matmul_backward at N = B*T tokens and C channels, called through the same
matmul_cublaslt. Operands are random bf16 (not zeros: the power a matmul draws, and so its clock, depends on the data).

  make dev/cuda/matmul_algos && ./dev/cuda/matmul_algos [B=64] [T=1024] [C=768]

Prints, per matmul, ms (median of 20 launches after 3 warm-ups), TFLOP/s and the algorithm's configuration per
heuristic rank (cuBLASLt's ids: algo, tile, stages, split-K and its reduction, CTA swizzle, cluster shape, inner
shape, custom option; "<- training" marks the one training runs), then one "RESULT" line with rank 0's time,
training's rank and time, and the fastest rank and its time.
*/
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#include "src/matmul.cuh"

// x[i] = a uniform value in [-scale, scale) from a hash of i and the seed
__global__ void fill_random_kernel(floatX* x, size_t n, uint32_t seed, float scale) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 0x9E3779B1u ^ seed;
        h ^= h >> 16; h *= 0x85EBCA6Bu; h ^= h >> 13; h *= 0xC2B2AE35u; h ^= h >> 16;
        x[i] = __float2bfloat16(scale * ((h >> 8) * (2.0f / 16777216.0f) - 1.0f));
    }
}

floatX* random_buffer(size_t n, uint32_t seed, float scale) {
    floatX* p;
    cudaCheck(cudaMalloc(&p, n * sizeof(floatX)));
    fill_random_kernel<<<1024, 256>>>(p, n, seed, scale);
    cudaCheck(cudaGetLastError());
    return p;
}

// the configuration cuBLASLt reports for an algorithm, as "name=value" pairs
std::string algo_config(const cublasLtMatmulAlgo_t& algo) {
    const struct { const char* name; cublasLtMatmulAlgoConfigAttributes_t attr; } fields[] = {
        {"id", CUBLASLT_ALGO_CONFIG_ID}, {"tile", CUBLASLT_ALGO_CONFIG_TILE_ID}, {"stages", CUBLASLT_ALGO_CONFIG_STAGES_ID},
        {"splitk", CUBLASLT_ALGO_CONFIG_SPLITK_NUM}, {"reduction", CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME},
        {"swizzle", CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING}, {"cluster", CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID},
        {"inner", CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID}, {"custom", CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION}};
    std::string out;
    for (const auto& f : fields) {
        uint64_t value = 0;   // the call wants the attribute's exact width: asked first, then read (little-endian)
        size_t width = 0, written = 0;
        if (cublasLtMatmulAlgoConfigGetAttribute(&algo, f.attr, nullptr, 0, &width) == CUBLAS_STATUS_SUCCESS && width <= sizeof(value) &&
            cublasLtMatmulAlgoConfigGetAttribute(&algo, f.attr, &value, width, &written) == CUBLAS_STATUS_SUCCESS)
            out += std::string(out.empty() ? "" : " ") + f.name + "=" + std::to_string(value);
    }
    return out;
}

struct MatmulCase {
    const char* name;
    int m, n, k;           // column-major D (m, n) = op(A) (m, k) @ op(B) (k, n), as matmul_cublaslt takes them
    bool trans_a, trans_b;
    bool bias, residual, gelu, backward;   // backward with gelu: the dGELU epilogue
    cublasLtMatmulTile_t train_tile = CUBLASLT_MATMUL_TILE_UNDEFINED;   // the tile training prefers (matmul_forward_lm_head)
};

int main(int argc, char** argv) {
    const int B = argc > 1 ? atoi(argv[1]) : 64, T = argc > 2 ? atoi(argv[2]) : 1024, C = argc > 3 ? atoi(argv[3]) : 768;
    const int N = B * T, Vp = 50304;
    cudaDeviceProp props;
    cudaCheck(cudaGetDeviceProperties(&props, 0));
    printf("device: %s | N = %d tokens, C = %d\n", props.name, N, C);
    matmul_setup();
    // forward: out^T (OC, N) = W^T (OC, C) @ inp^T (C, N); backward: dinp^T (C, N) = W (C, OC) @ dout^T (OC, N),
    // dW^T (C, OC) += inp^T (C, N) @ dout (N, OC) (matmul.cuh's column-major forms)
    const std::vector<MatmulCase> cases = {
        {"qkv forward (bias)", 3 * C, N, C, true, false, true, false, false, false},
        {"attproj forward (bias + residual)", C, N, C, true, false, true, true, false, false},
        {"fc forward (GELU_AUX_BIAS)", 4 * C, N, C, true, false, true, false, true, false},
        {"fcproj forward (bias + residual)", C, N, 4 * C, true, false, true, true, false, false},
        {"lm head forward", Vp, N, C, true, false, false, false, false, false, CUBLASLT_MATMUL_TILE_176x128},
        {"lm head dinp", C, N, Vp, false, false, false, false, false, false},
        {"lm head dW (accumulate)", C, Vp, N, false, true, false, true, false, false},
        {"fcproj dinp (DGELU)", 4 * C, N, C, false, false, false, false, true, true},
        {"fcproj dW (accumulate)", 4 * C, C, N, false, true, false, true, false, false},
        {"fc dinp", C, N, 4 * C, false, false, false, false, false, false},
        {"fc dW (accumulate)", C, 4 * C, N, false, true, false, true, false, false},
        {"qkv dinp", C, N, 3 * C, false, false, false, false, false, false},
        {"qkv dW (accumulate)", C, 3 * C, N, false, true, false, true, false, false},
        {"attproj dinp", C, N, C, false, false, false, false, false, false},
        {"attproj dW (accumulate)", C, C, N, false, true, false, true, false, false},
    };
    size_t max_a = 0, max_b = 0, max_d = 0;
    for (const MatmulCase& c : cases) {
        max_a = std::max(max_a, (size_t)c.m * c.k);
        max_b = std::max(max_b, (size_t)c.k * c.n);
        max_d = std::max(max_d, (size_t)c.m * c.n);
    }
    floatX* a = random_buffer(max_a, 1, 0.05f);
    floatX* b = random_buffer(max_b, 2, 1.0f);
    floatX* d = random_buffer(max_d, 3, 1.0f);
    floatX* aux = random_buffer(max_d, 4, 1.0f);
    floatX* bias = random_buffer(4 * C > Vp ? 4 * C : Vp, 5, 0.1f);
    cudaEvent_t start, stop;
    cudaCheck(cudaEventCreate(&start));
    cudaCheck(cudaEventCreate(&stop));
    for (const MatmulCase& c : cases) {
        const double flops = 2.0 * c.m * c.n * c.k;
        printf("%s: m=%d n=%d k=%d\n", c.name, c.m, c.n, c.k);
        float first_ms = 0, best_ms = 0, train_ms = 0;
        int best_rank = 0, train_rank = -1;
        for (int rank = 0; rank < kMaxAlgoRank; rank++) {
            cublaslt_algo_rank() = rank;
            auto launch = [&]() {
                return matmul_cublaslt(d, a, b, c.residual ? d : nullptr, c.bias ? bias : nullptr, c.m, c.n, c.k, c.trans_a,
                                       c.trans_b, c.gelu ? aux : nullptr, c.backward, 0);
            };
            if (!launch()) break;   // the heuristic offers fewer algorithms
            for (int i = 0; i < 2; i++) launch();
            std::vector<float> ms(20);
            for (float& t : ms) {
                cudaCheck(cudaEventRecord(start));
                launch();
                cudaCheck(cudaEventRecord(stop));
                cudaCheck(cudaEventSynchronize(stop));
                cudaCheck(cudaEventElapsedTime(&t, start, stop));
            }
            cudaCheck(cudaGetLastError());
            std::sort(ms.begin(), ms.end());
            const float med = ms[ms.size() / 2];
            const uint32_t tile = cublaslt_algo_tile(cublaslt_last_algo());
            const bool trains = train_rank < 0 && (c.train_tile == CUBLASLT_MATMUL_TILE_UNDEFINED ? rank == 0 : tile == (uint32_t)c.train_tile);
            if (trains) { train_rank = rank; train_ms = med; }
            printf("  rank %2d  %8.4f ms  %6.1f TFLOP/s  %s%s\n", rank, med, flops / med / 1e9, algo_config(cublaslt_last_algo()).c_str(),
                   trains ? "  <- training" : "");
            if (rank == 0) first_ms = best_ms = med;
            else if (med < best_ms) { best_ms = med; best_rank = rank; }
        }
        if (train_rank < 0) { train_rank = 0; train_ms = first_ms; }   // the preferred tile not offered: rank 0 runs
        printf("RESULT matmul_algos %s | rank0 ms=%.4f | training rank=%d ms=%.4f | best rank=%d ms=%.4f (%.1f%% faster than rank 0)\n",
               c.name, first_ms, train_rank, train_ms, best_rank, best_ms, 100.0 * (first_ms - best_ms) / first_ms);
    }
    cublaslt_algo_rank() = 0;
    for (floatX* p : {a, b, d, aux, bias}) cudaCheck(cudaFree(p));
    matmul_teardown();
    return 0;
}
