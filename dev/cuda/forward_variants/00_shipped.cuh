/*
Variant 0: whatever src/attention.cuh ships for GPT-2's calls (attention_forward_self_causal_path, which
attention_forward runs for them), so the shipped kernel is always validated and timed with everything else. On Hopper that is variant 5's kernel: at HS 64 192x128/3wg/pp/s3 from 128K query rows
(B * NH * T), else 128x128/2wg/pp/s3; at HS 128 128x128/2wg/pp, in CTA pairs (/c2) where the 128-row query blocks
pair up, claiming items at T >= 4096. Elsewhere it is variant 3's kernel (128x64/4w at HS 64, 128x48/4w at HS 128).
attention_forward_path_name() names the choice.
*/
#pragma once

void attention_forward0(const AttentionForwardParams& p, int config, cudaStream_t stream) {
    attention_check_self_causal(p);
    attention_forward_self_causal_path(p, stream);
}
