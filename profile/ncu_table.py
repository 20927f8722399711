#!/usr/bin/env python3
"""Turns an Nsight Compute CSV of ONE training step (profile_gpt2cu between cudaProfilerStart/Stop)
into two markdown tables: one row per kernel (summed over its calls), then one row per phase
(forward, attention, classifier, backward, optimizer). Standard library only.

  python3 profile/ncu_table.py ncu_step.csv [--gpu "NVIDIA H200"] [--step-ms 512.3]
                               [--peak-tflops 989] [--peak-gbps 4800] [--flops-per-tensor-op 1]

The CSV comes from profile/ncu_step.sh, which runs:
  ncu --clock-control none --profile-from-start off --replay-mode application --nvtx --csv --page raw \
      --print-units base --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,\
sm__ops_path_tensor_src_bf16_dst_fp32.sum \
      ./profile_gpt2cu 64 1024 > ncu_step.csv
The raw page is a header row (fixed columns "ID", "Kernel Name", ... then one column per metric), a
units row, then one row per kernel launch. Cells are quoted, may hold commas ("void k<float, 4>(int, int)")
and thousands separators ("1,234"). The profiled program's own stdout may come before the header.
A metric that is missing, or "n/a", prints "-".

What each kernel row reports:
  - tensor-core kernels (sm__ops_path_tensor_src_bf16_dst_fp32 > 0): TFLOP/s = ops * --flops-per-tensor-op
    / time, and % of the bf16 dense ceiling. If that counter is absent but a tensor pipe is busy
    (hmma on sm_80, gmma = wgmma on sm_90) the row reports "% tensor pipe" instead.
  - everything else: GB/s = (dram read + write bytes) / time, and % of the HBM ceiling.
  Ceilings: H100 SXM 989 TFLOP/s bf16 dense and 3350 GB/s; H200 989 and 4800 GB/s; picked from --gpu
  (or a device__attribute_display_name column), else H100; --peak-* override them.
"% of step" is of the summed kernel time in the CSV: ncu serializes kernels, so there is no overlap and no
launch gap in it. --step-ms (the same step timed without ncu) prints the two side by side.

Phase rule (each kernel gets exactly one phase, in this order of precedence):
  1. optimizer: kernel name contains "adamw" or "global_norm", or an NVTX range "norm" / "update" encloses it.
  2. attention: kernel name contains "attention" (forward, backward and its pre/postprocess kernels).
  3. classifier: the kernels around the first "fused_classifier" kernel, bounded by the nearest "layernorm"
     kernel on each side (exclusive): the lm-head matmul (lnf @ wte^T), fused_classifier, accumulate_loss,
     and the lm-head backward matmuls (dlnf, dwte). train_gpt2.cu runs them between lnf's forward and
     backward layernorm, so this holds without NVTX.
  4. forward / backward: from the enclosing NVTX range "forward" / "backward" when the CSV has ncu's NVTX
     column (ncu --nvtx); otherwise by order: before the fused_classifier kernel is forward, after it backward.
     Without a fused_classifier kernel and without NVTX a kernel is "other".
"""
import argparse
import csv
import re
import sys

# (substring of the GPU name, bf16 dense TFLOP/s, HBM GB/s); the first match wins, so H200 precedes H100
CEILINGS = [("H200", 989.0, 4800.0), ("H100", 989.0, 3350.0)]
PHASES = ["forward", "attention", "classifier", "backward", "optimizer", "other"]

M_TIME = "gpu__time_duration.sum"
M_DRAM_RD = "dram__bytes_read.sum"
M_DRAM_WR = "dram__bytes_write.sum"
M_SM = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
M_MEM = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
M_TENSOR_OPS = "sm__ops_path_tensor_src_bf16_dst_fp32.sum"
M_PIPES = ["sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed",
           "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_elapsed"]

# unit prefixes ncu uses when it scales ("usecond", "Mbyte"); --print-units base avoids them, but an
# auto-scaled CSV must read the same
PREFIX = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
          "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40}
BASE_UNITS = ("second", "byte", "inst", "op", "cycle", "warp", "thread", "sector", "request")
SHORT_TIME = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def unit_scale(unit):
    """factor that turns a value in `unit` into base units (seconds, bytes, counts)"""
    u = unit.strip()
    if u in SHORT_TIME:
        return SHORT_TIME[u]
    for base in BASE_UNITS:
        if u.endswith(base):
            prefix = u[: -len(base)]
            if prefix == "":
                return 1.0
            if prefix in PREFIX:
                return PREFIX[prefix]
    return 1.0  # "%", "", or a unit we do not know: take the value as printed


def parse_number(text):
    """'1,234.5' -> 1234.5; 'n/a', '' -> None"""
    t = text.strip().replace(",", "")
    try:
        return float(t)
    except ValueError:
        return None


def short_name(name):
    """'void attention_forward_kernel<64, true>(AttentionForwardParams)' -> 'attention_forward_kernel'.
    Generic wrappers (cutlass::Kernel2<...>, device_kernel<...>) keep their template argument, which is
    the only part that says which GEMM it is."""
    n = name.strip()
    if n.startswith("void "):
        n = n[5:]
    # drop the parameter list: the last top-level "(...)"
    depth = 0
    for i, ch in enumerate(n):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            n = n[:i]
            break
    lt = n.find("<")
    if lt > 0:
        base = n[:lt]
        if base.endswith("Kernel") or base.endswith("Kernel2") or base.endswith("device_kernel"):
            n = base + "<" + n[lt + 1:].rstrip(">")[:60] + ">"
        else:
            n = base
    return n.strip()


def nvtx_names(cell):
    """Range names in ncu's NVTX cell, outermost first. ncu writes each pushed range as
    "<domain>:<name>:<payload/color/message fields>" in quotes, after the thread id."""
    quoted = re.findall(r'"([^"]*)"', cell)
    if quoted:
        return [q.split(":")[1] if q.count(":") >= 1 else q for q in quoted]
    return [p for p in re.split(r"[:/]", cell) if p]


def read_ncu_csv(path):
    """-> (kernels, columns): one dict per launch, in launch order, with 'name', 'nvtx' (a list of range names,
    or None without an NVTX column) and every metric in base units (None where missing)."""
    lines = open(path, newline="", encoding="utf-8-sig", errors="replace").read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID",')), None)
    if start is None:
        sys.exit(f"{path}: no ncu CSV header (a line starting with \"ID\",) found")
    rows = list(csv.reader(lines[start:]))
    header = rows[0]
    col = {h: i for i, h in enumerate(header)}
    if "Kernel Name" not in col:
        sys.exit(f"{path}: the header has no \"Kernel Name\" column")
    nvtx_col = next((i for i, h in enumerate(header) if "Push/Pop_Range" in h), None)
    body = rows[1:]
    units = [""] * len(header)
    # the units row: same width, and an empty ID
    if body and len(body[0]) == len(header) and body[0][col["ID"]].strip() == "":
        units, body = body[0], body[1:]
    fixed = {"ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
             "Grid Size", "Device", "CC", "device__attribute_display_name"}
    metric_cols = [(h, i) for i, h in enumerate(header) if h not in fixed and i != nvtx_col]
    kernels = []
    for row in body:
        if len(row) != len(header) or parse_number(row[col["ID"]]) is None:
            continue  # program output or ncu messages after the table
        k = {"name": row[col["Kernel Name"]], "nvtx": nvtx_names(row[nvtx_col]) if nvtx_col is not None else None}
        if "device__attribute_display_name" in col:
            k["gpu"] = row[col["device__attribute_display_name"]]
        for h, i in metric_cols:
            v = parse_number(row[i])
            k[h] = None if v is None else v * unit_scale(units[i])
        kernels.append(k)
    if not kernels:
        sys.exit(f"{path}: the CSV holds no kernel rows")
    if kernels[0].get(M_TIME) is None:
        sys.exit(f"{path}: no {M_TIME} values; it is needed for every number here")
    return kernels, set(h for h, _ in metric_cols)


def assign_phases(kernels):
    names = [k["name"].lower() for k in kernels]
    cls = next((i for i, n in enumerate(names) if "fused_classifier" in n), None)
    lo, hi = -1, -1  # classifier window [lo, hi)
    if cls is not None:
        lo = cls
        while lo > 0 and "layernorm" not in names[lo - 1]:
            lo -= 1
        hi = cls + 1
        while hi < len(names) and "layernorm" not in names[hi]:
            hi += 1
    for i, k in enumerate(kernels):
        n, ranges = names[i], k["nvtx"] or []
        if "adamw" in n or "global_norm" in n or "norm" in ranges or "update" in ranges:
            k["phase"] = "optimizer"
        elif "attention" in n:
            k["phase"] = "attention"
        elif lo <= i < hi:
            k["phase"] = "classifier"
        elif "backward" in ranges:
            k["phase"] = "backward"
        elif "forward" in ranges:
            k["phase"] = "forward"
        elif cls is not None:
            k["phase"] = "forward" if i < cls else "backward"
        else:
            k["phase"] = "other"


class Sum:
    """time-weighted sums over a group of launches"""

    def __init__(self):
        self.calls, self.time, self.bytes, self.ops = 0, 0.0, 0.0, 0.0
        self.have_bytes = self.have_ops = False
        self.pct = {}  # metric -> (sum of value*time, sum of time)

    def add(self, k):
        t = k[M_TIME] or 0.0
        self.calls += 1
        self.time += t
        rd, wr = k.get(M_DRAM_RD), k.get(M_DRAM_WR)
        if rd is not None or wr is not None:
            self.have_bytes = True
            self.bytes += (rd or 0.0) + (wr or 0.0)
        if k.get(M_TENSOR_OPS) is not None:
            self.have_ops = True
            self.ops += k[M_TENSOR_OPS]
        for m in [M_SM, M_MEM] + M_PIPES:
            if k.get(m) is not None:
                s, w = self.pct.get(m, (0.0, 0.0))
                self.pct[m] = (s + k[m] * t, w + t)

    def avg_pct(self, m):
        s, w = self.pct.get(m, (0.0, 0.0))
        return s / w if w > 0 else None

    def pipe_pct(self):
        vals = [v for v in (self.avg_pct(m) for m in M_PIPES) if v is not None]
        return max(vals) if vals else None


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def achieved(s, peak_tflops, peak_gbps, flops_per_op):
    """-> (text, % of ceiling) for one group: TFLOP/s if it used the tensor cores, else GB/s"""
    if s.time <= 0:
        return "-", "-"
    if s.have_ops and s.ops > 0:
        tflops = s.ops * flops_per_op / s.time / 1e12
        return f"{tflops:.1f} TFLOP/s", f"{100 * tflops / peak_tflops:.1f}%"
    pipe = s.pipe_pct()
    if not s.have_ops and pipe is not None and pipe >= 1.0:
        return "tensor pipe", f"{pipe:.1f}%"
    if s.have_bytes:
        gbs = s.bytes / s.time / 1e9
        return f"{gbs:.0f} GB/s", f"{100 * gbs / peak_gbps:.1f}%"
    return "-", "-"


def main():
    ap = argparse.ArgumentParser(description="ncu raw CSV of one training step -> per-kernel and per-phase markdown tables")
    ap.add_argument("csv")
    ap.add_argument("--gpu", default=None, help="GPU name, picks the ceilings (default: from the CSV, else H100)")
    ap.add_argument("--peak-tflops", type=float, default=None, help="bf16 dense tensor ceiling, TFLOP/s")
    ap.add_argument("--peak-gbps", type=float, default=None, help="HBM ceiling, GB/s")
    ap.add_argument("--step-ms", type=float, default=None, help="the step timed without ncu, ms")
    ap.add_argument("--flops-per-tensor-op", type=float, default=1.0,
                    help="FLOPs per count of sm__ops_path_tensor_* (1 if it counts FLOPs, 2 if it counts FMAs)")
    args = ap.parse_args()

    kernels, columns = read_ncu_csv(args.csv)
    assign_phases(kernels)
    gpu = args.gpu or kernels[0].get("gpu") or ""
    ceiling = next((c for c in CEILINGS if c[0] in gpu.upper()), None)
    gpu_note = gpu if ceiling else (f"{gpu or 'unknown GPU'}, H100 ceilings assumed")
    ceiling = ceiling or CEILINGS[1]
    peak_tflops = args.peak_tflops or ceiling[1]
    peak_gbps = args.peak_gbps or ceiling[2]

    per_kernel, per_phase, total = {}, {p: Sum() for p in PHASES}, Sum()
    for k in kernels:
        key = (short_name(k["name"]), k["phase"])
        per_kernel.setdefault(key, Sum()).add(k)
        per_phase[k["phase"]].add(k)
        total.add(k)
    step_s = total.time
    source = "NVTX ranges" if kernels[0]["nvtx"] is not None else "kernel order"
    missing = [m for m in [M_DRAM_RD, M_DRAM_WR, M_SM, M_MEM, M_TENSOR_OPS] + M_PIPES if m not in columns]

    print(f"## ncu: one training step, {len(kernels)} kernel launches ({gpu_note})\n")
    line = f"Kernel time summed over the step: {step_s * 1e3:.2f} ms"
    if args.step_ms:
        line += f"; the same step without ncu: {args.step_ms:.2f} ms (kernel sum = {100 * step_s * 1e3 / args.step_ms:.1f}% of it)"
    print(line + ".")
    print(f"Ceilings: {peak_tflops:.0f} TFLOP/s bf16 dense, {peak_gbps:.0f} GB/s HBM. Phases from {source}.")
    if missing:
        print("Not in the CSV (shown as -): " + ", ".join(missing) + ".")
    print()
    print("| kernel | phase | calls | total ms | % of step | avg µs | SM % | mem % | achieved | % of ceiling |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for (name, phase), s in sorted(per_kernel.items(), key=lambda kv: -kv[1].time):
        ach, pct = achieved(s, peak_tflops, peak_gbps, args.flops_per_tensor_op)
        print(f"| {name} | {phase} | {s.calls} | {s.time * 1e3:.3f} | {100 * s.time / step_s:.1f} | "
              f"{s.time * 1e6 / s.calls:.1f} | {fmt(s.avg_pct(M_SM), '.0f')} | {fmt(s.avg_pct(M_MEM), '.0f')} | {ach} | {pct} |")
    print()
    # a phase mixes matmuls and memory-bound kernels, so it gets both rates over its whole time
    print("| phase | calls | total ms | % of step | tensor TFLOP/s | DRAM GB/s |")
    print("|---|---:|---:|---:|---:|---:|")
    for p in PHASES + ["total"]:
        s = total if p == "total" else per_phase[p]
        if s.calls == 0:
            continue
        tflops = s.ops * args.flops_per_tensor_op / s.time / 1e12 if s.have_ops and s.time > 0 else None
        gbs = s.bytes / s.time / 1e9 if s.have_bytes and s.time > 0 else None
        print(f"| {p} | {s.calls} | {s.time * 1e3:.3f} | {100 * s.time / step_s:.1f} | {fmt(tflops, '.1f')} | {fmt(gbs, '.0f')} |")

if __name__ == "__main__":
    main()
