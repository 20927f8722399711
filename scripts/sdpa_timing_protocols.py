"""
Times PyTorch SDPA's cuDNN (or FlashAttention-2) causal bf16 attention under the two timing protocols in use here,
so the dev harness's figures and sdpa_anchor.py's can be put side by side fairly:

    python scripts/sdpa_timing_protocols.py [--backend cudnn|flash] [--reps 100] B,NH,T,HS ...

  back-to-back  CUDA events around each of --reps launches, no synchronisation in between: what dev/cuda's harness
                does by default
  sync-each     the same, synchronised after every launch: what sdpa_anchor.py does (with 30 reps); the harness's
                --sync-each flag times flashgpt's kernels this way

Prints median and minimum ms of the forward and of forward + backward for each protocol. Needs a CUDA GPU and
PyTorch with SDPA backend selection (torch.nn.attention.sdpa_kernel).
"""

import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def timed(fn, reps, sync_each):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in events:
        start.record()
        fn()
        end.record()
        if sync_each:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    times = sorted(start.elapsed_time(end) for start, end in events)
    return times[len(times) // 2], times[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("shapes", nargs="+", help="B,NH,T,HS")
    parser.add_argument("--backend", choices=["cudnn", "flash"], default="cudnn")
    parser.add_argument("--reps", type=int, default=100)
    args = parser.parse_args()
    backend = SDPBackend.CUDNN_ATTENTION if args.backend == "cudnn" else SDPBackend.FLASH_ATTENTION
    print(f"# torch {torch.__version__} | {torch.cuda.get_device_name()} | {args.backend} | ms median / min of {args.reps}")
    for shape in args.shapes:
        B, NH, T, HS = map(int, shape.split(","))
        q = torch.randn(B, NH, T, HS, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn_like(q, requires_grad=True)
        v = torch.randn_like(q, requires_grad=True)
        dout = torch.randn_like(q)
        with sdpa_kernel(backend):
            def fwd():
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)

            def fwd_bwd():
                F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(dout)

            for name, fn in (("fwd", fwd), ("f+b", fwd_bwd)):
                b2b = timed(fn, args.reps, sync_each=False)
                sync = timed(fn, args.reps, sync_each=True)
                print(f"{shape:>16} {name}: back-to-back {b2b[0]:.3f} / {b2b[1]:.3f} | sync-each {sync[0]:.3f} / {sync[1]:.3f}",
                      flush=True)
        del q, k, v, dout
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
