"""FlashAttention 2.x's Python API (flash_attn.flash_attn_interface) on flashgpt's kernels: the same names, argument
order, defaults, shapes and return values, so a program written for flash_attn runs after importing this in its place:

  from flashgpt.flash_attn_interface import flash_attn_func, flash_attn_varlen_func   # python/ on sys.path

  flash_attn_func(q, k, v)                       q (B, T, H, D), k and v (B, Tk, H_kv, D); out like q
  flash_attn_qkvpacked_func(qkv)                 qkv (B, T, 3, H, D), read in place
  flash_attn_kvpacked_func(q, kv)                kv (B, Tk, 2, H_kv, D)
  flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)   q (total_q, H, D), ...
  flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen)                             qkv (total, 3, H, D)
  flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
  flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, ...)                       inference (below)

each with dropout_p=0.0, softmax_scale=None (1 / sqrt(D)), causal=False (aligned bottom-right when T != Tk, as
FlashAttention 2.1+), window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
return_attn_probs=False. With return_attn_probs: (out, softmax_lse, S_dmask), softmax_lse (B, H, T) fp32 (varlen
(H, total_q)), S_dmask the attention probabilities (B, H, T, Tk) recomputed densely from q, k and the LSE (for tests,
as FlashAttention's; not padded to its tile multiples). GQA / MQA where H_kv divides H. The backward is always
deterministic (bit-identical run to run), so `deterministic` changes nothing.

window_size (left, right): the sliding window, query i seeing keys i + Tk - T - left .. i + Tk - T + right (-1: that
side unbounded; causal sets right to 0), with the key tiles outside every row's window skipped. softcap > 0:
softcap * tanh(scale q.k / softcap) as the score. alibi_slopes (H,) or (B, H) fp32: -slope * |i + Tk - T - j| added
to each score; softmax_lse is then the LSE of these scores (FlashAttention's causal kernel adds slope * j instead, the
same softmax with an LSE shifted by a constant per row).
flash_attn_varlen_func's block_table reads k and v as a paged cache (forward only, as FlashAttention's).
dropout_p > 0: dropout with a seed from PyTorch's CPU generator (torch.manual_seed repeats it), the same mask recomputed
in the backward; with return_attn_probs, S_dmask holds the dropped probabilities negated (as FlashAttention's tests read
it). bf16 and fp16.
Head dims up to 256: rounded up to a multiple of 8 (a copy of q, k and v, as FlashAttention's wrapper pads), which on
Hopper (the library built with sm_90a code, as make builds it there) the kernels take as they are (a head dim between flashgpt's 8, 16, 32, 64, 96, 128 and 256 runs zero-padded
inside them) except where attention_unsupported_reason refuses one (packed sequences past 128 or with softcap, ALiBi or
dropout; dropout past 128); there, and before Hopper, zero-padded to the next of flashgpt's head dims (a copy; the
padding changes no score).
"""
import math

import torch
import torch.nn.functional as F

import flashgpt_attention as _fg

__all__ = ["flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func", "flash_attn_varlen_func",
           "flash_attn_varlen_qkvpacked_func", "flash_attn_varlen_kvpacked_func", "flash_attn_with_kvcache"]

_HEAD_DIMS = (8, 16, 32, 64, 96, 128, 256)   # the library's own kernels' (src/attention.cuh's attention_head_dim_compiled)


def _padded(D, device, packed, mods):
    """the head dim flashgpt runs for D (the inputs zero-padded to it where it is larger): D rounded up to a multiple
    of 8 (as FlashAttention's wrapper pads), or the next of the library's own where the call's features take no head
    dim between them that large (flashgpt_attention.padded_head_dim_limit). Comparisons only, so that a symbolic D
    under torch.compile stays one"""
    if D > 256:
        raise ValueError(f"head dim {D}: FlashAttention and flashgpt take head dims up to 256")
    D8 = (D + 7) // 8 * 8
    for d in _HEAD_DIMS:
        if d == D8:   # the library's own: no question to ask
            return D8
        if d > D8:
            _, softcap, alibi_slopes, dropout_p = mods
            limit = _fg.padded_head_dim_limit(device, packed is not None, softcap or alibi_slopes is not None, dropout_p)
            return D8 if D8 <= limit else d


def _attention(q, k, v, softmax_scale, causal, mods, return_attn_probs, packed=None):
    """q (B, T, H, D) or packed (total, H, D) with packed = (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k);
    mods = (window_size, softcap, alibi_slopes, dropout_p)"""
    window_size, softcap, alibi_slopes, dropout_p = mods
    # the seed, where S_dmask needs it again; else flash_attention draws it (under torch.compile, its op at each call)
    seed = _fg.new_dropout_seed() if dropout_p and return_attn_probs else None
    D = q.shape[-1]
    scale = 1.0 / math.sqrt(D) if softmax_scale is None else float(softmax_scale)
    Dp = _padded(D, q.device, packed, mods)
    if Dp != D:
        q, k, v = (F.pad(x, (0, Dp - D)) for x in (q, k, v))
    if packed is None:
        out, lse = _fg.flash_attention(q, k, v, causal=causal, scale=scale, layout="bthd", return_lse=True,
                                       window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                                       dropout_p=dropout_p, dropout_seed=seed)
    else:
        cu_q, cu_k, max_q, max_k = packed
        out, lse = _fg.flash_attention(q, k, v, causal=causal, scale=scale, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                                       max_seqlen_q=max_q, max_seqlen_k=max_k, return_lse=True, window_size=window_size,
                                       softcap=softcap, alibi_slopes=alibi_slopes, dropout_p=dropout_p, dropout_seed=seed)
    if Dp != D:
        out = out[..., :D]
    if not return_attn_probs:
        return out
    if packed is None:
        lse_out, probs = lse, _probs(q[..., :D], k[..., :D], lse, scale, causal, mods)
    else:
        lse_out, probs = _packed_lse_and_probs(q[..., :D], k[..., :D], lse, scale, causal, mods, packed)
    if dropout_p:   # the dropped probabilities negated
        cu_q, cu_k = (None, None) if packed is None else packed[:2]
        keep = _fg.dropout_mask(*probs.shape, dropout_p, seed, q.device, cu_q, cu_k)
        probs = torch.where(keep, probs, -probs)
    return out, lse_out, probs


def _probs(q, k, lse, scale, causal, mods, batch=None):
    """softmax of the scores (softcap, ALiBi) (B, H, T, Tk) from the forward's LSE, 0 where causal or the window hides
    a key (FlashAttention's tests read S_dmask; it is computed here densely, in fp32); batch: the sequence of a packed
    call (its row of (B, H) ALiBi slopes)"""
    window_size, softcap, alibi_slopes = mods[:3]
    B, T, H, D = q.shape
    Tk, H_kv = k.shape[1], k.shape[2]
    kk = k.float().repeat_interleave(H // H_kv, dim=2)
    s = torch.einsum("bthd,bshd->bhts", q.float(), kk) * scale
    i = torch.arange(T, device=q.device)[:, None]
    j = torch.arange(Tk, device=q.device)[None, :]
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if alibi_slopes is not None:
        slopes = alibi_slopes.float().to(q.device)
        slopes = slopes[batch:batch + 1] if slopes.dim() == 2 and batch is not None else slopes
        slopes = slopes.reshape(-1 if slopes.dim() == 2 else 1, H, 1, 1)
        s = s - slopes * (i + Tk - T - j).abs().float()
    p = torch.exp(s - lse[..., None])
    left, right = window_size
    right = 0 if causal else right
    if left >= 0 or right >= 0:
        if right >= 0:
            p = p.masked_fill(j > i + Tk - T + right, 0.0)
        if left >= 0:
            p = p.masked_fill(j < i + Tk - T - left, 0.0)
    return torch.nan_to_num(p, nan=0.0).to(q.dtype)


def _packed_lse_and_probs(q, k, lse, scale, causal, mods, packed):
    """varlen: softmax_lse (H, total_q) as FlashAttention 2.x returns it, and S_dmask (B, H, max_q, max_k) per
    sequence from (0, 0)"""
    cu_q, cu_k, max_q, max_k = packed
    B = cu_q.numel() - 1
    H = q.shape[1]
    lens_q = (cu_q[1:] - cu_q[:-1]).long()
    b_of_row = torch.repeat_interleave(torch.arange(B, device=q.device), lens_q, output_size=q.shape[0])
    t_of_row = torch.arange(q.shape[0], device=q.device) - cu_q.long()[b_of_row]
    lse_rows = lse.permute(1, 0, 2)[:, b_of_row, t_of_row]   # (H, total_q)
    probs = torch.zeros(B, H, max_q, max_k, dtype=q.dtype, device=q.device)
    for b in range(B):   # test-only output: a loop over sequences, with their lengths read back
        q0, q1, k0, k1 = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), int(cu_k[b + 1])
        if q1 > q0 and k1 > k0:
            probs[b, :, :q1 - q0, :k1 - k0] = _probs(q[None, q0:q1], k[None, k0:k1], lse[b:b + 1, :, :q1 - q0], scale,
                                                     causal, mods, b)[0]
    return lse_rows, probs


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """q (B, T, H, D), k and v (B, Tk, H_kv, D) -> out (B, T, H, D)"""
    return _attention(q, k, v, softmax_scale, causal, (window_size, softcap, alibi_slopes, dropout_p),
                      return_attn_probs)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                              alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """qkv (B, T, 3, H, D) -> out (B, T, H, D); q, k and v are read in place"""
    mods = (window_size, softcap, alibi_slopes, dropout_p)
    return _attention(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], softmax_scale, causal, mods, return_attn_probs)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                             alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """q (B, T, H, D), kv (B, Tk, 2, H_kv, D) -> out (B, T, H, D)"""
    return _attention(q, kv[:, :, 0], kv[:, :, 1], softmax_scale, causal, (window_size, softcap, alibi_slopes, dropout_p),
                      return_attn_probs)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None):
    """q (total_q, H, D), k and v (total_k, H_kv, D), cu_seqlens (B + 1,) int32 -> out (total_q, H, D). With
    block_table (B, max_pages) int32, k and v are a paged cache (pages, page_size, H_kv, D), sequence b's keys its first
    cu_seqlens_k[b + 1] - cu_seqlens_k[b] positions: forward only, as FlashAttention's (no dropout)."""
    if block_table is not None:
        return _paged_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, softmax_scale, causal, window_size,
                             softcap, alibi_slopes, dropout_p, return_attn_probs, block_table)
    return _attention(q, k, v, softmax_scale, causal, (window_size, softcap, alibi_slopes, dropout_p),
                      return_attn_probs, (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k))


def _paged_varlen(q, k_cache, v_cache, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, softmax_scale, causal, window_size,
                  softcap, alibi_slopes, dropout_p, return_attn_probs, block_table):
    """flash_attn_varlen_func over a paged cache: the KV-cache kernels with packed queries, out (total_q, H, D)"""
    if dropout_p:
        raise NotImplementedError("flashgpt's flash_attn_interface: dropout over a paged KV cache (FlashAttention has none)")
    if return_attn_probs:
        raise NotImplementedError("flashgpt's flash_attn_interface: return_attn_probs over a paged KV cache")
    if torch.is_grad_enabled() and any(x.requires_grad for x in (q, k_cache, v_cache)):
        raise NotImplementedError("flashgpt's flash_attn_interface: a paged KV cache runs forward only (as FlashAttention's)")
    D = q.shape[-1]
    scale = 1.0 / math.sqrt(D) if softmax_scale is None else float(softmax_scale)
    Dp = (D + 7) // 8 * 8
    if Dp != D:
        q, k_cache, v_cache = (F.pad(x, (0, Dp - D)) for x in (q, k_cache, v_cache))
    cu_k = cu_seqlens_k.to(device=q.device, dtype=torch.int32)
    out = _fg.kvcache_attention(q, k_cache, v_cache, cache_seqlens=cu_k[1:] - cu_k[:-1], causal=causal, scale=scale,
                                block_table=block_table, window_size=window_size, softcap=softcap,
                                alibi_slopes=alibi_slopes, cu_seqlens_q=cu_seqlens_q, max_seqlen_q=max_seqlen_q)
    return out[..., :D] if Dp != D else out


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None, causal=False,
                                     window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False):
    """qkv (total, 3, H, D) -> out (total, H, D)"""
    mods = (window_size, softcap, alibi_slopes, dropout_p)
    return _attention(qkv[:, 0], qkv[:, 1], qkv[:, 2], softmax_scale, causal, mods, return_attn_probs,
                      (cu_seqlens, cu_seqlens, max_seqlen, max_seqlen))


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                                    softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """q (total_q, H, D), kv (total_k, 2, H_kv, D) -> out (total_q, H, D)"""
    return _attention(q, kv[:, 0], kv[:, 1], softmax_scale, causal, (window_size, softcap, alibi_slopes, dropout_p),
                      return_attn_probs, (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k))


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None, cache_seqlens=None,
                            cache_batch_idx=None, cache_leftpad=None, block_table=None, softmax_scale=None, causal=False,
                            window_size=(-1, -1), softcap=0.0, rotary_interleaved=True, alibi_slopes=None, num_splits=0,
                            return_softmax_lse=False):
    """FlashAttention's inference call: q (B, T, H, D) against k_cache, v_cache (B_cache, Tk, H_kv, D), or paged
    (pages, page_size, H_kv, D) with block_table (B, max_pages) int32 (any page size). k, v (B, T_new, H_kv, D), if
    given, are written into the caches in place at cache_seqlens (an int or (B,) int32) and attended to, k (and q) with
    the rotary embedding where rotary_cos / rotary_sin (positions, rotary_dim / 2) are given; cache_batch_idx picks each
    sequence's cache row, cache_leftpad its first key. One kernel does the append, the rotary and the split-key
    attention (num_splits: 0 chooses by the occupancy). Returns out (B, T, H, D), and softmax_lse (B, H, T) fp32 with
    return_softmax_lse. A head dim that is not a multiple of 8 runs zero-padded, copying the caches (as FlashAttention's
    wrapper does)."""
    D = q.shape[-1]
    scale = 1.0 / math.sqrt(D) if softmax_scale is None else float(softmax_scale)
    Dp = (D + 7) // 8 * 8
    if Dp > 256:
        raise ValueError(f"head dim {D}: FlashAttention and flashgpt take head dims up to 256")
    caches = (k_cache, v_cache)
    if Dp != D:
        q, k_cache, v_cache, k, v = (None if x is None else F.pad(x, (0, Dp - D)) for x in (q, k_cache, v_cache, k, v))
    out = _fg.kvcache_attention(q, k_cache, v_cache, k, v, cache_seqlens=cache_seqlens, causal=causal, scale=scale,
                                cache_batch_idx=cache_batch_idx, cache_leftpad=cache_leftpad, block_table=block_table,
                                rotary_cos=rotary_cos, rotary_sin=rotary_sin, rotary_interleaved=rotary_interleaved,
                                window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                                num_splits=num_splits, return_lse=return_softmax_lse)
    if Dp != D:
        if k is not None:   # the appended rows back into the caller's caches
            caches[0].copy_(k_cache[..., :D])
            caches[1].copy_(v_cache[..., :D])
        out = (out[0][..., :D], out[1]) if return_softmax_lse else out[..., :D]
    return out
