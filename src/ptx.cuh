/*
The hardware layer under the attention kernels, the Hopper GEMM and the layernorm backward's barriers: thin
wrappers over the PTX instructions they use, the shared-memory tile layouts those instructions want, and the host
side (kernel launches, the sm_90a probe, TMA tensor maps).
The algorithms (tile shapes, schedules, softmax, masks, epilogues) live in attention.cuh and matmul_hopper.cuh.

  sm_80+   cp.async, ldmatrix, mma.sync m16n8k16 (bf16 or fp16 -> fp32), ex2.approx, red.global.add, named barriers
  tiles    the 128-byte swizzle (mma.sync tiles and wgmma's column blocks), cp.async tile loads with zero-filled
           rows past T, mma.sync and wgmma accumulator fragments reused as A operands
  sm_90a   wgmma (descriptors, fences, commit/wait, the m64nNk16 shapes in use, products over a swizzled tile), TMA
           loads, stores and reduce-adds, 1-D bulk copies, mbarriers, clusters (multicast, remote arrive/store),
           setmaxnreg, programmatic dependent launch; reg_fence / schedule_pin to steer ptxas around
           asynchronous MMAs
  host     launch_with_smem (dynamic shared memory, programmatic dependent launch), launch_persistent_clusters,
           hopper_path_available, cuTensorMapEncodeTiled looked up from the driver at run time, BTHD tensor maps

The sm_90a wrappers exist only where the compiler targets sm_90a (__CUDA_ARCH_FEAT_SM90_ALL).
*/
#pragma once
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cuda.h>           // CUtensorMap (types only: the driver entry point is fetched at run time)
#include <cudaTypedefs.h>   // PFN_cuTensorMapEncodeTiled
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include "common.cuh"

// ----------------------------------------------------------------------------
// sm_80+: cp.async, ldmatrix, mma.sync

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
// named barriers 1-15 (0 is __syncthreads): `threads` of the block (a multiple of 32) meet, or arrive without waiting
__device__ __forceinline__ void named_barrier_sync(int id, int threads) { asm volatile("bar.sync %0, %1;\n" :: "r"(id), "r"(threads) : "memory"); }
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) { asm volatile("bar.arrive %0, %1;\n" :: "r"(id), "r"(threads) : "memory"); }

// 16-byte global->shared copy that bypasses L1; src_bytes = 0 zero-fills (rows past T)
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
// a 16-byte store to shared memory (a chunk cp_async_16 would have copied, computed in registers instead)
__device__ __forceinline__ void st_shared_16(uint32_t dst, uint4 v) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" :: "r"(dst), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N)); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], uint32_t addr) {   // lanes 0-15 give the addresses
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}
// The tensor cores' 16-bit inputs: bf16, or IEEE fp16 where a kernel is compiled with kHalf; fp32 accumulators and
// fp32 math either way. ASM_16BIT issues the asm statement whose text TEXT(T) builds for T = "bf16" or "f16".
#define ASM_16BIT(kHalf, TEXT, ...) \
    do { if constexpr (kHalf) asm volatile(TEXT("f16") __VA_ARGS__); else asm volatile(TEXT("bf16") __VA_ARGS__); } while (0)

// d += a (16x16, row) * b (16x8, col), 16-bit inputs, fp32 accumulators
#define MMA_16816_TEXT(T) "mma.sync.aligned.m16n8k16.row.col.f32." T "." T ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
template <bool kHalf>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    ASM_16BIT(kHalf, MMA_16816_TEXT, : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// two floats rounded to the kernel's 16-bit type, lo in the low half
template <bool kHalf>
__device__ __forceinline__ uint32_t pack_x2(float lo, float hi) {
    if constexpr (kHalf) {
        __half2 v = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<uint32_t*>(&v);
    } else {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t*>(&v);
    }
}
template <bool kHalf>
__device__ __forceinline__ float2 unpack_x2(uint32_t v) {
    if constexpr (kHalf) return __half22float2(*reinterpret_cast<const __half2*>(&v));
    else return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v));
}
constexpr float kLog2e = 1.4426950408889634f;   // log2(e): exp(x) = exp2(x * kLog2e)

// one MUFU.EX2, whatever the compile flags (exp2f without fast-math is 4 instructions)
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// one MUFU.TANH (sm_75+; relative error about 2^-11, below the bf16 rounding of the logits it feeds)
__device__ __forceinline__ float fast_tanh(float x) {
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
// one MUFU.LG2
__device__ __forceinline__ float fast_log2(float x) {
    float y;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
// two values as an FP8 pair, times scale and saturated (as every FP8 copy and cast writes them), their largest |value|
// into amax
__device__ __forceinline__ __nv_fp8x2_storage_t fp8x2_scaled(float a, float b, float scale, __nv_fp8_interpretation_t format,
                                                             float& amax) {
    amax = fmaxf(amax, fmaxf(fabsf(a), fabsf(b)));
    return __nv_cvt_float2_to_fp8x2(make_float2(a * scale, b * scale), __NV_SATFINITE, format);
}

// *p += a, p[1] += b in global memory (red.global.add: no result returned); sm_90 adds both in one instruction
__device__ __forceinline__ void red_add_f32x2(float* p, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" :: "l"(p), "f"(a), "f"(b) : "memory");
#else
    asm volatile("red.global.add.f32 [%0], %1;\n red.global.add.f32 [%0+4], %2;\n" :: "l"(p), "f"(a), "f"(b) : "memory");
#endif
}

// ----------------------------------------------------------------------------
// tile layouts: the 128-byte swizzle, cp.async tile loads, products of mma.sync accumulator fragments

// two fp32 m16n8 accumulator tiles (n8 tiles 2kk, 2kk+1 of one m16 row) in 16 bits = the A fragment of k16 step kk
template <bool kHalf>
__device__ __forceinline__ void accum_tiles_to_a_frag(uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
    a[0] = pack_x2<kHalf>(lo[0], lo[1]);
    a[1] = pack_x2<kHalf>(lo[2], lo[3]);
    a[2] = pack_x2<kHalf>(hi[0], hi[1]);
    a[3] = pack_x2<kHalf>(hi[2], hi[3]);
}

// out (kMT m16 tiles x kDT n8 tiles) += A B, A = the fp32 accumulator tiles `in` (kMT x kNT, the m16n8 layout)
// in 16 bits: in tiles 2kk, 2kk+1 are exactly the A fragment of k step kk, so P (forward) or dS (dQ) never touches
// shared memory. B comes from a [k][n] tile by ldmatrix.trans: b_addr(kk, dp) addresses n tiles 2dp, 2dp+1.
template <bool kHalf, int kMT, int kNT, int kDT, class BAddr>
__device__ __forceinline__ void mma_accum_times_tile(float (&out)[kMT][kDT][4], const float (&in)[kMT][kNT][4], BAddr b_addr) {
    #pragma unroll
    for (int kk = 0; kk < kNT / 2; kk++) {
        uint32_t a[kMT][4];
        #pragma unroll
        for (int mt = 0; mt < kMT; mt++) accum_tiles_to_a_frag<kHalf>(a[mt], in[mt][2 * kk], in[mt][2 * kk + 1]);
        #pragma unroll
        for (int dp = 0; dp < kDT / 2; dp++) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, b_addr(kk, dp));
            #pragma unroll
            for (int mt = 0; mt < kMT; mt++) {
                mma_16816<kHalf>(out[mt][2 * dp], a[mt], b[0], b[1]);
                mma_16816<kHalf>(out[mt][2 * dp + 1], a[mt], b[2], b[3]);
            }
        }
    }
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile whose rows hold HS bf16. The chunk index
// is XORed with row % 8, so the 8 row addresses of one ldmatrix (same chunk, 8 consecutive rows) hit 8
// different bank groups instead of one: the 128-byte swizzle, which TMA/wgmma use too.
// Rows of 64 bytes (HS 32) pair up in 128 bytes, so the XOR takes row / 2; rows of 32 bytes (HS 16) come in fours, so
// row / 4; a 192-byte row (HS 96) is a 128-byte part as above and a 64-byte part swizzled like HS 32's rows.
template <int HS>
__device__ __forceinline__ int swizzle(int row, int chunk) {
    if constexpr (HS % 64 == 0) return row * (HS * 2) + ((chunk ^ (row & 7)) << 4);
    else if constexpr (HS == 32) return row * 64 + ((chunk ^ ((row >> 1) & 3)) << 4);
    else if constexpr (HS == 16) return row * 32 + ((chunk ^ ((row >> 2) & 1)) << 4);
    else {
        static_assert(HS == 96, "head dims: multiples of 64, 32 and 96");
        return row * 192 + ((chunk < 8 ? chunk ^ (row & 7) : 8 + ((chunk - 8) ^ ((row >> 1) & 3))) << 4);
    }
}

// Copy rows [row0, row0 + rows) of one head's (T, HS) slice of a strided tensor into a swizzled tile;
// rows past T are zero-filled: a zero K row gives a finite score that the causal mask removes, a zero
// V row contributes nothing, whereas garbage could be NaN and 0 * NaN = NaN. Chunks from `chunks` on are zero-filled
// too (a head dim of 8 in a tile of 16).
template <int HS, int kThreads>
__device__ __forceinline__ void load_tile_async(uint8_t* tile, const floatX* src, size_t row_stride, int row0, int rows, int T,
                                                int chunks = HS / 8) {
    constexpr int kChunks = HS / 8;
    for (int c = threadIdx.x; c < rows * kChunks; c += kThreads) {
        int r = c / kChunks, ch = c % kChunks, t = row0 + r;
        bool valid = t < T && ch < chunks;
        cp_async_16(smem_addr(tile + swizzle<HS>(r, ch)), src + (size_t)(valid ? t : 0) * row_stride + ch * 8, valid);
    }
}

// The same copy for a tile of kRows rows with the per-thread address math done once: thread i always
// copies chunk i % kChunks of rows i / kChunks + k * kRowStep, so its swizzled smem offset is a constant
// stride apart (kRowStep is a multiple of 8, the swizzle period) and its global pointer steps by
// kRowStep rows. load_tile_async's generic loop makes the compiler hoist one 64-bit pointer per copy out
// of the forward's K/V loop, which costs ~20 registers the HS 128 kernels with 32 rows per warp lack.
template <int HS, int kThreads, int kRows>
__device__ __forceinline__ void load_tile_rows_async(uint8_t* tile, const floatX* src, size_t row_stride, int row0, int T) {
    constexpr int kChunks = HS / 8, kRowStep = kThreads / kChunks;
    static_assert(kThreads % kChunks == 0 && kRowStep % 8 == 0 && kRows % kRowStep == 0, "tile rows must split evenly");
    const int r = threadIdx.x / kChunks, ch = threadIdx.x % kChunks;
    const uint32_t dst = smem_addr(tile + swizzle<HS>(r, ch));
    const int rows_left = T - row0 - r;   // rows this thread may read: k * kRowStep < rows_left
    const floatX* row_src = src + (size_t)(row0 + r) * row_stride + ch * 8;
    #pragma unroll
    for (int k = 0; k < kRows / kRowStep; k++) {
        const bool valid = k * kRowStep < rows_left;
        cp_async_16(dst + k * kRowStep * HS * 2, valid ? row_src : src, valid);
        row_src += kRowStep * row_stride;
    }
}

// wgmma tiles. wgmma's 128-byte swizzle works on 128-byte rows: 8-row atoms of 1024 bytes, 16-byte chunk c of row r
// stored at chunk c ^ (r % 8), which for HS 64 is exactly swizzle<64>. A 256-byte HS 128 row is two atoms wide, so a
// tile of R rows is stored as HS / 64 column blocks of (R, 64) bf16, one after the other (R * 128 bytes each), each in
// the HS 64 layout. Descriptors: K-major operands (contracted over HS) find head dims 16ks.. in block ks / 4 at
// +32 * (ks % 4) bytes, SBO = 1024 (8 rows), LBO unused; MN-major operands (contracted over rows) find rows 16j.. at
// +16j * 128 bytes of a block, SBO = 1024, LBO = R * 128 (the next 64 head dims), so HS 128 is one n128 wgmma.
// Byte offset of 16-byte chunk `chunk` (0 .. HS/8 - 1) of row `row` in a wgmma tile of kRows rows:
// HS / 64 column blocks of (kRows, 64) bf16, each in the swizzle<64> layout (see above). HS 64: swizzle<64>.
template <int kRows>
__device__ __forceinline__ int swizzle_wgmma(int row, int chunk) {
    return (chunk >> 3) * (kRows * 128) + swizzle<64>(row, chunk & 7);
}

// the accumulator columns 16j..16j+15 of an m64nN tile (register groups 2j, 2j+1) as the 16-bit A fragment of k step j
template <bool kHalf>
__device__ __forceinline__ void accum_to_a_frag(uint32_t (&a)[4], const float* acc, int j) {
    a[0] = pack_x2<kHalf>(acc[8 * j + 0], acc[8 * j + 1]);
    a[1] = pack_x2<kHalf>(acc[8 * j + 2], acc[8 * j + 3]);
    a[2] = pack_x2<kHalf>(acc[8 * j + 4], acc[8 * j + 5]);
    a[3] = pack_x2<kHalf>(acc[8 * j + 6], acc[8 * j + 7]);
}

// ----------------------------------------------------------------------------
// sm_90a: wgmma, mbarriers, TMA, clusters, register and launch control

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// shared-memory matrix descriptor, all offsets in 16-byte units: start address (bits 0-13), leading
// byte offset (bits 16-29: ignored for K-major with this swizzle; for MN-major the distance between
// 64-element column blocks, used only when N > 64), stride between 8-row groups 1024 bytes (bits
// 32-45), base offset 0 (every tile starts on a 1024-byte atom), 128-byte swizzle (mode 1 in bits 62-63)
__device__ __forceinline__ uint64_t wgmma_desc(const uint8_t* tile, uint32_t lbo_bytes = 16) {
    return (uint64_t)((smem_addr(tile) & 0x3FFFF) >> 4) | ((uint64_t)(lbo_bytes >> 4) << 16) | ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// wait until at most N committed groups of this warpgroup are still running
template <int N> __device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory"); }
// cp.async wrote the tiles through the generic proxy; wgmma reads them through the async proxy
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }

// The fp32 accumulator d of an m64nN wgmma: N / 2 registers a thread, asm operands %0 .. %(N/2 - 1), listed once here.
#define WGMMA_D8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define WGMMA_D16 WGMMA_D8(0), WGMMA_D8(8)
#define WGMMA_D32 WGMMA_D8(0), WGMMA_D8(8), WGMMA_D8(16), WGMMA_D8(24)
#define WGMMA_D40 WGMMA_D32, WGMMA_D8(32)
#define WGMMA_D48 WGMMA_D32, WGMMA_D8(32), WGMMA_D8(40)
#define WGMMA_D64 WGMMA_D32, WGMMA_D8(32), WGMMA_D8(40), WGMMA_D8(48), WGMMA_D8(56)
// the same as outputs only (scale-d 0: the old accumulator is dead, so ptxas need not keep it alive up to here)
#define WGMMA_O8(i) "=f"(d[i]), "=f"(d[i + 1]), "=f"(d[i + 2]), "=f"(d[i + 3]), "=f"(d[i + 4]), "=f"(d[i + 5]), "=f"(d[i + 6]), "=f"(d[i + 7])
#define WGMMA_O32 WGMMA_O8(0), WGMMA_O8(8), WGMMA_O8(16), WGMMA_O8(24)
#define WGMMA_O40 WGMMA_O32, WGMMA_O8(32)
#define WGMMA_O48 WGMMA_O32, WGMMA_O8(32), WGMMA_O8(40)
// the same operands' names in the asm text, eight a piece: {%0, %1, .., %(N/2 - 1)}
#define WGMMA_R0 "%0, %1, %2, %3, %4, %5, %6, %7"
#define WGMMA_R8 "%8, %9, %10, %11, %12, %13, %14, %15"
#define WGMMA_R16 "%16, %17, %18, %19, %20, %21, %22, %23"
#define WGMMA_R24 "%24, %25, %26, %27, %28, %29, %30, %31"
#define WGMMA_R32 "%32, %33, %34, %35, %36, %37, %38, %39"
#define WGMMA_R40 "%40, %41, %42, %43, %44, %45, %46, %47"
#define WGMMA_R48 "%48, %49, %50, %51, %52, %53, %54, %55"
#define WGMMA_R56 "%56, %57, %58, %59, %60, %61, %62, %63"
#define WGMMA_D16_NAMES "{" WGMMA_R0 ", " WGMMA_R8 "}"
#define WGMMA_D32_NAMES "{" WGMMA_R0 ", " WGMMA_R8 ", " WGMMA_R16 ", " WGMMA_R24 "}"
#define WGMMA_D40_NAMES "{" WGMMA_R0 ", " WGMMA_R8 ", " WGMMA_R16 ", " WGMMA_R24 ", " WGMMA_R32 "}"
#define WGMMA_D48_NAMES "{" WGMMA_R0 ", " WGMMA_R8 ", " WGMMA_R16 ", " WGMMA_R24 ", " WGMMA_R32 ", " WGMMA_R40 "}"
#define WGMMA_D64_NAMES "{" WGMMA_R0 ", " WGMMA_R8 ", " WGMMA_R16 ", " WGMMA_R24 ", " WGMMA_R32 ", " WGMMA_R40 ", " WGMMA_R48 ", " WGMMA_R56 "}"

// The asm text of d (m64 x nN, fp32) (+)= A (64 x 16, smem descriptor) * B (16 x N, smem descriptor), both K-major,
// of 16-bit type T: operands %0 .. %(N/2 - 1) = d (NAMES), then the descriptors (%DA, %DB) and scale-d (%SD, 0 or 1)
#define WGMMA_SS_KMAJOR(T, N, NAMES, DA, DB, SD) "{\n.reg .pred p;\nsetp.ne.b32 p, %" #SD ", 0;\n" \
    "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." T "." T " " NAMES ", %" #DA ", %" #DB ", p, 1, 1, 0, 0;\n}\n"
#define WGMMA_SS_N64_TEXT(T) WGMMA_SS_KMAJOR(T, 64, WGMMA_D32_NAMES, 32, 33, 34)
#define WGMMA_SS_N80_TEXT(T) WGMMA_SS_KMAJOR(T, 80, WGMMA_D40_NAMES, 40, 41, 42)
#define WGMMA_SS_N96_TEXT(T) WGMMA_SS_KMAJOR(T, 96, WGMMA_D48_NAMES, 48, 49, 50)
#define WGMMA_SS_N128_TEXT(T) WGMMA_SS_KMAJOR(T, 128, WGMMA_D64_NAMES, 64, 65, 66)
// n64, 32 regs a thread. kScaleD = 0: d = A * B (the old d is ignored, so the accumulator needs no zeroing), d declared
// as outputs only: with "+f" ptxas kept the forward's half-diagonal S (n64 into the upper half of the n128 S
// registers) from pipelining (C7511). The n128 form below keeps "+f": "=f" there changed every forward kernel's schedule.
template <bool kHalf, int kScaleD = 1>
__device__ __forceinline__ void wgmma_ss_m64n64k16(float (&d)[32], uint64_t desc_a, uint64_t desc_b) {
    if constexpr (kScaleD == 0) ASM_16BIT(kHalf, WGMMA_SS_N64_TEXT, : WGMMA_O32 : "l"(desc_a), "l"(desc_b), "n"(0));
    else ASM_16BIT(kHalf, WGMMA_SS_N64_TEXT, : WGMMA_D32 : "l"(desc_a), "l"(desc_b), "n"(1));
}
// n80, 40 regs a thread: the HS 256 forward's S over 80-key tiles. With both operands in shared memory an m64nNk16
// wgmma reads 2 KB of A and N * 32 bytes of B: at n64 4 KB per 32 tensor-core cycles, all the 128 bytes a cycle an
// SM's shared memory gives; n80 reads 4.5 KB per 40 cycles, n96 5 KB per 48.
template <bool kHalf, int kScaleD = 1>
__device__ __forceinline__ void wgmma_ss_m64n80k16(float (&d)[40], uint64_t desc_a, uint64_t desc_b) {
    if constexpr (kScaleD == 0) ASM_16BIT(kHalf, WGMMA_SS_N80_TEXT, : WGMMA_O40 : "l"(desc_a), "l"(desc_b), "n"(0));
    else ASM_16BIT(kHalf, WGMMA_SS_N80_TEXT, : WGMMA_D40 : "l"(desc_a), "l"(desc_b), "n"(1));
}
// n96, 48 regs a thread: the HS 128 dQ kernel's S and dP over 96-key steps (see n80)
template <bool kHalf, int kScaleD = 1>
__device__ __forceinline__ void wgmma_ss_m64n96k16(float (&d)[48], uint64_t desc_a, uint64_t desc_b) {
    if constexpr (kScaleD == 0) ASM_16BIT(kHalf, WGMMA_SS_N96_TEXT, : WGMMA_O48 : "l"(desc_a), "l"(desc_b), "n"(0));
    else ASM_16BIT(kHalf, WGMMA_SS_N96_TEXT, : WGMMA_D48 : "l"(desc_a), "l"(desc_b), "n"(1));
}
// n128, 64 regs a thread
template <bool kHalf, int kScaleD = 1>
__device__ __forceinline__ void wgmma_ss_m64n128k16(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
    ASM_16BIT(kHalf, WGMMA_SS_N128_TEXT, : WGMMA_D64 : "l"(desc_a), "l"(desc_b), "n"(kScaleD));
}
// d (m64 x nN) += A (64 x 16) * B (16 x N), both from shared memory, K-major: N = 64, 80, 96 or 128
template <bool kHalf, int N, int kScaleD = 1>
__device__ __forceinline__ void wgmma_ss_m64k16(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b) {
    static_assert(N == 64 || N == 80 || N == 96 || N == 128, "n64, n80, n96, n128");
    if constexpr (N == 128) wgmma_ss_m64n128k16<kHalf, kScaleD>(d, desc_a, desc_b);
    else if constexpr (N == 96) wgmma_ss_m64n96k16<kHalf, kScaleD>(d, desc_a, desc_b);
    else if constexpr (N == 80) wgmma_ss_m64n80k16<kHalf, kScaleD>(d, desc_a, desc_b);
    else wgmma_ss_m64n64k16<kHalf, kScaleD>(d, desc_a, desc_b);
}
// d (m64 x n128, fp32) += A (64 x 16, smem, K-major) * B (16 x 128, smem): B K-major (kTransB 0) or MN-major (1: B's
// 128 columns contiguous, in 64-column blocks the descriptor's leading byte offset apart); bf16 (the Hopper GEMM's)
template <int kTransB>
__device__ __forceinline__ void wgmma_ss_m64n128k16_b(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WGMMA_D64_NAMES ", %64, %65, p, 1, 1, 0, %67;\n}\n"
                 : WGMMA_D64 : "l"(desc_a), "l"(desc_b), "n"(1), "n"(kTransB));
}
// d (m64 x n128, fp32) += A (64 x 32, E4M3, smem, K-major) * B (32 x 128, FP8, smem, K-major: 128 rows of 32 k), B E5M2
// (kE5M2) or E4M3: FP8 operands are K-major only, and 32 of them fill a k step's 32 bytes (the Hopper GEMM's -fp8 kernel)
template <bool kE5M2>
__device__ __forceinline__ void wgmma_ss_m64n128k32_fp8(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
    if constexpr (kE5M2)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e5m2 " WGMMA_D64_NAMES ", %64, %65, p, 1, 1;\n}\n"
                     : WGMMA_D64 : "l"(desc_a), "l"(desc_b), "n"(1));
    else
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " WGMMA_D64_NAMES ", %64, %65, p, 1, 1;\n}\n"
                     : WGMMA_D64 : "l"(desc_a), "l"(desc_b), "n"(1));
}
// d (m64 x n64, fp32) += A (64 x 16, 16-bit registers) * B (16 x 64, smem descriptor, MN-major: transposed)
#define WGMMA_RS_N64_TEXT(T) "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n" \
    "wgmma.mma_async.sync.aligned.m64n64k16.f32." T "." T " " WGMMA_D32_NAMES ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
template <bool kHalf>
__device__ __forceinline__ void wgmma_rs_m64n64k16_trans_b(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b) {
    ASM_16BIT(kHalf, WGMMA_RS_N64_TEXT, : WGMMA_D32 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(1));
}
// d (m64 x n128, fp32, 64 regs a thread) += A (64 x 16, 16-bit registers) * B (16 x 128, smem descriptor, MN-major)
#define WGMMA_RS_N128_TEXT(T) "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n" \
    "wgmma.mma_async.sync.aligned.m64n128k16.f32." T "." T " " WGMMA_D64_NAMES ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
template <bool kHalf>
__device__ __forceinline__ void wgmma_rs_m64n128k16_trans_b(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b) {
    ASM_16BIT(kHalf, WGMMA_RS_N128_TEXT, : WGMMA_D64 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(1));
}
// d (m64 x nN, N = 32 or 64) (+)= A (64 x 16) * B (16 x N), both from shared memory and both MN-major (A's 64 rows
// and B's N columns contiguous: each operand is stored transposed, k rows of 128 bytes); scale_d = 0 overwrites d
#define WGMMA_SS_TRANS_N32_TEXT(T) "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n" \
    "wgmma.mma_async.sync.aligned.m64n32k16.f32." T "." T " " WGMMA_D16_NAMES ", %16, %17, p, 1, 1, 1, 1;\n}\n"
#define WGMMA_SS_TRANS_N64_TEXT(T) "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" \
    "wgmma.mma_async.sync.aligned.m64n64k16.f32." T "." T " " WGMMA_D32_NAMES ", %32, %33, p, 1, 1, 1, 1;\n}\n"
template <bool kHalf, int N>
__device__ __forceinline__ void wgmma_ss_m64k16_trans_ab(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    static_assert(N == 32 || N == 64, "n32 or n64");
    if constexpr (N == 32) ASM_16BIT(kHalf, WGMMA_SS_TRANS_N32_TEXT, : WGMMA_D16 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
    else ASM_16BIT(kHalf, WGMMA_SS_TRANS_N64_TEXT, : WGMMA_D32 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// An empty asm that "redefines" each register: ordinary code cannot be moved across it, in either
// direction, for these registers (see the overlap kernel's header).
template <int N> __device__ __forceinline__ void reg_fence(float (&r)[N]) {
    #pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(r[i]) :: "memory");
}
template <int N> __device__ __forceinline__ void reg_fence(uint32_t (&r)[N][4]) {
    #pragma unroll
    for (int i = 0; i < N; i++)
        #pragma unroll
        for (int k = 0; k < 4; k++) asm volatile("" : "+r"(r[i][k]) :: "memory");
}

// 1, in a form ptxas cannot fold: a `#pragma unroll 1` loop running schedule_pin() times is a basic block of its
// own, so ptxas keeps the softmax inside it ahead of the wgmma wait that follows. The overlap loops need this:
// without it ptxas sank the exps below the wait for the older GEMM (SASS, forward WS kernel: all 66 MUFU.EX2 of
// a thread after the wait for P V; dK/dV: 19 of 32), and the softmax no longer overlapped that GEMM.
__device__ __forceinline__ unsigned schedule_pin() { return min(blockDim.x, 1u); }

__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(smem_addr(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(smem_addr(bar)) : "memory");
}
// arrive and announce `bytes` of TMA transactions that will complete on this barrier's current phase
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, int bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(smem_addr(bar)), "r"(bytes) : "memory");
}
// wait until the phase with this parity has completed; kClusterAcquire: with acquire semantics at cluster scope,
// for a phase a peer CTA completed with mbar_arrive_remote_release
template <bool kClusterAcquire = false>
__device__ __forceinline__ void mbar_wait(uint64_t* bar, int parity) {
    uint32_t done;
    do {
        if constexpr (kClusterAcquire)
            asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                         : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
        else
            asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                         : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
    } while (!done);
}
// one TMA box of a 4-D tensor map at coordinates (c0, c1, c2, c3) into shared memory, completing on bar
__device__ __forceinline__ void tma_load_4d(uint8_t* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1, int c2, int c3) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n"
                 :: "r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_addr(bar))
                 : "memory");
}
// one box of a 2-D tensor map at (c0, c1) into shared memory, completing on bar
__device__ __forceinline__ void tma_load_2d(uint8_t* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 :: "r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_addr(bar)) : "memory");
}
// the same box multicast into every CTA of cta_mask (cluster ranks), at the same shared-memory offset, each CTA's
// barrier at bar's offset receiving the box's bytes
__device__ __forceinline__ void tma_load_2d_multicast(uint8_t* dst, const CUtensorMap* map, uint64_t* bar, uint16_t cta_mask, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, %3}], [%4], %5;\n"
                 :: "r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_addr(bar)), "h"(cta_mask)
                 : "memory");
}
// tma_load_4d's box multicast the same way
__device__ __forceinline__ void tma_load_4d_multicast(uint8_t* dst, const CUtensorMap* map, uint64_t* bar, uint16_t cta_mask,
                                                      int c0, int c1, int c2, int c3) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, %3, %4, %5}], [%6], %7;\n"
                 :: "r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_addr(bar)),
                    "h"(cta_mask) : "memory");
}
// arrive on the barrier at bar's offset in the shared memory of cluster rank cta
__device__ __forceinline__ void mbar_arrive_remote(uint64_t* bar, int cta) {
    asm volatile("{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\nmbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n"
                 :: "r"(smem_addr(bar)), "r"(cta) : "memory");
}
// the same at cluster scope with release semantics: the peer sees this thread's earlier st_shared_remote stores once
// its mbar_wait<true> passes (the forward pairs' item hand-over)
__device__ __forceinline__ void mbar_arrive_remote_release(uint64_t* bar, int cta) {
    asm volatile("{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\nmbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n}\n"
                 :: "r"(smem_addr(bar)), "r"(cta) : "memory");
}
// store v at dst's offset in the shared memory of cluster rank cta
__device__ __forceinline__ void st_shared_remote(void* dst, int cta, int v) {
    asm volatile("{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\nst.shared::cluster.u32 [remote], %2;\n}\n"
                 :: "r"(smem_addr(dst)), "r"(cta), "r"(v) : "memory");
}
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
__device__ __forceinline__ int cluster_cta_rank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return (int)r;
}
template <int N> __device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(N)); }
template <int N> __device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(N)); }
// Programmatic dependent launch: from launch_dependents on (once every CTA of this grid has executed it), the next
// kernel of the stream, if launched with early_start, may place its CTAs on the SMs this grid leaves; its wait
// returns once the grid it overlapped has finished and its memory is visible
__device__ __forceinline__ void pdl_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory"); }
__device__ __forceinline__ void pdl_wait_prerequisites() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }

// 1-D bulk copy of `bytes` (a multiple of 16, both addresses 16-byte aligned) into shared memory, completing on bar
__device__ __forceinline__ void bulk_load(void* dst, const void* src, int bytes, uint64_t* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 :: "r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(bar)) : "memory");
}
// TMA reduce-add (fp32 add in L2) of one box from shared memory into a 3-D tensor map at (c0, c1, c2): the box
// must be laid out as the map's swizzle says, and elements past the tensor's bounds are skipped. Like every bulk
// copy it belongs to the thread's current bulk group (bulk_commit), which bulk_wait_read / bulk_wait track.
__device__ __forceinline__ void tma_reduce_add_3d(const CUtensorMap* map, const void* src, int c0, int c1, int c2) {
    asm volatile("cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group [%0, {%1, %2, %3}], [%4];\n"
                 :: "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(src)) : "memory");
}
// one box from shared memory into a 2-D tensor map at (c0, c1), rows and columns past the tensor skipped (a bulk group's)
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, const void* src, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n"
                 :: "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_addr(src)) : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// at most N of this thread's bulk groups still read shared memory / still run
template <int N> __device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read %0;\n" :: "n"(N) : "memory"); }
template <int N> __device__ __forceinline__ void bulk_wait() { asm volatile("cp.async.bulk.wait_group %0;\n" :: "n"(N) : "memory"); }

// wgmma and TMA over the swizzled tiles above
// d (m64 x N) (+)= A B^T contracted over the head dimension: A = 64 rows of a swizzle_wgmma tile of kRowsA rows
// (desc_a: its first row), B = a swizzle_wgmma tile of N rows; k16 step ks reads column block ks / 4 at +32 bytes
// per step inside the 128-byte atom (descriptor units: 16 bytes). kScaleD0 = 0: the first step overwrites d.
// kRowsB: the rows of B's tile (B = its first N rows)
template <bool kHalf, int HS, int N, int kRowsA, int kScaleD0 = 1, int kRowsB = N>
__device__ __forceinline__ void wgmma_ss_over_hs(float (&d)[N / 2], uint64_t desc_a, const uint8_t* tile_b) {
    wgmma_ss_m64k16<kHalf, N, kScaleD0>(d, desc_a, wgmma_desc(tile_b));
    #pragma unroll
    for (int ks = 1; ks < HS / 16; ks++)
        wgmma_ss_m64k16<kHalf, N>(d, desc_a + (ks / 4) * (kRowsA * 128 / 16) + 2 * (ks % 4), wgmma_desc(tile_b + (ks / 4) * kRowsB * 128 + 32 * (ks % 4)));
}
// d (m64 x nHS) += A (64 x 16, 16-bit registers) * B (16 x HS): rows 16j..16j+15 of an MN-major swizzle_wgmma
// tile of kRows rows (16 rows of 128 bytes into each column block): the forward's P V, the backward's dV, dK, dQ.
// HS 128: one n128 wgmma over both column blocks (LBO = the distance between them, kRows * 128 bytes) into the
// accumulator's two halves [0, 32) and [32, 64), as two n64 wgmmas would write them
// HS 256: two n128 wgmmas, column blocks 0-1 into d[0, 64) and 2-3 into d[64, 128) (where one n256 would put them)
template <bool kHalf, int HS, int kRows>
__device__ __forceinline__ void wgmma_rs_m64k16_trans_b(float (&d)[HS / 2], const uint32_t (&a)[4], const uint8_t* tile, int j) {
    if constexpr (HS == 64) wgmma_rs_m64n64k16_trans_b<kHalf>(d, a, wgmma_desc(tile + j * 16 * 128));
    else if constexpr (HS == 128) wgmma_rs_m64n128k16_trans_b<kHalf>(d, a, wgmma_desc(tile + j * 16 * 128, /*lbo_bytes=*/kRows * 128));
    else {
        static_assert(HS == 256, "head dims 64, 128, 256");
        float (&lo)[64] = *reinterpret_cast<float(*)[64]>(d);
        float (&hi)[64] = *reinterpret_cast<float(*)[64]>(d + 64);
        wgmma_rs_m64n128k16_trans_b<kHalf>(lo, a, wgmma_desc(tile + j * 16 * 128, /*lbo_bytes=*/kRows * 128));
        wgmma_rs_m64n128k16_trans_b<kHalf>(hi, a, wgmma_desc(tile + 2 * kRows * 128 + j * 16 * 128, /*lbo_bytes=*/kRows * 128));
    }
}
// a (rows, HS) tile of the tensor map at rows row0.. of head h, batch b: HS / 64 TMA boxes, one per column block
template <int HS, int kRows>
__device__ __forceinline__ void tma_load_tile(uint8_t* tile, const CUtensorMap* map, uint64_t* bar, int h, int row0, int b) {
    #pragma unroll
    for (int c = 0; c < HS / 64; c++) tma_load_4d(tile + c * kRows * 128, map, bar, 64 * c, h, row0, b);
}
// n / 2 (full, empty) pairs: full completes on the producer's arrive + its TMA bytes, empty on empty_count arrivals
__device__ __forceinline__ void init_mbarriers(uint64_t* bars, int n, int empty_count) {
    for (int i = 0; i < n; i += 2) { mbar_init(&bars[i], 1); mbar_init(&bars[i + 1], empty_count); }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// ----------------------------------------------------------------------------
// host: launches, the sm_90a probe, TMA tensor maps

// Launch kKernel (a __global__ taking its arguments by value) with smem_bytes of dynamic shared memory,
// raising the kernel's limit whenever a launch needs more than any before (above 48 KB a kernel must opt in; the
// extras' kernels need more with an fp32 bias than with a bf16 one). One static per kernel.
// early_start (sm_90+, programmatic dependent launch): the kernel may start while the one before it in the stream
// still runs, once every CTA of that one has executed griddepcontrol.launch_dependents (pdl_launch_dependents above).
template <auto kKernel, class... Args>
void launch_with_smem_ex(dim3 grid, int threads, int smem_bytes, cudaStream_t stream, bool early_start, const Args&... args) {
    static int smem_limit = -1;
    if (smem_bytes > smem_limit) {
        cudaCheck(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
        smem_limit = smem_bytes;
    }
    cudaLaunchConfig_t config = {};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    config.gridDim = grid;
    config.blockDim = dim3(threads);
    config.dynamicSmemBytes = smem_bytes;
    config.stream = stream;
    config.attrs = attr;
    config.numAttrs = early_start ? 1 : 0;
    cudaCheck(cudaLaunchKernelEx(&config, kKernel, args...));
}
template <auto kKernel, class... Args>
void launch_with_smem(dim3 grid, int threads, int smem_bytes, cudaStream_t stream, const Args&... args) {
    launch_with_smem_ex<kKernel>(grid, threads, smem_bytes, stream, false, args...);
}

// Launch kKernel as a persistent grid of clusters of kCluster CTAs: min(clusters_wanted, the clusters that fit on the
// GPU at once), counted once per kernel (GPCs may leave SMs unpaired, so it can be fewer than SMs / kCluster)
template <auto kKernel, int kCluster, class... Args>
void launch_persistent_clusters(int clusters_wanted, int threads, int smem_bytes, cudaStream_t stream, const Args&... args) {
    cudaLaunchConfig_t config = {};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = kCluster; attr[0].val.clusterDim.y = 1; attr[0].val.clusterDim.z = 1;
    config.blockDim = dim3(threads);
    config.dynamicSmemBytes = smem_bytes;
    config.stream = stream;
    config.attrs = attr;
    config.numAttrs = 1;
    static int max_clusters = 0;
    if (!max_clusters) {
        cudaCheck(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
        config.gridDim = dim3(kCluster * (device_props().multiProcessorCount / kCluster));
        cudaCheck(cudaOccupancyMaxActiveClusters(&max_clusters, kKernel, &config));
        if (max_clusters < 1) { fprintf(stderr, "no %d-CTA cluster of this kernel fits the GPU\n", kCluster); exit(EXIT_FAILURE); }
    }
    config.gridDim = dim3(kCluster * std::min(clusters_wanted, max_clusters));
    cudaCheck(cudaLaunchKernelEx(&config, kKernel, args...));
}

// 1 if this binary carries sm_90a code for the GPU in hand (a GPU_ARCH=80 build running on an H100 does not). Static,
// as every non-template kernel of a header: each translation unit that includes it keeps its own copy.
static __global__ void hopper_path_probe_kernel(int* compiled) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    *compiled = 1;
#else
    *compiled = 0;
#endif
}

inline bool hopper_path_available() {
    static int available = -1;
    if (available < 0) {
        available = 0;
        if (device_props().major == 9) {
            int* d_flag;
            cudaCheck(cudaMalloc(&d_flag, sizeof(int)));
            hopper_path_probe_kernel<<<1, 1>>>(d_flag);
            cudaCheck(cudaGetLastError());
            cudaCheck(cudaMemcpy(&available, d_flag, sizeof(int), cudaMemcpyDeviceToHost));
            cudaCheck(cudaFree(d_flag));
        }
    }
    return available == 1;
}

// cuTensorMapEncodeTiled from the driver, looked up once at run time (no link dependency on libcuda)
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
    static PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
    if (!encode) {
        void* fn = nullptr;
        cudaDriverEntryPointQueryResult found;
        cudaCheck(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
        if (found != cudaDriverEntryPointSuccess || !fn) {
            fprintf(stderr, "attention: the CUDA driver has no cuTensorMapEncodeTiled (TMA needs a CUDA 12 driver)\n");
            exit(EXIT_FAILURE);
        }
        encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
    }
    return encode;
}

// a tiled tensor map with 128-byte swizzle (dims[0] contiguous; strides in bytes, of dims 1..rank-1)
inline CUtensorMap swizzled_tensor_map(CUtensorMapDataType type, int rank, const void* base, const cuuint64_t* dims,
                                       const cuuint64_t* strides, const cuuint32_t* box) {
    const cuuint32_t element_strides[4] = {1, 1, 1, 1};
    CUtensorMap map;
    CUresult r = tensor_map_encoder()(&map, type, rank, const_cast<void*>(base), dims, strides, box, element_strides,
                                      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "cuTensorMapEncodeTiled failed (error %d; tensor %p must be 16-byte aligned)\n", (int)r, base);
        exit(EXIT_FAILURE);
    }
    return map;
}

// A (B, T, NH, HS) bf16 tensor with the head dim contiguous and the other strides in elements (multiples of 8: TMA
// needs 16-byte strides), as a 4-D tensor map (HS, NH, T, B): boxes of 64 head dims x 1 head x box_rows rows x
// 1 batch, 128-byte swizzle, rows past T read as zeros.
inline CUtensorMap bthd_tensor_map(const floatX* base, long long row_stride, long long head_stride, long long batch_stride,
                                   int B, int T, int NH, int HS, int box_rows) {
    const cuuint64_t dims[4] = {(cuuint64_t)HS, (cuuint64_t)NH, (cuuint64_t)T, (cuuint64_t)B};
    const cuuint64_t strides[3] = {(cuuint64_t)head_stride * 2, (cuuint64_t)row_stride * 2, (cuuint64_t)batch_stride * 2};
    const cuuint32_t box[4] = {64, 1, (cuuint32_t)box_rows, 1};
    return swizzled_tensor_map(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, base, dims, strides, box);
}
