#!/usr/bin/env python3
"""One training step's GPU timeline as a picture: every kernel, memcpy and memset as a bar on a time axis,
one row per CUDA stream, the idle gaps on a row of their own, the step's phases as a band on top, and the
idle fraction in the title. The same numbers print as text (span, busy, idle per phase, largest gaps), with the
kernel time per kind (matmul, attention, ...) and the kernels that take the most of it.

  python3 profile/step_timeline.py TRACE [-o step_timeline.png] [--title TEXT] [--top-gaps 8] [--top-kernels 12] [--no-png]

TRACE is one of
  - an nsys export (SQLite):
      nsys profile -t cuda,nvtx --capture-range=cudaProfilerApi -o gpt2_step ./profile_gpt2cu 64 1024
      nsys export --type sqlite -o gpt2_step.sqlite gpt2_step.nsys-rep
    read from CUPTI_ACTIVITY_KIND_KERNEL / _MEMCPY / _MEMSET (start, end, streamId; kernel names through
    StringIds, demangledName else shortName). With NVTX_EVENTS and CUPTI_ACTIVITY_KIND_RUNTIME in the file,
    each record also gets the NVTX ranges open on the launching thread when it was launched.
  - the CSV of `./profile_gpt2cu 64 1024 --timeline step.csv` (CUPTI inside profile_gpt2cu, no nsys):
      kind,name,start_us,end_us,stream
The trace should hold one step: nsys's capture range and profile_gpt2cu's --timeline both record only the
step after the warmup.

Idle: no record of the trace runs on any stream. The span runs from the first start to the last end; walking
the records in start order, each stretch with nothing running is a gap, charged to the phase of the record
that ends it, and each record's time beyond what already ran is its phase's busy time, so per-phase busy +
idle adds up to the span.
Phases: ncu_table.py's rule (assign_phases: optimizer by name or NVTX "norm"/"update", the classifier window
around fused_classifier, forward/backward by NVTX or by order around it); on the band, attention kernels
join the forward or backward around them, and a record never goes back to an earlier phase than the one
before it (the loss and norm readback after global_norm counts as optimizer).

The PNG needs matplotlib; without it the text still prints and the exit code is 3.
"""
import argparse
import csv
import os
import re
import sqlite3
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ncu_table import assign_phases, short_name  # noqa: E402  (the phase rule and name shortening are shared)

BAND = ["forward", "classifier", "backward", "optimizer"]
BAND_COLORS = {"forward": "#cfe2f3", "classifier": "#fce5cd", "backward": "#d9ead3", "optimizer": "#ead1dc",
               "other": "#eeeeee"}
CATEGORIES = [("matmul", "#4c72b0"), ("attention", "#dd8452"), ("layernorm", "#55a868"), ("other kernels", "#8172b3"),
              ("optimizer", "#937860"), ("fp8 casts", "#da8bc3"), ("memcpy / memset", "#8c8c8c")]
IDLE_COLOR = "#c44e52"
MEMCPY_KINDS = {1: "HtoD", 2: "DtoH", 8: "DtoD"}


class TraceError(Exception):
    pass


def record(kind, name, start, end, stream, nvtx=None):
    """one activity; times in µs"""
    return {"kind": kind, "name": name, "start": float(start), "end": float(end), "stream": int(stream), "nvtx": nvtx}


# ----------------------------------------------------------------------------
# reading

def read_csv_trace(path):
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    need = {"name", "start_us", "end_us"}
    if not rows or not need <= set(rows[0]):
        raise TraceError(f"{path}: expected a CSV with columns kind,name,start_us,end_us,stream and at least one row")
    return [record(r.get("kind") or "kernel", r["name"], r["start_us"], r["end_us"], r.get("stream") or 0) for r in rows]


def columns(db, table):
    return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}


def nvtx_lookup(db, tables):
    """correlationId -> the NVTX push/pop ranges (outermost first) open on the launching thread at the launch,
    or None when the export has no NVTX or runtime API tables"""
    if "NVTX_EVENTS" not in tables or "CUPTI_ACTIVITY_KIND_RUNTIME" not in tables:
        return None
    strings = dict(db.execute("SELECT id, value FROM StringIds")) if "StringIds" in tables else {}
    text_id = "textId" if "textId" in columns(db, "NVTX_EVENTS") else "NULL"
    ranges = {}  # thread -> [(start, end, name)]
    for start, end, tid, text, tid_text in db.execute(
            f"SELECT start, end, globalTid, text, {text_id} FROM NVTX_EVENTS WHERE eventType = 59"):
        name = text if text is not None else strings.get(tid_text, "")
        ranges.setdefault(tid, []).append((start, end if end is not None and end >= 0 else float("inf"), name))
    for r in ranges.values():
        r.sort()
    found = {}
    for corr, start, tid in db.execute("SELECT correlationId, start, globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME"):
        found[corr] = [name for s, e, name in ranges.get(tid, []) if s <= start <= e]
    return found


def read_nsys_sqlite(path):
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
            raise TraceError(f"{path}: no CUPTI_ACTIVITY_KIND_KERNEL table (was the report taken with -t cuda?)")
        strings = dict(db.execute("SELECT id, value FROM StringIds")) if "StringIds" in tables else {}
        nvtx = nvtx_lookup(db, tables)
        kcols = columns(db, "CUPTI_ACTIVITY_KIND_KERNEL")
        demangled = "demangledName" if "demangledName" in kcols else "NULL"
        short = "shortName" if "shortName" in kcols else "NULL"
        raw = []  # (kind, name, start ns, end ns, stream, correlationId)
        for start, end, stream, corr, d, s in db.execute(
                f"SELECT start, end, streamId, correlationId, {demangled}, {short} FROM CUPTI_ACTIVITY_KIND_KERNEL"):
            name = strings.get(d) or strings.get(s) or f"kernel {d if d is not None else s}"
            raw.append(("kernel", name, start, end, stream, corr))
        if "CUPTI_ACTIVITY_KIND_MEMCPY" in tables:
            for start, end, stream, corr, kind, nbytes in db.execute(
                    "SELECT start, end, streamId, correlationId, copyKind, bytes FROM CUPTI_ACTIVITY_KIND_MEMCPY"):
                raw.append(("memcpy", f"memcpy {MEMCPY_KINDS.get(kind, 'other')} {nbytes} B", start, end, stream, corr))
        if "CUPTI_ACTIVITY_KIND_MEMSET" in tables:
            for start, end, stream, corr, nbytes in db.execute(
                    "SELECT start, end, streamId, correlationId, bytes FROM CUPTI_ACTIVITY_KIND_MEMSET"):
                raw.append(("memset", f"memset {nbytes} B", start, end, stream, corr))
    finally:
        db.close()
    if not raw:
        raise TraceError(f"{path}: the export holds no kernels")
    t0 = min(r[2] for r in raw)
    return [record(kind, name, (start - t0) / 1e3, (end - t0) / 1e3, stream,
                   None if nvtx is None else nvtx.get(corr, []))
            for kind, name, start, end, stream, corr in raw]


def load_trace(path):
    """-> (records sorted by start, source)"""
    if not os.path.isfile(path):
        raise TraceError(f"{path}: no such file")
    with open(path, "rb") as f:
        sqlite = f.read(16) == b"SQLite format 3\x00"
    records = read_nsys_sqlite(path) if sqlite else read_csv_trace(path)
    records.sort(key=lambda r: (r["start"], r["end"]))
    return records, "nsys" if sqlite else "CUPTI CSV"


# ----------------------------------------------------------------------------
# analysis

def assign_bands(records):
    """r["phase"] from ncu_table's rule, r["band"] the contiguous phase drawn on the band"""
    assign_phases(records)
    names = [r["name"].lower() for r in records]
    cls = next((i for i, n in enumerate(names) if "fused_classifier" in n), None)
    if cls is None:  # no classifier to order around: no band
        for r in records:
            r["band"] = "other"
        return
    level = 0
    for i, r in enumerate(records):
        p = r["phase"]
        if p == "attention":
            p = "forward" if i < cls else "backward"
        if p in BAND:
            level = max(level, BAND.index(p))
        r["band"] = BAND[level]


def idle_stats(records):
    """span, busy, idle, the gaps and per-band busy / idle (µs); records sorted by start, bands assigned"""
    start, end = records[0]["start"], max(r["end"] for r in records)
    gaps, per_band = [], {}
    cur_end, last = start, 0  # what has run so far ends at cur_end, set by records[last]
    for i, r in enumerate(records):
        # a band's stretch of the span runs from where the previous band's stopped to its own last end
        b = per_band.setdefault(r["band"], {"busy": 0.0, "idle": 0.0, "count": 0, "from": cur_end})
        b["count"] += 1
        if r["start"] > cur_end:
            gaps.append({"start": cur_end, "end": r["start"], "before": last, "after": i})
            b["idle"] += r["start"] - cur_end
        b["busy"] += max(0.0, r["end"] - max(r["start"], cur_end))
        if r["end"] > cur_end:
            cur_end, last = r["end"], i
        b["to"] = cur_end
    idle = sum(g["end"] - g["start"] for g in gaps)
    return {"start": start, "end": end, "span": end - start, "busy": end - start - idle, "idle": idle,
            "gaps": gaps, "per_band": per_band}


def category(r):
    n = r["name"].lower()
    if r["kind"] != "kernel":
        return "memcpy / memset"
    if "attention" in n:
        return "attention"
    if any(k in n for k in ("nvjet", "gemm", "cutlass", "xmma", "splitkreduce", "cublas", "matmul")):
        return "matmul"
    if "layernorm" in n:
        return "layernorm"
    if "adamw" in n or "global_norm" in n:
        return "optimizer"
    if "fp8_" in n:   # -fp8: the casts to FP8 and the scales' upkeep (src/fp8.cuh)
        return "fp8 casts"
    return "other kernels"


def label(name):
    """a kernel name short enough for a bar or a line: 'gemm 256x128 NNT', 'attn_bwd_dq_hopper_ws'"""
    n = short_name(name)
    m = re.match(r"nvjet_.*?_(\d+x\d+)_.*_([NT]{3})$", n)
    if m:
        return f"gemm {m.group(1)} {m.group(2)}"
    m = re.search(r"tilesize(\d+x\d+x\d+)", n)
    if m and "gemm" in n:
        return f"gemm {m.group(1)}" + (" dgelu" if "dgelu" in n else "")
    for a, b in (("_kernel", ""), ("attention", "attn"), ("backward", "bwd"), ("forward", "fwd"), ("layernorm", "ln")):
        n = n.replace(a, b)
    return n if len(n) <= 36 else n[:35] + "…"


def time_by(records, key):
    """{key(record): (records, µs summed)}"""
    out = {}
    for r in records:
        count, us = out.get(key(r), (0, 0.0))
        out[key(r)] = (count + 1, us + r["end"] - r["start"])
    return out


def kernel_time_tables(records, top_kernels):
    """kernel time summed per category, and the top_kernels kernels (by label) that take the most of it"""
    kernels = [r for r in records if r["kind"] == "kernel"]
    total = sum(r["end"] - r["start"] for r in kernels)
    if total <= 0:
        return []
    lines = ["", f"kernel time {total / 1e3:.3f} ms (each kernel's start to end, summed):", "",
             "| kind | kernels | ms | % |", "|---|---:|---:|---:|"]
    per_kind = time_by(kernels, category)
    for name, _ in CATEGORIES:
        if name in per_kind:
            count, us = per_kind[name]
            lines.append(f"| {name} | {count} | {us / 1e3:.3f} | {100 * us / total:.1f} |")
    if top_kernels > 0:
        lines += ["", "| kernel | kind | calls | ms | % |", "|---|---|---:|---:|---:|"]
        kind_of = {label(r["name"]): category(r) for r in kernels}
        per_kernel = time_by(kernels, lambda r: label(r["name"]))
        for name, (calls, us) in sorted(per_kernel.items(), key=lambda kv: -kv[1][1])[:top_kernels]:
            lines.append(f"| {name} | {kind_of[name]} | {calls} | {us / 1e3:.3f} | {100 * us / total:.1f} |")
    return lines


def summary(records, stats, source, path, top_gaps, top_kernels=0):
    streams = sorted({r["stream"] for r in records})
    counts = {k: sum(r["kind"] == k for r in records) for k in ("kernel", "memcpy", "memset")}
    gaps = stats["gaps"]
    lines = [f"step_timeline: {path} ({source}): {counts['kernel']} kernels, {counts['memcpy']} memcpy, "
             f"{counts['memset']} memset on {len(streams)} stream(s)",
             f"span {stats['span'] / 1e3:.3f} ms, busy {stats['busy'] / 1e3:.3f} ms, idle {stats['idle'] / 1e3:.3f} ms = "
             f"{idle_pct(stats):.2f}% of the span, in {len(gaps)} gaps "
             f"({sum(g['end'] - g['start'] >= 10 for g in gaps)} of them >= 10 µs)",
             "",
             "| phase | records | ms | busy ms | idle ms | idle % |",
             "|---|---:|---:|---:|---:|---:|"]
    for band in BAND + ["other"]:
        b = stats["per_band"].get(band)
        if b:
            t = b["busy"] + b["idle"]
            lines.append(f"| {band} | {b['count']} | {t / 1e3:.3f} | {b['busy'] / 1e3:.3f} | {b['idle'] / 1e3:.3f} | "
                         f"{100 * b['idle'] / t if t > 0 else 0:.2f} |")
    if gaps and top_gaps > 0:
        lines += ["", f"largest gaps (of {len(gaps)}):"]
        for g in sorted(gaps, key=lambda g: -(g["end"] - g["start"]))[:top_gaps]:
            lines.append(f"  {g['end'] - g['start']:9.1f} µs at {g['start'] / 1e3:8.3f} ms: after "
                         f"{label(records[g['before']]['name'])}, before {label(records[g['after']]['name'])}")
    lines += kernel_time_tables(records, top_kernels)
    return "\n".join(lines)


def idle_pct(stats):
    return 100 * stats["idle"] / stats["span"] if stats["span"] > 0 else 0.0


# ----------------------------------------------------------------------------
# the picture

def draw_png(records, stats, source, out_path, title, mark_gaps_us):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    t0 = stats["start"]
    ms = lambda us: (us - t0) / 1e3  # noqa: E731
    streams = sorted({r["stream"] for r in records})
    rows = len(streams) + 2  # phases on top, idle at the bottom
    fig, ax = plt.subplots(figsize=(18, 1.4 + 0.55 * rows))
    y_phase, y_idle = rows - 1, 0
    y_stream = {s: rows - 2 - i for i, s in enumerate(streams)}
    span_ms = stats["span"] / 1e3

    # the phase band: each phase's stretch of the span, the busy and idle time the summary charges to it
    for band, b in stats["per_band"].items():
        lo, hi = b["from"], b["to"]
        ax.broken_barh([(ms(lo), (hi - lo) / 1e3)], (y_phase - 0.4, 0.8), facecolors=BAND_COLORS[band], edgecolor="#999999")
        ax.text(ms((lo + hi) / 2), y_phase, f"{band}\nidle {100 * b['idle'] / max(hi - lo, 1e-9):.1f}%",
                ha="center", va="center", fontsize=7, clip_on=True)

    # the records, colored by category; the longest get a label
    totals = time_by(records, category)
    for name, color in CATEGORIES:
        mine = [r for r in records if category(r) == name]
        for s in streams:
            bars = [(ms(r["start"]), max((r["end"] - r["start"]) / 1e3, 0.0)) for r in mine if r["stream"] == s]
            if bars:
                ax.broken_barh(bars, (y_stream[s] - 0.4, 0.8), facecolors=color, edgecolor="none")
    for r in records:
        if (r["end"] - r["start"]) / 1e3 >= 0.012 * span_ms:
            ax.text(ms((r["start"] + r["end"]) / 2), y_stream[r["stream"]], label(r["name"]), rotation=90,
                    ha="center", va="center", fontsize=5.5, color="white", clip_on=True)

    # the gaps at their true width, and a hairline at each one of at least mark_gaps_us so short ones show
    gaps = stats["gaps"]
    ax.broken_barh([(ms(g["start"]), (g["end"] - g["start"]) / 1e3) for g in gaps], (y_idle - 0.4, 0.8),
                   facecolors=IDLE_COLOR, edgecolor="none")
    marks = [ms(g["start"]) for g in gaps if g["end"] - g["start"] >= mark_gaps_us]
    if marks:
        ax.vlines(marks, y_idle - 0.4, y_idle + 0.4, colors=IDLE_COLOR, linewidth=0.5)
    for g in sorted(gaps, key=lambda g: -(g["end"] - g["start"]))[:5]:
        ax.text(ms(g["start"]), y_idle + 0.45, f"{g['end'] - g['start']:.0f} µs", fontsize=6, ha="center", va="bottom",
                color=IDLE_COLOR, clip_on=True)

    ax.set_xlim(0, span_ms)
    ax.set_ylim(-0.7, rows - 0.4)
    ticks = [y_idle] + [y_stream[s] for s in streams] + [y_phase]
    labels = [f"idle ({len(gaps)} gaps)"] + [f"stream {s} ({sum(r['stream'] == s for r in records)})" for s in streams] + ["phase"]
    ax.set_yticks(ticks)
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xlabel("ms from the step's first GPU activity", fontsize=9)
    ax.tick_params(axis="x", labelsize=8)
    ax.set_title(title or f"{source}: one training step, {span_ms:.2f} ms, {len(records)} records on {len(streams)} "
                          f"stream(s); GPU idle {idle_pct(stats):.2f}% ({stats['idle'] / 1e3:.3f} ms in {len(gaps)} gaps)",
                 fontsize=10)
    handles = [Patch(color=c, label=f"{n} {totals[n][1] / 1e3:.2f} ms") for n, c in CATEGORIES if totals.get(n, (0, 0.0))[1] > 0]
    handles.append(Patch(color=IDLE_COLOR, label=f"idle {stats['idle'] / 1e3:.3f} ms"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.35 if rows <= 3 else -0.2), ncol=len(handles),
              fontsize=8, frameon=False)
    fig.savefig(out_path, dpi=150, bbox_inches="tight")
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description="a GPU trace of one training step -> a timeline PNG and idle summary")
    ap.add_argument("trace", help="nsys SQLite export or profile_gpt2cu --timeline CSV")
    ap.add_argument("-o", "--out", default="step_timeline.png", help="PNG to write (default step_timeline.png)")
    ap.add_argument("--title", default=None, help="the picture's title (default: source, span and idle fraction)")
    ap.add_argument("--top-gaps", type=int, default=8, help="how many of the largest gaps to list")
    ap.add_argument("--top-kernels", type=int, default=12, help="how many kernels to list by their summed time")
    ap.add_argument("--mark-gaps-us", type=float, default=5.0, help="hairline every gap at least this long (µs)")
    ap.add_argument("--no-png", action="store_true", help="print the summary only")
    args = ap.parse_args()
    try:
        records, source = load_trace(args.trace)
    except (TraceError, sqlite3.DatabaseError, ValueError, KeyError) as e:
        sys.exit(f"step_timeline: {e}")
    assign_bands(records)
    stats = idle_stats(records)
    print(summary(records, stats, source, args.trace, args.top_gaps, args.top_kernels))
    if args.no_png:
        return 0
    try:
        draw_png(records, stats, source, args.out, args.title, args.mark_gaps_us)
    except ImportError as e:
        print(f"no PNG: {e} (pip install matplotlib, or draw it where matplotlib is installed; --no-png skips this)")
        return 3
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
