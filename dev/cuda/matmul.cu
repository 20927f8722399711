/*
GPT-2's matmuls with their epilogues, as src/matmul.cuh computes them through cuBLASLt, beside flashgpt's own Hopper
GEMM: the forward ones, out (M, N) = a (M, K) @ b (N, K)^T + bias (N) [then GELU, keeping the pre-GELU values in aux],
and the backward one through GELU, dfch (M, N) = dout (M, K) @ b (K, N) * gelu'(aux), with gelu(aux) recomputed for
the weight gradient and dfch's column sums, the bias gradient of the layer before. Variants validated against an
fp64 CPU reference and timed at GPT-2's training shapes.

  make dev/cuda/matmul && ./dev/cuda/matmul all [--check] [-n M] [--seed S]
  ./dev/cuda/matmul all --fp8 1 [-n M] [-c C]  FP8 against bf16 on a layer's matmuls of the training step

Variants:
  0  shipped, as training calls it: the forward through cuBLASLt (matmul_forward: bias, or GELU_AUX_BIAS); the
     backward through src/matmul_hopper.cuh's kernel on Hopper, and its partials reduced into the bias gradient;
     elsewhere variant 5
  1  naive: one thread per output, fp32 accumulation
  2  Hopper (sm_90a), warp-specialised and persistent: one TMA producer warpgroup fills a ring of 4 stages of
     (128 x 64 a, 256 x 64 b) tiles, 128-byte swizzle; two consumer warpgroups each run m64n256k16 wgmmas
     over 64 rows of the 128 x 256 output tile and keep one stage's wgmmas in flight; the epilogue adds the bias
     (and GELU) from registers and stores bf16 pairs. N must be a multiple of 256, K of 64.
  3  variant 2 with its epilogue through shared memory: each consumer warpgroup writes its 64 x 256 output (and
     aux) as swizzled 64 x 64 boxes and one thread stores them by TMA, which runs on while the next tile's mainloop
     does; GELU with tanh.approx. 3 stages of the ring (2 with GELU: the staging takes their room).
  4  variant 3 with 128 x 192 tiles (m64n192k16): smaller stages and staging, so 4 stages fit (3 with GELU).
  5  the backward through cuBLASLt: its DGELU epilogue, gelu_forward's recompute of gelu(aux), bias_backward's
     pass over the output (training's path off Hopper, and on Hopper before src/matmul_hopper.cuh)
  6  FP8: the forward through cuBLASLt with E4M3 operands (a and b cast once per tensor, current scaling: each
     multiplied by 448 / its amax), fp32 accumulation (cuBLASLt's split accumulation, not fast accumulation), bf16
     out with the bias (and GELU) epilogue; validated against fp64 on the cast values (its own error), and its
     distance to the bf16 inputs' fp64 printed (FP8's)
  (variant 0's backward on Hopper is src/matmul_hopper.cuh's kernel, whose header describes it: clusters of two
  CTAs sharing dout by TMA multicast, ping-pong consumer warpgroups with 128 x 128 tiles, aux read and gelu(aux)
  written 16 bytes a lane through a per-warp transpose, the 64-row column sums as fp32 partials that
  reduce_partials_add adds.)

--fp8 1 times FP8 against bf16 on every matmul of a layer of the training step at -n tokens (C = 768 or -c): each
linear's forward, dinp and dweight, bf16 as training runs them (src/matmul.cuh) and FP8 as Hopper's cuBLASLt takes
it, both operands K-major (D = A^T B): the forward's as they are, the backward's from the transposed copies a cast
kernel would write (W^T for dinp; dout^T and inp^T for dweight); E4M3 x E4M3 forward, E4M3 x E5M2 (dout) backward,
each with fast accumulation and without. The lm head stays bf16, as the FP8 recipe keeps it. Then the kernels
around them: the casts, the layernorm with FP8 out against bf16's, the layernorm backward writing dresidual in FP8
(and fp8_transpose its transpose) against the bf16 one followed by a cast, a layer's four weight casts one by one
against one batched launch, and fcproj's dinp through GELU on the Hopper kernel, FP8 against bf16.

Validation (--check: M = 1000 and 4096 at each shape; otherwise M = min(-n, 4096)): randn inputs, b scaled by
1/sqrt(K), outputs poisoned (NaN) before each launch; sampled rows (the first and last 64, 192 more at random) of
every column against fp64: |got - ref| <= 2^-7 (|ref| + 1) (bf16 keeps 8 bits; the sums carry ~1 in scale). The
backward's gelu(aux), every element, the same way. Its bias gradient against the fp64 sum of the written out:
within 2^-8 (|sum| + sum|out|) + 1e-3. The Hopper kernel's partials: every one written, and those of the 64-row
groups inside the sampled first and last 64 rows within 2^-9 sum|ref| + 1e-3 of fp64.
Timing (without --check): M = -n (65536) rows, the five matmuls of a d12 layer; TFLOP/s = 2 M N K / time.
*/
#include "src/matmul.cuh"   // first: its cublasCheck is the one the harness then keeps
#define DEV_CUDA_NO_ATTENTION   // a layer harness: no attention kernels in this binary
#include "dev/cuda/common.h"
#include "src/gelu.cuh"
#include "src/matmul_hopper.cuh"
#include "src/fp8.cuh"      // matmul_fp8, fp8_cast
#include "src/utils.h"     // strfmt
#include <cuda_fp8.h>
#include <functional>
#include <type_traits>

// ----------------------------------------------------------------------------
// variant 1: naive

__global__ void matmul_forward_naive_kernel(floatX* out, floatX* aux, const floatX* inp, const floatX* weight, const floatX* bias,
                                            int M, int N, int K, bool gelu_on) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x, row = blockIdx.y;
    if (col >= N) return;
    float acc = bias ? __bfloat162float(bias[col]) : 0.0f;
    for (int k = 0; k < K; k++) acc += __bfloat162float(inp[(size_t)row * K + k]) * __bfloat162float(weight[(size_t)col * K + k]);
    if (gelu_on) aux[(size_t)row * N + col] = __float2bfloat16(acc);
    out[(size_t)row * N + col] = __float2bfloat16(gelu_on ? gelu(acc) : acc);
}

// ----------------------------------------------------------------------------
// variant 2: TMA + wgmma, warp-specialised, persistent

constexpr int kGemmBM = 128, kGemmBK = 64;
constexpr int kGemmStageA = kGemmBM * kGemmBK * 2;   // bytes
constexpr int kGemmThreads = 384;
// kBN: the output tile's width, 256 (variants 2, 3) or 192 (variant 4). Ring stages: 4 with the epilogue's direct
// stores; with the staging (kStaged: each consumer warpgroup's 64 x kBN output, and aux with GELU, staged in shared
// memory as TMA boxes of 64 columns x 64 rows, 128-byte swizzle, stored by TMA while the next tile's mainloop runs)
// as many as fit beside it.
template <int kBN> __host__ __device__ constexpr int gemm_stage_b() { return kBN * kGemmBK * 2; }
template <int kBN> __host__ __device__ constexpr int gemm_stage_out() { return 64 * kBN * 2; }   // a warpgroup, one tensor
// The epilogues: out = acc + bias; out = gelu(acc + bias) with aux = acc + bias. kEpiDGelu names the backward's
// shape (variant 0: src/matmul_hopper.cuh on Hopper; variant 5: cuBLASLt), which this kernel does not take.
enum GemmEpilogue { kEpiBias = 0, kEpiGeluAux = 1, kEpiDGelu = 2 };
template <int kBN, bool kStaged, int kEpi> __host__ __device__ constexpr int gemm_staging_bytes() {
    return kStaged ? 2 * (kEpi != kEpiBias ? 2 : 1) * gemm_stage_out<kBN>() : 0;
}
template <int kBN, bool kStaged, int kEpi> __host__ __device__ constexpr int gemm_stages() {
    return kStaged ? std::min(4, (226 * 1024 - gemm_staging_bytes<kBN, kStaged, kEpi>()) / (kGemmStageA + gemm_stage_b<kBN>())) : 4;
}
template <int kBN, bool kStaged, int kEpi> constexpr int gemm_smem_bytes() {
    return 1024 + gemm_stages<kBN, kStaged, kEpi>() * (kGemmStageA + gemm_stage_b<kBN>()) + gemm_staging_bytes<kBN, kStaged, kEpi>() +
           2 * gemm_stages<kBN, kStaged, kEpi>() * 8;
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// The accumulators of m64n192 (96 registers) and m64n256 (128) as asm operands, on src/ptx.cuh's WGMMA_D8 / WGMMA_R*
#define WGMMA_D96 WGMMA_D64, WGMMA_D8(64), WGMMA_D8(72), WGMMA_D8(80), WGMMA_D8(88)
#define WGMMA_D128 WGMMA_D96, WGMMA_D8(96), WGMMA_D8(104), WGMMA_D8(112), WGMMA_D8(120)
#define WGMMA_R64 "%64, %65, %66, %67, %68, %69, %70, %71"
#define WGMMA_R72 "%72, %73, %74, %75, %76, %77, %78, %79"
#define WGMMA_R80 "%80, %81, %82, %83, %84, %85, %86, %87"
#define WGMMA_R88 "%88, %89, %90, %91, %92, %93, %94, %95"
#define WGMMA_R96 "%96, %97, %98, %99, %100, %101, %102, %103"
#define WGMMA_R104 "%104, %105, %106, %107, %108, %109, %110, %111"
#define WGMMA_R112 "%112, %113, %114, %115, %116, %117, %118, %119"
#define WGMMA_R120 "%120, %121, %122, %123, %124, %125, %126, %127"
#define WGMMA_R0_63 WGMMA_R0 ", " WGMMA_R8 ", " WGMMA_R16 ", " WGMMA_R24 ", " WGMMA_R32 ", " WGMMA_R40 ", " WGMMA_R48 ", " WGMMA_R56
#define WGMMA_D96_NAMES "{" WGMMA_R0_63 ", " WGMMA_R64 ", " WGMMA_R72 ", " WGMMA_R80 ", " WGMMA_R88 "}"
#define WGMMA_D128_NAMES "{" WGMMA_R0_63 ", " WGMMA_R64 ", " WGMMA_R72 ", " WGMMA_R80 ", " WGMMA_R88 ", " WGMMA_R96 ", " WGMMA_R104 \
                         ", " WGMMA_R112 ", " WGMMA_R120 "}"

// d (m64 x n256, fp32, 128 registers a thread) += A (64 x 16) * B (16 x 256) in shared memory, both K-major
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 " WGMMA_D128_NAMES ", %128, %129, p, 1, 1, 0, 0;\n}\n"
                 : WGMMA_D128 : "l"(desc_a), "l"(desc_b), "n"(1));
}
// the same at n192 (96 registers a thread)
__device__ __forceinline__ void wgmma_m64n192k16(float (&d)[96], uint64_t desc_a, uint64_t desc_b) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %98, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n192k16.f32.bf16.bf16 " WGMMA_D96_NAMES ", %96, %97, p, 1, 1, 0, 0;\n}\n"
                 : WGMMA_D96 : "l"(desc_a), "l"(desc_b), "n"(1));
}
template <int kBN> __device__ __forceinline__ void wgmma_m64k16(float (&d)[kBN / 2], uint64_t desc_a, uint64_t desc_b) {
    if constexpr (kBN == 256) wgmma_m64n256k16(d, desc_a, desc_b);
    else wgmma_m64n192k16(d, desc_a, desc_b);
}
#endif

// map_a: A (M, K) as (K, M) boxes of 64 x 128. map_b: B (N, K) as (K, N) boxes of 64 x kBN. Tile t = (t / (N / kBN),
// t % (N / kBN)). kStaged: out (and aux) through map_out / map_aux, (N, M) boxes of 64 x 64; otherwise out and aux
// directly.
template <int kBN, bool kStaged, int kEpi>
__global__ void __launch_bounds__(kGemmThreads, 1)
matmul_wgmma_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                    const __grid_constant__ CUtensorMap map_out, const __grid_constant__ CUtensorMap map_aux, floatX* out,
                    floatX* aux, const floatX* bias, int M, int N, int K) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(kEpi != kEpiDGelu, "the backward is src/matmul_hopper.cuh's kernel");
    constexpr int kGemmStages = gemm_stages<kBN, kStaged, kEpi>(), kGemmStageB = gemm_stage_b<kBN>(), kGemmStageOut = gemm_stage_out<kBN>();
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
    uint8_t* tiles_a = smem;
    uint8_t* tiles_b = smem + kGemmStages * kGemmStageA;
    uint8_t* staging = tiles_b + kGemmStages * kGemmStageB;   // kStaged: per warpgroup, out then aux (kGemmStageOut each)
    uint64_t* full = reinterpret_cast<uint64_t*>(staging + gemm_staging_bytes<kBN, kStaged, kEpi>());
    uint64_t* empty = full + kGemmStages;
    if (threadIdx.x == 0) {
        for (int s = 0; s < kGemmStages; s++) { mbar_init(&full[s], 1); mbar_init(&empty[s], 256); }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    const int n_tiles = N / kBN, num_tiles = ceil_div(M, kGemmBM) * n_tiles, k_blocks = K / kGemmBK;
    const int wg = threadIdx.x / 128;
    if (wg == 0) {   // ---- producer: one thread issues every load
        setmaxnreg_dec<24>();
        if (threadIdx.x == 0) {
            int it = 0;
            for (int t = blockIdx.x; t < num_tiles; t += gridDim.x) {
                const int m0 = (t / n_tiles) * kGemmBM, n0 = (t % n_tiles) * kBN;
                for (int kb = 0; kb < k_blocks; kb++, it++) {
                    const int s = it % kGemmStages;
                    mbar_wait(&empty[s], ((it / kGemmStages) & 1) ^ 1);   // a fresh barrier passes parity 1 at once
                    mbar_arrive_expect_tx(&full[s], kGemmStageA + kGemmStageB);
                    tma_load_2d(tiles_a + s * kGemmStageA, &map_a, &full[s], kb * kGemmBK, m0);
                    tma_load_2d(tiles_b + s * kGemmStageB, &map_b, &full[s], kb * kGemmBK, n0);
                }
            }
        }
        return;
    }
    // ---- consumers: warpgroup cwg owns rows 64 cwg .. 64 cwg + 63 of each tile
    setmaxnreg_inc<240>();
    const int cwg = wg - 1, lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32, g = lane / 4, tq = lane % 4;
    float acc[kBN / 2];
    int it = 0;
    for (int t = blockIdx.x; t < num_tiles; t += gridDim.x) {
        const int m0 = (t / n_tiles) * kGemmBM, n0 = (t % n_tiles) * kBN;
        #pragma unroll
        for (int i = 0; i < kBN / 2; i++) acc[i] = 0.0f;
        int prev = -1;   // the stage whose wgmmas are still in flight
        for (int kb = 0; kb < k_blocks; kb++, it++) {
            const int s = it % kGemmStages;
            mbar_wait(&full[s], (it / kGemmStages) & 1);
            const uint8_t* a = tiles_a + s * kGemmStageA + cwg * 64 * 128;
            const uint8_t* b = tiles_b + s * kGemmStageB;
            wgmma_fence();
            #pragma unroll
            for (int ks = 0; ks < kGemmBK / 16; ks++)   // k16 step ks at +32 bytes of each row
                wgmma_m64k16<kBN>(acc, wgmma_desc(a + 32 * ks), wgmma_desc(b + 32 * ks));
            wgmma_commit();
            wgmma_wait<1>();   // the previous stage's wgmmas are done: release it
            if (prev >= 0) mbar_arrive(&empty[prev]);
            prev = s;
        }
        wgmma_wait<0>();
        mbar_arrive(&empty[prev]);
        // epilogue: rows r and r + 8 of this warp, columns 8 j + 2 tq, + 1
        if constexpr (kStaged) {
            // the previous tile's stores have read the staging before it is written again
            if (threadIdx.x % 128 == 0) bulk_wait_read<0>();
            named_barrier_sync(1 + cwg, 128);
            uint8_t* stage_out = staging + cwg * (kEpi != kEpiBias ? 2 : 1) * kGemmStageOut;
            uint8_t* stage_aux = stage_out + kGemmStageOut;
            #pragma unroll
            for (int j = 0; j < kBN / 8; j++) {
                const int c = 8 * j + 2 * tq;   // the tile's column
                const float b0 = bias ? __bfloat162float(bias[n0 + c]) : 0.0f, b1 = bias ? __bfloat162float(bias[n0 + c + 1]) : 0.0f;
                #pragma unroll
                for (int half = 0; half < 2; half++) {
                    const int rr = warp * 16 + g + 8 * half;   // the warpgroup's row
                    const int at = (c / 64) * 8192 + rr * 128 + (((c % 64) / 8) ^ (rr % 8)) * 16 + (c % 8) * 2;
                    const float x0 = acc[4 * j + 2 * half] + b0, x1 = acc[4 * j + 2 * half + 1] + b1;
                    if constexpr (kEpi == kEpiGeluAux) {
                        *reinterpret_cast<__nv_bfloat162*>(stage_aux + at) = __floats2bfloat162_rn(x0, x1);
                        *reinterpret_cast<__nv_bfloat162*>(stage_out + at) = __floats2bfloat162_rn(gelu(x0), gelu(x1));
                    } else {
                        *reinterpret_cast<__nv_bfloat162*>(stage_out + at) = __floats2bfloat162_rn(x0, x1);
                    }
                }
            }
            fence_proxy_async();   // the staging's writes are visible to the TMA ...
            named_barrier_sync(1 + cwg, 128);   // ... from every thread of the warpgroup
            if (threadIdx.x % 128 == 0) {
                for (int blk = 0; blk < kBN / 64; blk++) {
                    tma_store_2d(&map_out, stage_out + blk * 8192, n0 + 64 * blk, m0 + 64 * cwg);
                    if constexpr (kEpi == kEpiGeluAux) tma_store_2d(&map_aux, stage_aux + blk * 8192, n0 + 64 * blk, m0 + 64 * cwg);
                }
                bulk_commit();
            }
        } else {
            const int r = m0 + cwg * 64 + warp * 16 + g;
            #pragma unroll
            for (int j = 0; j < kBN / 8; j++) {
                const int col = n0 + 8 * j + 2 * tq;
                const float b0 = bias ? __bfloat162float(bias[col]) : 0.0f, b1 = bias ? __bfloat162float(bias[col + 1]) : 0.0f;
                #pragma unroll
                for (int half = 0; half < 2; half++) {
                    const int row = r + 8 * half;
                    if (row >= M) continue;
                    const float x0 = acc[4 * j + 2 * half] + b0, x1 = acc[4 * j + 2 * half + 1] + b1;
                    const size_t off = (size_t)row * N + col;
                    if constexpr (kEpi == kEpiGeluAux) {
                        *reinterpret_cast<__nv_bfloat162*>(aux + off) = __floats2bfloat162_rn(x0, x1);
                        *reinterpret_cast<__nv_bfloat162*>(out + off) = __floats2bfloat162_rn(gelu(x0), gelu(x1));
                    } else {
                        *reinterpret_cast<__nv_bfloat162*>(out + off) = __floats2bfloat162_rn(x0, x1);
                    }
                }
            }
        }
    }
    if constexpr (kStaged) {
        if (threadIdx.x % 128 == 0) bulk_wait<0>();   // every store done before the kernel ends
    }
#endif
}

template <int kBN_, bool kStaged_, int kEpi_> struct GemmTag { static constexpr int kBN = kBN_, kEpi = kEpi_; static constexpr bool kStaged = kStaged_; };

// variants 2-4 (2: direct stores, 256 wide; 3: staged, 256 wide; 4: staged, 192 wide), the forward shapes: false
// where the shape does not fit (N % the tile width, K % 64, or no sm_90a). aux: GELU's pre-GELU output
bool matmul_wgmma(int variant, int epilogue, floatX* out, floatX* aux, const floatX* a, const floatX* b, const floatX* bias,
                  int M, int N, int K, cudaStream_t stream) {
    const int bn = variant >= 4 ? 192 : 256;
    if (N % bn || K % kGemmBK || !hopper_path_available() || epilogue == kEpiDGelu) return false;
    const cuuint64_t dims_a[2] = {(cuuint64_t)K, (cuuint64_t)M}, dims_out[2] = {(cuuint64_t)N, (cuuint64_t)M};
    const cuuint64_t dims_b[2] = {(cuuint64_t)K, (cuuint64_t)N};
    const cuuint64_t strides_a[1] = {(cuuint64_t)K * 2}, strides_out[1] = {(cuuint64_t)N * 2};
    const cuuint32_t box_a[2] = {kGemmBK, kGemmBM}, box_b[2] = {kGemmBK, (cuuint32_t)bn}, box_out[2] = {64, 64};
    const CUtensorMap map_a = swizzled_tensor_map(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, a, dims_a, strides_a, box_a);
    const CUtensorMap map_b = swizzled_tensor_map(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, b, dims_b, strides_a, box_b);
    const CUtensorMap map_out = swizzled_tensor_map(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, out, dims_out, strides_out, box_out);
    const CUtensorMap map_aux = aux ? swizzled_tensor_map(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, aux, dims_out, strides_out, box_out) : map_out;
    auto launch = [&](auto tag) {
        using Tag = decltype(tag);
        const int num_tiles = ceil_div(M, kGemmBM) * (N / Tag::kBN);
        launch_with_smem<matmul_wgmma_kernel<Tag::kBN, Tag::kStaged, Tag::kEpi>>(
            dim3(std::min(num_tiles, device_props().multiProcessorCount)), kGemmThreads, gemm_smem_bytes<Tag::kBN, Tag::kStaged, Tag::kEpi>(),
            stream, map_a, map_b, map_out, map_aux, out, aux, bias, M, N, K);
    };
    const bool gelu = epilogue == kEpiGeluAux;
    if (variant == 2) { if (gelu) launch(GemmTag<256, false, kEpiGeluAux>{}); else launch(GemmTag<256, false, kEpiBias>{}); }
    else if (variant == 3) { if (gelu) launch(GemmTag<256, true, kEpiGeluAux>{}); else launch(GemmTag<256, true, kEpiBias>{}); }
    else { if (gelu) launch(GemmTag<192, true, kEpiGeluAux>{}); else launch(GemmTag<192, true, kEpiBias>{}); }
    return true;
}

// ----------------------------------------------------------------------------
// FP8 (variant 6, --fp8): per-tensor current scaling and cuBLASLt's FP8 matmul

// amax (zeroed before) = max |x|: each warp's maximum, then one atomicMax on the float's bits (non-negative floats
// order as their bits do)
__global__ void amax_kernel(float* amax, const floatX* x, size_t n) {
    float m = 0.0f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        m = fmaxf(m, fabsf(__bfloat162float(x[i])));
    for (int offset = 16; offset > 0; offset >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, offset));
    if (threadIdx.x % 32 == 0) atomicMax(reinterpret_cast<unsigned int*>(amax), __float_as_uint(m));
}

// q = x * (fmax / amax), saturated to the format's finite range; scale_inv = amax / fmax, the factor the GEMM
// multiplies back (1 where x is all zeros)
template <class Fp8>
__global__ void quantize_fp8_kernel(Fp8* q, float* scale_inv, const floatX* x, size_t n, const float* amax, float fmax) {
    const float a = *amax, scale = a > 0.0f ? fmax / a : 1.0f;
    if (blockIdx.x == 0 && threadIdx.x == 0) *scale_inv = 1.0f / scale;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        q[i] = Fp8(__bfloat162float(x[i]) * scale);   // the conversion saturates (__NV_SATFINITE)
}

template <class Fp8> constexpr float fp8_max() { return std::is_same<Fp8, __nv_fp8_e4m3>::value ? 448.0f : 57344.0f; }

// q (n) and scale_inv (one float) from x (n), current scaling; amax: one float of scratch
template <class Fp8>
void quantize_fp8(Fp8* q, float* scale_inv, float* amax, const floatX* x, size_t n, cudaStream_t stream) {
    cudaCheck(cudaMemsetAsync(amax, 0, sizeof(float), stream));
    amax_kernel<<<1024, 256, 0, stream>>>(amax, x, n);
    quantize_fp8_kernel<Fp8><<<1024, 256, 0, stream>>>(q, scale_inv, x, n, amax, fp8_max<Fp8>());
    cudaCheck(cudaGetLastError());
}

// ----------------------------------------------------------------------------

struct MatmulShape { const char* name; int N, K, epilogue; };
// the forward matmuls of a d12 layer (C = 768), out (M, N) = a (M, K) @ b (N, K)^T + bias, and the backward one through
// GELU: dfch (M, 4C) = dout (M, C) @ fcprojw (C, 4C) * gelu'(fch), gelu(fch) recomputed, fcb's gradient; that one at
// d24's C = 1024 too (16 k-blocks) and with K = 64 (one k-block: the whole epilogue after it)
static const MatmulShape kShapes[] = {
    {"qkv", 2304, 768, kEpiBias}, {"attproj", 768, 768, kEpiBias}, {"fc (GELU, aux)", 3072, 768, kEpiGeluAux},
    {"fcproj", 768, 3072, kEpiBias}, {"fcproj dinp (DGELU, gelu, bias grad)", 3072, 768, kEpiDGelu},
    {"d24 fcproj dinp", 4096, 1024, kEpiDGelu}, {"one k-block", 256, 64, kEpiDGelu},
};
static const char* kVariantNames[] = {"shipped", "naive", "TMA + wgmma, warp-specialised", "2 + TMA-store epilogue",
                                     "3 with 128 x 192 tiles", "cuBLASLt DGELU + gelu_forward + bias_backward",
                                     "cuBLASLt FP8 E4M3, per-tensor scales"};
constexpr int kNumVariants = 7;

// variant 1, the backward: out = (a @ b) * gelu'(aux), b (K, N)
__global__ void matmul_dgelu_naive_kernel(floatX* out, const floatX* aux, const floatX* a, const floatX* b, int M, int N, int K) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x, row = blockIdx.y;
    if (col >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; k++) acc += __bfloat162float(a[(size_t)row * K + k]) * __bfloat162float(b[(size_t)k * N + col]);
    out[(size_t)row * N + col] = __float2bfloat16(acc * gelu_grad(__bfloat162float(aux[(size_t)row * N + col])));
}

// one matmul of a shape; false where the variant does not take it (2-4: the forward, 5: the backward). The backward's
// variants 0 and 5 also write gelu (gelu(aux)) and add the bias gradient into dbias; 0 on Hopper leaves its partials
// in colsum.
// a8, b8: variant 6's E4M3 casts of a and b (the forward's), with their inverse scales fp8_scale_inv[0] and [4]
// (16 bytes apart: matmul_fp8)
struct MatmulBuffers {
    floatX *a, *b, *bias, *out, *aux, *gelu, *dbias;
    float *colsum, *scratch;
    __nv_fp8_e4m3 *a8, *b8;
    float *fp8_scale_inv, *fp8_amax;
};
bool run_variant(int variant, const MatmulShape& sh, const MatmulBuffers& m, int M) {
    const int N = sh.N, K = sh.K;
    bool ran = true;
    if (sh.epilogue == kEpiDGelu) {
        if (variant == 1) {
            matmul_dgelu_naive_kernel<<<dim3(ceil_div(N, 256), M), 256>>>(m.out, m.aux, m.a, m.b, M, N, K);
        } else if (variant == 0 && matmul_backward_dgelu_hopper(m.out, m.gelu, m.colsum, m.a, m.b, m.aux, M, N, K, 0)) {
            reduce_partials_add(m.dbias, nullptr, m.colsum, matmul_dgelu_partial_rows(M), N, 0);
        } else if (variant == 0 || variant == 5) {
            matmul_cublaslt(m.out, m.b, m.a, nullptr, nullptr, N, M, K, false, false, m.aux, true, 0);
            gelu_forward(m.gelu, m.aux, (size_t)M * N, 0);
            bias_backward(m.dbias, m.scratch, m.out, M, N, 0);
        } else {
            ran = false;
        }
    } else if (variant == 0) {
        matmul_forward(m.out, m.a, m.b, m.bias, nullptr, M, K, N, sh.epilogue == kEpiGeluAux ? m.aux : nullptr, 0);
    } else if (variant == 1) {
        matmul_forward_naive_kernel<<<dim3(ceil_div(N, 256), M), 256>>>(m.out, m.aux, m.a, m.b, m.bias, M, N, K, sh.epilogue == kEpiGeluAux);
    } else if (variant <= 4) {
        ran = matmul_wgmma(variant, sh.epilogue, m.out, sh.epilogue == kEpiBias ? nullptr : m.aux, m.a, m.b, m.bias, M, N, K, 0);
    } else if (variant == 6) {
        // column-major out^T (N, M) = (b8 as (K, N))^T (a8 as (K, M))
        ran = matmul_fp8(m.out, m.b8, CUDA_R_8F_E4M3, m.a8, CUDA_R_8F_E4M3, m.fp8_scale_inv + 4, m.fp8_scale_inv, nullptr, m.bias,
                         sh.epilogue == kEpiGeluAux ? m.aux : nullptr, N, M, K, /*fast_accum=*/false, 0);
    } else {
        ran = false;
    }
    cudaCheck(cudaGetLastError());
    return ran;
}

MatmulBuffers alloc_buffers(const MatmulShape& sh, int M) {
    MatmulBuffers m;
    m.a = device_alloc<floatX>((size_t)M * sh.K); m.b = device_alloc<floatX>((size_t)sh.N * sh.K); m.bias = device_alloc<floatX>(sh.N);
    m.out = device_alloc<floatX>((size_t)M * sh.N); m.aux = device_alloc<floatX>((size_t)M * sh.N);
    m.gelu = device_alloc<floatX>((size_t)M * sh.N); m.dbias = device_alloc<floatX>(sh.N);
    m.colsum = device_alloc<float>((size_t)matmul_dgelu_partial_rows(M) * sh.N);
    m.scratch = device_alloc<float>(bias_backward_scratch_floats(M, sh.N));
    m.a8 = device_alloc<__nv_fp8_e4m3>((size_t)M * sh.K); m.b8 = device_alloc<__nv_fp8_e4m3>((size_t)sh.N * sh.K);
    m.fp8_scale_inv = device_alloc<float>(8); m.fp8_amax = device_alloc<float>(1);
    return m;
}
// variant 6's operands: a and b cast to E4M3 (the forward's; a DGELU shape's b is (K, N), which variant 6 does not take)
void cast_fp8_operands(const MatmulBuffers& m, const MatmulShape& sh, int M) {
    quantize_fp8(m.a8, m.fp8_scale_inv, m.fp8_amax, m.a, (size_t)M * sh.K, 0);
    quantize_fp8(m.b8, m.fp8_scale_inv + 4, m.fp8_amax, m.b, (size_t)sh.N * sh.K, 0);
}
void free_buffers(MatmulBuffers& m) {
    for (void* p : {(void*)m.a, (void*)m.b, (void*)m.bias, (void*)m.out, (void*)m.aux, (void*)m.gelu, (void*)m.dbias, (void*)m.colsum,
                    (void*)m.scratch, (void*)m.a8, (void*)m.b8, (void*)m.fp8_scale_inv, (void*)m.fp8_amax})
        cudaCheck(cudaFree(p));
}

// GELU (tanh form) or its derivative in fp64: the references
double gelu_fp64(double x, bool grad) {
    const double k = 0.7978845608028654, t = std::tanh(k * (x + 0.044715 * x * x * x));
    return grad ? 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x) : 0.5 * x * (1.0 + t);
}

int validate(const HarnessArgs& args, const MatmulShape& sh, int M, std::mt19937_64& rng) {
    const int N = sh.N, K = sh.K;
    const bool dgelu = sh.epilogue == kEpiDGelu;
    std::vector<floatX> h_a((size_t)M * K), h_b((size_t)N * K), h_bias(N), h_aux((size_t)M * N);
    fill_randn_bf16(h_a, 1.0f, rng);
    fill_randn_bf16(h_b, 1.0f / std::sqrt((float)K), rng);
    fill_randn_bf16(h_bias, 0.5f, rng);
    fill_randn_bf16(h_aux, 1.0f, rng);   // DGELU's pre-GELU input
    // b: (N, K) for the forward, (K, N) for the backward
    auto b_at = [&](int k, int c) { return (double)__bfloat162float(dgelu ? h_b[(size_t)k * N + c] : h_b[(size_t)c * K + k]); };
    std::vector<int> rows;
    for (int r = 0; r < std::min(M, 64); r++) rows.push_back(r);
    for (int r = std::max(64, M - 64); r < M; r++) rows.push_back(r);
    for (int i = 0; i < 192 && M > 128; i++) rows.push_back(64 + (int)(rng() % (M - 128)));
    // the fp64 reference of the sampled rows (out, and the forward GELU's aux) from a (M, K) and b as b_at reads it: a
    // row a unit on every core; each output sums k = 0 .. K - 1 in order, walking b along its rows (k outer where b is
    // (K, N), the backward's; c outer where it is (N, K)), so the values do not depend on the order or the thread count
    auto reference = [&](auto a_val, auto b_val, std::vector<double>& ref_out, std::vector<double>& ref_aux) {
        ref_out.assign(rows.size() * N, 0.0);
        ref_aux.assign(rows.size() * N, 0.0);
        parallel_units((int)rows.size(), [&](int i) {
            double* x = &ref_aux[(size_t)i * N];
            if (dgelu) {
                for (int k = 0; k < K; k++) {
                    const double a = a_val(rows[i], k);
                    for (int c = 0; c < N; c++) x[c] += a * b_val(k, c);
                }
            } else {
                for (int c = 0; c < N; c++) {
                    double sum = __bfloat162float(h_bias[c]);
                    for (int k = 0; k < K; k++) sum += a_val(rows[i], k) * b_val(k, c);
                    x[c] = sum;
                }
            }
            for (int c = 0; c < N; c++) {
                const double pre = __bfloat162float(h_aux[(size_t)rows[i] * N + c]);
                ref_out[(size_t)i * N + c] = dgelu ? x[c] * gelu_fp64(pre, true) : sh.epilogue == kEpiGeluAux ? gelu_fp64(x[c], false) : x[c];
            }
        });
    };
    std::vector<double> ref_out, ref_aux, fp8_out, fp8_aux;
    reference([&](int r, int k) { return (double)__bfloat162float(h_a[(size_t)r * K + k]); }, b_at, ref_out, ref_aux);
    MatmulBuffers m = alloc_buffers(sh, M);
    to_device(m.a, h_a); to_device(m.b, h_b); to_device(m.bias, h_bias);
    const bool fp8 = args.wants(6) && !dgelu;
    if (fp8) {   // variant 6's reference: the same sums over the E4M3 values its casts wrote, times their scales
        cast_fp8_operands(m, sh, M);
        const std::vector<__nv_fp8_e4m3> a8 = from_device(m.a8, (size_t)M * K), b8 = from_device(m.b8, (size_t)N * K);
        const std::vector<float> scale_inv = from_device(m.fp8_scale_inv, 8);
        reference([&](int r, int k) { return (double)(float)a8[(size_t)r * K + k] * scale_inv[0]; },
                  [&](int k, int c) { return (double)(float)b8[(size_t)c * K + k] * scale_inv[4]; }, fp8_out, fp8_aux);
    }
    const size_t partial_rows = matmul_dgelu_partial_rows(M);
    int failures = 0;
    for (int variant = 0; variant < kNumVariants; variant++) {
        if (!args.wants(variant)) continue;
        poison(m.out, (size_t)M * N * 2);
        poison(m.gelu, (size_t)M * N * 2);
        poison(m.colsum, partial_rows * N * 4);
        cudaCheck(cudaMemset(m.dbias, 0, N * 2));
        if (dgelu) to_device(m.aux, h_aux); else poison(m.aux, (size_t)M * N * 2);
        if (!run_variant(variant, sh, m, M)) continue;
        cudaCheck(cudaDeviceSynchronize());
        std::vector<floatX> out = from_device(m.out, (size_t)M * N), aux = from_device(m.aux, (size_t)M * N);
        // against fp64: worst |got - ref| in units of 2^-7 (|ref| + 1), and how many exceed 1
        auto compare = [&](const std::vector<double>& r_out, const std::vector<double>& r_aux, size_t* bad_out) {
            double worst = 0.0;
            for (size_t i = 0; i < rows.size(); i++)
                for (int c = 0; c < N; c++)
                    for (int which = 0; which < (sh.epilogue == kEpiGeluAux ? 2 : 1); which++) {
                        const double ref = which ? r_aux[i * N + c] : r_out[i * N + c];
                        const double got = __bfloat162float((which ? aux : out)[(size_t)rows[i] * N + c]);
                        const double frac = std::isfinite(got) ? std::fabs(got - ref) / std::ldexp(std::fabs(ref) + 1.0, -7) : INFINITY;
                        worst = std::max(worst, frac);
                        *bad_out += !(frac <= 1.0);
                    }
            return worst;
        };
        size_t bad = 0, fp8_off = 0;
        const double worst = variant == 6 ? compare(fp8_out, fp8_aux, &bad) : compare(ref_out, ref_aux, &bad);
        std::string extra;
        if (variant == 6)   // FP8's own error: the cast inputs against the bf16 ones (reported, not checked)
            extra = strfmt("; against the bf16 inputs' fp64: worst %.1f of tol", compare(ref_out, ref_aux, &fp8_off));
        if (dgelu && variant != 1) {
            // gelu(aux) everywhere against fp64; the bias gradient against the fp64 sum of the written out
            std::vector<floatX> gelu = from_device(m.gelu, (size_t)M * N), dbias = from_device(m.dbias, N);
            double gelu_worst = 0.0, bias_worst = 0.0;
            size_t gelu_bad = 0, bias_bad = 0;
            for (size_t e = 0; e < (size_t)M * N; e++) {
                const double x = __bfloat162float(h_aux[e]);
                const double ref = gelu_fp64(x, false);
                const double got = __bfloat162float(gelu[e]);
                const double frac = std::isfinite(got) ? std::fabs(got - ref) / std::ldexp(std::fabs(ref) + 1.0, -7) : INFINITY;
                gelu_worst = std::max(gelu_worst, frac);
                gelu_bad += !(frac <= 1.0);
            }
            std::vector<double> sums(N, 0.0), abs_sums(N, 0.0);   // each column's sums in row order, walking out by rows
            for (int r = 0; r < M; r++)
                for (int c = 0; c < N; c++) {
                    const double o = __bfloat162float(out[(size_t)r * N + c]);
                    sums[c] += o;
                    abs_sums[c] += std::fabs(o);
                }
            for (int c = 0; c < N; c++) {
                const double sum = sums[c], abs_sum = abs_sums[c];
                const double got = __bfloat162float(dbias[c]);
                const double frac = std::isfinite(got) ? std::fabs(got - sum) / (std::ldexp(std::fabs(sum) + abs_sum, -8) + 1e-3) : INFINITY;
                bias_worst = std::max(bias_worst, frac);
                bias_bad += !(frac <= 1.0);
            }
            extra = strfmt("; gelu worst %.2f; bias grad worst %.2f", gelu_worst, bias_worst);
            bad += gelu_bad + bias_bad;
        }
        if (dgelu && variant == 0 && matmul_dgelu_hopper_supported(M, N, K)) {
            // the partials: every one written; the 64-row groups inside the sampled first and last 64 rows against fp64
            std::vector<float> colsum = from_device(m.colsum, partial_rows * N);
            size_t nonfinite = 0, sum_bad = 0;
            for (float x : colsum) nonfinite += !std::isfinite(x);
            double sum_worst = 0.0;
            for (int grp = 0; grp < (int)partial_rows; grp++) {
                const int r0 = 64 * grp, r1 = std::min(M, r0 + 64);
                bool sampled = true;   // rows r0 .. r1 - 1 all among the first 64 or the last 64
                for (int r = r0; r < r1; r++) sampled = sampled && (r < 64 || r >= M - 64);
                if (!sampled) continue;
                for (int c = 0; c < N; c++) {
                    double ref = 0.0, abs_sum = 0.0;
                    for (int r = r0; r < r1; r++) {
                        const size_t i = std::find(rows.begin(), rows.end(), r) - rows.begin();
                        ref += ref_out[i * N + c];
                        abs_sum += std::fabs(ref_out[i * N + c]);
                    }
                    const double frac = std::fabs(colsum[(size_t)grp * N + c] - ref) / (std::ldexp(abs_sum, -9) + 1e-3);
                    sum_worst = std::max(sum_worst, frac);
                    sum_bad += !(frac <= 1.0);
                }
            }
            extra += strfmt("; partials: %zu non-finite, %zu out of tol, worst %.2f", nonfinite, sum_bad, sum_worst);
            bad += nonfinite + sum_bad;
        }
        const bool ok = bad == 0;
        printf("  variant %d (%s): %s M=%d N=%d K=%d: %zu rows x %d columns vs fp64, worst %.2f of tol%s %s\n", variant,
               kVariantNames[variant], sh.name, M, N, K, rows.size(), N, worst, extra.c_str(), ok ? "ok" : "FAIL");
        failures += !ok;
    }
    free_buffers(m);
    return failures;
}

void bench(const HarnessArgs& args, int M, std::mt19937_64& rng) {
    for (const MatmulShape& sh : kShapes) {
        const int N = sh.N, K = sh.K;
        std::vector<floatX> h((size_t)M * K), hb((size_t)N * K), haux((size_t)M * N);
        fill_randn_bf16(h, 1.0f, rng);
        fill_randn_bf16(hb, 1.0f / std::sqrt((float)K), rng);
        fill_randn_bf16(haux, 1.0f, rng);
        MatmulBuffers m = alloc_buffers(sh, M);
        to_device(m.a, h); to_device(m.b, hb); to_device(m.aux, haux);
        cudaCheck(cudaMemcpy(m.bias, m.b, N * 2, cudaMemcpyDeviceToDevice));
        if (args.wants(6) && sh.epilogue != kEpiDGelu) cast_fp8_operands(m, sh, M);
        cudaCheck(cudaMemset(m.dbias, 0, N * 2));
        const double flops = 2.0 * M * N * K;
        for (int variant = 0; variant < kNumVariants; variant++) {
            if (!args.wants(variant) || (variant == 1 && M > 8192)) continue;   // the naive kernel: validation only at size
            if (!run_variant(variant, sh, m, M)) continue;
            const Timing tm = time_kernel([&](int) { run_variant(variant, sh, m, M); }, args.repeats, 0);
            printf("variant %d (%s) %s M=%d N=%d K=%d: %.4f ms (min %.4f) %.0f TFLOP/s\n", variant, kVariantNames[variant], sh.name, M, N, K,
                   tm.median_ms, tm.min_ms, flops / (tm.median_ms * 1e-3) / 1e12);
            printf("RESULT matmul variant=%d shape=%s M=%d N=%d K=%d ms_med=%.4f tflops=%.0f\n", variant, sh.name, M, N, K,
                   tm.median_ms, flops / (tm.median_ms * 1e-3) / 1e12);
        }
        free_buffers(m);
    }
}

// --fp8 1: every matmul of a layer of the step (linear (N = out, K = in): forward out (M, N) = x (M, K) @ W^T; dinp
// (M, K) = dout (M, N) @ W; dW (N, K) += dout^T @ x), bf16 through src/matmul.cuh as training calls it, FP8 in the
// TN form from operands cast once (the backward's from transposed copies, here just FP8 data of their shapes)
void bench_fp8_step(const HarnessArgs& args, int M, int C, std::mt19937_64& rng) {
    struct Linear { const char* name; int N, K; bool gelu, residual; };
    const Linear linears[] = {{"qkv", 3 * C, C, false, false}, {"attproj", C, C, false, true}, {"fc", 4 * C, C, true, false},
                              {"fcproj", C, 4 * C, false, true}};
    const size_t most = (size_t)M * 4 * C;   // the largest operand: (M, 4C)
    std::vector<floatX> h(most);
    fill_randn_bf16(h, 1.0f, rng);
    floatX* x = device_alloc<floatX>(most);
    to_device(x, h);
    floatX *dout = device_alloc<floatX>(most), *out = device_alloc<floatX>(most), *aux = device_alloc<floatX>(most);
    floatX *w = device_alloc<floatX>((size_t)4 * C * C), *dw = device_alloc<floatX>((size_t)4 * C * C), *bias = device_alloc<floatX>(4 * C);
    cudaCheck(cudaMemcpy(dout, x, most * 2, cudaMemcpyDeviceToDevice));
    cudaCheck(cudaMemcpy(w, x, (size_t)4 * C * C * 2, cudaMemcpyDeviceToDevice));
    cudaCheck(cudaMemset(dw, 0, (size_t)4 * C * C * 2));
    cudaCheck(cudaMemcpy(bias, x, 4 * C * 2, cudaMemcpyDeviceToDevice));
    __nv_fp8_e4m3 *x8 = device_alloc<__nv_fp8_e4m3>(most), *w8 = device_alloc<__nv_fp8_e4m3>((size_t)4 * C * C);
    __nv_fp8_e5m2* dout8 = device_alloc<__nv_fp8_e5m2>(most);
    float *amax = device_alloc<float>(1), *scales = device_alloc<float>(12);   // x's, w's and dout's, 16 bytes apart
    float *x_scale = scales, *w_scale = scales + 4, *dout_scale = scales + 8;
    quantize_fp8(x8, x_scale, amax, x, most, 0);
    quantize_fp8(w8, w_scale, amax, w, (size_t)4 * C * C, 0);
    quantize_fp8(dout8, dout_scale, amax, dout, most, 0);
    printf("FP8 against bf16, a layer of the step at M = %d tokens, C = %d (ms, medians of %d)\n", M, C, args.repeats);
    printf("| matmul | m x n x k | bf16 | FP8 | FP8 fast accum | bf16 / FP8 | bf16 / FP8 fast |\n|---|---|---|---|---|---|---|\n");
    double total[3] = {0, 0, 0};
    for (const Linear& L : linears) {
        const int N = L.N, K = L.K;
        floatX* res = L.residual ? out : nullptr;
        struct Op { const char* what; int m, n, k; std::function<void()> bf16; std::function<bool(bool)> f8; };
        const Op ops[] = {
            // forward, column-major out^T (N, M) = W^T x^T: FP8 A = W (K-major), B = x (K-major), both E4M3
            {"forward", N, M, K,
             [&] { matmul_cublaslt(out, w, x, res, bias, N, M, K, true, false, L.gelu ? aux : nullptr, false, 0); },
             [&](bool fast) { return matmul_fp8(out, w8, CUDA_R_8F_E4M3, x8, CUDA_R_8F_E4M3, w_scale, x_scale, res, bias, L.gelu ? aux : nullptr, N, M, K, fast, 0); }},
            // dinp^T (K, M) = W dout^T: FP8 A = W^T (K-major over N), B = dout (E5M2)
            {"dinp", K, M, N,
             [&] { matmul_cublaslt(out, w, dout, nullptr, nullptr, K, M, N, false, false, nullptr, false, 0); },
             [&](bool fast) { return matmul_fp8(out, w8, CUDA_R_8F_E4M3, dout8, CUDA_R_8F_E5M2, w_scale, dout_scale, nullptr, nullptr, nullptr, K, M, N, fast, 0); }},
            // dW^T (K, N) += x^T dout: FP8 A = x^T (K-major over M), B = dout^T (E5M2), accumulating into dW
            {"dweight", K, N, M,
             [&] { matmul_cublaslt(dw, x, dout, dw, nullptr, K, N, M, false, true, nullptr, false, 0); },
             [&](bool fast) { return matmul_fp8(dw, x8, CUDA_R_8F_E4M3, dout8, CUDA_R_8F_E5M2, x_scale, dout_scale, dw, nullptr, nullptr, K, N, M, fast, 0); }},
        };
        for (const Op& op : ops) {
            const double flops = 2.0 * op.m * op.n * op.k;
            const Timing t16 = time_kernel([&](int) { op.bf16(); }, args.repeats, 0);
            float t8[2] = {NAN, NAN};
            for (int fast = 0; fast < 2; fast++)
                if (op.f8(fast)) t8[fast] = time_kernel([&](int) { op.f8(fast); }, args.repeats, 0).median_ms;
            total[0] += t16.median_ms, total[1] += t8[0], total[2] += t8[1];
            printf("| %s %s | %d x %d x %d | %.4f (%.0f TF/s) | %.4f (%.0f TF/s) | %.4f (%.0f TF/s) | %.2f | %.2f |\n", L.name, op.what,
                   op.m, op.n, op.k, t16.median_ms, flops / t16.median_ms / 1e9, t8[0], flops / t8[0] / 1e9, t8[1],
                   flops / t8[1] / 1e9, t16.median_ms / t8[0], t16.median_ms / t8[1]);
            printf("RESULT matmul_fp8 op=%s_%s m=%d n=%d k=%d bf16_ms=%.4f fp8_ms=%.4f fp8_fast_ms=%.4f\n", L.name, op.what, op.m, op.n,
                   op.k, t16.median_ms, t8[0], t8[1]);
        }
    }
    printf("| the layer's 12 | | %.4f | %.4f | %.4f | %.2f | %.2f |\n", total[0], total[1], total[2], total[0] / total[1],
           total[0] / total[2]);
    // the casts training adds for these matmuls (src/fp8.cuh's fp8_cast): in the forward x and W row-major; in the
    // backward dout both ways (E5M2), x and W transposed
    Fp8Scale* slot = device_alloc<Fp8Scale>(1);
    const Fp8Scale init = fp8_scale_init(false);
    cudaCheck(cudaMemcpy(slot, &init, sizeof(init), cudaMemcpyHostToDevice));
    uint8_t *q = device_alloc<uint8_t>(most), *qT = device_alloc<uint8_t>(most);
    double casts = 0;
    for (const Linear& L : linears) {
        const double t = time_kernel([&](int) {
            fp8_cast(q, nullptr, x, M, L.K, slot, false, 0);
            fp8_cast(q, nullptr, w, L.N, L.K, slot, false, 0);
            fp8_cast(q, qT, dout, M, L.N, slot, true, 0);
            fp8_cast(nullptr, qT, x, M, L.K, slot, false, 0);
            fp8_cast(nullptr, qT, w, L.N, L.K, slot, false, 0);
        }, args.repeats, 0).median_ms;
        const double bytes = (double)M * L.K * 3 + (double)M * L.N * 4 + (double)M * L.K * 3 + 6.0 * L.N * L.K;
        printf("| %s casts | %.0f MB | | %.4f (%.0f GB/s) | | | |\n", L.name, bytes / 1e6, t, bytes / t / 1e6);
        casts += t;
    }
    printf("| the layer's 12 with the casts | | %.4f | %.4f | %.4f | %.2f | %.2f |\n", total[0], total[1] + casts, total[2] + casts,
           total[0] / (total[1] + casts), total[0] / (total[2] + casts));
    printf("RESULT matmul_fp8_layer bf16_ms=%.4f fp8_ms=%.4f fp8_fast_ms=%.4f casts_ms=%.4f\n", total[0], total[1], total[2], casts);
    // the layernorm before qkv and fc: bf16 out (the bf16 step's) against FP8 out both ways (-fp8's); each reads x
    // (M, C) bf16 and writes 2 bytes an element
    float* stats = device_alloc<float>(2 * (size_t)M);
    if (layernorm_forward_fp8_fits(M, C)) {
        const double ln16 = time_kernel([&](int) { layernorm_forward(out, stats, stats + M, x, w, bias, M, C, 0); }, args.repeats, 0).median_ms;
        const double ln8 = time_kernel([&](int) { layernorm_forward_fp8(q, qT, stats, stats + M, x, w, bias, M, C, slot, 0); },
                                       args.repeats, 0).median_ms;
        const double bytes = 4.0 * M * C;
        printf("| layernorm | %.0f MB | %.4f (%.0f GB/s) | %.4f (%.0f GB/s) | | %.2f | |\n", bytes / 1e6, ln16, bytes / ln16 / 1e6, ln8,
               bytes / ln8 / 1e6, ln16 / ln8);
        printf("RESULT layernorm_fp8 M=%d C=%d bf16_ms=%.4f fp8_ms=%.4f\n", M, C, ln16, ln8);
    }
    // the layernorm backward before attproj and fcproj: bf16 dresidual then its cast both ways (E5M2), against the
    // backward writing the FP8 copy itself and fp8_transpose adding the transpose; each reads dout, x and dinp and
    // writes dinp (8 bytes an element), the cast reads dinp and writes 2 bytes, the FP8 copy 1 and its transpose 2
    {
        float* ln_scratch = device_alloc<float>(layernorm_backward_scratch_floats(M, C));
        Fp8Scale* dslot = device_alloc<Fp8Scale>(1);
        const Fp8Scale e5 = fp8_scale_init(true);
        cudaCheck(cudaMemcpy(dslot, &e5, sizeof(e5), cudaMemcpyHostToDevice));
        const Fp8Copy f8 = {q, &dslot->scale, &dslot->amax, true};
        floatX* grads = device_alloc<floatX>(3 * C);
        cudaCheck(cudaMemset(grads, 0, 3 * C * sizeof(floatX)));
        const double sep = time_kernel([&](int) {
            layernorm_backward(out, grads, grads + C, ln_scratch, dout, x, w, stats, stats + M, M, C, 0, grads + 2 * C);
            fp8_cast(q, qT, out, M, C, dslot, true, 0);
        }, args.repeats, 0).median_ms;
        const double fused = time_kernel([&](int) {
            layernorm_backward(out, grads, grads + C, ln_scratch, dout, x, w, stats, stats + M, M, C, 0, grads + 2 * C, &f8);
            fp8_transpose(qT, q, M, C, 0);
        }, args.repeats, 0).median_ms;
        const double ln_fp8 = time_kernel([&](int) {
            layernorm_backward(out, grads, grads + C, ln_scratch, dout, x, w, stats, stats + M, M, C, 0, grads + 2 * C, &f8);
        }, args.repeats, 0).median_ms;
        printf("| layernorm backward + dresidual's FP8 both ways | %.0f MB | %.4f | %.4f | | %.2f | |\n", 11.0 * M * C / 1e6, sep, fused,
               sep / fused);
        printf("RESULT layernorm_backward_fp8 M=%d C=%d separate_ms=%.4f fused_ms=%.4f ln_fp8_ms=%.4f\n", M, C, sep, fused, ln_fp8);
        // a layer's four weights (E4M3, transposed as the backward's): four casts against one batched launch
        Fp8CastJobs jobs = {};
        for (int i = 0; i < kFp8CastJobs; i++) {
            const Fp8LayerWeight lw = fp8_layer_weight(i, C);
            jobs.job[i] = {nullptr, qT + lw.offset, w, lw.out, lw.in, slot};
        }
        const double four = time_kernel([&](int) {
            for (const Fp8CastJob& j : jobs.job) fp8_cast(nullptr, j.qT, w, j.M, j.K, slot, false, 0);
        }, args.repeats, 0).median_ms;
        const double batched = time_kernel([&](int) { fp8_cast_batch(jobs, kFp8CastJobs, false, 0); }, args.repeats, 0).median_ms;
        printf("RESULT fp8_cast_weights C=%d four_ms=%.4f batched_ms=%.4f\n", C, four, batched);
        for (void* ptr : {(void*)ln_scratch, (void*)dslot, (void*)grads}) cudaCheck(cudaFree(ptr));
    }
    // fcproj's dinp through GELU (src/matmul_hopper.cuh): bf16 operands and outputs (dinp, gelu) against -fp8's E5M2
    // dout and E4M3 weight with FP8 outputs (dinp both ways, gelu transposed); both write the bias partials
    if (matmul_dgelu_hopper_supported(M, 4 * C, C, true)) {
        cudaCheck(cudaMemcpy(aux, x, most * 2, cudaMemcpyDeviceToDevice));   // pre: randn; gelu_out goes over x, read no more
        float* partials = device_alloc<float>((size_t)matmul_dgelu_partial_rows(M) * 4 * C);
        uint8_t* gelu8T = device_alloc<uint8_t>(most);
        Fp8Scale* dslots = device_alloc<Fp8Scale>(2);   // dinp's (E5M2) and gelu's (E4M3)
        const Fp8Scale h_dslots[2] = {fp8_scale_init(true), fp8_scale_init(false)};
        cudaCheck(cudaMemcpy(dslots, h_dslots, sizeof(h_dslots), cudaMemcpyHostToDevice));
        const DgeluFp8Out f8 = {q, qT, gelu8T, &dslots[0].scale, &dslots[1].scale, &dslots[0].amax, true,
                                (const uint8_t*)dout8, (const uint8_t*)w8, dout_scale, w_scale};
        const double t16 = time_kernel([&](int) { matmul_backward_dgelu_hopper(out, x, partials, dout, w, aux, M, 4 * C, C, 0); },
                                       args.repeats, 0).median_ms;
        const double t8 = time_kernel([&](int) { matmul_backward_dgelu_hopper(nullptr, nullptr, partials, nullptr, nullptr, aux, M, 4 * C, C, 0, &f8); },
                                      args.repeats, 0).median_ms;
        const double flops = 2.0 * M * 4 * C * C;
        printf("| fcproj dinp through GELU | %d x %d x %d | %.4f (%.0f TF/s) | %.4f (%.0f TF/s) | | %.2f | |\n", M, 4 * C, C, t16,
               flops / t16 / 1e9, t8, flops / t8 / 1e9, t16 / t8);
        printf("RESULT dgelu_fp8 M=%d C=%d bf16_ms=%.4f fp8_ms=%.4f\n", M, C, t16, t8);
        for (void* ptr : {(void*)partials, (void*)gelu8T, (void*)dslots}) cudaCheck(cudaFree(ptr));
    }
    for (void* p : {(void*)slot, (void*)q, (void*)qT, (void*)stats}) cudaCheck(cudaFree(p));
    for (void* p : {(void*)x, (void*)dout, (void*)out, (void*)aux, (void*)w, (void*)dw, (void*)bias, (void*)x8, (void*)w8, (void*)dout8,
                    (void*)scales, (void*)amax})
        cudaCheck(cudaFree(p));
}

static float float_from_bits(unsigned int bits) { float f; memcpy(&f, &bits, sizeof(f)); return f; }
// how many FP8 steps apart two bytes are (both formats order their magnitudes as their bits; +0 and -0 alike; 256 for
// nonzero values of opposite signs)
static int fp8_steps(uint8_t a, uint8_t b) { return ((a ^ b) & 0x80) && ((a | b) & 0x7f) ? 256 : std::abs((a & 0x7f) - (b & 0x7f)); }
// v's FP8 byte (round to nearest, saturating as the kernels' casts), E5M2 or E4M3
static uint8_t fp8_byte(double v, bool e5m2) { return e5m2 ? __nv_fp8_e5m2((float)v).__x : __nv_fp8_e4m3((float)v).__x; }

// src/fp8.cuh's cast (training's, delayed scaling: the slot's scale given) against the host's conversion of the same
// products: every byte of q and of qT, and the amax, on shapes that are not whole 64 x 64 tiles; both formats. The
// inputs span 2^-12 to 2^9 times the scale's reach, so some saturate and some go subnormal.
int check_fp8_cast(std::mt19937_64& rng) {
    int failures = 0;
    for (int e5m2 = 0; e5m2 < 2; e5m2++) {
        for (const std::pair<int, int> mk : {std::make_pair(1008, 776), std::make_pair(64, 64), std::make_pair(16, 8)}) {
            const int M = mk.first, K = mk.second;
            std::vector<floatX> h((size_t)M * K);
            std::uniform_real_distribution<float> expo(-12.0f, 9.0f), sign(-1.0f, 1.0f);
            for (floatX& v : h) v = __float2bfloat16(std::copysign(std::exp2(expo(rng)), sign(rng)));
            floatX* x = device_alloc<floatX>(h.size());
            to_device(x, h);
            uint8_t *q = device_alloc<uint8_t>(h.size()), *qT = device_alloc<uint8_t>(h.size());
            cudaCheck(cudaMemset(q, 0x7f, h.size()));   // poison: 0x7f is NaN in both formats, never a saturated cast
            cudaCheck(cudaMemset(qT, 0x7f, h.size()));
            Fp8Scale slot = fp8_scale_init(e5m2);
            slot.scale = 0.75f;   // not a power of two: the products round
            Fp8Scale* d_slot = device_alloc<Fp8Scale>(1);
            cudaCheck(cudaMemcpy(d_slot, &slot, sizeof(slot), cudaMemcpyHostToDevice));
            fp8_cast(q, qT, x, M, K, d_slot, e5m2, 0);
            cudaCheck(cudaDeviceSynchronize());
            const std::vector<uint8_t> got = from_device(q, h.size()), gotT = from_device(qT, h.size());
            const Fp8Scale after = from_device(d_slot, 1)[0];
            size_t bad = 0;
            float amax = 0.0f;
            for (int m = 0; m < M; m++) {
                for (int k = 0; k < K; k++) {
                    const float v = __bfloat162float(h[(size_t)m * K + k]);
                    amax = std::max(amax, std::fabs(v));
                    const uint8_t want = fp8_byte(v * slot.scale, e5m2);
                    bad += got[(size_t)m * K + k] != want;
                    bad += gotT[(size_t)k * M + m] != want;
                }
            }
            unsigned int amax_bits;
            memcpy(&amax_bits, &amax, sizeof(amax_bits));
            const bool amax_ok = after.amax == amax_bits;
            printf("  fp8_cast %s M=%d K=%d: %zu of %zu bytes differ from the host's conversion, amax %s\n", e5m2 ? "E5M2" : "E4M3", M, K,
                   bad, 2 * h.size(), amax_ok ? "exact" : "WRONG");
            failures += bad != 0 || !amax_ok;
            for (void* ptr : {(void*)x, (void*)q, (void*)qT, (void*)d_slot}) cudaCheck(cudaFree(ptr));
        }
    }
    return failures;
}

// src/fp8.cuh's batched cast (training's four weights of a layer in one launch): four tensors of different shapes,
// two row-major and two transposed, every byte against the host's conversion and each slot's own amax
int check_fp8_cast_batch(std::mt19937_64& rng) {
    const int shapes[kFp8CastJobs][2] = {{240, 80}, {80, 80}, {320, 80}, {80, 320}};   // a layer's at C = 80
    Fp8CastJobs jobs = {};
    std::vector<std::vector<floatX>> hx(kFp8CastJobs);
    Fp8Scale* slots = device_alloc<Fp8Scale>(kFp8CastJobs);
    std::vector<Fp8Scale> init(kFp8CastJobs, fp8_scale_init(false));
    for (int i = 0; i < kFp8CastJobs; i++) {
        const int M = shapes[i][0], K = shapes[i][1];
        hx[i].resize((size_t)M * K);
        fill_randn_bf16(hx[i], 40.0f * (i + 1), rng);   // each slot's amax its own
        init[i].scale = 0.75f + 0.5f * i;
        floatX* x = device_alloc<floatX>(hx[i].size());
        to_device(x, hx[i]);
        uint8_t* out = device_alloc<uint8_t>(hx[i].size());
        cudaCheck(cudaMemset(out, 0x7f, hx[i].size()));
        jobs.job[i] = {i % 2 ? nullptr : out, i % 2 ? out : nullptr, x, M, K, slots + i};
    }
    cudaCheck(cudaMemcpy(slots, init.data(), kFp8CastJobs * sizeof(Fp8Scale), cudaMemcpyHostToDevice));
    fp8_cast_batch(jobs, kFp8CastJobs, false, 0);
    cudaCheck(cudaDeviceSynchronize());
    const std::vector<Fp8Scale> after = from_device(slots, kFp8CastJobs);
    int failures = 0;
    for (int i = 0; i < kFp8CastJobs; i++) {
        const int M = shapes[i][0], K = shapes[i][1];
        const bool transposed = i % 2;
        const std::vector<uint8_t> got = from_device(transposed ? jobs.job[i].qT : jobs.job[i].q, hx[i].size());
        size_t bad = 0;
        float amax = 0.0f;
        for (int m = 0; m < M; m++)
            for (int k = 0; k < K; k++) {
                const float v = __bfloat162float(hx[i][(size_t)m * K + k]);
                amax = std::max(amax, std::fabs(v));
                bad += got[transposed ? (size_t)k * M + m : (size_t)m * K + k] != fp8_byte(v * init[i].scale, false);
            }
        const bool ok = bad == 0 && float_from_bits(after[i].amax) == amax;
        printf("  fp8_cast_batch tensor %d (%d x %d, %s): %zu of %zu bytes differ from the host's conversion, amax %s\n", i, M, K,
               transposed ? "transposed" : "row-major", bad, hx[i].size(), float_from_bits(after[i].amax) == amax ? "exact" : "WRONG");
        failures += !ok;
        for (void* ptr : {(void*)jobs.job[i].x, (void*)(transposed ? jobs.job[i].qT : jobs.job[i].q)}) cudaCheck(cudaFree(ptr));
    }
    cudaCheck(cudaFree(slots));
    return failures;
}

// src/layernorm.cuh's backward with dinp in FP8 too, then src/fp8.cuh's fp8_transpose of it (training's dresidual
// under -fp8): against the same kernel without the FP8 copy on the same inputs, dinp, dweight, dbias and dsum bit for
// bit (dinp accumulates onto random values); every FP8 byte the host's conversion of the bf16 dinp written, the
// transpose exactly q's, nothing left unwritten (poisoned with NaN bytes), the amax exact. C = 784 takes one warp a
// row, 1,616 two, neither a multiple of the transpose's 64-column tiles (training's C is one of 16, as -fp8 needs);
// N = 1,008 is no multiple of its 128-row tiles.
int check_layernorm_backward_fp8(std::mt19937_64& rng, int N, int C, bool e5m2) {
    std::vector<floatX> hd((size_t)N * C), hx((size_t)N * C), hdi((size_t)N * C), hw(C);
    fill_randn_bf16(hd, 1.0f, rng); fill_randn_bf16(hx, 2.0f, rng); fill_randn_bf16(hdi, 0.5f, rng); fill_randn_bf16(hw, 1.0f, rng);
    std::vector<float> hm(N), hr(N);
    for (int n = 0; n < N; n++) {
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) m += __bfloat162float(hx[(size_t)n * C + c]);
        m /= C;
        for (int c = 0; c < C; c++) { const double d = __bfloat162float(hx[(size_t)n * C + c]) - m; v += d * d; }
        hm[n] = (float)m;
        hr[n] = (float)(1.0 / std::sqrt(v / C + 1e-5));
    }
    floatX *dout = device_alloc<floatX>(hd.size()), *x = device_alloc<floatX>(hx.size()), *w = device_alloc<floatX>(C);
    floatX *dinp[2] = {device_alloc<floatX>(hdi.size()), device_alloc<floatX>(hdi.size())}, *grads[2] = {device_alloc<floatX>(3 * C), device_alloc<floatX>(3 * C)};
    float *mean = device_alloc<float>(N), *rstd = device_alloc<float>(N), *scratch = device_alloc<float>(layernorm_backward_scratch_floats(N, C));
    to_device(dout, hd); to_device(x, hx); to_device(w, hw); to_device(mean, hm); to_device(rstd, hr);
    uint8_t* q = device_alloc<uint8_t>(2 * hd.size());
    cudaCheck(cudaMemset(q, 0x7f, 2 * hd.size()));
    Fp8Scale slot = fp8_scale_init(e5m2);
    slot.scale = e5m2 ? 20000.0f : 37.0f;   // some values saturate, small ones go subnormal
    Fp8Scale* d_slot = device_alloc<Fp8Scale>(1);
    cudaCheck(cudaMemcpy(d_slot, &slot, sizeof(slot), cudaMemcpyHostToDevice));
    const Fp8Copy f8 = {q, &d_slot->scale, &d_slot->amax, e5m2};
    for (int i = 0; i < 2; i++) {   // 0 without the FP8 copy, 1 with it; dweight, dbias, dsum accumulate onto zeros
        to_device(dinp[i], hdi);
        cudaCheck(cudaMemset(grads[i], 0, 3 * C * sizeof(floatX)));
        layernorm_backward(dinp[i], grads[i], grads[i] + C, scratch, dout, x, w, mean, rstd, N, C, 0, grads[i] + 2 * C, i ? &f8 : nullptr);
    }
    fp8_transpose(q + hd.size(), q, N, C, 0);
    cudaCheck(cudaDeviceSynchronize());
    const std::vector<floatX> di0 = from_device(dinp[0], hdi.size()), di1 = from_device(dinp[1], hdi.size());
    const std::vector<floatX> g0 = from_device(grads[0], 3 * C), g1 = from_device(grads[1], 3 * C);
    const std::vector<uint8_t> got = from_device(q, 2 * hd.size());
    const Fp8Scale after = from_device(d_slot, 1)[0];
    size_t dinp_differ = 0, bytes_bad = 0, not_transposed = 0, sums_off = 0;
    float amax = 0.0f;
    for (size_t i = 0; i < di0.size(); i++) dinp_differ += __bfloat16_as_ushort(di0[i]) != __bfloat16_as_ushort(di1[i]);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            const float v = __bfloat162float(di1[(size_t)n * C + c]);
            amax = std::max(amax, std::fabs(v));
            const uint8_t have = got[(size_t)n * C + c];
            bytes_bad += have != fp8_byte(v * slot.scale, e5m2);
            not_transposed += got[hd.size() + (size_t)c * N + n] != have;
        }
    for (int i = 0; i < 3 * C; i++) sums_off += __bfloat16_as_ushort(g0[i]) != __bfloat16_as_ushort(g1[i]);
    const bool amax_ok = float_from_bits(after.amax) == amax;
    const bool ok = dinp_differ == 0 && bytes_bad == 0 && not_transposed == 0 && sums_off == 0 && amax_ok;
    printf("  layernorm_backward FP8 %s N=%d C=%d: dinp %zu differ from the bf16 call's, %zu FP8 bytes from the host's cast, "
           "%zu not transposed, %zu of dweight / dbias / dsum differ, amax %s %s\n", e5m2 ? "E5M2" : "E4M3", N, C, dinp_differ,
           bytes_bad, not_transposed, sums_off, amax_ok ? "exact" : "WRONG", ok ? "ok" : "FAIL");
    for (void* ptr : {(void*)dout, (void*)x, (void*)w, (void*)dinp[0], (void*)dinp[1], (void*)grads[0], (void*)grads[1], (void*)mean,
                      (void*)rstd, (void*)scratch, (void*)q, (void*)d_slot})
        cudaCheck(cudaFree(ptr));
    return !ok;
}
int check_layernorm_backward_fp8(std::mt19937_64& rng) {
    return check_layernorm_backward_fp8(rng, 1008, 784, true) + check_layernorm_backward_fp8(rng, 1008, 784, false) +
           check_layernorm_backward_fp8(rng, 96, 1616, true);
}

// src/fp8.cuh's matmul_fp8 writing D in FP8 (training's fc forward: GELU in the epilogue, gelu(.) in E4M3 for fcproj):
// against the same call writing bf16, every element within E4M3's rounding (2^-4 relative, 2^-9 absolute below
// the normals, over the scale), and the amax cuBLASLt reports against the bf16 output's (before the scale, as
// training's scales read it)
int check_fp8_output(std::mt19937_64& rng) {
    const int M = 1008, N = 3072, K = 768;
    std::vector<floatX> ha((size_t)M * K), hb((size_t)N * K), hbias(N);
    fill_randn_bf16(ha, 1.0f, rng);
    fill_randn_bf16(hb, 1.0f / std::sqrt((float)K), rng);
    fill_randn_bf16(hbias, 1.0f, rng);
    floatX *a = device_alloc<floatX>(ha.size()), *b = device_alloc<floatX>(hb.size()), *bias = device_alloc<floatX>(N);
    to_device(a, ha); to_device(b, hb); to_device(bias, hbias);
    __nv_fp8_e4m3 *a8 = device_alloc<__nv_fp8_e4m3>(ha.size()), *b8 = device_alloc<__nv_fp8_e4m3>(hb.size());
    float *scales = device_alloc<float>(12), *amax = device_alloc<float>(1);   // a's, b's inverse scales; D's scale; D's amax
    quantize_fp8(a8, scales, amax, a, ha.size(), 0);
    quantize_fp8(b8, scales + 4, amax, b, hb.size(), 0);
    floatX *d16 = device_alloc<floatX>((size_t)M * N), *aux = device_alloc<floatX>((size_t)M * N);
    uint8_t* d8 = device_alloc<uint8_t>((size_t)M * N);
    cudaCheck(cudaMemset(d8, 0x7f, (size_t)M * N));   // NaN in E4M3: a poison no output is
    bool ran = matmul_fp8(d16, b8, CUDA_R_8F_E4M3, a8, CUDA_R_8F_E4M3, scales + 4, scales, nullptr, bias, aux, N, M, K, true, 0);
    const std::vector<floatX> ref = from_device(d16, (size_t)M * N);
    float ref_amax = 0.0f;
    for (floatX v : ref) ref_amax = std::max(ref_amax, std::fabs(__bfloat162float(v)));
    const float d_scale = 448.0f / ref_amax * 0.75f;
    cudaCheck(cudaMemcpy(scales + 8, &d_scale, sizeof(float), cudaMemcpyHostToDevice));
    ran = ran && matmul_fp8(d8, b8, CUDA_R_8F_E4M3, a8, CUDA_R_8F_E4M3, scales + 4, scales, nullptr, bias, aux, N, M, K, true, 0,
                            CUDA_R_8F_E4M3, scales + 8, amax);
    cudaCheck(cudaDeviceSynchronize());
    if (!ran) {
        printf("  matmul_fp8 with an E4M3 D and GELU: cuBLASLt has no algorithm (training writes bf16 and casts)\n");
        return 0;
    }
    const std::vector<__nv_fp8_e4m3> got = from_device(reinterpret_cast<__nv_fp8_e4m3*>(d8), (size_t)M * N);
    const float got_amax = from_device(amax, 1)[0];
    size_t bad = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        const float want = __bfloat162float(ref[i]), have = (float)got[i] / d_scale;
        bad += !(std::fabs(have - want) <= 0.0625f * std::fabs(want) + std::exp2(-9.0f) / d_scale + 0.01f * std::fabs(want));
    }
    const bool amax_ok = std::fabs(got_amax - ref_amax) <= 0.01f * ref_amax;
    printf("  matmul_fp8 with an E4M3 D and GELU: %zu of %zu outside E4M3's rounding of the bf16 call's; amax %.4f, the bf16 "
           "output's %.4f (%s)\n", bad, ref.size(), got_amax, ref_amax, amax_ok ? "before the scale" : "WRONG");
    for (void* ptr : {(void*)a, (void*)b, (void*)bias, (void*)a8, (void*)b8, (void*)scales, (void*)amax, (void*)d16, (void*)aux, (void*)d8})
        cudaCheck(cudaFree(ptr));
    return bad != 0 || !amax_ok;
}

// src/matmul_hopper.cuh's DGELU kernel in its FP8 mode (training's -fp8 backward): FP8 operands (dout in E5M2 or E4M3,
// the weight's transpose in E4M3, cast on the host), FP8 outputs, against fp64 on the dequantised operands; K = 624 is
// no multiple of the 128 a stage takes (the last stage reads zeros past it), the rows no multiple of 128. The tensor
// cores accumulate FP8 products in fewer bits than fp32 (no promotion, as the forward's matmuls), so a dinp byte passes
// within one FP8 step of the fp64 value's cast or within 2^-8 of (the products' absolute sum times |gelu'| plus the
// sum): the first where the sum cancels, the second where gelu' is tiny (pre far below 0), where the kernel's fp32
// gelu', whose tanh is good to about 2^-11, is off by more than its own size and E5M2's fine steps near zero show it
// (the bf16 mode computes the same gelu'); gelu bytes within one step; at most 3% of the bytes a step off; the two dinp
// layouts equal; the 64-row partials of dinp within 2^-9 of the fp64 absolute sums; dinp's amax within 2^-7.
int check_dgelu_fp8(std::mt19937_64& rng) {
    int failures = 0;
    const int M = 1008, N = 768, K = 624;   // rows, columns (the kernel's C), the reduction (its OC)
    if (!hopper_path_available()) {
        printf("  dgelu fp8: needs the Hopper kernel (sm_90a): skipped\n");
        return 0;
    }
    std::vector<floatX> h_dout((size_t)M * K), h_w((size_t)K * N), h_pre((size_t)M * N);
    fill_randn_bf16(h_dout, 1.0f, rng);
    fill_randn_bf16(h_w, 0.05f, rng);
    fill_randn_bf16(h_pre, 2.0f, rng);
    float dout_max = 0.0f, w_max = 0.0f;
    for (floatX v : h_dout) dout_max = std::max(dout_max, std::fabs(__bfloat162float(v)));
    for (floatX v : h_w) w_max = std::max(w_max, std::fabs(__bfloat162float(v)));
    auto value = [](uint8_t byte, bool e5m2) {
        if (e5m2) { __nv_fp8_e5m2 v; v.__x = byte; return (double)(float)v; }
        __nv_fp8_e4m3 v; v.__x = byte; return (double)(float)v;
    };
    floatX* pre = device_alloc<floatX>(h_pre.size());
    to_device(pre, h_pre);
    uint8_t *dout8 = device_alloc<uint8_t>((size_t)M * K), *w8T = device_alloc<uint8_t>((size_t)N * K);
    uint8_t* q = device_alloc<uint8_t>(3 * (size_t)M * N);   // dinp8, dinp8T, gelu8T
    const size_t partial_floats = (size_t)matmul_dgelu_partial_rows(M) * N;
    float* partials = device_alloc<float>(partial_floats);
    Fp8Scale* slots = device_alloc<Fp8Scale>(4);   // dinp, gelu, dout, weight
    for (int e5m2 = 0; e5m2 < 2; e5m2++) {
        const float fmax = e5m2 ? kFp8MaxE5M2 : kFp8MaxE4M3;
        const float dout_scale = 0.9f * fmax / dout_max, w_scale = 0.9f * kFp8MaxE4M3 / w_max;
        std::vector<uint8_t> h_dout8((size_t)M * K), h_w8T((size_t)N * K);
        std::vector<double> dq((size_t)M * K), wq((size_t)N * K);   // the operands' values, dequantised
        for (size_t e = 0; e < h_dout8.size(); e++) {
            h_dout8[e] = fp8_byte(__bfloat162float(h_dout[e]) * dout_scale, e5m2);
            dq[e] = value(h_dout8[e], e5m2) / dout_scale;
        }
        for (int k = 0; k < K; k++)
            for (int n = 0; n < N; n++) {
                const size_t e = (size_t)n * K + k;
                h_w8T[e] = fp8_byte(__bfloat162float(h_w[(size_t)k * N + n]) * w_scale, false);
                wq[e] = value(h_w8T[e], false) / w_scale;
            }
        to_device(dout8, h_dout8);
        to_device(w8T, h_w8T);
        std::vector<double> ref_d((size_t)M * N), ref_y((size_t)M * N), ref_slack((size_t)M * N);   // ref_slack: see above
        parallel_units(M, [&](int m) {   // a row a unit
            for (int n = 0; n < N; n++) {
                double acc = 0.0, abs_acc = 0.0;
                for (int k = 0; k < K; k++) {
                    const double t = dq[(size_t)m * K + k] * wq[(size_t)n * K + k];
                    acc += t;
                    abs_acc += std::fabs(t);
                }
                const double x = __bfloat162float(h_pre[(size_t)m * N + n]);
                ref_d[(size_t)m * N + n] = acc * gelu_fp64(x, true);
                ref_slack[(size_t)m * N + n] = abs_acc * std::fabs(gelu_fp64(x, true)) + std::fabs(acc);
                ref_y[(size_t)m * N + n] = gelu_fp64(x, false);
            }
        });
        double d_max = 0.0, y_max = 0.0;
        for (size_t e = 0; e < ref_d.size(); e++) {
            d_max = std::max(d_max, std::fabs(ref_d[e]));
            y_max = std::max(y_max, std::fabs(ref_y[e]));
        }
        Fp8Scale h_slots[4] = {fp8_scale_init(e5m2), fp8_scale_init(false), fp8_scale_init(e5m2), fp8_scale_init(false)};
        h_slots[0].scale = (float)(0.9 * fmax / d_max);
        h_slots[1].scale = (float)(0.9 * kFp8MaxE4M3 / y_max);
        h_slots[2].scale_inv = 1.0f / dout_scale;
        h_slots[3].scale_inv = 1.0f / w_scale;
        cudaCheck(cudaMemcpy(slots, h_slots, sizeof(h_slots), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemset(q, 0x7f, 3 * (size_t)M * N));   // poison: NaN in both formats, which a saturating cast never writes
        poison(partials, partial_floats * 4);
        const DgeluFp8Out f8 = {q, q + (size_t)M * N, q + 2 * (size_t)M * N, &slots[0].scale, &slots[1].scale, &slots[0].amax, e5m2 == 1,
                                dout8, w8T, &slots[2].scale_inv, &slots[3].scale_inv};
        const bool ran = matmul_backward_dgelu_hopper(nullptr, nullptr, partials, nullptr, nullptr, pre, M, N, K, 0, &f8);
        cudaCheck(cudaGetLastError());
        const std::vector<uint8_t> got = from_device(q, 3 * (size_t)M * N);
        const std::vector<float> got_partials = from_device(partials, partial_floats);
        Fp8Scale after[1];
        cudaCheck(cudaMemcpy(after, slots, sizeof(after), cudaMemcpyDeviceToHost));
        size_t poisoned = 0, layouts_differ = 0, off_one[2] = {0, 0}, off_more[2] = {0, 0}, cancelled = 0, partials_bad = 0;
        for (int r = 0; r < M; r++)
            for (int c = 0; c < N; c++) {
                const size_t e = (size_t)r * N + c;
                const uint8_t d8 = got[e], d8T = got[(size_t)M * N + (size_t)c * M + r], g8T = got[2 * (size_t)M * N + (size_t)c * M + r];
                poisoned += (d8 == 0x7f) + (d8T == 0x7f) + (g8T == 0x7f);
                layouts_differ += d8 != d8T;
                const int sd = fp8_steps(d8, fp8_byte(ref_d[e] * h_slots[0].scale, e5m2 == 1)), sg = fp8_steps(g8T, fp8_byte(ref_y[e] * h_slots[1].scale, false));
                const bool within_sum = std::fabs(value(d8, e5m2 == 1) / h_slots[0].scale - ref_d[e]) <= std::ldexp(ref_slack[e], -8);
                off_one[0] += sd == 1;
                cancelled += sd > 1 && within_sum;
                off_more[0] += sd > 1 && !within_sum;
                off_one[1] += sg == 1; off_more[1] += sg > 1;
            }
        double partial_worst = 0.0;
        for (int grp = 0; grp < matmul_dgelu_partial_rows(M); grp++)
            for (int c = 0; c < N; c++) {
                double sum = 0.0, abs_sum = 0.0;
                for (int r = 64 * grp; r < std::min(M, 64 * grp + 64); r++) {
                    sum += ref_d[(size_t)r * N + c];
                    abs_sum += std::fabs(ref_d[(size_t)r * N + c]);
                }
                const double got_sum = got_partials[(size_t)grp * N + c];
                const double frac = std::isfinite(got_sum) ? std::fabs(got_sum - sum) / (std::ldexp(abs_sum, -9) + 1e-6) : INFINITY;
                partial_worst = std::max(partial_worst, frac);
                partials_bad += !(frac <= 1.0);
            }
        const float got_amax = float_from_bits(after[0].amax);
        const bool amax_ok = std::fabs(got_amax - d_max) <= std::ldexp(d_max, -7);
        const size_t n = (size_t)M * N;
        const bool ok = ran && poisoned == 0 && layouts_differ == 0 && off_more[0] == 0 && off_more[1] == 0 && off_one[0] * 33 <= n &&
                        off_one[1] * 33 <= n && partials_bad == 0 && amax_ok;
        printf("  dgelu fp8 (dout, dinp %s) M=%d N=%d K=%d: %zu unwritten, layouts differ at %zu; against fp64 one step off dinp %zu / "
               "gelu %zu of %zu, further %zu (and %zu within the sums' slack) / %zu; partials worst %.2f of tol; amax %.4g "
               "(fp64 %.4g) %s\n", e5m2 ? "E5M2" : "E4M3", M, N, K, poisoned, layouts_differ, off_one[0], off_one[1], n, off_more[0],
               cancelled, off_more[1], partial_worst, got_amax, d_max, ok ? "ok" : "FAIL");
        failures += !ok;
    }
    for (void* p : {(void*)pre, (void*)dout8, (void*)w8T, (void*)q, (void*)partials, (void*)slots}) cudaCheck(cudaFree(p));
    return failures;
}

// src/fp8.cuh's layernorm with its output in FP8 (training's ln1 and ln2 under -fp8): against fp64 on the host, each
// byte within one E4M3 step of the fp64 value's cast (the kernel's fp32 statistics can move a value across a rounding
// boundary) and nearly all exact; out8T exactly out8 transposed; mean, rstd and the amax within fp32's reach. C = 776
// is no multiple of 32; at C = 1608 a CTA's threads take its transposes in two rounds (as at d48's 1,600).
int check_layernorm_fp8(std::mt19937_64& rng, int N, int C) {
    std::vector<floatX> hx((size_t)N * C), hw(C), hb(C);
    fill_randn_bf16(hx, 2.0f, rng); fill_randn_bf16(hw, 1.0f, rng); fill_randn_bf16(hb, 0.5f, rng);
    floatX *x = device_alloc<floatX>(hx.size()), *w = device_alloc<floatX>(C), *b = device_alloc<floatX>(C);
    to_device(x, hx); to_device(w, hw); to_device(b, hb);
    uint8_t *q = device_alloc<uint8_t>(hx.size()), *qT = device_alloc<uint8_t>(hx.size());
    float *mean = device_alloc<float>(N), *rstd = device_alloc<float>(N);
    cudaCheck(cudaMemset(q, 0x7f, hx.size()));
    cudaCheck(cudaMemset(qT, 0x7f, hx.size()));
    Fp8Scale slot = fp8_scale_init(false);
    slot.scale = 37.0f;   // some values saturate (|y| > 448 / 37), small ones go subnormal
    Fp8Scale* d_slot = device_alloc<Fp8Scale>(1);
    cudaCheck(cudaMemcpy(d_slot, &slot, sizeof(slot), cudaMemcpyHostToDevice));
    layernorm_forward_fp8(q, qT, mean, rstd, x, w, b, N, C, d_slot, 0);
    cudaCheck(cudaDeviceSynchronize());
    const std::vector<uint8_t> got = from_device(q, hx.size()), gotT = from_device(qT, hx.size());
    const std::vector<float> gm = from_device(mean, N), gr = from_device(rstd, N);
    const Fp8Scale after = from_device(d_slot, 1)[0];
    size_t off_one = 0, off_more = 0, not_transposed = 0, stats_bad = 0;
    double amax = 0.0;
    for (int n = 0; n < N; n++) {
        double m = 0.0, v = 0.0;
        for (int c = 0; c < C; c++) m += __bfloat162float(hx[(size_t)n * C + c]);
        m /= C;
        for (int c = 0; c < C; c++) { const double d = __bfloat162float(hx[(size_t)n * C + c]) - m; v += d * d; }
        const double r = 1.0 / std::sqrt(v / C + 1e-5);
        stats_bad += std::fabs(gm[n] - m) > 1e-5 * (1 + std::fabs(m)) || std::fabs(gr[n] - r) > 1e-5 * r;
        for (int c = 0; c < C; c++) {
            const double y = (__bfloat162float(hx[(size_t)n * C + c]) - m) * r * __bfloat162float(hw[c]) + __bfloat162float(hb[c]);
            amax = std::max(amax, std::fabs(y));
            const uint8_t want = __nv_fp8_e4m3((float)(y * slot.scale)).__x, have = got[(size_t)n * C + c];
            const int steps = fp8_steps(want, have);
            off_one += steps == 1;
            off_more += steps > 1;
            not_transposed += gotT[(size_t)c * N + n] != have;
        }
    }
    const float got_amax = float_from_bits(after.amax);
    const bool amax_ok = std::fabs(got_amax - amax) <= 1e-5 * amax;
    const bool ok = off_more == 0 && off_one * 100 <= hx.size() && not_transposed == 0 && stats_bad == 0 && amax_ok;
    printf("  layernorm_forward_fp8 N=%d C=%d: %zu bytes one E4M3 step from fp64's cast, %zu further, %zu not transposed, "
           "%zu rows' statistics off, amax %s %s\n", N, C, off_one, off_more, not_transposed, stats_bad, amax_ok ? "ok" : "WRONG",
           ok ? "ok" : "FAIL");
    for (void* ptr : {(void*)x, (void*)w, (void*)b, (void*)q, (void*)qT, (void*)mean, (void*)rstd, (void*)d_slot}) cudaCheck(cudaFree(ptr));
    return !ok;
}
int check_layernorm_fp8(std::mt19937_64& rng) {
    int failures = 0;
    for (const std::pair<int, int> nc : {std::make_pair(96, 776), std::make_pair(64, 1608)})
        failures += check_layernorm_fp8(rng, nc.first, nc.second);
    return failures;
}

int main(int argc, char** argv) {
    int M = 65536, fp8_step = 0, C = 768;
    const HarnessArgs args = parse_layer_harness_args(argc, argv, {{"-n", &M}, {"--fp8", &fp8_step}, {"-c", &C}});
    std::mt19937_64 rng(args.seed);
    matmul_setup();
    if (fp8_step) {
        if (fp8_supported()) bench_fp8_step(args, M, C, rng);
        else printf("--fp8 1: this GPU has no FP8 tensor cores (sm_89+)\n");
        matmul_teardown();
        return 0;
    }
    int failures = 0;
    for (const MatmulShape& sh : kShapes) {
        if (args.check) for (int m : {1000, 4096}) failures += validate(args, sh, m, rng);
        else failures += validate(args, sh, std::min(M, 4096), rng);
    }
    if (args.check && args.wants(6) && fp8_supported()) failures += check_fp8_cast(rng) + check_fp8_cast_batch(rng) + check_fp8_output(rng) + check_layernorm_fp8(rng) +
                                                check_layernorm_backward_fp8(rng) + check_dgelu_fp8(rng);
    if (args.bench && failures == 0) bench(args, M, rng);
    matmul_teardown();
    printf("%s\n", failures ? "FAILED" : "all ok");
    return failures ? EXIT_FAILURE : EXIT_SUCCESS;
}
