#!/usr/bin/env python3
"""AlphaFold-family attention at the PyTorch level: flashgpt's triangle_attention (python/flashgpt_attention.py)
against NVIDIA's cuEquivariance (cuequivariance_torch.triangle_attention, where it imports) and PyTorch SDPA's
memory-efficient backend, on the same bf16 inputs, in one process. The case syntax is ../shared/bench/af_anchor.py's:

  python3 scripts/af_bench.py n=759,h=4,t=759,d=32 n=128,h=8,t=759,d=32 n=759,h=4,t=759,d=32,mask=0.1

A case: n rows (the batch: residues or MSA sequences), h heads, t tokens (queries = keys), d head dim, a pair bias
(1, 1, h, t, t) shared by every row with requires_grad (its gradient is part of the backward), mask = the fraction of
keys masked at the end of each row (a (1, n, 1, 1, t) key mask; 0: none). Prints ms (median of 20, CUDA events) for
the forward and the forward + backward, TF/s (forward 4 n h t^2 d FLOPs, backward 2.5x that), each backend's ratio to
cuEquivariance, and its largest error against an fp32 reference over the first rows (out, then the bias gradient).
Needs `make lib` (or FLASHGPT_ATTENTION_LIB).
"""
import math
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
from flashgpt_attention import triangle_attention  # noqa: E402

try:
    import cuequivariance_torch as cuet
except Exception as e:  # not installed, or no kernels for this GPU
    cuet = None
    print(f"# cuequivariance_torch unavailable: {str(e)[:100]}")


def median_ms(fn, reps=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(True), torch.cuda.Event(True)
        a.record(); fn(); b.record(); torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def case(arg):
    c = dict(n=759, h=4, t=759, d=32, mask=0.0)
    for kv in arg.split(","):
        k, v = kv.split("=")
        c[k] = float(v) if k == "mask" else int(v)
    N, H, T, D, mf = c["n"], c["h"], c["t"], c["d"], c["mask"]
    q, k, v = [torch.randn(1, N, H, T, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3)]
    bias = torch.randn(1, 1, H, T, T, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    mask = torch.ones(1, N, 1, 1, T, device="cuda", dtype=torch.bool)
    if mf:
        mask[..., int(T * (1 - mf)):] = False
    do = torch.randn(1, N, H, T, D, device="cuda", dtype=torch.bfloat16)
    scale = 1 / math.sqrt(D)
    R = min(N, 16)   # the fp32 reference over the first R rows (the whole (N, H, T, T) may not fit)
    qr, kr, vr, br = (x.detach().float().requires_grad_() for x in (q[0, :R], k[0, :R], v[0, :R], bias[0]))
    ref = torch.softmax(qr @ kr.transpose(-1, -2) * scale + br + torch.where(mask[0, :R], 0.0, -1e9), -1) @ vr
    ref.backward(do[0, :R].float())
    ref_dbias = br.grad   # the first R rows' share of the bias gradient
    runs = [("flashgpt", lambda: triangle_attention(q, k, v, bias, mask if mf else None, scale))]
    if cuet is not None:
        runs.append(("cuEquivariance", lambda: cuet.triangle_attention(q, k, v, bias, mask, scale)))
    def sdpa():
        m = bias[0] + torch.where(mask[0], 0.0, float("-inf")).to(bias.dtype) if mf else bias[0]
        with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
            return F.scaled_dot_product_attention(q[0], k[0], v[0], attn_mask=m).unsqueeze(0)
    runs.append(("sdpa efficient", sdpa))
    flops = 4.0 * N * H * T * T * D
    results = {}
    for name, f in runs:
        try:
            out = f()
            err = (out[0, :R].float() - ref).abs().max().item()
            # the bias gradient of the first R rows alone: the same call on them
            qs, ks, vs = (x[:, :R].detach().requires_grad_() for x in (q, k, v))
            b1 = bias.detach().clone().requires_grad_()
            sub = {"flashgpt": lambda: triangle_attention(qs, ks, vs, b1, mask[:, :R] if mf else None, scale),
                   "cuEquivariance": lambda: cuet.triangle_attention(qs, ks, vs, b1, mask[:, :R], scale)}.get(name)
            derr = float("nan")
            if sub is not None:
                sub().backward(do[:, :R])
                derr = (b1.grad[0, 0].float() - ref_dbias).abs().max().item()
            tf = median_ms(f)
            def fb():
                for x in (q, k, v, bias):
                    x.grad = None
                f().backward(do)
            tfb = median_ms(fb)
            results[name] = (tf, tfb)
            print(f"{arg:<32} {name:<15} | fwd {tf:8.3f} ms {flops / tf / 1e9:6.1f} TF/s | f+b {tfb:8.3f} ms "
                  f"{3.5 * flops / tfb / 1e9:6.1f} TF/s | err out {err:.2e} dbias {derr:.2e}", flush=True)
        except Exception as e:
            print(f"{arg:<32} {name:<15} | unavailable: {str(e).splitlines()[0][:90]}", flush=True)
    if "cuEquivariance" in results:
        cf, cfb = results["cuEquivariance"]
        for name, (tf, tfb) in results.items():
            if name != "cuEquivariance":
                print(f"{arg:<32} {name:<15} | x cuEquivariance: fwd {cf / tf:.2f}  f+b {cfb / tfb:.2f}", flush=True)


if __name__ == "__main__":
    print(f"# torch {torch.__version__} | {torch.cuda.get_device_name()}")
    torch.manual_seed(0)
    for a in sys.argv[1:] or ["n=759,h=4,t=759,d=32"]:
        case(a)
