#!/usr/bin/env python3
"""GPU test: an Evoformer-style block (AlphaFold 2's attention modules) through flashgpt's AlphaFold-family calls
(python/flashgpt_attention.py: triangle_attention, evoformer_attention) against the same block in plain fp32 PyTorch.
Prints one PASS/FAIL line per module, like tests/test_cpu; exits 0 with a SKIP line where torch or a CUDA GPU is
missing.

  make lib && python3 tests/test_evoformer.py

The modules, each with gating and heads of 8 channels unless said, on a small protein (r residues, s MSA rows, c_z
pair channels) with some residues and MSA rows masked:
  MSA row attention with pair bias     rows of the MSA attend along residues; pair bias (1, 1, H, r, r) from z
  MSA column attention                 columns attend along MSA rows; key mask only (evoformer_attention)
  triangle attention, starting node    rows of z attend along residues; bias from z; key mask (triangle_attention)
  triangle attention, ending node      the same on z transposed
  template pointwise-style attention   head dim 16 (template stack), bias and mask
The linear layers run in PyTorch; the attention and the gate are flashgpt's. Each module's output and every gradient
(the block's inputs, every weight, the pair bias' source z) are checked by FlashAttention's rule:
  max|ours - ref_fp32| <= 2 * max|naive_bf16 - ref_fp32| + 1e-3
where ref_fp32 is the block in fp32 and naive_bf16 the same block in bf16 with PyTorch's plain attention (softmax of
bf16 logits). Masked logits are -1e9 in the references, as in OpenFold; no row here has every key masked.
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpu import require_torch_cuda, results, run  # noqa: E402

require_torch_cuda("test_evoformer.py")
import torch  # noqa: E402
import flashgpt_attention as fa  # noqa: E402


def plain_attention(q, k, v, biases, mask):
    """softmax(q k^T / sqrt(d) + biases, mask -1e9) v on (..., H, L, D) tensors, in their own dtype"""
    logits = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    for b in biases:
        logits = logits + b.to(logits.dtype)
    if mask is not None:
        logits = logits + torch.where(mask, 0.0, -1e9).to(logits.dtype)
    return torch.softmax(logits, -1) @ v


class GatedAttention(torch.nn.Module):
    """OpenFold's Attention: q, k, v, gate projections of the input (c channels), H heads of d channels, a sigmoid
    gate on the output, an output projection; attention over the second-to-last axis of x (..., L, c)"""

    def __init__(self, c, H, d, c_bias=None):
        super().__init__()
        self.H, self.d = H, d
        self.qkvg = torch.nn.Linear(c, 4 * H * d)
        self.out = torch.nn.Linear(H * d, c)
        self.bias = torch.nn.Linear(c_bias, H, bias=False) if c_bias else None

    def forward(self, x, z=None, mask=None, flash=False):
        *lead, L, _ = x.shape
        q, k, v, g = self.qkvg(x).view(*lead, L, 4, self.H, self.d).unbind(-3)   # (..., L, H, d) each
        g = torch.sigmoid(g)
        pair = None if self.bias is None else self.bias(z).permute(2, 0, 1)      # (H, L, L)
        if flash:
            # (N, L, H, d) layout with a (N, 1, 1, L) mask bias and a (1, H, L, L) pair bias: DeepSpeed's conventions;
            # or cuEquivariance's (B, N, H, L, d) for the triangle modules (bias (B, 1, H, L, L), mask (B, N, 1, 1, L))
            N = math.prod(lead)
            qn, kn, vn = (t.reshape(N, L, self.H, self.d) for t in (q, k, v))
            if pair is not None and mask is not None and getattr(self, "triangle", False):
                t = lambda y: y.transpose(1, 2).unsqueeze(0)   # noqa: E731  (1, N, H, L, d)
                o = fa.triangle_attention(t(qn), t(kn), t(vn), pair.unsqueeze(0).unsqueeze(0),
                                          mask.reshape(1, N, 1, 1, L))[0].transpose(1, 2)
            else:
                biases = []
                if mask is not None:
                    biases.append(torch.where(mask.reshape(1, N, 1, 1, L), 0.0, -1e9).to(x.dtype))
                if pair is not None:
                    biases.append(pair.reshape(1, 1, self.H, L, L))
                o = fa.evoformer_attention(qn.unsqueeze(0), kn.unsqueeze(0), vn.unsqueeze(0), biases)[0]
            o = o.reshape(*lead, L, self.H, self.d)
        else:
            t = lambda y: y.transpose(-2, -3)   # noqa: E731  (..., H, L, d)
            m = None if mask is None else mask.reshape(*lead, 1, 1, L)
            o = t(plain_attention(t(q), t(k), t(v), [pair] if pair is not None else [], m))
        return self.out((o * g).reshape(*lead, L, self.H * self.d))


def module_cases(r, s, c_m, c_z):
    """(name, module, input builder): each builder returns (x, z, mask) for the module"""
    torch.manual_seed(1)
    res_mask = torch.rand(r, device="cuda") > 0.1
    res_mask[0] = True
    msa_mask = torch.rand(s, r, device="cuda") > 0.1
    msa_mask[:, 0] = msa_mask[0, :] = True
    m = torch.randn(s, r, c_m, device="cuda")
    z = torch.randn(r, r, c_z, device="cuda")
    tri_start = GatedAttention(c_z, 4, 8, c_bias=c_z)
    tri_end = GatedAttention(c_z, 4, 8, c_bias=c_z)
    tri_start.triangle = tri_end.triangle = True
    pair_mask = res_mask[None, :].expand(r, r)
    return [
        ("MSA row attention with pair bias", GatedAttention(c_m, 8, 8, c_bias=c_z), lambda: (m, z, msa_mask)),
        ("MSA column attention", GatedAttention(c_m, 8, 8), lambda: (m.transpose(0, 1), None, msa_mask.t())),
        ("triangle attention, starting node", tri_start, lambda: (z, z, pair_mask)),
        ("triangle attention, ending node", tri_end, lambda: (z.transpose(0, 1), z.transpose(0, 1), pair_mask)),
        ("template attention, head dim 16", GatedAttention(c_z, 4, 16, c_bias=c_z), lambda: (z, z, pair_mask)),
    ]


def grads_of(module, x, z, mask, dtype, flash):
    """the module's output and the gradients of its input, the pair bias' source and every weight, for a fixed dout"""
    mod = {torch.float32: lambda mm: mm.float(), torch.bfloat16: lambda mm: mm.bfloat16()}[dtype](module)
    x = x.detach().to(dtype).requires_grad_()
    zz = None if z is None else z.detach().to(dtype).requires_grad_()
    out = mod(x, zz, mask, flash=flash)
    torch.manual_seed(2)
    dout = torch.randn(out.shape, device="cuda").to(dtype)
    mod.zero_grad()
    out.backward(dout)
    named = [("out", out), ("d input", x.grad)] + ([("d pair source", zz.grad)] if zz is not None else [])
    named += [(f"d {n}", p.grad) for n, p in mod.named_parameters()]
    return [(n, t.detach().float()) for n, t in named]


def check_module(name, module, inputs):
    module = module.cuda()
    x, z, mask = inputs()
    ref = grads_of(module, x, z, mask, torch.float32, flash=False)
    naive = grads_of(module, x, z, mask, torch.bfloat16, flash=False)
    ours = grads_of(module, x, z, mask, torch.bfloat16, flash=True)
    bad = []
    for (n, r), (_, nv), (_, o) in zip(ref, naive, ours):
        err, tol = (o - r).abs().max().item(), 2 * (nv - r).abs().max().item() + 1e-3
        if not (err <= tol):   # NaN fails too
            bad.append(f"{n}: {err:.3e} > {tol:.3e}")
    if bad:
        raise AssertionError("; ".join(bad))


if __name__ == "__main__":
    for name, module, inputs in module_cases(r=67, s=12, c_m=32, c_z=16):
        run(name, lambda: check_module(name, module, inputs), label="evoformer ")
    failed = sum(1 for r in results if r[0] == "FAIL")
    print(f"test_evoformer: {len(results) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
