/*
Variant 0: whatever src/attention.cuh ships (attention_forward), so the shipped kernel is always validated and
timed with everything else. On Hopper that is variant 5's kernel: at HS 64 192x128/3wg/pp/s3 from 128K query rows
(B * NH * T), else 128x128/2wg/pp/s3; at HS 128 128x128/2wg/pp, in CTA pairs (/c2) where the 128-row query blocks
pair up, claiming items at T >= 4096. Elsewhere it is variant 3's kernel (128x64/4w at HS 64, 128x48/4w at HS 128).
attention_forward_path_name() names the choice.
Last measured (H100, 2026-11-24, binaries of 4ebbd77, two rounds, ms_med; dev/cuda/README.md "Current figures"):
  64x12x1024x64 0.3055 / 0.3069, 8x12x1024x64 0.0487 / 0.0485, 4x12x4096x64 0.2217 / 0.2214,
  1x12x16384x64 0.7777 / 0.7716, 4x16x8192x128 1.7191 / 1.7111
*/
#pragma once

void attention_forward0(const AttentionForwardParams& p, int config, cudaStream_t stream) {
    attention_forward(p, stream);
}
