/*
Thin wrappers over the PTX instructions the attention kernels use, and the driver call that builds TMA tensor maps.
Nothing here knows about attention: tile layouts, schedules and the algorithm live in attention.cuh.

  sm_80+   cp.async, ldmatrix, mma.sync m16n8k16 (bf16 -> fp32), ex2.approx, red.global.add
  sm_90a   wgmma (descriptors, fences, commit/wait, the m64nNk16 shapes in use), TMA loads and reduce-adds,
           1-D bulk copies, mbarriers, clusters (multicast, remote arrive/store), named barriers, setmaxnreg,
           programmatic dependent launch; reg_fence / schedule_pin to steer ptxas around asynchronous MMAs
  host     cuTensorMapEncodeTiled, looked up from the driver at run time

The sm_90a wrappers exist only where the compiler targets sm_90a (__CUDA_ARCH_FEAT_SM90_ALL).
*/
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cuda.h>           // CUtensorMap (types only: the driver entry point is fetched at run time)
#include <cudaTypedefs.h>   // PFN_cuTensorMapEncodeTiled
#include "common.cuh"

// ----------------------------------------------------------------------------
// sm_80+: cp.async, ldmatrix, mma.sync

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

// 16-byte global->shared copy that bypasses L1; src_bytes = 0 zero-fills (rows past T)
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(src), "r"(valid ? 16 : 0));
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
// d += a (16x16, row) * b (16x8, col), bf16 inputs, fp32 accumulators
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}
// one MUFU.EX2, whatever the compile flags (exp2f without fast-math is 4 instructions)
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
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
#define WGMMA_D64 WGMMA_D32, WGMMA_D8(32), WGMMA_D8(40), WGMMA_D8(48), WGMMA_D8(56)
// the same as outputs only (scale-d 0: the old accumulator is dead, so ptxas need not keep it alive up to here)
#define WGMMA_O8(i) "=f"(d[i]), "=f"(d[i + 1]), "=f"(d[i + 2]), "=f"(d[i + 3]), "=f"(d[i + 4]), "=f"(d[i + 5]), "=f"(d[i + 6]), "=f"(d[i + 7])
#define WGMMA_O32 WGMMA_O8(0), WGMMA_O8(8), WGMMA_O8(16), WGMMA_O8(24)
#define WGMMA_D16_NAMES "{" \
    "%0, %1, %2, %3, %4, %5, %6, %7, " \
    "%8, %9, %10, %11, %12, %13, %14, %15" \
    "}"
#define WGMMA_D32_NAMES "{" \
    "%0, %1, %2, %3, %4, %5, %6, %7, " \
    "%8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, " \
    "%24, %25, %26, %27, %28, %29, %30, %31" \
    "}"
#define WGMMA_D64_NAMES "{" \
    "%0, %1, %2, %3, %4, %5, %6, %7, " \
    "%8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, " \
    "%24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, " \
    "%40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, " \
    "%56, %57, %58, %59, %60, %61, %62, %63" \
    "}"

// d (m64 x n64, fp32, 32 regs a thread) += A (64 x 16, smem descriptor) * B (16 x 64, smem descriptor), both K-major;
// kScaleD = 0: d = A * B (the old d is ignored, so the accumulator needs no zeroing), d declared as outputs only:
// with "+f" ptxas kept the forward's half-diagonal S (n64 into the upper half of the n128 S registers) from
// pipelining (C7511). The n128 form below keeps "+f": "=f" there changed every forward kernel's schedule.
template <int kScaleD = 1>
__device__ __forceinline__ void wgmma_ss_m64n64k16(float (&d)[32], uint64_t desc_a, uint64_t desc_b) {
#define WGMMA_SS_N64 "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" \
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WGMMA_D32_NAMES ", %32, %33, p, 1, 1, 0, 0;\n}\n"
    if constexpr (kScaleD == 0) asm volatile(WGMMA_SS_N64 : WGMMA_O32 : "l"(desc_a), "l"(desc_b), "n"(0));
    else asm volatile(WGMMA_SS_N64 : WGMMA_D32 : "l"(desc_a), "l"(desc_b), "n"(1));
#undef WGMMA_SS_N64
}
// d (m64 x n128, fp32, 64 regs a thread) += A (64 x 16, smem descriptor) * B (16 x 128, smem descriptor), both K-major
template <int kScaleD = 1>
__device__ __forceinline__ void wgmma_ss_m64n128k16(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
#define WGMMA_SS_N128 "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" \
                      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WGMMA_D64_NAMES ", %64, %65, p, 1, 1, 0, 0;\n}\n"
    asm volatile(WGMMA_SS_N128 : WGMMA_D64 : "l"(desc_a), "l"(desc_b), "n"(kScaleD));
#undef WGMMA_SS_N128
}
// d (m64 x nN) += A (64 x 16) * B (16 x N), both from shared memory, K-major: N = 64 or 128
template <int N, int kScaleD = 1>
__device__ __forceinline__ void wgmma_ss_m64k16(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b) {
    if constexpr (N == 128) wgmma_ss_m64n128k16<kScaleD>(d, desc_a, desc_b);
    else wgmma_ss_m64n64k16<kScaleD>(d, desc_a, desc_b);
}
// d (m64 x n64, fp32) += A (64 x 16, bf16 registers) * B (16 x 64, smem descriptor, MN-major: transposed)
__device__ __forceinline__ void wgmma_rs_m64n64k16_trans_b(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WGMMA_D32_NAMES ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
                 : WGMMA_D32 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(1));
}
// d (m64 x n128, fp32, 64 regs a thread) += A (64 x 16, bf16 registers) * B (16 x 128, smem descriptor, MN-major)
__device__ __forceinline__ void wgmma_rs_m64n128k16_trans_b(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " WGMMA_D64_NAMES ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
                 : WGMMA_D64 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "n"(1));
}
// d (m64 x nN, N = 32 or 64) (+)= A (64 x 16) * B (16 x N), both from shared memory and both MN-major (A's 64 rows
// and B's N columns contiguous: each operand is stored transposed, k rows of 128 bytes); scale_d = 0 overwrites d
template <int N>
__device__ __forceinline__ void wgmma_ss_m64k16_trans_ab(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, int scale_d) {
    static_assert(N == 32 || N == 64, "n32 or n64");
    if constexpr (N == 32)
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 " WGMMA_D16_NAMES ", %16, %17, p, 1, 1, 1, 1;\n}\n"
                     : WGMMA_D16 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
    else
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WGMMA_D32_NAMES ", %32, %33, p, 1, 1, 1, 1;\n}\n"
                     : WGMMA_D32 : "l"(desc_a), "l"(desc_b), "r"(scale_d));
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
// the same box multicast into every CTA of cta_mask (cluster ranks), at the same shared-memory offset, each CTA's
// barrier at bar's offset receiving the box's bytes
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
__device__ __forceinline__ void named_barrier_sync(int id, int threads) { asm volatile("bar.sync %0, %1;\n" :: "r"(id), "r"(threads) : "memory"); }
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) { asm volatile("bar.arrive %0, %1;\n" :: "r"(id), "r"(threads) : "memory"); }
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
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// at most N of this thread's bulk groups still read shared memory / still run
template <int N> __device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read %0;\n" :: "n"(N) : "memory"); }
template <int N> __device__ __forceinline__ void bulk_wait() { asm volatile("cp.async.bulk.wait_group %0;\n" :: "n"(N) : "memory"); }
#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// ----------------------------------------------------------------------------
// host: TMA tensor maps

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
        fprintf(stderr, "attention: cuTensorMapEncodeTiled failed (error %d; tensor %p must be 16-byte aligned)\n", (int)r, base);
        exit(EXIT_FAILURE);
    }
    return map;
}
