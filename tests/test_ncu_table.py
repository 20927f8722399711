#!/usr/bin/env python3
"""CPU test of profile/ncu_table.py on tests/ncu_step_fixture.csv, a hand-made ncu raw CSV of a tiny
"step" (20 launches: program output before the header, a units row in usecond/Mbyte, quoted names with
commas, thousands separators, an "n/a", ncu's NVTX column). Prints one PASS/FAIL line per test, like
tests/test_cpu, for scripts/run_tests.sh to count.

  python3 tests/test_ncu_table.py

The expected figures are worked out by hand from the fixture (times in µs):
  forward 100+50+400+400+60 = 1010, attention 300+40+700 = 1040, classifier 1000+500+10+900+900 = 3310,
  backward 120+800+30+200 = 1150, optimizer 50+5+400 = 455; step 6965.
"""
import csv
import io
import os
import subprocess
import sys
import tempfile

from cpu_check import check, report, test

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FIXTURE = os.path.join(ROOT, "tests", "ncu_step_fixture.csv")
SCRIPT = os.path.join(ROOT, "profile", "ncu_table.py")


def run_table(csv_path, *args):
    out = subprocess.run([sys.executable, SCRIPT, csv_path, *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise AssertionError("ncu_table.py failed: " + out.stderr.strip())
    return out.stdout


def table_rows(text, first_header):
    """rows (lists of cells) of the markdown table whose header starts with first_header"""
    rows, inside = [], False
    for line in text.splitlines():
        if line.startswith("| " + first_header + " |"):
            inside = True
            continue
        if inside:
            if not line.startswith("|"):
                break
            if not line.startswith("|---"):
                rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def phases(text):
    return {r[0]: r for r in table_rows(text, "phase")}


def kernels(text):
    return {(r[0], r[1]): r for r in table_rows(text, "kernel")}


def without_column(name_part):
    """the fixture with every column whose header contains name_part removed, as a temporary file"""
    lines = open(FIXTURE).read().splitlines(keepends=True)
    start = next(i for i, l in enumerate(lines) if l.startswith('"ID",'))
    rows = list(csv.reader(io.StringIO("".join(lines[start:]))))
    keep = [i for i, h in enumerate(rows[0]) if name_part not in h]
    buf = io.StringIO()
    csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows([[r[i] for i in keep] for r in rows])
    f = tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False)
    f.write("".join(lines[:start]) + buf.getvalue())
    f.close()
    return f.name


EXPECTED = {"forward": ("5", "1.010", "14.5"), "attention": ("3", "1.040", "14.9"), "classifier": ("5", "3.310", "47.5"),
            "backward": ("4", "1.150", "16.5"), "optimizer": ("3", "0.455", "6.5"), "total": ("20", "6.965", "100.0")}


@test
def ncu_table_phase_sums_from_nvtx():
    out = run_table(FIXTURE, "--gpu", "NVIDIA H200", "--step-ms", "7.1")
    check("Phases from NVTX ranges" in out, "NVTX column not used")
    got = phases(out)
    for p, (calls, ms, pct) in EXPECTED.items():
        check(p in got and tuple(got[p][1:4]) == (calls, ms, pct), f"{p}: {got.get(p)} != {calls, ms, pct}")
    # forward: tensor ops 2 x 2e11 over 1010 µs
    check(got["forward"][4] == "396.0", f"forward TFLOP/s {got['forward'][4]}")
    check("kernel sum = 98.1% of it" in out, "step-ms comparison missing")


@test
def ncu_table_phase_sums_from_kernel_order():
    path = without_column("Push/Pop_Range")
    try:
        out = run_table(path, "--gpu", "NVIDIA H200")
    finally:
        os.unlink(path)
    check("Phases from kernel order" in out, "expected the kernel-order rule")
    got = phases(out)
    for p, (calls, ms, pct) in EXPECTED.items():
        check(p in got and tuple(got[p][1:4]) == (calls, ms, pct), f"{p}: {got.get(p)} != {calls, ms, pct}")


@test
def ncu_table_kernel_rows():
    k = kernels(run_table(FIXTURE, "--gpu", "NVIDIA H200"))
    # the same cuBLAS kernel in forward (2 calls) and backward (1 call) stays two rows
    fwd = k[("nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_NTN", "forward")]
    check(fwd[2:6] == ["2", "0.800", "11.5", "400.0"], f"nvjet forward row {fwd}")
    check(fwd[8:10] == ["500.0 TFLOP/s", "50.6%"], f"nvjet forward TFLOP/s {fwd[8:10]}")
    check(k[("nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_NTN", "backward")][2] == "1", "nvjet backward calls")
    # memory-bound: (30 MB + 20e6 B) / 100 µs = 500 GB/s = 10.4% of 4800
    check(k[("encoder_forward_kernel", "forward")][8:10] == ["500 GB/s", "10.4%"], "encoder GB/s")
    check(k[("fused_classifier_kernel", "classifier")][8:10] == ["4000 GB/s", "83.3%"], "fused_classifier GB/s")
    # names with commas inside quotes and templates come out short; "n/a" prints "-"
    check(("reduce_partials_add_kernel", "backward") in k, "reduce_partials_add_kernel short name")
    check(("attention_forward_kernel", "attention") in k, "attention_forward_kernel short name")
    check(k[("accumulate_loss_kernel", "classifier")][6] == "-", "n/a must print -")


@test
def ncu_table_default_ceilings_and_tensor_pipe_fallback():
    out = run_table(FIXTURE)  # no --gpu: H100 ceilings, said in the title
    check("H100 ceilings assumed" in out, "unknown GPU must say which ceilings it used")
    check(kernels(out)[("encoder_forward_kernel", "forward")][9] == "14.9%", "500 GB/s of 3350")
    path = without_column("sm__ops_path_tensor")
    try:
        out = run_table(path)
    finally:
        os.unlink(path)
    check("sm__ops_path_tensor_src_bf16_dst_fp32.sum" in out, "missing metric must be named")
    row = kernels(out)[("nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_NTN", "forward")]
    check(row[8:10] == ["tensor pipe", "70.0%"], f"tensor pipe fallback {row[8:10]}")
    check(phases(out)["forward"][4] == "-", "no tensor counter: phase TFLOP/s must be -")


report("ncu_table")
