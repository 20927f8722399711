#!/usr/bin/env python3
"""Turns the RESULT lines of dev/cuda/attention_{forward,backward} and the output of
../shared/bench/sdpa_anchor.py from the SAME device call into a markdown table: one row per
(shape, variant, config) with ms, TFLOP/s and the ratios to variant 2 and to PyTorch's
FlashAttention-2 and cuDNN backends (forward rows against their fwd figures, backward rows
against bwd, and the backward's fwd_bwd_tflops against their fwd+bwd).

  python3 scripts/results_table.py bench.log anchor.log [--best]     (--best: one row per variant)
"""
import re
import sys


def parse_results(path):
    rows = []
    for line in open(path):
        if not line.startswith("RESULT "):
            continue
        parts = line.split()
        row = {"kind": parts[1].replace("attention_", ""), "variant": int(parts[2])}
        for kv in parts[3:]:
            k, v = kv.split("=", 1)
            row[k] = v if k == "cfg" else float(v)
        rows.append(row)
    return rows


def parse_anchor(path):
    """{(B, NH, T, HS): {backend: {"fwd": tf, "bwd": tf, "fb": tf}}}"""
    anchor = {}
    pat = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\w+)\s+\|\s+([\d.]+)\s+([\d.]+)\s+\|\s+([\d.]+)\s+([\d.]+)\s+\|\s+([\d.]+)\s+([\d.]+)")
    for line in open(path):
        m = pat.match(line)
        if m:
            B, NH, T, HS = (int(m.group(i)) for i in range(1, 5))
            anchor.setdefault((B, NH, T, HS), {})[m.group(5)] = {"fwd": float(m.group(7)), "bwd": float(m.group(9)), "fb": float(m.group(11))}
    return anchor


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 2:
        sys.exit(__doc__)
    rows, anchor = parse_results(args[0]), parse_anchor(args[1])
    if "--best" in sys.argv:   # keep the fastest config of each (kind, variant, shape)
        best = {}
        for r in rows:
            key = (r["kind"], r["variant"], r["B"], r["NH"], r["T"], r["HS"])
            if key not in best or r["ms_med"] < best[key]["ms_med"]:
                best[key] = r
        rows = list(best.values())
    print("| kind | B×NH×T×HS | variant | cfg | ms | TF/s | ×v2 | ×FA2 | ×cuDNN | f+b TF/s | f+b ×FA2 | f+b ×cuDNN |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        shape = (int(r["B"]), int(r["NH"]), int(r["T"]), int(r["HS"]))
        a = anchor.get(shape, {})
        which = "fwd" if r["kind"] == "forward" else "bwd"
        ratio = lambda backend, key, tf: f"{tf / a[backend][key]:.2f}" if backend in a and tf else "-"
        fb = r.get("fwd_bwd_tflops")
        vs2 = f"{r['speedup_vs_2']:.2f}" if r.get("speedup_vs_2") else "-"
        print(f"| {r['kind']} | {'×'.join(map(str, shape))} | {r['variant']} | {r['cfg']} | {r['ms_med']:.4f} | {r['tflops']:.1f} | "
              f"{vs2} | {ratio('flash', which, r['tflops'])} | {ratio('cudnn', which, r['tflops'])} | "
              f"{fb if fb else '-'} | {ratio('flash', 'fb', fb)} | {ratio('cudnn', 'fb', fb)} |")


if __name__ == "__main__":
    main()
