#!/usr/bin/env python3
"""GPU test of python/flashgpt_attention.py (libflashgpt_attention.so, `make lib`) against PyTorch's
F.scaled_dot_product_attention. Prints one PASS/FAIL line per case, like tests/test_cpu; exits 0 with a SKIP line
where torch or a CUDA GPU is missing.

  make lib && python3 tests/test_python_attention.py

Each case compares our out, dq, dk and dv with SDPA on the same bf16 inputs, by FlashAttention's rule:
  max|ours - ref_fp32| <= 2 * max|sdpa_bf16 - ref_fp32| + 1e-4
where ref_fp32 is SDPA's math backend on the inputs in fp32 (TF32 off) and sdpa_bf16 is the math backend in bf16
with bf16 reductions (PyTorch's naive low-precision attention). GQA references repeat k and v per group; causal
with Tq != Tk passes SDPA the mask j <= i + Tk - Tq (its is_causal aligns the diagonal top-left, ours bottom-right).
"""
import copy
import math
import os
import sys
import traceback

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "python"))

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("SKIP: test_python_attention.py (no torch)")
    sys.exit(0)
if not torch.cuda.is_available():
    print("SKIP: test_python_attention.py (no CUDA GPU)")
    sys.exit(0)

import flashgpt_attention as fa  # noqa: E402

results = []


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def run(name, fn):
    try:
        fn()
        results.append(("PASS", name))
    except Exception as e:  # a crash is a failure too
        print(f"  {name}: {type(e).__name__}: {e}")
        if not isinstance(e, AssertionError):
            traceback.print_exc(file=sys.stdout)
        results.append(("FAIL", name))
    print(f"{results[-1][0]}: {name}", flush=True)


# ----------------------------------------------------------------------------
# references

class math_sdpa:
    """SDPA on its math backend; reduced=True lets it reduce in bf16 (its default upcasts bf16 to fp32)"""

    def __init__(self, reduced=False):
        self.reduced = reduced

    def __enter__(self):
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel
            self.ctx = sdpa_kernel(SDPBackend.MATH)
        except ImportError:
            self.ctx = torch.backends.cuda.sdp_kernel(enable_flash=False, enable_math=True, enable_mem_efficient=False)
        self.ctx.__enter__()
        self.has_flag = hasattr(torch.backends.cuda, "allow_fp16_bf16_reduction_math_sdp")
        if self.has_flag:
            self.saved = torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()
            torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(self.reduced)
        return self

    def __exit__(self, *exc):
        if self.has_flag:
            torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(self.saved)
        return self.ctx.__exit__(*exc)


def sdpa(q, k, v, causal, scale, layout):
    """SDPA on tensors in our layout: GQA by repeating k and v, causal as a bottom-right boolean mask"""
    to_bhtd = (lambda x: x) if layout == "bhtd" else (lambda x: x.transpose(1, 2))  # its own inverse
    q, k, v = to_bhtd(q), to_bhtd(k), to_bhtd(v)
    H, H_kv, Tq, Tk = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
    if H_kv != H:
        k, v = k.repeat_interleave(H // H_kv, dim=1), v.repeat_interleave(H // H_kv, dim=1)
    mask = None
    if causal:
        i = torch.arange(Tq, device=q.device)[:, None]
        j = torch.arange(Tk, device=q.device)[None, :]
        mask = j <= i + (Tk - Tq)
    return to_bhtd(F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale))


def out_and_grads(fn, q, k, v, dout):
    """fn(q, k, v) and the gradients of <fn(q, k, v), dout> for q, k, v, on leaf copies of the inputs"""
    q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
    out = fn(q, k, v)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), dout.to(out.dtype))
    return [t.float() for t in (out, dq, dk, dv)]


def fa_rule(names, ours, naive, ref):
    """FlashAttention's pass rule per tensor; prints one line each and fails on any"""
    bad = []
    for name, o, n, r in zip(names, ours, naive, ref):
        err, naive_err = (o - r).abs().max().item(), (n - r).abs().max().item()
        bound = 2 * naive_err + 1e-4
        ok = math.isfinite(err) and err <= bound
        print(f"  {name:<4} max|ours-ref| {err:.3e}  max|sdpa_bf16-ref| {naive_err:.3e}  bound {bound:.3e}  "
              f"{'ok' if ok else 'FAIL'}")
        if not ok:
            bad.append(name)
    check(not bad, f"over the bound: {', '.join(bad)}")


def randn_bf16(*shape):
    return torch.randn(*shape, device="cuda").bfloat16()


def attention_case(B, H, H_kv, Tq, Tk, D, causal, layout="bhtd", scale=None, make=None):
    """one case; make(shape) builds an input tensor (default: a contiguous randn in that shape)"""
    def run_case():
        make_input = make or (lambda shape: randn_bf16(*shape))
        shape = (lambda b, h, t: (b, h, t, D)) if layout == "bhtd" else (lambda b, h, t: (b, t, h, D))
        q, k, v = make_input(shape(B, H, Tq)), make_input(shape(B, H_kv, Tk)), make_input(shape(B, H_kv, Tk))
        dout = randn_bf16(*shape(B, H, Tq))
        s = scale if scale is not None else 1.0 / math.sqrt(D)
        ours = out_and_grads(lambda q, k, v: fa.flash_attention(q, k, v, causal=causal, scale=scale, layout=layout),
                             q, k, v, dout)
        with math_sdpa(reduced=True):
            naive = out_and_grads(lambda q, k, v: sdpa(q, k, v, causal, s, layout), q, k, v, dout)
        with math_sdpa():
            ref = out_and_grads(lambda q, k, v: sdpa(q, k, v, causal, s, layout), q.float(), k.float(), v.float(),
                                dout.float())
        check(ours[0].shape == ref[0].shape, f"out shape {tuple(ours[0].shape)} != {tuple(ref[0].shape)}")
        fa_rule(("out", "dq", "dk", "dv"), ours, naive, ref)
    name = (f"B={B} H={H} H_kv={H_kv} Tq={Tq} Tk={Tk} D={D} causal={int(causal)} {layout}"
            + (f" scale={scale}" if scale is not None else "") + (" (inputs copied)" if make else ""))
    run(name, run_case)


def awkward_input(shape):
    """a tensor the kernels can't read in place, so flash_attention copies it: head dim not contiguous, or 16-byte
    misaligned (a view 1 element into a buffer), alternately"""
    awkward_input.calls = getattr(awkward_input, "calls", 0) + 1
    if awkward_input.calls % 2:
        return randn_bf16(*shape[:-2], shape[-1], shape[-2]).transpose(-1, -2)
    n = math.prod(shape)
    return randn_bf16(n + 1)[1:].view(shape)


def unsupported_calls():
    q = randn_bf16(1, 2, 64, 48)
    try:
        fa.flash_attention(q, q, q)
        raise AssertionError("head dim 48 ran")
    except fa.FlashAttentionError as e:
        print(f"  head dim 48 raises: {e}")
        check("head dim" in str(e), "the message must name the head dim")
    q, k = randn_bf16(1, 6, 64, 64), randn_bf16(1, 4, 64, 64)
    try:
        fa.flash_attention(q, k, k)
        raise AssertionError("6 query heads on 4 key/value heads ran")
    except fa.FlashAttentionError as e:
        print(f"  H=6 H_kv=4 raises: {e}")
        check("multiple" in str(e), "the message must say the heads do not divide")


# ----------------------------------------------------------------------------
# nanoGPT's CausalSelfAttention with SDPA swapped for flash_attention

class CausalSelfAttention(torch.nn.Module):
    def __init__(self, n_embd, n_head, attention):
        super().__init__()
        self.c_attn = torch.nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = torch.nn.Linear(n_embd, n_embd)
        self.n_head, self.attention = n_head, attention

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)  # views into one (B, T, 3C) buffer: no copies on our side
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = self.attention(q, k, v)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


def nanogpt_drop_in():
    B, T, C, n_head = 4, 256, 384, 6
    torch.manual_seed(1)
    # weights and input exactly bf16, so the fp32 reference and the bf16 runs start from the same values
    model = CausalSelfAttention(C, n_head, None).cuda().bfloat16().float()
    x = torch.randn(B, T, C, device="cuda").bfloat16().float()
    target = torch.randn(B, T, C, device="cuda")

    def loss_and_grads(dtype, attention):
        m = copy.deepcopy(model).to(dtype)
        m.attention = attention
        xi = x.detach().to(dtype).requires_grad_()
        loss = F.mse_loss(m(xi).float(), target)
        loss.backward()
        return loss.item(), xi.grad.float(), m.c_attn.weight.grad.float()

    with math_sdpa():
        ref = loss_and_grads(torch.float32,
                             lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    sdpa_bf16 = loss_and_grads(torch.bfloat16,
                               lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    ours = loss_and_grads(torch.bfloat16, lambda q, k, v: fa.flash_attention(q, k, v, causal=True))
    loss_gap = abs(ours[0] - sdpa_bf16[0]) / abs(sdpa_bf16[0])
    print(f"  loss: ours {ours[0]:.6f}  sdpa_bf16 {sdpa_bf16[0]:.6f}  fp32 {ref[0]:.6f}  |ours-sdpa|/sdpa {loss_gap:.2e}")
    check(loss_gap < 1e-2, "losses differ by more than 1%")
    bad = []
    for name, o, s, r in (("x.grad", ours[1], sdpa_bf16[1], ref[1]), ("c_attn.weight.grad", ours[2], sdpa_bf16[2], ref[2])):
        rel = lambda g: ((g - r).norm() / r.norm()).item()  # noqa: E731
        ok = rel(o) <= 2 * rel(s) + 1e-3
        print(f"  {name:<18} |ours-fp32|/|fp32| {rel(o):.3e}  |sdpa_bf16-fp32|/|fp32| {rel(s):.3e}  {'ok' if ok else 'FAIL'}")
        if not ok:
            bad.append(name)
    check(not bad, f"gradient error over 2x SDPA bf16's: {', '.join(bad)}")


# ----------------------------------------------------------------------------

def main():
    # the fp32 reference must be true fp32
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    try:
        version = fa.library_version()
    except Exception as e:  # not built, or not loadable: every case would fail the same way
        print(f"FAIL: load {fa.library_path()}: {e}")
        return 1
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {fa.library_path()} (commit {version or '?'})")
    print("pass rule per tensor: max|ours - sdpa_fp32| <= 2 * max|sdpa_bf16_math - sdpa_fp32| + 1e-4")
    attention_case(2, 4, 4, 256, 256, 64, causal=True)
    attention_case(2, 4, 4, 200, 200, 128, causal=True)
    attention_case(2, 3, 3, 257, 257, 64, causal=False)
    attention_case(2, 2, 2, 100, 300, 64, causal=True)        # cross, bottom-right diagonal
    attention_case(2, 2, 2, 300, 128, 128, causal=False)      # cross, Tq > Tk
    attention_case(1, 8, 2, 190, 190, 64, causal=True)        # GQA 8 / 2
    attention_case(2, 4, 1, 64, 200, 128, causal=False)       # MQA, cross
    attention_case(2, 4, 4, 129, 129, 64, causal=True, layout="bthd")
    attention_case(2, 8, 2, 150, 150, 128, causal=False, layout="bthd", scale=0.3)
    attention_case(2, 3, 3, 333, 333, 32, causal=True)
    attention_case(2, 3, 3, 170, 170, 96, causal=False)
    attention_case(2, 4, 2, 120, 120, 64, causal=True, make=awkward_input)
    run("unsupported calls raise FlashAttentionError with the library's reason", unsupported_calls)
    run("nanoGPT CausalSelfAttention: flash_attention in place of SDPA, loss and gradients", nanogpt_drop_in)
    n_pass = sum(s == "PASS" for s, _ in results)
    print(f"python attention tests: {n_pass} passed, {len(results) - n_pass} failed")
    return 0 if n_pass == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
