#!/usr/bin/env python3
"""Host cost of one attention call: microseconds of CPU time per call of flashgpt's compiled ops (what a
torch.compile'd model runs) and eager calls, against PyTorch SDPA's cuDNN ops and eager SDPA, at 1 x 1 x 64 x 64 causal
bf16 (so small that the GPU never limits a loop of calls), with dropout 0 and 0.2.

  make lib && python3 scripts/bench_host_cost.py [--rounds 30] [--calls 300]

The host's speed drifts by tens of percent within seconds, so every item is timed once a round, in alternating order,
for --rounds rounds of --calls calls each, all in one process; the table gives each item's median, quartiles and
minimum. Needs a CUDA GPU and PyTorch with the cuDNN SDPA backend.
"""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import flashgpt_attention as fg  # noqa: E402  (registers torch.ops.flashgpt)


def items(p):
    """(name, call) pairs at dropout p, each call one attention call"""
    B, H, T, D = 1, 1, 64, 64
    qkv = torch.randn(B, T, 3 * H * D, device="cuda", dtype=torch.bfloat16)
    q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in qkv.split(H * D, dim=2))   # nanoGPT's views
    dout = torch.randn(B, T, H, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    cudnn = torch.ops.aten._scaled_dot_product_cudnn_attention.default
    cudnn_bwd = torch.ops.aten._scaled_dot_product_cudnn_attention_backward.default
    o = cudnn(q, k, v, None, True, p, True, False, scale=0.125)
    # the compiled ops' arguments as _CompiledAttention passes them: out (B, T, H, D) memory, whole gradients
    out, lse = torch.empty(B, T, H, D, device="cuda", dtype=torch.bfloat16), torch.empty(B, H, T, device="cuda")
    grads = [torch.empty(B, T, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
    seed = torch.ops.flashgpt.attention.default(q, k, v, out, lse, True, 0.125, "bhtd", -1, -1, 0.0, None, p, None)
    return [
        (f"SDPA cuDNN op, forward, p={p}", lambda: cudnn(q, k, v, None, True, p, True, False, scale=0.125)),
        (f"flashgpt op, forward, p={p}", lambda: torch.ops.flashgpt.attention.default(
            q, k, v, out, lse, True, 0.125, "bhtd", -1, -1, 0.0, None, p, None)),
        (f"SDPA cuDNN op, backward, p={p}", lambda: cudnn_bwd(dout, q, k, v, o[0], o[1], o[6], o[7], None, o[2], o[3],
                                                               o[4], o[5], p, True, scale=0.125)),
        (f"flashgpt op, backward, p={p}", lambda: torch.ops.flashgpt.attention_backward.default(
            dout, q, k, v, out, lse, *grads, 7, True, 0.125, "bhtd", -1, -1, 0.0, None, p, seed)),
        (f"F.scaled_dot_product_attention, eager, p={p}",
         lambda: F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)),
        (f"flashgpt flash_attention, eager, p={p}", lambda: fg.flash_attention(q, k, v, causal=True, dropout_p=p)),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    torch.manual_seed(0)
    calls = items(0.0) + items(0.2)
    times = {name: [] for name, _ in calls}
    with torch.no_grad():   # (the ops take and write their tensors themselves: no autograd graph is built)
        for _, fn in calls:
            for _ in range(100):
                fn()
        torch.cuda.synchronize()
        for r in range(args.rounds):
            for name, fn in (calls if r % 2 == 0 else calls[::-1]):
                start = time.perf_counter()
                for _ in range(args.calls):
                    fn()
                times[name].append((time.perf_counter() - start) / args.calls * 1e6)
                torch.cuda.synchronize()
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}; us of host time a call, {args.rounds} rounds of "
          f"{args.calls} calls")
    print("| call | median | quartiles | min |\n|---|---|---|---|")
    for name, _ in calls:
        x = sorted(times[name])
        n = len(x)
        print(f"| {name} | {x[n // 2]:.1f} | {x[n // 4]:.1f}-{x[3 * n // 4]:.1f} | {x[0]:.1f} |")


if __name__ == "__main__":
    main()
