#!/usr/bin/env python3
"""GPU test of flashgpt.flash_attn_interface (FlashAttention 2.x's Python API on flashgpt's kernels) over a slice of
FlashAttention's own test grid: head dims 32, 40, 59, 64, 80, 96, 111, 128, 160, 192, 224, 256 (those between
flashgpt's run zero-padded), its (T, Tk) pairs, MHA / MQA / GQA, causal or not, sliding windows (its `local` cases:
window_size drawn at random below Tk, with and without causal), softcap (its 50.0) and ALiBi (its slopes, rand * 0.3
per (B, H), and per head), dropout (its 0.17: the mask read back from S_dmask's sign bits, the dropped fraction, and the
same seed giving the same result), the packed forms and varlen; bf16 and fp16.
Prints one PASS/FAIL line per case; exits 0 with a SKIP line where torch or a CUDA GPU is missing.

  make lib && python3 tests/test_flash_attn_interface.py
  python3 tests/test_flash_attn_interface.py --sample 500 [--seed S]   N cases drawn from FlashAttention's whole grid
                                                                        instead (its shapes: batch 4, 9 heads)

Rule (FlashAttention's tests): out and dq, dk, dv against the same attention in fp32 (PyTorch, from the bf16 or fp16
inputs) within 2x the error of the naive computation in the inputs' dtype (softmax of bf16 / fp16 logits) plus 1e-3;
softmax_lse within 1e-3 of the fp32 LSE; S_dmask against the fp32 probabilities. What flashgpt does not run yet
(none at present) must raise NotImplementedError.
"""
import math
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpu import require_torch_cuda, results, run  # noqa: E402

require_torch_cuda("test_flash_attn_interface.py")
import torch  # noqa: E402
from flashgpt import flash_attn_interface as fai  # noqa: E402


def reference(q, k, v, causal, dtype, window=(-1, -1), softcap=0.0, alibi=None, keep=None, dropout_p=0.0):
    """attention on (B, T, H, D) tensors computed in dtype (fp32: the reference; bf16: the naive low-precision one),
    the causal diagonal and the window bottom-right, softcap, ALiBi (slopes (H,) or (B, H): -slope |i + Tk - T - j|),
    dropout (keep (B, H, T, Tk) bool: the kept probabilities, scaled by 1 / (1 - dropout_p)); returns out (B, T, H, D)
    and the LSE (B, H, T)"""
    H, H_kv = q.shape[2], k.shape[2]
    q, k, v = (x.to(dtype).transpose(1, 2) for x in (q, k, v))
    k, v = (x.repeat_interleave(H // H_kv, dim=1) for x in (k, v))
    s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    T, Tk = s.shape[-2], s.shape[-1]
    i = torch.arange(T, device=q.device)[:, None]
    j = torch.arange(Tk, device=q.device)[None, :]
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if alibi is not None:
        slopes = alibi.reshape(-1, alibi.shape[-1], 1, 1).to(dtype)
        s = s - slopes * (i + Tk - T - j).abs().to(dtype)
    right = 0 if causal else window[1]
    if right >= 0:
        s = s.masked_fill(j > i + Tk - T + right, float("-inf"))
    if window[0] >= 0:
        s = s.masked_fill(j < i + Tk - T - window[0], float("-inf"))
    lse = torch.logsumexp(s.float(), dim=-1)
    p = torch.nan_to_num(torch.softmax(s, dim=-1), nan=0.0)   # rows that see no key: 0
    if keep is not None:
        p = p.masked_fill(~keep, 0.0) / (1.0 - dropout_p)
    return (p @ v).transpose(1, 2), lse


def check_close(name, ours, ref, naive, floor=1e-3):
    err, tol = (ours.float() - ref.float()).abs().max().item(), 2 * (naive.float() - ref.float()).abs().max().item() + floor
    assert err <= tol, f"{name}: {err:.3e} > {tol:.3e}"


def case_dense(B, T, Tk, H, H_kv, D, causal, packed, window=(-1, -1), softcap=0.0, alibi=None, dtype=torch.bfloat16,
               dropout=0.0):
    def fn():
        slopes = None if alibi is None else torch.rand(*((B, H) if alibi == "bh" else (H,)), device="cuda") * 0.3
        mods = dict(window_size=window, softcap=softcap, alibi_slopes=slopes, dropout_p=dropout)
        q = torch.randn(B, T, H, D, device="cuda", dtype=dtype)
        k = torch.randn(B, Tk, H_kv, D, device="cuda", dtype=dtype)
        v = torch.randn(B, Tk, H_kv, D, device="cuda", dtype=dtype)
        dout = torch.randn(B, T, H, D, device="cuda", dtype=dtype)
        if packed == "qkv":
            qkv = torch.stack([q, k, v], dim=2).requires_grad_()
            out, lse, probs = fai.flash_attn_qkvpacked_func(qkv, causal=causal, **mods, return_attn_probs=True)
            out.backward(dout)
            dq, dk, dv = qkv.grad.unbind(2)
        elif packed == "kv":
            qg, kv = q.clone().requires_grad_(), torch.stack([k, v], dim=2).requires_grad_()
            out, lse, probs = fai.flash_attn_kvpacked_func(qg, kv, causal=causal, **mods, return_attn_probs=True)
            out.backward(dout)
            dq, (dk, dv) = qg.grad, kv.grad.unbind(2)
        else:
            qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))
            out, lse, probs = fai.flash_attn_func(qg, kg, vg, causal=causal, **mods, return_attn_probs=True)
            out.backward(dout)
            dq, dk, dv = qg.grad, kg.grad, vg.grad
        assert out.dtype == dtype and dq.dtype == dtype, f"out {out.dtype}, dq {dq.dtype}: not the inputs' {dtype}"
        # FlashAttention's tests read the mask from S_dmask's signs (the sign bit: a dropped probability that rounds to
        # zero in 16 bits is -0)
        keep = ~torch.signbit(probs) if dropout else None
        if dropout:
            i, j = torch.arange(T, device="cuda")[:, None], torch.arange(Tk, device="cuda")[None, :]
            vis = torch.ones(T, Tk, dtype=torch.bool, device="cuda")
            right = 0 if causal else window[1]
            if right >= 0:
                vis &= j <= i + Tk - T + right
            if window[0] >= 0:
                vis &= j >= i + Tk - T - window[0]
            dropped = (~keep & vis).sum().item() / max(1, vis.sum().item() * B * H)
            assert abs(dropped - dropout) <= 0.01, f"dropped fraction {dropped:.4f}, dropout_p {dropout}"
        grads = {}
        for rdt in (torch.float32, dtype):
            xs = [x.to(rdt).requires_grad_() for x in (q, k, v)]
            o, l = reference(*xs, causal, rdt, window, softcap, slopes, keep, dropout)
            o.backward(dout.to(rdt))
            grads[rdt] = (o, l, *[x.grad for x in xs])
        (ro, rl, rdq, rdk, rdv), (no, _, ndq, ndk, ndv) = grads[torch.float32], grads[dtype]
        for n, a, r, nv in (("out", out, ro, no), ("dq", dq, rdq, ndq), ("dk", dk, rdk, ndk), ("dv", dv, rdv, ndv)):
            check_close(n, a, r, nv)
        finite = torch.isfinite(rl)
        assert torch.equal(finite, torch.isfinite(lse)), "softmax_lse: -inf rows differ"
        lerr = (lse[finite] - rl[finite]).abs().max().item() if finite.any() else 0.0
        assert lerr <= 1e-3 * max(1.0, rl[finite].abs().max().item() if finite.any() else 1.0), f"softmax_lse {lerr:.3e}"
        assert probs.shape == (B, H, T, Tk), f"S_dmask shape {tuple(probs.shape)}"
        v_heads = v.float().repeat_interleave(H // H_kv, dim=2)   # the probabilities, through v, give out
        kept = probs.float().clamp(min=0) / (1.0 - dropout) if dropout else probs.float()
        check_close("S_dmask @ v", torch.einsum("bhts,bshd->bthd", kept, v_heads), ro, no)
    return fn


def case_varlen(lens_q, lens_k, H, H_kv, D, causal, packed, window=(-1, -1), softcap=0.0, alibi=None, dtype=torch.bfloat16,
                dropout=0.0):
    def fn():
        slopes = None if alibi is None else torch.rand(*((len(lens_q), H) if alibi == "bh" else (H,)), device="cuda") * 0.3
        mods = dict(window_size=window, softcap=softcap, alibi_slopes=slopes, dropout_p=dropout)
        cu_q = torch.tensor([0] + list(torch.tensor(lens_q).cumsum(0)), device="cuda", dtype=torch.int32)
        cu_k = torch.tensor([0] + list(torch.tensor(lens_k).cumsum(0)), device="cuda", dtype=torch.int32)
        tq, tk = int(cu_q[-1]), int(cu_k[-1])
        q = torch.randn(tq, H, D, device="cuda", dtype=dtype)
        k = torch.randn(tk, H_kv, D, device="cuda", dtype=dtype)
        v = torch.randn(tk, H_kv, D, device="cuda", dtype=dtype)
        dout = torch.randn(tq, H, D, device="cuda", dtype=dtype)
        if packed == "qkv":
            qkv = torch.stack([q, k, v], dim=1).requires_grad_()
            out, lse, probs = fai.flash_attn_varlen_qkvpacked_func(qkv, cu_q, max(lens_q), causal=causal, **mods,
                                                                   return_attn_probs=True)
            out.backward(dout)
            dq, dk, dv = qkv.grad.unbind(1)
        else:
            qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))
            out, lse, probs = fai.flash_attn_varlen_func(qg, kg, vg, cu_q, cu_k, max(lens_q), max(lens_k), causal=causal,
                                                         **mods, return_attn_probs=True)
            out.backward(dout)
            dq, dk, dv = qg.grad, kg.grad, vg.grad
        assert lse.shape == (H, tq), f"varlen softmax_lse shape {tuple(lse.shape)}"
        for b in range(len(lens_q)):
            q0, q1, k0, k1 = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), int(cu_k[b + 1])
            res = {}
            for rdt in (torch.float32, dtype):
                xs = [x[None, a:e].to(rdt).requires_grad_() for x, a, e in ((q, q0, q1), (k, k0, k1), (v, k0, k1))]
                sl = None if slopes is None else slopes[b] if slopes.dim() == 2 else slopes
                keep = ~torch.signbit(probs[b:b + 1, :, :q1 - q0, :k1 - k0]) if dropout else None
                o, l = reference(*xs, causal, rdt, window, softcap, sl, keep, dropout)
                o.backward(dout[None, q0:q1].to(rdt))
                res[rdt] = (o[0], l[0], *[x.grad[0] for x in xs])
            (ro, rl, rdq, rdk, rdv), (no, _, ndq, ndk, ndv) = res[torch.float32], res[dtype]
            for n, a, r, nv in (("out", out[q0:q1], ro, no), ("dq", dq[q0:q1], rdq, ndq), ("dk", dk[k0:k1], rdk, ndk),
                                ("dv", dv[k0:k1], rdv, ndv)):
                check_close(f"sequence {b} {n}", a, r, nv)
            fin = torch.isfinite(rl)
            if fin.any():
                assert (lse[:, q0:q1][fin] - rl[fin]).abs().max().item() <= 1e-3 * max(1.0, rl[fin].abs().max().item()), \
                    f"sequence {b} softmax_lse"
    return fn


def padded_head_dims():
    """where the library runs a head dim between its own as it is (Hopper, sm_90a code: without extras, packed
    sequences up to 128 without softcap, ALiBi or dropout, dropout up to 128) and where the interface pads past it"""
    dev, none = torch.device("cuda"), ((-1, -1), 0.0, None, 0.0)
    hopper = torch.cuda.get_device_capability() == (9, 0)
    packed = (None, None, 0, 0)
    for D, pack, mods, on_hopper in [(64, None, none, 64), (33, None, none, 40), (40, packed, none, 40),
                                     (136, packed, none, 256), (80, packed, ((-1, -1), 30.0, None, 0.0), 96),
                                     (160, None, ((-1, -1), 30.0, None, 0.0), 160), (160, None, ((-1, -1), 0.0, None, 0.1), 256),
                                     (97, None, ((-1, -1), 0.0, None, 0.1), 104), (8, packed, ((-1, -1), 30.0, None, 0.1), 8)]:
        D8 = (D + 7) // 8 * 8
        want = on_hopper if hopper or D8 in fai._HEAD_DIMS else next(d for d in fai._HEAD_DIMS if d >= D8)
        got = fai._padded(D, dev, pack, mods)
        assert got == want, f"D={D} packed={pack is not None} mods={mods}: {got}, want {want}"


def compiled_as_eager(D):
    """a program that compiles its model runs flash_attn_func in one graph (a head dim between the library's too,
    whose padding the library decides: padded_head_dim_limit is a constant there), with eager's results"""
    q, k, v = (torch.randn(2, 200, 4, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    dout = torch.randn(2, 200, 4, D, device="cuda", dtype=torch.bfloat16)
    results = []
    for fn in (fai.flash_attn_func, torch.compile(fai.flash_attn_func, fullgraph=True, backend="aot_eager")):
        out = fn(q, k, v, causal=True)
        results.append([out] + list(torch.autograd.grad(out, (q, k, v), dout)))
    for name, a, b in zip(("out", "dq", "dk", "dv"), *results):
        assert torch.equal(a, b), f"{name}: compiled differs from eager by {(a.float() - b.float()).abs().max().item():.3e}"


def dropout_repeats():
    """dropout with torch.manual_seed(s) twice: the same out and gradients, bit for bit; another seed: a different out"""
    q, k, v, dout = (torch.randn(2, 300, 4, 64, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    results = []
    for seed in (7, 7, 8):
        torch.manual_seed(seed)
        xs = [x.clone().requires_grad_() for x in (q, k, v)]
        out = fai.flash_attn_func(*xs, dropout_p=0.17, causal=True)
        out.backward(dout)
        results.append([out] + [x.grad for x in xs])
    assert all(torch.equal(a, b) for a, b in zip(results[0], results[1])), "the same seed gave different results"
    assert not torch.equal(results[0][0], results[2][0]), "another seed gave the same out"


def sample_grid(n, seed):
    """n parametrizations drawn from FlashAttention's test grid (tests/test_flash_attn.py's test_flash_attn_output and
    test_flash_attn_varlen_output: batch 4, 9 query heads over 9, 3 or 1 key/value heads, its head dims, (T, Tk) pairs,
    causal, local windows drawn below Tk, ALiBi, dropout 0.17, softcap 50, kv-packed, fp16 / bf16; varlen with each
    sequence 0-20 shorter than T, Tk), each run as the slice above runs its cases. Like FlashAttention's tests it skips
    dropout with softcap; qkv-packed where T = Tk and the heads are MHA"""
    rng = random.Random(seed)
    dims = [32, 40, 59, 64, 80, 96, 111, 128, 160, 192, 224, 256]
    pairs = [(113, 203), (128, 217), (113, 211), (108, 256), (256, 512), (512, 256), (1024, 1024), (1023, 1024),
             (1024, 1023), (2048, 2048)]
    drawn = 0
    while drawn < n:
        D, (T, Tk), H_kv = rng.choice(dims), rng.choice(pairs), rng.choice([9, 3, 1])
        causal, local, alibi, varlen, packed = (rng.random() < 0.5 for _ in range(5))
        dropout, softcap = rng.choice([0.0, 0.17]), rng.choice([0.0, 50.0])
        dtype = rng.choice([torch.float16, torch.bfloat16])
        if dropout and softcap:
            continue
        drawn += 1
        window = (rng.randrange(Tk), rng.randrange(Tk)) if local else (-1, -1)
        pack = ("qkv" if T == Tk and H_kv == 9 else "kv") if packed else "none"
        desc = (f"D={D} T={T} Tk={Tk} H=9 H_kv={H_kv} causal={int(causal)} window={window} alibi={int(alibi)} "
                f"dropout={dropout} softcap={softcap} {str(dtype)[6:]} {pack}")
        if varlen:
            lens_q = [rng.randint(max(1, T - 20), T) for _ in range(4)]
            lens_k = lens_q if pack == "qkv" else [rng.randint(max(1, Tk - 20), Tk) for _ in range(4)]
            run(f"varlen {desc} lens {lens_q} x {lens_k}",
                case_varlen(lens_q, lens_k, 9, H_kv, D, causal, "qkv" if pack == "qkv" else "none", window, softcap,
                            "bh" if alibi else None, dtype, dropout))
        else:
            run(f"dense B=4 {desc}", case_dense(4, T, Tk, 9, H_kv, D, causal, pack, window, softcap, "bh" if alibi else None,
                                                dtype, dropout))


if __name__ == "__main__":
    torch.manual_seed(int.from_bytes(os.urandom(4), "little"))   # fresh inputs every run
    if "--sample" in sys.argv:
        args = sys.argv[1:]
        n = int(args[args.index("--sample") + 1])
        seed = int(args[args.index("--seed") + 1]) if "--seed" in args else int.from_bytes(os.urandom(4), "little")
        print(f"{n} cases of FlashAttention's grid, seed {seed}")
        sample_grid(n, seed)
        failed = sum(1 for r in results if r[0] == "FAIL")
        print(f"test_flash_attn_interface --sample: {len(results) - failed} passed, {failed} failed")
        sys.exit(1 if failed else 0)
    pairs = [(113, 203), (128, 217), (113, 211), (108, 256), (256, 512), (512, 256), (1023, 1024), (1024, 1023)]
    dims = [32, 40, 59, 64, 80, 96, 111, 128, 160, 192, 224, 256]
    heads = [(4, 4), (4, 1), (6, 2)]   # MHA, MQA, GQA
    for i, D in enumerate(dims):   # each head dim against two (T, Tk) pairs, the head patterns and causal in turn
        for j in range(2):
            T, Tk = pairs[(2 * i + j) % len(pairs)]
            H, H_kv = heads[(i + j) % len(heads)]
            causal = (i + j) % 2 == 1
            packed = "kv" if (i + j) % 3 == 2 else "none"   # (qkv-packed below: these pairs have T != Tk)
            name = f"flash_attn_{'' if packed == 'none' else packed + 'packed_'}func B=2 T={T} Tk={Tk} H={H} H_kv={H_kv} D={D} causal={int(causal)}"
            run(name, case_dense(2, T, Tk, H, H_kv, D, causal, packed))
    run("flash_attn_qkvpacked_func B=2 T=1024 H=4 D=128 causal=1", case_dense(2, 1024, 1024, 4, 4, 128, True, "qkv"))
    run("flash_attn_func B=1 T=2048 H=2 D=64 causal=1", case_dense(1, 2048, 2048, 2, 2, 64, True, "none"))
    run("flash_attn_varlen_func [113, 7, 300] x [203, 64, 300] H=4 H_kv=2 D=64 causal=1",
        case_varlen([113, 7, 300], [203, 64, 300], 4, 2, 64, True, "none"))
    run("flash_attn_varlen_func [50, 129] x [50, 129] H=3 H_kv=3 D=80 causal=0",
        case_varlen([50, 129], [50, 129], 3, 3, 80, False, "none"))
    run("flash_attn_varlen_qkvpacked_func [33, 1, 200] H=2 D=128 causal=1",
        case_varlen([33, 1, 200], [33, 1, 200], 2, 2, 128, True, "qkv"))
    # sliding windows: FlashAttention's `local` cases draw window_size below Tk; here a draw per case, with and without
    # causal, a head dim and (T, Tk) pair of the grid each, and the packed forms
    draw = lambda Tk: tuple(int(x) for x in torch.randint(0, Tk, (2,)))  # noqa: E731
    for i, D in enumerate([32, 59, 64, 96, 111, 128, 192, 256]):
        T, Tk = pairs[(3 * i + 1) % len(pairs)]
        H, H_kv = heads[i % len(heads)]
        window = draw(Tk)
        run(f"flash_attn_func B=2 T={T} Tk={Tk} H={H} H_kv={H_kv} D={D} causal={i % 2} window={window}",
            case_dense(2, T, Tk, H, H_kv, D, i % 2 == 1, "kv" if i % 3 == 2 else "none", window))
    run("flash_attn_func B=1 T=2048 H=2 D=128 causal=1 window=(256, 0)",
        case_dense(1, 2048, 2048, 2, 2, 128, True, "none", (256, 0)))
    run("flash_attn_qkvpacked_func B=2 T=1024 H=4 D=64 causal=0 window=(100, 30)",
        case_dense(2, 1024, 1024, 4, 4, 64, False, "qkv", (100, 30)))
    run("flash_attn_func B=2 T=512 Tk=256 H=4 H_kv=1 D=64 causal=0 window=(-1, 10)",
        case_dense(2, 512, 256, 4, 1, 64, False, "none", (-1, 10)))
    run("flash_attn_varlen_func [113, 7, 300] x [203, 64, 300] H=4 H_kv=2 D=128 causal=1 window=(40, 0)",
        case_varlen([113, 7, 300], [203, 64, 300], 4, 2, 128, True, "none", (40, 0)))
    run("flash_attn_varlen_qkvpacked_func [33, 1, 200] H=2 D=64 causal=0 window=(17, 5)",
        case_varlen([33, 1, 200], [33, 1, 200], 2, 2, 64, False, "qkv", (17, 5)))
    # softcap (FlashAttention's grid: 0 and 50) and ALiBi (its slopes rand * 0.3, per (B, H); and per head), each head
    # dim of the grid once, with causal, windows, GQA / MQA and the packed forms among them
    for i, D in enumerate(dims):
        T, Tk = pairs[(5 * i + 2) % len(pairs)]
        H, H_kv = heads[(i + 1) % len(heads)]
        softcap, alibi = [(50.0, None), (0.0, "bh"), (50.0, "h")][i % 3]
        window = draw(Tk) if i % 4 == 3 else (-1, -1)
        causal, packed = (i + 1) % 2 == 1, "kv" if i % 5 == 4 else "none"
        run(f"flash_attn_func B=2 T={T} Tk={Tk} H={H} H_kv={H_kv} D={D} causal={int(causal)} softcap={softcap} "
            f"alibi={alibi} window={window}", case_dense(2, T, Tk, H, H_kv, D, causal, packed, window, softcap, alibi))
    run("flash_attn_qkvpacked_func B=2 T=1024 H=4 D=128 causal=1 softcap=50 alibi=(B, H)",
        case_dense(2, 1024, 1024, 4, 4, 128, True, "qkv", softcap=50.0, alibi="bh"))
    run("flash_attn_varlen_func [113, 7, 300] x [203, 64, 300] H=4 H_kv=2 D=64 causal=1 alibi=(B, H) softcap=50",
        case_varlen([113, 7, 300], [203, 64, 300], 4, 2, 64, True, "none", softcap=50.0, alibi="bh"))
    run("flash_attn_varlen_qkvpacked_func [33, 1, 200] H=2 D=128 causal=0 alibi=(H) window=(40, 8)",
        case_varlen([33, 1, 200], [33, 1, 200], 2, 2, 128, False, "qkv", (40, 8), alibi="h"))
    # fp16: every head dim of the grid once, against a (T, Tk) pair each, with the head patterns, causal, windows, softcap,
    # ALiBi and the packed forms in turn; varlen
    fp16 = torch.float16
    for i, D in enumerate(dims):
        T, Tk = pairs[(3 * i + 2) % len(pairs)]
        H, H_kv = heads[i % len(heads)]
        causal, packed = i % 2 == 0, "kv" if i % 4 == 1 else "none"
        softcap, alibi = [(0.0, None), (50.0, None), (0.0, "bh"), (0.0, None)][i % 4]
        window = draw(Tk) if i % 3 == 2 else (-1, -1)
        run(f"fp16 flash_attn_{'' if packed == 'none' else packed + 'packed_'}func B=2 T={T} Tk={Tk} H={H} H_kv={H_kv} "
            f"D={D} causal={int(causal)} softcap={softcap} alibi={alibi} window={window}",
            case_dense(2, T, Tk, H, H_kv, D, causal, packed, window, softcap, alibi, dtype=fp16))
    run("fp16 flash_attn_qkvpacked_func B=2 T=1024 H=4 D=128 causal=1",
        case_dense(2, 1024, 1024, 4, 4, 128, True, "qkv", dtype=fp16))
    run("fp16 flash_attn_func B=1 T=2048 H=2 D=64 causal=1", case_dense(1, 2048, 2048, 2, 2, 64, True, "none", dtype=fp16))
    run("fp16 flash_attn_varlen_func [113, 7, 300] x [203, 64, 300] H=4 H_kv=2 D=64 causal=1",
        case_varlen([113, 7, 300], [203, 64, 300], 4, 2, 64, True, "none", dtype=fp16))
    run("fp16 flash_attn_varlen_qkvpacked_func [33, 1, 200] H=2 D=128 causal=0 window=(17, 5)",
        case_varlen([33, 1, 200], [33, 1, 200], 2, 2, 128, False, "qkv", (17, 5), dtype=fp16))
    # dropout (FlashAttention's 0.17; the mma.sync kExtras copies): head dims, causal, GQA, windows, ALiBi, fp16, packs
    for i, D in enumerate([32, 59, 64, 96, 128, 256]):
        T, Tk = pairs[(5 * i + 1) % len(pairs)]
        H, H_kv = heads[i % len(heads)]
        causal, packed = i % 2 == 1, "kv" if i % 3 == 2 else "none"
        window = draw(Tk) if i == 3 else (-1, -1)
        alibi, dtype = ("bh" if i == 4 else None), (torch.float16 if i % 3 == 1 else torch.bfloat16)
        run(f"dropout=0.17 flash_attn_func B=2 T={T} Tk={Tk} H={H} H_kv={H_kv} D={D} causal={int(causal)} window={window} "
            f"alibi={alibi} {str(dtype)[6:]}",
            case_dense(2, T, Tk, H, H_kv, D, causal, packed, window, alibi=alibi, dtype=dtype, dropout=0.17))
    run("dropout=0.17 flash_attn_qkvpacked_func B=2 T=1024 H=4 D=64 causal=1",
        case_dense(2, 1024, 1024, 4, 4, 64, True, "qkv", dropout=0.17))
    run("dropout=0.17 flash_attn_varlen_func [113, 7, 300] x [203, 64, 300] H=4 H_kv=2 D=64 causal=1",
        case_varlen([113, 7, 300], [203, 64, 300], 4, 2, 64, True, "none", dropout=0.17))
    run("dropout: the same seed repeats bit for bit, another differs", dropout_repeats)
    run("the head dims the interface pads to (flashgpt_attention_padded_head_dim_limit)", padded_head_dims)
    for D in (64, 40):
        run(f"flash_attn_func under torch.compile(fullgraph=True) B=2 T=200 H=4 D={D} causal=1: as eager, bit for bit",
            lambda D=D: compiled_as_eager(D))
    failed = sum(1 for r in results if r[0] == "FAIL")
    print(f"test_flash_attn_interface: {len(results) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
