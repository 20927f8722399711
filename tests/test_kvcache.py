#!/usr/bin/env python3
"""GPU test of flash_attn_with_kvcache (flashgpt.flash_attn_interface; the library's kvcache_attention underneath) over
cases drawn from FlashAttention's KV-cache test grid: new query tokens 1, 3, 16, 64, 128 against caches of 128 to
131,072 positions, a new-token count equal to the queries' or fewer, no append; MHA / MQA / GQA; head dims 32, 59, 64,
80, 128, 256; the rotary embedding on 0, half and all of the head dim, interleaved or not; cache_batch_idx; leftpad;
contiguous or paged caches (pages of 16, 64, 256 and 512 positions); causal, sliding windows, ALiBi, softcap; one split
or the occupancy's; bf16 and fp16. Then flash_attn_varlen_func over a paged cache (FlashAttention's
test_flash_attn_varlen_causal with a block table: its (T, Tk) pairs both ways, 8 sequences of ragged lengths, 9
heads, causal with or without a window). The cases come from a seeded draw, so every run covers the same grid points
with fresh random data.

  make lib && python3 tests/test_kvcache.py             the drawn cases and the corner cases
  python3 tests/test_kvcache.py --cases 2000            more of the grid
  python3 tests/test_kvcache.py --cases 8 --no-corners  a few (under compute-sanitizer)

Each case checks, against a float64 reference built from the same 16-bit inputs (the rotary embedding applied in fp32
and rounded to the 16-bit type, as FlashAttention's reference does):
  out within 2x the error of the naive computation in the 16-bit type plus 1e-3 (FlashAttention's rule), every element
  written (out poisoned with NaN first); softmax_lse within 1e-3 (relative past 1) where a row sees a key;
  the caches: the appended rows equal the new keys (rotated, within 1e-3 as FlashAttention's test) and values (exactly),
  and every other row bit-identical to before, NaN poison included: the rows past each length and before each left
  pad are poisoned with NaN, so a kernel that read them would spread NaN into out.
"""
import math
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpu import require_torch_cuda, results, run  # noqa: E402

require_torch_cuda("test_kvcache.py")
import torch  # noqa: E402
import flashgpt_attention as fg  # noqa: E402
from flashgpt import flash_attn_interface as fai  # noqa: E402


def rotary(x, cos, sin, positions, interleaved):
    """x (B, S, H, D) with the rotary embedding of cos, sin (positions, rot / 2) at positions (B, S), computed in fp32
    and rounded to x's dtype"""
    rot = 2 * cos.shape[1]
    if rot == 0:
        return x
    c = cos.float()[positions.long()][:, :, None, :]   # (B, S, 1, rot / 2)
    s = sin.float()[positions.long()][:, :, None, :]
    xf = x.float()
    r = xf[..., :rot]
    if interleaved:
        a, b = r[..., 0::2], r[..., 1::2]
        out = torch.stack((a * c - b * s, a * s + b * c), dim=-1).flatten(-2)
    else:
        a, b = r[..., :rot // 2], r[..., rot // 2:]
        out = torch.cat((a * c - b * s, b * c + a * s), dim=-1)
    return torch.cat((out, xf[..., rot:]), dim=-1).to(x.dtype)


def reference(q, k, v, keys, leftpad, causal, window, softcap, alibi, dtype):
    """attention of q (B, T, H, D) over the dense caches k, v (B, Tk, H_kv, D), sequence b's keys leftpad[b] ..
    keys[b] - 1, computed in dtype; the band, ALiBi's distance aligned to keys[b]; returns out and the LSE (B, H, T)"""
    B, T, H, D = q.shape
    Tk, H_kv = k.shape[1], k.shape[2]
    qd, kd, vd = (x.to(dtype).transpose(1, 2) for x in (q, k, v))
    kd, vd = (x.repeat_interleave(H // H_kv, dim=1) for x in (kd, vd))
    s = (qd @ kd.transpose(-1, -2)) * (1.0 / math.sqrt(D))
    i = torch.arange(T, device=q.device)[None, None, :, None]
    j = torch.arange(Tk, device=q.device)[None, None, None, :]
    end = keys.long()[:, None, None, None]
    diag = i + end - T - j   # query i's distance to key j, bottom-right
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if alibi is not None:
        s = s - alibi.reshape(-1, H, 1, 1).to(dtype) * diag.abs().to(dtype)
    visible = j < end
    if leftpad is not None:
        visible = visible & (j >= leftpad.long()[:, None, None, None])
    right = 0 if causal else window[1]
    if right >= 0:
        visible = visible & (diag >= -right)
    if window[0] >= 0:
        visible = visible & (diag <= window[0])
    s = s.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(s.double(), dim=-1)
    p = torch.nan_to_num(torch.softmax(s, dim=-1), nan=0.0)
    return (p @ vd).transpose(1, 2), lse


def case(dtype, T, Tk, D, mha, new_kv, T_new, paged, leftpad, batch_idx, rot_frac, interleaved, causal, local, alibi,
         softcap, num_splits):
    def fn():
        dev = "cuda"
        B, H = 2, 6
        H_kv = {"mha": 6, "mqa": 1, "gqa": 3}[mha]
        rot = int(rot_frac * D) // 16 * 16
        window = tuple(int(w) for w in torch.randint(0, Tk, (2,))) if local else (-1, -1)
        q = torch.randn(B, T, H, D, device=dev, dtype=dtype)
        k_new = torch.randn(B, T_new, H_kv, D, device=dev, dtype=dtype) if new_kv else None
        v_new = torch.randn(B, T_new, H_kv, D, device=dev, dtype=dtype) if new_kv else None
        n_new = T_new if new_kv else 0
        # FlashAttention's draw: room for the new tokens (for all T where the rotary positions run per token)
        room = T if (causal or local) and rot > 0 else n_new
        cached = torch.randint(0 if new_kv else 1, Tk - room + 1, (B,), dtype=torch.int32, device=dev)
        keys = cached + n_new
        pad = None
        if leftpad:
            pad = torch.tensor([random.randrange(int(c)) if c > 0 else 0 for c in cached.tolist()], dtype=torch.int32, device=dev)
        # the caches, their dense view (B, Tk, ...) for the reference; NaN in the rows outside each sequence's cached
        # keys: past them (the new tokens' rows too, which the kernel must take from k_new, v_new) and before leftpad
        pos = torch.arange(Tk, device=dev)[None, :]
        outside = (pos >= cached[:, None]) | ((pos < pad[:, None]) if pad is not None else False)
        if paged:
            pages_per_seq = (Tk + paged - 1) // paged
            n_pages = pages_per_seq * B * 3
            table = torch.randperm(n_pages, device=dev, dtype=torch.int32)[:B * pages_per_seq].reshape(B, pages_per_seq)
            k_cache = torch.randn(n_pages, paged, H_kv, D, device=dev, dtype=dtype)
            v_cache = torch.randn(n_pages, paged, H_kv, D, device=dev, dtype=dtype)
            used = torch.zeros(n_pages, dtype=torch.bool, device=dev)
            used[table.long().flatten()] = True
            k_cache[~used] = float("nan")   # pages no sequence owns
            v_cache[~used] = float("nan")
            rows = (table.long()[:, :, None] * paged + torch.arange(paged, device=dev)).reshape(B, -1)[:, :Tk]   # (B, Tk)
            flat_k, flat_v = k_cache.view(-1, H_kv, D), v_cache.view(-1, H_kv, D)
            flat_k[rows[outside]] = float("nan")
            flat_v[rows[outside]] = float("nan")
            dense = lambda c: c.view(-1, H_kv, D)[rows]  # noqa: E731
            cache_idx = None
        else:
            B_cache = 2 * B if batch_idx else B
            k_cache = torch.randn(B_cache, Tk, H_kv, D, device=dev, dtype=dtype)
            v_cache = torch.randn(B_cache, Tk, H_kv, D, device=dev, dtype=dtype)
            cache_idx = torch.randperm(B_cache, device=dev, dtype=torch.int32)[:B] if batch_idx else None
            sel = cache_idx.long() if batch_idx else torch.arange(B, device=dev)
            k_cache[sel[:, None].expand(B, Tk)[outside], pos.expand(B, Tk)[outside]] = float("nan")
            v_cache[sel[:, None].expand(B, Tk)[outside], pos.expand(B, Tk)[outside]] = float("nan")
            dense = lambda c: c[sel]  # noqa: E731
            table = None
        cos = sin = None
        if rot > 0:
            n_pos = Tk if not paged else table.shape[1] * paged
            angle = torch.rand(n_pos, rot // 2, device=dev) * 2 * math.pi
            cos, sin = torch.cos(angle).to(dtype), torch.sin(angle).to(dtype)
        # what the call should do: the rotated new keys and the values into rows cached .. keys - 1, q rotated
        k_before, v_before = k_cache.clone(), v_cache.clone()
        k_ref, v_ref = dense(k_cache).clone(), dense(v_cache).clone()
        if new_kv:
            new_pos = cached.long()[:, None] + torch.arange(T_new, device=dev)[None, :]
            k_rot = rotary(k_new, cos, sin, new_pos, interleaved) if rot else k_new
            bi = torch.arange(B, device=dev)[:, None].expand(B, T_new)
            k_ref[bi, new_pos] = k_rot
            v_ref[bi, new_pos] = v_new
        q_ro = q
        if rot:
            q_pos = cached.long()[:, None] + (torch.arange(T, device=dev)[None, :] if causal or local else 0)
            q_ro = rotary(q, cos, sin, q_pos.expand(B, T), interleaved)
        slopes = torch.rand(B, H, device=dev) * 0.3 if alibi else None
        out = torch.full((B, T, H, D), float("nan"), device=dev, dtype=dtype)
        got, lse = fg.kvcache_attention(q, k_cache, v_cache, k_new, v_new, cache_seqlens=cached, causal=causal,
                                        cache_batch_idx=cache_idx, cache_leftpad=pad, block_table=table,
                                        rotary_cos=cos, rotary_sin=sin, rotary_interleaved=interleaved,
                                        window_size=window, softcap=softcap, alibi_slopes=slopes,
                                        num_splits=num_splits, return_lse=True, out=out)
        torch.cuda.synchronize()
        assert not got.isnan().any(), "out has NaN: an element not written, or a poisoned row read"
        # the caches
        k_after, v_after = dense(k_cache), dense(v_cache)
        if new_kv:
            assert torch.allclose(k_after[bi, new_pos].float(), k_ref[bi, new_pos].float(), rtol=1e-3, atol=1e-3), "appended keys"
            assert torch.equal(v_after[bi, new_pos], v_ref[bi, new_pos]), "appended values"
            k_before_view = k_before.view(-1, H_kv, D) if paged else k_before
            v_before_view = v_before.view(-1, H_kv, D) if paged else v_before
            if paged:
                k_before_view[rows[bi, new_pos]] = k_cache.view(-1, H_kv, D)[rows[bi, new_pos]]
                v_before_view[rows[bi, new_pos]] = v_cache.view(-1, H_kv, D)[rows[bi, new_pos]]
            else:
                k_before_view[sel[:, None].expand(B, T_new), new_pos] = k_cache[sel[:, None].expand(B, T_new), new_pos]
                v_before_view[sel[:, None].expand(B, T_new), new_pos] = v_cache[sel[:, None].expand(B, T_new), new_pos]
        assert torch.equal(k_cache.nan_to_num(7.0), k_before.nan_to_num(7.0)), "a key cache row other than the appended ones changed"
        assert torch.equal(v_cache.nan_to_num(7.0), v_before.nan_to_num(7.0)), "a value cache row other than the appended ones changed"
        # out and the LSE (the reference's rows outside the keys are NaN: zero them, they are masked)
        k_ref, v_ref = k_ref.nan_to_num(0.0), v_ref.nan_to_num(0.0)
        ref, ref_lse = reference(q_ro, k_ref, v_ref, keys, pad, causal, window, softcap, slopes, torch.float64)
        naive, _ = reference(q_ro, k_ref, v_ref, keys, pad, causal, window, softcap, slopes, dtype)
        err = (got.double() - ref).abs().max().item()
        tol = 2 * (naive.double() - ref).abs().max().item() + 1e-3
        assert err <= tol, f"out: {err:.3e} > {tol:.3e}"
        fin = torch.isfinite(ref_lse)
        assert torch.equal(torch.isfinite(lse), fin), "softmax_lse: -inf where a row sees a key, or finite where none"
        if fin.any():
            lerr = ((lse.double() - ref_lse).abs() / ref_lse.abs().clamp(min=1.0))[fin].max().item()
            assert lerr <= 1e-3, f"softmax_lse: {lerr:.3e}"
    return fn


def flash_attn_api():
    """FlashAttention's call itself: an int cache_seqlens, D 59 (zero-padded with the caches copied and written back),
    return_softmax_lse, a paged cache"""
    dev, dtype = "cuda", torch.bfloat16
    B, T, H, H_kv, D, Tk = 2, 1, 4, 2, 59, 300
    q = torch.randn(B, T, H, D, device=dev, dtype=dtype)
    k_cache, v_cache = (torch.randn(B, Tk, H_kv, D, device=dev, dtype=dtype) for _ in range(2))
    k, v = (torch.randn(B, 1, H_kv, D, device=dev, dtype=dtype) for _ in range(2))
    k0, v0 = k_cache.clone(), v_cache.clone()
    out, lse = fai.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=200, causal=True, return_softmax_lse=True)
    assert out.shape == q.shape and lse.shape == (B, H, T)
    assert torch.equal(k_cache[:, 200], k[:, 0]) and torch.equal(v_cache[:, 200], v[:, 0]), "the append at cache_seqlens"
    assert torch.equal(k_cache[:, :200], k0[:, :200]) and torch.equal(k_cache[:, 201:], k0[:, 201:]), "other rows kept"
    keys = torch.full((B,), 201, dtype=torch.int32, device=dev)
    ref, _ = reference(q, k_cache, v_cache, keys, None, True, (-1, -1), 0.0, None, torch.float64)
    naive, _ = reference(q, k_cache, v_cache, keys, None, True, (-1, -1), 0.0, None, dtype)
    assert (out.double() - ref).abs().max() <= 2 * (naive.double() - ref).abs().max() + 1e-3, "out"
    # paged, page 256, no append: the same keys as a contiguous cache
    table = torch.tensor([[3, 0], [1, 2]], dtype=torch.int32, device=dev)
    kp, vp = (torch.randn(4, 256, H_kv, 64, device=dev, dtype=dtype) for _ in range(2))
    q64 = torch.randn(B, 3, H, 64, device=dev, dtype=dtype)
    lens = torch.tensor([300, 512], dtype=torch.int32, device=dev)
    out_p = fai.flash_attn_with_kvcache(q64, kp, vp, cache_seqlens=lens, block_table=table, causal=True)
    kc, vc = (x[table.long()].reshape(B, 512, H_kv, 64) for x in (kp, vp))
    out_c = fai.flash_attn_with_kvcache(q64, kc, vc, cache_seqlens=lens, causal=True)
    assert torch.equal(out_p, out_c), "a paged cache and the same keys contiguous differ"


def paged_varlen_case(seqlen_q, seqlen_k, d, local, page, dtype):
    """flash_attn_varlen_func over a paged cache (FlashAttention's test_flash_attn_varlen_causal with a block table): 8
    sequences of random lengths near seqlen_q and seqlen_k, 9 heads, causal, a window drawn below seqlen_k where local"""
    def fn():
        dev, B, H = "cuda", 8, 9
        lens_q = torch.randint(max(1, seqlen_q - 20), seqlen_q + 1, (B,))
        lens_k = torch.randint(max(1, seqlen_k - 20), seqlen_k + 1, (B,))
        cu_q = torch.cat([torch.zeros(1, dtype=torch.int32), lens_q.cumsum(0).to(torch.int32)]).to(dev)
        cu_k = torch.cat([torch.zeros(1, dtype=torch.int32), lens_k.cumsum(0).to(torch.int32)]).to(dev)
        window = tuple(int(w) for w in torch.randint(0, seqlen_k, (2,))) if local else (-1, -1)
        q = torch.randn(int(lens_q.sum()), H, d, device=dev, dtype=dtype)
        pages_per_seq = (seqlen_k + page - 1) // page
        n_pages = pages_per_seq * B * 3
        k_pool, v_pool = (torch.randn(n_pages, page, H, d, device=dev, dtype=dtype) for _ in range(2))
        table = torch.randperm(n_pages, device=dev, dtype=torch.int32)[:B * pages_per_seq].reshape(B, pages_per_seq)
        out = fai.flash_attn_varlen_func(q, k_pool, v_pool, cu_q, cu_k, int(lens_q.max()), int(lens_k.max()), causal=True,
                                         window_size=window, block_table=table)
        assert out.shape == q.shape
        for b in range(B):
            qb = q[None, int(cu_q[b]):int(cu_q[b + 1])]
            kb, vb = (x[table[b].long()].reshape(1, -1, H, d)[:, :int(lens_k[b])] for x in (k_pool, v_pool))
            keys = torch.tensor([int(lens_k[b])], device=dev)
            ref, _ = reference(qb, kb, vb, keys, None, True, window, 0.0, None, torch.float64)
            naive, _ = reference(qb, kb, vb, keys, None, True, window, 0.0, None, dtype)
            got = out[None, int(cu_q[b]):int(cu_q[b + 1])]
            err, tol = (got.double() - ref).abs().max().item(), 2 * (naive.double() - ref).abs().max().item() + 1e-3
            assert err <= tol, f"sequence {b}: {err:.3e} > {tol:.3e}"
    return fn


if __name__ == "__main__":
    n_cases = int(sys.argv[sys.argv.index("--cases") + 1]) if "--cases" in sys.argv else 160
    torch.manual_seed(int.from_bytes(os.urandom(4), "little"))   # fresh data every run; the grid points are seeded
    draw = random.Random(47)
    pairs = [(1, 128), (1, 339), (3, 1024), (64, 800), (64, 256), (3, 799), (64, 2048), (16, 20000), (1, 128 * 1024),
             (16, 128 * 1024), (128, 128)]
    run("flash_attn_with_kvcache: FlashAttention's call (int cache_seqlens, D 59, LSE, paged = contiguous)", flash_attn_api)
    cases = []
    while len(cases) < n_cases:
        T, Tk = draw.choice(pairs)
        c = dict(dtype=draw.choice([torch.bfloat16, torch.float16]), T=T, Tk=Tk, D=draw.choice([32, 59, 64, 80, 128, 256]),
                 mha=draw.choice(["mha", "mqa", "gqa"]), new_kv=draw.random() < 0.6, T_new=T if draw.random() < 0.5 else None,
                 paged=draw.choice([None, None, 16, 64, 256, 512]), leftpad=draw.random() < 0.3,
                 batch_idx=draw.random() < 0.3, rot_frac=draw.choice([0.0, 0.5, 1.0]), interleaved=draw.random() < 0.5,
                 causal=draw.random() < 0.5, local=draw.random() < 0.3, alibi=draw.random() < 0.3,
                 softcap=draw.choice([0.0, 0.0, 50.0]), num_splits=draw.choice([0, 1]))
        if c["T_new"] is None:
            c["T_new"] = draw.randint(1, T)
        # FlashAttention's skips: no rotary without an append; batch_idx not with pages (a table row picks the pages;
        # leftpad runs with them here, as flashgpt takes it); no more queries than cache room for new keys;
        # head dim 59 (FlashAttention pads it in Python, as flashgpt's interface does) goes through that interface's
        # padding only in flash_attn_api: here 56, a multiple of 8 between the kernels' head dims)
        if (not c["new_kv"] and c["rot_frac"] > 0) or (c["paged"] and c["batch_idx"]) or (c["new_kv"] and T > Tk):
            continue
        if c["D"] == 59:
            c["D"] = 56
        cases.append(c)
    cases += [] if "--no-corners" in sys.argv else [   # corners: the longest cache with every modifier, T * group past one 16-row chunk, page 16 at 128K
        dict(dtype=torch.bfloat16, T=16, Tk=131072, D=128, mha="gqa", new_kv=True, T_new=16, paged=16, leftpad=True,
             batch_idx=False, rot_frac=1.0, interleaved=False, causal=True, local=True, alibi=True, softcap=50.0, num_splits=0),
        dict(dtype=torch.float16, T=128, Tk=128, D=256, mha="mqa", new_kv=True, T_new=128, paged=None, leftpad=False,
             batch_idx=True, rot_frac=0.5, interleaved=True, causal=True, local=False, alibi=False, softcap=0.0, num_splits=0),
        dict(dtype=torch.bfloat16, T=1, Tk=1, D=64, mha="mha", new_kv=True, T_new=1, paged=None, leftpad=False,
             batch_idx=False, rot_frac=1.0, interleaved=True, causal=False, local=False, alibi=False, softcap=0.0, num_splits=0),
    ]
    for c in cases:
        name = " ".join(f"{k}={v}" for k, v in c.items()).replace("torch.", "")
        run(name, case(**c))
    # flash_attn_varlen_func with a block table: FlashAttention's (T, Tk) pairs both ways, pages of 16 to 512
    varlen_pairs = [(1, 239), (3, 799), (127, 512), (127, 513), (113, 203), (128, 217), (113, 211), (108, 256), (256, 512),
                    (1023, 1024)]
    for i in range(max(8, n_cases // 8)):
        sq, sk = draw.choice(varlen_pairs)
        if draw.random() < 0.5:
            sq, sk = sk, sq
        d, local, page = draw.choice([32, 59, 64, 128, 256]), draw.random() < 0.4, draw.choice([16, 64, 256, 512])
        dtype = draw.choice([torch.bfloat16, torch.float16])
        run(f"flash_attn_varlen_func paged: T={sq} Tk={sk} d={d} local={local} page={page} dtype={dtype}".replace("torch.", ""),
            paged_varlen_case(sq, sk, d, local, page, dtype))
    failed = sum(r[0] == "FAIL" for r in results)
    print(f"{len(results) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
