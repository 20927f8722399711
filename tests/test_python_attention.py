#!/usr/bin/env python3
"""GPU test of python/flashgpt_attention.py (libflashgpt_attention.so, `make lib`) against PyTorch's
F.scaled_dot_product_attention. Prints one PASS/FAIL line per case, like tests/test_cpu; exits 0 with a SKIP line
where torch or a CUDA GPU is missing.

  make lib && python3 tests/test_python_attention.py [--inductor]

The torch.compile block traces with AOTAutograd and runs the graph eagerly (backend "aot_eager": the autograd.Function
Dynamo traces, the custom ops' fake implementations and runtime, and no graph break); --inductor (make test-all) compiles it with
Inductor too, which costs a minute of code generation. The last block captures a forward and backward into a CUDA
graph and checks its replays against the eager call.

Each case compares our out, dq, dk and dv with SDPA on the same bf16 inputs, by FlashAttention's rule:
  max|ours - ref_fp32| <= 2 * max|sdpa_bf16 - ref_fp32| + 1e-4
where ref_fp32 is SDPA's math backend on the inputs in fp32 (TF32 off) and sdpa_bf16 is the math backend in bf16
with bf16 reductions (PyTorch's naive low-precision attention). GQA references repeat k and v per group; causal
with Tq != Tk passes SDPA the mask j <= i + Tk - Tq (its is_causal aligns the diagonal top-left, ours bottom-right).

The extras: a bias goes to SDPA as its additive attn_mask (with -inf where our masks hide a key), and its gradient is
checked like the others; key lengths become that mask too; packed sequences are compared with SDPA on each sequence
alone; a gate multiplies SDPA's output (the reference is sdpa * gate), and its gradient is checked like the others.
A row that sees no key gives 0 here and NaN in SDPA: such rows must be exactly 0, and are left out of the rest.
"""
import copy
import itertools
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpu import require_torch_cuda, results, run  # noqa: E402

require_torch_cuda("test_python_attention.py")
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import flashgpt_attention as fa  # noqa: E402


def check(cond, what):
    if not cond:
        raise AssertionError(what)


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


def sdpa(q, k, v, causal, scale, layout, attn_mask=None):
    """SDPA on tensors in our layout: GQA by repeating k and v, causal as a bottom-right boolean mask; attn_mask
    (bool or additive, broadcast to (B, H, Tq, Tk)) takes the causal mask's place (the caller folds causal into it)"""
    to_bhtd = (lambda x: x) if layout == "bhtd" else (lambda x: x.transpose(1, 2))  # its own inverse
    q, k, v = to_bhtd(q), to_bhtd(k), to_bhtd(v)
    H, H_kv, Tq, Tk = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
    if H_kv != H:
        k, v = k.repeat_interleave(H // H_kv, dim=1), v.repeat_interleave(H // H_kv, dim=1)
    mask = attn_mask
    if causal and attn_mask is None:
        i = torch.arange(Tq, device=q.device)[:, None]
        j = torch.arange(Tk, device=q.device)[None, :]
        mask = j <= i + (Tk - Tq)
    return to_bhtd(F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale))


def out_and_grads(fn, q, k, v, dout, *extra):
    """fn(q, k, v, *extra) and the gradients of <fn(q, k, v, *extra), dout> for q, k, v and each extra (a bias, a
    gate), on leaf copies of the inputs"""
    inputs = [x.detach().requires_grad_() for x in (q, k, v) + extra]
    out = fn(*inputs)
    grads = torch.autograd.grad(out, inputs, dout.to(out.dtype))
    return [t.float() for t in (out,) + grads]


def three_runs(ours_fn, ref_fn, q, k, v, dout, extra=()):
    """out_and_grads of ours_fn, of ref_fn reducing in bf16 (the naive computation) and of ref_fn in fp32 (the
    reference), with the shapes of ours and the reference checked equal"""
    ours = out_and_grads(ours_fn, q, k, v, dout, *extra)
    with math_sdpa(reduced=True):
        naive = out_and_grads(ref_fn, q, k, v, dout, *extra)
    with math_sdpa():
        ref = out_and_grads(ref_fn, q.float(), k.float(), v.float(), dout.float(), *(x.float() for x in extra))
    check(ours[0].shape == ref[0].shape, f"out shape {tuple(ours[0].shape)} != {tuple(ref[0].shape)}")
    return ours, naive, ref


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
        ours_fn = lambda q, k, v: fa.flash_attention(q, k, v, causal=causal, scale=scale, layout=layout)  # noqa: E731
        ours, naive, ref = three_runs(ours_fn, lambda q, k, v: sdpa(q, k, v, causal, s, layout), q, k, v, dout)
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
    q = randn_bf16(1, 2, 64, 264)
    try:
        fa.flash_attention(q, q, q)
        raise AssertionError("head dim 264 ran")
    except fa.FlashAttentionError as e:
        print(f"  head dim 264 raises: {e}")
        check("head dim" in str(e), "the message must name the head dim")
    q = randn_bf16(1, 2, 64, 160)   # a head dim between the compiled ones with dropout: refused on every GPU
    try:
        fa.flash_attention(q, q, q, dropout_p=0.1)
        raise AssertionError("head dim 160 with dropout ran")
    except fa.FlashAttentionError as e:
        print(f"  head dim 160 with dropout raises: {e}")
        check("head dim" in str(e), "the message must name the head dim")
    q, k = randn_bf16(1, 6, 64, 64), randn_bf16(1, 4, 64, 64)
    try:
        fa.flash_attention(q, k, k)
        raise AssertionError("6 query heads on 4 key/value heads ran")
    except fa.FlashAttentionError as e:
        print(f"  H=6 H_kv=4 raises: {e}")
        check("multiple" in str(e), "the message must say the heads do not divide")


# ----------------------------------------------------------------------------
# the extras: bias, key lengths, packed sequences

def visible(Tq, Tk, causal, key_lengths=None):
    """(B or 1, 1, Tq, Tk) bool: query i sees key j, as the library decides: j < Tk_b and, causal, j <= i + Tk_b - Tq
    (each sequence's diagonal aligned bottom-right to its own key length Tk_b)"""
    i = torch.arange(Tq, device="cuda")[:, None]
    j = torch.arange(Tk, device="cuda")[None, :]
    lengths = key_lengths.long() if key_lengths is not None else torch.tensor([Tk], device="cuda")
    L = lengths[:, None, None, None]
    seen = j < L
    return seen & (j <= i + L - Tq) if causal else seen


def extras_case(name, B, H, H_kv, Tq, Tk, D, causal, make_bias=None, bias_grad=False, key_lengths=None, gated=False):
    """one case on (B, H, T, D) inputs with a bias (make_bias() builds it; bias_grad: its gradient is checked too),
    key_lengths (a list of B) and / or a gate (gated: a (B, H, T, D) contiguous gate, so flash_attention copies it
    into out's (B, T, H, D) memory; its gradient is checked). SDPA gets one additive mask: the bias plus -inf where
    our masks hide a key, and its output times the gate. Rows that see no key must be 0 in ours; SDPA's mask opens
    them (else NaN) and dout is 0 there, so they add no gradient in any run, and out is compared on the other rows."""
    def run_case():
        q, k, v = randn_bf16(B, H, Tq, D), randn_bf16(B, H_kv, Tk, D), randn_bf16(B, H_kv, Tk, D)
        bias = make_bias() if make_bias else None
        gate = randn_bf16(B, H, Tq, D) if gated else None
        lengths = torch.tensor(key_lengths, dtype=torch.int32, device="cuda") if key_lengths else None
        seen = visible(Tq, Tk, causal, lengths)
        alive = seen.any(dim=-1, keepdim=True)  # rows that see a key
        dout = randn_bf16(B, H, Tq, D) * alive
        s = 1.0 / math.sqrt(D)

        def bias_and_gate(extra):
            """the bias and gate of one run: the leaf copies in extra where their gradients are checked"""
            extra = list(extra)
            return extra.pop(0) if bias_grad else bias, extra.pop(0) if gated else None

        def ours_fn(q, k, v, *extra):
            b, g = bias_and_gate(extra)
            return fa.flash_attention(q, k, v, causal=causal, bias=b, key_lengths=lengths, gate=g)

        def ref_fn(q, k, v, *extra):
            mask = torch.zeros(seen.shape, dtype=q.dtype, device="cuda").masked_fill(~(seen | ~alive), -math.inf)
            b, g = bias_and_gate(extra)
            out = sdpa(q, k, v, False, s, "bhtd", attn_mask=mask if b is None else b.to(q.dtype) + mask)
            return out if g is None else out * g

        extra = ((bias,) if bias_grad else ()) + ((gate,) if gated else ())
        ours, naive, ref = three_runs(ours_fn, ref_fn, q, k, v, dout, extra)
        if not alive.all():
            dead = (ours[0] * ~alive).abs().max().item()
            print(f"  {(~alive).sum().item()} (b, row) see no key: max|out| there {dead:.3e}")
            check(dead == 0, "rows that see no key must give 0")
        for run_out in (ours, naive, ref):
            run_out[0] = run_out[0] * alive
        fa_rule(("out", "dq", "dk", "dv") + (("dbias",) if bias_grad else ()) + (("dgate",) if gated else ()), ours,
                naive, ref)
    run(f"{name}: B={B} H={H} H_kv={H_kv} Tq={Tq} Tk={Tk} D={D} causal={int(causal)}", run_case)


def masked_bias(B, Tk, fraction):
    """(B, 1, 1, Tk) fp32 of bf16-exact values (SDPA's bf16 run gets the same bias) with -inf on about fraction of
    the keys, never key 0 (so every causal row keeps a key)"""
    bias = torch.randn(B, 1, 1, Tk, device="cuda").bfloat16().float()
    drop = torch.rand(B, 1, 1, Tk, device="cuda") < fraction
    drop[..., 0] = False
    return bias.masked_fill(drop, -math.inf)


def varlen_case(seqlens_q, seqlens_k, H, H_kv, D, causal, one_cu_seqlens=False, gated=False):
    """packed sequences: q (total_q, H, D), k and v (total_k, H_kv, D) against SDPA on each sequence alone, packed
    back. one_cu_seqlens: the cu_seqlens shorthand (q and k alike), the longest length read from it. gated: a
    (total_q, H, D) gate (out's memory: no copy), its gradient checked too."""
    def run_case():
        starts_q, starts_k = [0, *itertools.accumulate(seqlens_q)], [0, *itertools.accumulate(seqlens_k)]
        cu_q = torch.tensor(starts_q, dtype=torch.int32, device="cuda")
        cu_k = torch.tensor(starts_k, dtype=torch.int32, device="cuda")
        q, dout = randn_bf16(starts_q[-1], H, D), randn_bf16(starts_q[-1], H, D)
        k, v = randn_bf16(starts_k[-1], H_kv, D), randn_bf16(starts_k[-1], H_kv, D)
        extra = (randn_bf16(starts_q[-1], H, D),) if gated else ()
        s = 1.0 / math.sqrt(D)

        def ours_fn(q, k, v, *gate):
            g = gate[0] if gate else None
            if one_cu_seqlens:
                return fa.flash_attention(q, k, v, causal=causal, cu_seqlens=cu_q, gate=g)
            return fa.flash_attention(q, k, v, causal=causal, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                                      max_seqlen_q=max(seqlens_q), max_seqlen_k=max(seqlens_k), gate=g)

        def ref_fn(q, k, v, *gate):
            outs = []
            for b in range(len(seqlens_q)):
                rows_q, rows_k = slice(starts_q[b], starts_q[b + 1]), slice(starts_k[b], starts_k[b + 1])
                outs.append(sdpa(q[rows_q][None], k[rows_k][None], v[rows_k][None], causal, s, "bthd")[0])
            out = torch.cat(outs)
            return out * gate[0] if gate else out

        ours, naive, ref = three_runs(ours_fn, ref_fn, q, k, v, dout, extra)
        fa_rule(("out", "dq", "dk", "dv") + (("dgate",) if gated else ()), ours, naive, ref)
    lengths = f"seqlens {seqlens_q}" if one_cu_seqlens else f"seqlens_q {seqlens_q} seqlens_k {seqlens_k}"
    run(f"packed {lengths} H={H} H_kv={H_kv} D={D} causal={int(causal)}"
        + (" (cu_seqlens, max_seqlen read back)" if one_cu_seqlens else "") + (" gated" if gated else ""), run_case)


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


COMPILE_BACKEND = "inductor" if "--inductor" in sys.argv[1:] else "aot_eager"


def compiled_drop_in():
    """nanoGPT's attention block under torch.compile(fullgraph=True): flash_attention runs as the custom ops (no graph
    break), with the eager call's out and gradients, with static and with symbolic sizes (dynamic=True); with
    dropout, the same seed gives the same loss"""
    B, T, C, n_head = 4, 256, 384, 6
    torch.manual_seed(2)
    model = CausalSelfAttention(C, n_head, lambda q, k, v: fa.flash_attention(q, k, v, causal=True)).cuda().bfloat16()
    x = torch.randn(B, T, C, device="cuda", dtype=torch.bfloat16)

    def run_model(m):
        xi = x.detach().clone().requires_grad_()
        y = m(xi)
        y.float().square().mean().backward()
        return y.detach(), xi.grad, m.c_attn.weight.grad

    eager = run_model(copy.deepcopy(model))
    for dynamic in (False, True):
        compiled_model = copy.deepcopy(model)
        compiled = run_model(torch.compile(compiled_model, fullgraph=True, backend=COMPILE_BACKEND, dynamic=dynamic))
        for name, a, b in zip(("out", "x.grad", "c_attn.weight.grad"), eager, compiled):   # (the compiled linears
            err = ((a.float() - b.float()).norm() / a.float().norm()).item()                 # round apart from eager's)
            print(f"  compiled ({COMPILE_BACKEND}, dynamic={dynamic}) {name}: |compiled - eager| / |eager| {err:.2e}")
            check(err < 2e-2, f"compiled (dynamic={dynamic}) {name} differs from eager's")
    drop = copy.deepcopy(model)
    drop.attention = lambda q, k, v: fa.flash_attention(q, k, v, causal=True, dropout_p=0.2)
    step = torch.compile(drop, fullgraph=True, backend=COMPILE_BACKEND)
    losses = []
    for seed in (5, 5, 6):
        torch.manual_seed(seed)
        losses.append(step(x).float().square().mean().item())
    print(f"  dropout 0.2 compiled: losses {losses}")
    check(losses[0] == losses[1] and losses[0] != losses[2], "dropout under compile: the seed does not decide the mask")


def cuda_graph_capture():
    """flash_attention's forward and backward captured into a CUDA graph replay as the eager calls compute, bit for bit,
    and an eager call of a larger shape on the capture stream in between (which replaces the planned backward's kept
    scratch for that stream, freeing the old one) leaves the graph's own scratch alone"""
    B, H, T, D = 2, 4, 256, 64
    torch.manual_seed(3)
    q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    dout = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16)

    def step(q, k, v, dout):
        out = fa.flash_attention(q, k, v, causal=True)
        return (out,) + torch.autograd.grad(out, (q, k, v), dout)

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        eager = [t.clone() for t in step(q, k, v, dout)]   # (also the warm-up: plans, the stream's kept scratch)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        captured = step(q, k, v, dout)
    big = [torch.randn(8, 8, 1024, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3)]
    with torch.cuda.stream(stream):
        step(*big, torch.randn_like(big[0]))
        # small tensors that the freed scratch's memory may go to: a graph still writing there would change them
        filler = [torch.randn(1024, device="cuda") for _ in range(256)]
        kept = [t.clone() for t in filler]
    torch.cuda.current_stream().wait_stream(stream)
    for _ in range(2):
        graph.replay()
    torch.cuda.synchronize()
    same = [torch.equal(a, b) for a, b in zip(eager, captured)]
    untouched = all(torch.equal(a, b) for a, b in zip(filler, kept))
    print(f"  replayed out, dq, dk, dv equal the eager call's: {same}; memory allocated after the capture untouched: "
          f"{untouched}")
    check(all(same), "a CUDA graph of the call replays other values than the eager call")
    check(untouched, "a replay wrote memory allocated after its capture")


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
    attention_case(2, 4, 2, 150, 210, 256, causal=True)       # head dim 256, GQA, cross
    attention_case(2, 4, 2, 120, 120, 64, causal=True, make=awkward_input)
    # the extras
    extras_case("bias (1, H, Tq, Tk) bf16 with its gradient", 2, 4, 4, 100, 160, 64, causal=True,
                make_bias=lambda: randn_bf16(1, 4, 100, 160), bias_grad=True)
    extras_case("bias (B, 1, 1, Tk) fp32 with -inf keys, expanded to (B, H, Tq, Tk) (strides 0)", 2, 3, 3, 150, 150, 64,
                causal=True, make_bias=lambda: masked_bias(2, 150, 0.25).expand(2, 3, 150, 150))
    extras_case("key_lengths [200, 77, 5]", 3, 4, 2, 100, 200, 64, causal=False, key_lengths=[200, 77, 5])
    extras_case("key_lengths [160, 97, 1]", 3, 2, 2, 160, 160, 128, causal=True, key_lengths=[160, 97, 1])
    varlen_case([50, 130, 7], [80, 130, 40], 4, 2, 64, causal=True)
    varlen_case([33, 1, 200], [33, 1, 200], 2, 2, 128, causal=False, one_cu_seqlens=True)
    extras_case("gate (B, H, Tq, D), copied to out's memory", 2, 3, 3, 140, 140, 64, causal=False, gated=True)
    extras_case("gate with a bias (B, 1, Tq, Tk) bf16 and key_lengths [130, 50], dbias and dgate", 2, 4, 2, 96, 130,
                64, causal=True, make_bias=lambda: randn_bf16(2, 1, 96, 130), bias_grad=True, key_lengths=[130, 50],
                gated=True)
    varlen_case([40, 100, 9], [60, 100, 9], 2, 2, 64, causal=True, gated=True)
    run("unsupported calls raise FlashAttentionError with the library's reason", unsupported_calls)
    run("nanoGPT CausalSelfAttention: flash_attention in place of SDPA, loss and gradients", nanogpt_drop_in)
    run("nanoGPT CausalSelfAttention under torch.compile(fullgraph=True): the custom ops, eager's results", compiled_drop_in)
    run("forward and backward captured into a CUDA graph: the eager call's results on replay", cuda_graph_capture)
    n_pass = sum(s == "PASS" for s, _ in results)
    print(f"python attention tests: {n_pass} passed, {len(results) - n_pass} failed")
    return 0 if n_pass == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
