/*
Matmuls through cuBLASLt (bf16 in/out, fp32 accumulate), with the bias add and either the residual
add or GELU fused into the epilogue, plus a deterministic bias-gradient kernel.
forward:  out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC)       [PyTorch: F.linear]
          out (N, OC) = residual (N, OC) + inp @ weight^T + bias        [PyTorch: x + F.linear(...)]
backward: dinp (N, C) = dout (N, OC) @ weight;  dweight (OC, C) += dout^T @ inp;  dbias += dout.sum(0)
cuBLASLt is column-major, so a row-major (R, K) array is a column-major (K, R) one: every call
below is written as D (m, n) = op(A) (m, k) @ op(B) (k, n) in column-major terms.
*/
#pragma once
#include <cublasLt.h>
#include "cuda_utils.cuh"

inline void cublas_check(cublasStatus_t status, const char* file, int line) {
    if (status != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "[cuBLAS ERROR] %d at %s:%d\n", (int)status, file, line);
        exit(EXIT_FAILURE);
    }
}
#define cublasCheck(status) (cublas_check((status), __FILE__, __LINE__))

static cublasLtHandle_t cublaslt_handle = nullptr;
static void* cublaslt_workspace = nullptr;
static const size_t cublaslt_workspace_size = 32 * 1024 * 1024;  // Hopper wants 32 MiB

void matmul_setup() {
    cublasCheck(cublasLtCreate(&cublaslt_handle));
    cudaCheck(cudaMalloc(&cublaslt_workspace, cublaslt_workspace_size));
}

void matmul_teardown() {
    cudaCheck(cudaFree(cublaslt_workspace));
    cublasCheck(cublasLtDestroy(cublaslt_handle));
    cublaslt_workspace = nullptr;
    cublaslt_handle = nullptr;
}

// Which of cuBLASLt's heuristic results runs: 0, its first, always in training; dev/cuda/matmul_algos.cu times the
// others (matmul_cublaslt then returns false where the heuristic has fewer) and prints their configurations
inline int& cublaslt_algo_rank() { static int rank = 0; return rank; }
inline cublasLtMatmulAlgo_t& cublaslt_last_algo() { static cublasLtMatmulAlgo_t algo; return algo; }   // the last one run
inline uint32_t cublaslt_algo_tile(const cublasLtMatmulAlgo_t& algo) {   // a cublasLtMatmulTile_t
    uint32_t tile = 0;
    size_t written = 0;
    cublasCheck(cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile), &written));
    return tile;
}
static const int kMaxAlgoRank = 16;

// D (m,n) = op(A) @ op(B) [+ C] [+ bias (m)], epilogue options:
//   gelu_aux && !backward: D = gelu(result), gelu_aux (m,n) = the pre-GELU result
//   gelu_aux &&  backward: D = result * gelu'(gelu_aux)
// A is (m,k) column-major, or (k,m) if trans_a; B is (k,n), or (n,k) if trans_b. C is (m,n) like D (ld m),
// added with beta = 1 before the single rounding to bf16; null means beta = 0, and c == d accumulates in place.
// The GELU epilogues take no C. prefer_tile: the first of the heuristic's algorithms with that tile runs, where it
// offers one (else its first); a rule, not a timing, so every process runs the same algorithm and sums alike.
bool matmul_cublaslt(floatX* d, const floatX* a, const floatX* b, const floatX* c, const floatX* bias, int m, int n, int k,
                     bool trans_a, bool trans_b, floatX* gelu_aux, bool backward, cudaStream_t stream,
                     cublasLtMatmulTile_t prefer_tile = CUBLASLT_MATMUL_TILE_UNDEFINED) {
    if (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d | (uintptr_t)bias | (uintptr_t)gelu_aux) % 16 != 0) {
        fprintf(stderr, "matmul_cublaslt: pointers must be 16-byte aligned\n");
        exit(EXIT_FAILURE);
    }
    if (c && gelu_aux) {
        fprintf(stderr, "matmul_cublaslt: a C input with a GELU epilogue is not supported\n");
        exit(EXIT_FAILURE);
    }
    cublasLtMatmulDesc_t desc;
    cublasCheck(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));

    cublasLtMatrixLayout_t layout_a, layout_b, layout_c;
    cublasCheck(cublasLtMatrixLayoutCreate(&layout_a, CUDA_R_16BF, trans_a ? k : m, trans_a ? m : k, trans_a ? k : m));
    cublasCheck(cublasLtMatrixLayoutCreate(&layout_b, CUDA_R_16BF, trans_b ? n : k, trans_b ? k : n, trans_b ? n : k));
    cublasCheck(cublasLtMatrixLayoutCreate(&layout_c, CUDA_R_16BF, m, n, m));

    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    if (gelu_aux) {
        epilogue = backward ? CUBLASLT_EPILOGUE_DGELU : (bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX);
        int64_t ld_aux = m;
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &gelu_aux, sizeof(gelu_aux)));
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld_aux, sizeof(ld_aux)));
        cudaDataType_t aux_type = CUDA_R_16BF;
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &aux_type, sizeof(aux_type)));
    } else if (bias) {
        epilogue = CUBLASLT_EPILOGUE_BIAS;
    }
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    if (bias) {
        cudaDataType_t bias_type = CUDA_R_16BF;
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }

    cublasLtMatmulPreference_t preference;
    cublasCheck(cublasLtMatmulPreferenceCreate(&preference));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &cublaslt_workspace_size, sizeof(cublaslt_workspace_size)));
    cublasLtMatmulHeuristicResult_t heuristic[kMaxAlgoRank];
    const bool prefer = prefer_tile != CUBLASLT_MATMUL_TILE_UNDEFINED && cublaslt_algo_rank() == 0;
    int rank = std::min(cublaslt_algo_rank(), kMaxAlgoRank - 1), returned = 0;
    cublasCheck(cublasLtMatmulAlgoGetHeuristic(cublaslt_handle, desc, layout_a, layout_b, layout_c, layout_c,
                                               preference, prefer ? kMaxAlgoRank : rank + 1, heuristic, &returned));
    for (int i = 0; prefer && i < returned; i++)
        if (cublaslt_algo_tile(heuristic[i].algo) == (uint32_t)prefer_tile) { rank = i; break; }
    if (returned == 0) {
        fprintf(stderr, "matmul_cublaslt: no cuBLASLt algorithm for m=%d n=%d k=%d trans_a=%d trans_b=%d epilogue=%d\n",
                m, n, k, (int)trans_a, (int)trans_b, (int)epilogue);
        exit(EXIT_FAILURE);
    }
    // C and D share one layout; with beta = 0 cuBLASLt reads no C, so D stands in for a null C
    const float alpha = 1.0f, beta = c ? 1.0f : 0.0f;
    if (rank < returned) {
        cublaslt_last_algo() = heuristic[rank].algo;
        cublasCheck(cublasLtMatmul(cublaslt_handle, desc, &alpha, a, layout_a, b, layout_b, &beta, c ? c : d, layout_c, d,
                                   layout_c, &heuristic[rank].algo, cublaslt_workspace, cublaslt_workspace_size, stream));
    }
    cublasCheck(cublasLtMatmulPreferenceDestroy(preference));
    cublasCheck(cublasLtMatmulDescDestroy(desc));
    cublasCheck(cublasLtMatrixLayoutDestroy(layout_a));
    cublasCheck(cublasLtMatrixLayoutDestroy(layout_b));
    cublasCheck(cublasLtMatrixLayoutDestroy(layout_c));
    return rank < returned;
}

// out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC) [+ residual (N, OC)]; bias and residual may be null,
// residual may be out itself (in place). The residual is added to the fp32 result, so out is rounded to bf16 once.
// With gelu_pre (no residual): out = gelu(...) and gelu_pre (N, OC) keeps the pre-GELU values.
void matmul_forward(floatX* out, const floatX* inp, const floatX* weight, const floatX* bias, const floatX* residual,
                    int N, int C, int OC, floatX* gelu_pre, cudaStream_t stream,
                    cublasLtMatmulTile_t prefer_tile = CUBLASLT_MATMUL_TILE_UNDEFINED) {
    NVTX_RANGE_FN();
    // column-major: out^T (OC, N) = (weight as (C, OC))^T @ inp^T (C, N) + residual^T (OC, N)
    matmul_cublaslt(out, weight, inp, residual, bias, OC, N, C, /*trans_a=*/true, /*trans_b=*/false, gelu_pre,
                    /*backward=*/false, stream, prefer_tile);
}

// The lm head's forward, logits (N, Vp) = lnf (N, C) @ wte (Vp, C)^T. On an H100 (cuBLAS 13) the heuristic ranks a
// 192 x 192 tile first here, while its 176 x 128 tile (in 1 x 2 clusters) runs faster at every GPT-2 size
// (dev/cuda/matmul_algos prints each algorithm's time and tile): that one runs wherever the heuristic offers it.
void matmul_forward_lm_head(floatX* logits, const floatX* lnf, const floatX* wte, int N, int C, int Vp, cudaStream_t stream) {
    matmul_forward(logits, lnf, wte, nullptr, nullptr, N, C, Vp, nullptr, stream, CUBLASLT_MATMUL_TILE_176x128);
}

// ----------------------------------------------------------------------------
// bias gradient: dbias (OC) += sum over N rows of dout (N, OC), deterministic (no atomics).
// grid (ceil(OC/256), row_blocks), block (32, 8): threadIdx.x owns 8 channels, threadIdx.y strides
// over rows; the 8 row-groups are added in order, then reduce_partials_add adds the row blocks in order.

#define BIAS_BWD_TARGET_BLOCKS 1024

inline int bias_backward_row_blocks(int N, int OC) {
    int col_blocks = ceil_div(OC, 32 * X128_SIZE);
    return std::max(1, std::min(BIAS_BWD_TARGET_BLOCKS / col_blocks, ceil_div(N, 8)));
}
inline size_t bias_backward_scratch_floats(int N, int OC) { return (size_t)bias_backward_row_blocks(N, OC) * OC; }

// partials (gridDim.y, OC)
__global__ void bias_backward_kernel(float* partials, const floatX* dout, int N, int OC) {
    __shared__ float smem[8][32][X128_SIZE];
    int c = (blockIdx.x * 32 + threadIdx.x) * X128_SIZE;
    float acc[X128_SIZE] = {0.0f};
    if (c < OC) {
        for (int row = blockIdx.y * 8 + threadIdx.y; row < N; row += gridDim.y * 8) {
            x128 d = load128(dout + (size_t)row * OC + c);
            for (int k = 0; k < X128_SIZE; k++) acc[k] += d.f(k);
        }
    }
    for (int k = 0; k < X128_SIZE; k++) smem[threadIdx.y][threadIdx.x][k] = acc[k];
    __syncthreads();  // all row-groups written
    if (threadIdx.y != 0 || c >= OC) return;
    for (int y = 1; y < 8; y++) {
        for (int k = 0; k < X128_SIZE; k++) acc[k] += smem[y][threadIdx.x][k];
    }
    for (int k = 0; k < X128_SIZE; k++) partials[(size_t)blockIdx.y * OC + c + k] = acc[k];
}

// scratch: bias_backward_scratch_floats(N, OC) floats
void bias_backward(floatX* dbias, float* scratch, const floatX* dout, int N, int OC, cudaStream_t stream) {
    NVTX_RANGE_FN();
    int row_blocks = bias_backward_row_blocks(N, OC);
    dim3 grid(ceil_div(OC, 32 * X128_SIZE), row_blocks);
    bias_backward_kernel<<<grid, dim3(32, 8), 0, stream>>>(scratch, dout, N, OC);
    cudaCheck(cudaGetLastError());
    reduce_partials_add(dbias, nullptr, scratch, row_blocks, OC, stream);
}

// dinp (N, C) = dout (N, OC) @ weight (OC, C)             (if gelu_pre: dinp *= gelu'(gelu_pre), gelu_pre (N, C))
// dweight (OC, C) += dout^T @ inp (N, C);  dbias (OC) += dout.sum(0). dinp and dbias may be null (not computed).
void matmul_backward(floatX* dinp, floatX* dweight, floatX* dbias, float* scratch, const floatX* dout, const floatX* inp,
                     const floatX* weight, int N, int C, int OC, floatX* gelu_pre, cudaStream_t stream) {
    NVTX_RANGE_FN();
    if (dbias) bias_backward(dbias, scratch, dout, N, OC, stream);
    // column-major: dinp^T (C, N) = (weight as (C, OC)) @ dout^T (OC, N)
    if (dinp) matmul_cublaslt(dinp, weight, dout, /*c=*/nullptr, nullptr, C, N, OC, /*trans_a=*/false, /*trans_b=*/false,
                              gelu_pre, /*backward=*/true, stream);
    // column-major: dweight^T (C, OC) += inp^T (C, N) @ dout (N, OC) = inp^T @ (dout^T as (OC, N))^T (C = D: accumulate)
    matmul_cublaslt(dweight, inp, dout, /*c=*/dweight, nullptr, C, OC, N, /*trans_a=*/false, /*trans_b=*/true,
                    nullptr, /*backward=*/false, stream);
}
