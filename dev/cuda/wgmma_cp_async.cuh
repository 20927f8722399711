/*
cp.async loads into the wgmma tile layout, for the Hopper dev variants that load with every thread instead of TMA
(forward variant 4, backward variant 5). src/attention.cuh's shipped Hopper kernels load with TMA.
*/
#pragma once

// load_tile_async, but into the swizzle_wgmma layout (rows past T zero-filled the same way)
template <int HS, int kRows, int kThreads>
__device__ __forceinline__ void load_tile_async_wgmma(uint8_t* tile, const floatX* src, size_t row_stride, int row0, int T) {
    if constexpr (HS == 64) {
        load_tile_async<64, kThreads>(tile, src, row_stride, row0, kRows, T);   // the same layout
    } else {
        constexpr int kChunks = HS / 8;
        for (int c = threadIdx.x; c < kRows * kChunks; c += kThreads) {
            int r = c / kChunks, ch = c % kChunks, t = row0 + r;
            bool valid = t < T;
            cp_async_16(smem_addr(tile + swizzle_wgmma<kRows>(r, ch)), src + (size_t)(valid ? t : 0) * row_stride + ch * 8, valid);
        }
    }
}

