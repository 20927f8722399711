#!/usr/bin/env python3
"""KV-cache decoding bandwidth: flashgpt's kvcache_attention (contiguous; paged in pages of 256 from a shuffled pool;
paged with one new token appended, rotary and causal, as an engine's decode step runs it) against PyTorch SDPA's cuDNN
and FlashAttention-2 backends, at GQA 32/8, head dim 128, one query token, batch 1 / 8 / 64 and caches of 8K / 32K /
128K keys. Every call is timed as a CUDA graph of 20 calls, each reading the next of several caches so that together
they pass the 50 MB L2 (as a model's layers do); medians of 15 replays. The copy rates are device-to-device copies
timed the same way: of 1 GiB (the device's rate), and of the case's own byte count (read + write = the K and V bytes,
through as many buffers), which shows what a memory-bound call of that size can reach.
  python3 scripts/bench_kvcache.py            (needs a CUDA PyTorch and the library: make lib)
"""
import sys
import os
import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import flashgpt_attention as fg  # noqa: E402

REPS = 20
H, H_KV, D, PAGE = 32, 8, 128, 256


def graph_ms(fn):
    """milliseconds per call of fn, replayed as a CUDA graph of REPS calls (median of 15 replays)"""
    for _ in range(3):
        fn()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(REPS):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(15):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / REPS)
    return sorted(times)[len(times) // 2]


def cycling(buffers):
    """a counter that picks the next of the buffers at each call (a graph records each call's own pick)"""
    state = [0]
    def pick():
        state[0] += 1
        return buffers[state[0] % len(buffers)]
    return pick


def copy_gbs(total_bytes, copies):
    """device-to-device copy rate (read + write bytes per second) of total_bytes, cycled through copies buffers"""
    n = total_bytes // 4   # bf16 elements read (and written) per copy
    pairs = [(torch.empty(n, dtype=torch.bfloat16, device="cuda"), torch.empty(n, dtype=torch.bfloat16, device="cuda"))
             for _ in range(copies)]
    pick = cycling(pairs)
    def run():
        src, dst = pick()
        dst.copy_(src)
    t = graph_ms(run)
    return 4 * n / t / 1e6


def main():
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}")
    device_copy = copy_gbs(1 << 30, 1)
    print(f"# copy rate (1 GiB): {device_copy:.0f} GB/s")
    print("| B | keys | KV MB | flashgpt us | GB/s | % copy rate | % same-size copy | paged / contiguous | "
          "append+rotary / contiguous | cuDNN GB/s | flashgpt / cuDNN | FA2 GB/s | paged bit-identical |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for B in (1, 8, 64):
        for Tk in (8192, 32768, 131072):
            kv_bytes = 2 * B * Tk * H_KV * D * 2
            copies = max(1, -(-160_000_000 // kv_bytes))
            q = torch.randn(B, 1, H, D, device="cuda", dtype=torch.bfloat16)
            lens = torch.full((B,), Tk, dtype=torch.int32, device="cuda")
            out = torch.empty_like(q)
            caches = [(torch.randn(B, Tk, H_KV, D, device="cuda", dtype=torch.bfloat16),
                       torch.randn(B, Tk, H_KV, D, device="cuda", dtype=torch.bfloat16)) for _ in range(copies)]
            pick = cycling(caches)
            t_contig = graph_ms(lambda: fg.kvcache_attention(q, *pick(), cache_seqlens=lens, out=out))
            ref = fg.kvcache_attention(q, *caches[0], cache_seqlens=lens)
            # the same keys in pages of PAGE positions, scattered through a pool
            n = Tk // PAGE
            paged = []
            for kc, vc in caches:
                table = torch.randperm(B * n, device="cuda", dtype=torch.int32).reshape(B, n)
                kp = torch.empty(B * n, PAGE, H_KV, D, device="cuda", dtype=torch.bfloat16)
                vp = torch.empty_like(kp)
                kp[table.long().flatten()] = kc.reshape(B * n, PAGE, H_KV, D)
                vp[table.long().flatten()] = vc.reshape(B * n, PAGE, H_KV, D)
                paged.append((kp, vp, table))
            pick = None   # the closures' buffers go with it
            del caches, kc, vc
            pick = cycling(paged)
            def run_paged():
                kp, vp, table = pick()
                fg.kvcache_attention(q, kp, vp, cache_seqlens=lens, block_table=table, out=out)
            t_paged = graph_ms(run_paged)
            kp, vp, table = paged[0]
            same = torch.equal(ref, fg.kvcache_attention(q, kp, vp, cache_seqlens=lens, block_table=table))
            k_new = torch.randn(B, 1, H_KV, D, device="cuda", dtype=torch.bfloat16)
            v_new = torch.randn_like(k_new)
            cos = torch.randn(Tk, D // 2, device="cuda", dtype=torch.bfloat16)
            sin = torch.randn_like(cos)
            def run_append():
                kp, vp, table = pick()
                fg.kvcache_attention(q, kp, vp, k_new, v_new, cache_seqlens=lens - 1, block_table=table, rotary_cos=cos,
                                     rotary_sin=sin, causal=True, out=out)
            t_append = graph_ms(run_append)
            pick = None
            del paged, kp, vp, table
            # SDPA takes (B, H, T, D)
            caches = [(torch.randn(B, H_KV, Tk, D, device="cuda", dtype=torch.bfloat16),
                       torch.randn(B, H_KV, Tk, D, device="cuda", dtype=torch.bfloat16)) for _ in range(copies)]
            pick = cycling(caches)
            qs = q.transpose(1, 2).contiguous()
            anchors = {}
            for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("fa2", SDPBackend.FLASH_ATTENTION)):
                try:
                    with sdpa_kernel(backend):
                        anchors[name] = kv_bytes / graph_ms(lambda: F.scaled_dot_product_attention(qs, *pick(), enable_gqa=True)) / 1e6
                except RuntimeError as e:
                    anchors[name] = float("nan")
                    print(f"# {name} at B={B} keys={Tk}: {str(e).splitlines()[0][:100]}")
            pick = None
            del caches
            torch.cuda.empty_cache()
            same_size_copy = copy_gbs(kv_bytes, copies)
            gbs = kv_bytes / t_contig / 1e6
            print(f"| {B} | {Tk} | {kv_bytes / 1e6:.1f} | {t_contig * 1e3:.1f} | {gbs:.0f} | {100 * gbs / device_copy:.0f}% | "
                  f"{100 * gbs / same_size_copy:.0f}% | {t_paged / t_contig:.3f} | {t_append / t_contig:.3f} | "
                  f"{anchors['cudnn']:.0f} | {gbs / anchors['cudnn']:.2f} | {anchors['fa2']:.0f} | {same} |")


if __name__ == "__main__":
    main()
