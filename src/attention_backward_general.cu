/*
flashgpt attention, the backward's general dispatch: every call outside GPT-2's family (attention_backward in
src/attention_backward.cu sends it here), onto the general copies of src/attention_backward.cuh by the call's extras and
modifiers, into build/attention.a. A file of its own so that it compiles beside src/attention_backward.cu (as one file
they would be the build's longest object); as that file, it compiles twice, its fp16 copies (ATTENTION_FP16 1) in an
object of their own.
*/
#include "attention_backward.cuh"

#ifndef ATTENTION_FP16
#define ATTENTION_FP16 0
#endif

// the general copies, chosen by the call's extras and modifiers; bf16 or (kHalf) fp16
template <bool kHalf>
void backward_general(const AttentionBackwardParams& p, cudaStream_t stream) {
    const int HS = p.HS;
    // the kernels' extras (attention_kernel_extras); they write dS into the scratch where either bias's gradient is asked
    // for, and the dbias kernel sums it over each bias's broadcast dimensions after them
    AttentionBackwardParams k = p;
    k.x = attention_with_score_constants(attention_kernel_extras(p.x, p.B, p.T, p.Tk, p.NH, stream), p.scale);
    k.dbias = p.dbias ? p.dbias : p.dbias2, k.dbias2 = nullptr;
    const bool hopper = attention_backward_uses_hopper(HS);
    // softcap and ALiBi (the score modifiers): the Hopper split's kMods copies, or with bias tiles or packs the mma.sync
    // kExtras copies, which apply them too (as every mma.sync general copy does)
    const bool dropout = attention_has_dropout(k.x), mods = attention_has_score_mods(k.x) || dropout;   // (as the forward)
    // (HS 8-56 run HS 64's Hopper copies, 72-120 HS 128's, 136-248 HS 256's, zero-padded: see head_chunk_stored)
    if (!mods && HS <= 128 && attention_hopper_bias_fits(k.x)) {   // a bf16 tile bias, a key bias, gating: the Hopper split's kBias copies
        k.x = with_zero_tile_bias(k.x, p.Tk);
        // the ordered dBias where the tile bias is the one bias whose gradient is asked for; else dS into the scratch
        const bool ordered = attention_backward_dbias_ordered(p);
        const DbiasOrder order = ordered ? dbias_order(k, 128, HS > 64 ? 64 : 128, stream) : DbiasOrder{};
        if (ordered) k.dbias = nullptr;
        if (HS > 64) attention_backward_split_hopper_ws<128, 2, 64, 2, 64, 2, true, true, false, false, kHalf>(k, stream, order);
        else attention_backward_split_hopper_ws<64, 2, 128, 2, 128, 2, true, true, false, false, kHalf>(k, stream, order);
        if (ordered) {
            const bool first = p.dbias != nullptr;
            dbias_from_order(order, k, first ? p.x.bias_st : p.x.bias2_st, first ? p.x.bias_fp32 : p.x.bias2_fp32, first ? p.dbias : p.dbias2, stream);
            return;
        }
    } else if (!mods && HS > 32 && HS <= 128 && attention_hopper_packed_fits(k.x, {p.q_st, p.k_st, p.v_st, p.o_st, p.do_st, p.dq_st, p.dk_st, p.dv_st})) {
        // packed sequences with their totals: the Hopper split's kVarlen copies (HS 40-56 on HS 64's, as the forward)
        if (HS > 64) attention_backward_split_hopper_ws<128, 2, 64, 2, 64, 2, true, false, true, false, kHalf>(k, stream);
        else attention_backward_split_hopper_ws<64, 2, 128, 2, 128, 2, true, false, true, false, kHalf>(k, stream);
    } else if ((attention_has_extras(k.x) && !(hopper && HS != 256 && attention_gate_only(k.x))) || (!hopper && HS <= 16) ||
               (dropout && (!hopper || HS > 128))) {
        // the mma.sync split's kExtras copies
        if (HS <= 16) attention_backward_split<16, 4, 1, 64, 4, 1, 64, true, kHalf>(k, stream);
        else if (HS == 32) attention_backward_split<32, 4, 1, 64, 4, 1, 64, true, kHalf>(k, stream);
        else if (HS == 64) attention_backward_split<64, 4, 1, 32, 4, 1, 64, true, kHalf>(k, stream);
        else if (HS == 96) attention_backward_split<96, 4, 1, 32, 4, 1, 32, true, kHalf>(k, stream);
        else if (HS == 128) attention_backward_split<128, 4, 1, 32, 4, 1, 32, true, kHalf>(k, stream);
        else attention_backward_split<256, 4, 1, 32, 4, 1, 32, true, kHalf>(k, stream);
    } else if (hopper && mods) {   // the general copies' tiles below, with the score modifiers
        if (HS > 128) attention_backward_split_hopper_ws_256<2, true, kHalf>(k, stream);
        else if (HS > 64) attention_backward_split_hopper_ws<128, 2, 64, 2, 96, 2, true, false, false, true, kHalf>(k, stream);
        else attention_backward_split_hopper_ws<64, 2, 128, 2, 128, 2, true, false, false, true, kHalf>(k, stream);
    } else if (hopper) {
        // the warp-specialised split's general copies (GQA: each dK/dV item sums its group's query heads; gating)
        if (HS > 128) attention_backward_split_hopper_ws_256<2, false, kHalf>(k, stream);
        else if (HS > 64) attention_backward_split_hopper_ws<128, 2, 64, 2, 96, 2, true, false, false, false, kHalf>(k, stream);
        else attention_backward_split_hopper_ws<64, 2, 128, 2, 128, 2, true, false, false, false, kHalf>(k, stream);
    } else {
        // general: preprocess, the dK/dV kernel (GQA: each CTA sums its group's query heads), the dQ kernel
        if (HS == 32) attention_backward_split<32, 4, 1, 64, 4, 1, 64, false, kHalf>(k, stream);
        else if (HS == 64) attention_backward_split<64, 4, 1, 32, 4, 1, 64, false, kHalf>(k, stream);
        else if (HS == 96) attention_backward_split<96, 4, 1, 32, 4, 1, 32, false, kHalf>(k, stream);
        else if (HS == 128) attention_backward_split<128, 4, 1, 32, 4, 1, 32, false, kHalf>(k, stream);
        else attention_backward_split<256, 4, 1, 32, 4, 1, 32, false, kHalf>(k, stream);   // dK/dV in two column halves (blockIdx.z)
    }
    if (p.dbias) launch_attention_dbias(k, p.x.bias_st, p.x.bias_fp32, p.dbias, stream);
    if (p.dbias2) launch_attention_dbias(k, p.x.bias2_st, p.x.bias2_fp32, p.dbias2, stream);
}

template void backward_general<ATTENTION_FP16 != 0>(const AttentionBackwardParams& p, cudaStream_t stream);
