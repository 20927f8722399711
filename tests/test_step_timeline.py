#!/usr/bin/env python3
"""CPU test of profile/step_timeline.py on a synthetic step of 17 records, written here as the CSV that
profile_gpt2cu --timeline writes and as an nsys SQLite export (built with sqlite3: StringIds, the kernel,
memcpy and memset tables, runtime API calls and NVTX ranges). Prints one PASS/FAIL line per test, like
tests/test_cpu, for scripts/run_tests.sh to count; the PNG test prints SKIP where matplotlib is missing.

  python3 tests/test_step_timeline.py

The step, in µs (stream 7 unless said; worked out by hand below):
   0  memset            0-5       9  nvjet NNT (dlnf)     171-200
   1  encoder           10-20    10  layernorm_backward   200-210
   2  layernorm         20-30    11  attention bwd dq     215-240
   3  nvjet TNT         32-60    12  reduce_partials      245-255  (stream 9, inside stream 7's 240-260 gap)
   4  attention fwd     60-80    13  wte_backward         260-270
   5  fused_res_ln      85-90    14  global_norm          280-285
   6  nvjet TNT (head)  90-140   15  memcpy DtoH          290-291
   7  fused_classifier  150-170  16  adamw                300-350
   8  accumulate_loss   170-171
Gaps: 5-10, 30-32, 80-85, 140-150, 210-215, 240-245, 255-260, 270-280, 285-290, 291-300: 61 µs of 350 = 17.43%.
Phases (each gap charged to the record after it): forward 0-5 busy 78 idle 12; classifier 6-9 busy 100
idle 10; backward 10-13 busy 55 idle 15; optimizer 14-16 busy 56 idle 24 (the memcpy after global_norm
is optimizer on the band although the order rule alone says backward).
"""
import importlib.util
import os
import sqlite3
import subprocess
import sys
import tempfile

from cpu_check import check, report, skip, test

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SCRIPT = os.path.join(ROOT, "profile", "step_timeline.py")
# the script runs under this interpreter and its site setting (python3 -S hides matplotlib: the no-PNG path)
PYTHON = [sys.executable] + (["-S"] if sys.flags.no_site else [])
spec = importlib.util.spec_from_file_location("step_timeline", SCRIPT)
st = importlib.util.module_from_spec(spec)
spec.loader.exec_module(st)

NVJET_TNT = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_bias_TNT"
NVJET_NNT = "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"
# (kind, name, start µs, end µs, stream)
STEP = [
    ("memset", "memset 1000 B", 0, 5, 7),
    ("kernel", "encoder_forward_kernel(floatX*, const int*, const floatX*, const floatX*, int, int, int)", 10, 20, 7),
    ("kernel", "layernorm_forward_kernel(floatX*, float*, float*, const floatX*, const floatX*, const floatX*, int, int)", 20, 30, 7),
    ("kernel", NVJET_TNT, 32, 60, 7),
    ("kernel", "void attention_forward_hopper_ws_kernel<64, 3, 128, 3, true>(AttentionForwardParams, HopperTmaMaps, int)", 60, 80, 7),
    ("kernel", "fused_residual_layernorm_forward_kernel(floatX*, floatX*, float*, float*, const floatX*, const floatX*, "
               "const floatX*, const floatX*, int, int)", 85, 90, 7),
    ("kernel", NVJET_TNT, 90, 140, 7),
    ("kernel", "fused_classifier_kernel(floatX*, float*, const int*, float, int, int, bool)", 150, 170, 7),
    ("kernel", "accumulate_loss_kernel(float*, const float*, int, float)", 170, 171, 7),
    ("kernel", NVJET_NNT, 171, 200, 7),
    ("kernel", "layernorm_backward_kernel(floatX*, float*, const floatX*, const floatX*, const floatX*, const float*, "
               "const float*, int, int)", 200, 210, 7),
    ("kernel", "void attention_backward_dq_hopper_ws_kernel<64>(AttentionBackwardParams)", 215, 240, 7),
    ("kernel", "reduce_partials_add_kernel(floatX*, floatX*, const float*, int, int)", 245, 255, 9),
    ("kernel", "wte_backward_kernel(floatX*, const floatX*, const int*, int, int)", 260, 270, 7),
    ("kernel", "global_norm_squared_kernel(float*, const floatX*, unsigned long)", 280, 285, 7),
    ("memcpy", "memcpy DtoH 4 B", 290, 291, 7),
    ("kernel", "adamw_kernel(floatX*, float*, const floatX*, float*, float*, unsigned long, float, float, float)", 300, 350, 7),
]
BANDS = ["forward"] * 6 + ["classifier"] * 4 + ["backward"] * 4 + ["optimizer"] * 3
GAPS = [(5, 10), (30, 32), (80, 85), (140, 150), (210, 215), (240, 245), (255, 260), (270, 280), (285, 290), (291, 300)]
PER_BAND = {"forward": (78, 12, 6), "classifier": (100, 10, 4), "backward": (55, 15, 4), "optimizer": (56, 24, 3)}
# NVTX ranges of profile_gpt2cu, by record index: the memset (zero_grad) sits only in "step 1"
NVTX = {**{i: ["step 1", "forward"] for i in range(1, 7)}, **{i: ["step 1", "backward"] for i in range(7, 14)},
        14: ["step 1", "norm"], 15: ["step 1", "norm"], 16: ["step 1", "update"], 0: ["step 1"]}


def write_csv(path, rows=STEP):
    with open(path, "w") as f:
        f.write("kind,name,start_us,end_us,stream\n")
        for kind, name, s, e, stream in rows:
            f.write(f'{kind},"{name}",{s:.3f},{e:.3f},{stream}\n')


def write_sqlite(path):
    """the step as nsys exports it: ns on the trace clock (offset T0), names in StringIds, runtime API calls
    with host start times, NVTX push/pop ranges (eventType 59) on the launching thread"""
    T0, TID = 5_000_000_000, 1234
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, end INT, deviceId INT, contextId INT, streamId INT,
            correlationId INT, globalPid INT, demangledName INT, shortName INT, mangledName INT, gridX INT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INT, end INT, deviceId INT, streamId INT, correlationId INT,
            copyKind INT, bytes INT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INT, end INT, deviceId INT, streamId INT, correlationId INT,
            value INT, bytes INT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT, end INT, eventClass INT, globalTid INT, correlationId INT,
            nameId INT);
        CREATE TABLE NVTX_EVENTS (start INT, end INT, eventType INT, rangeId INT, category INT, color INT, text TEXT,
            globalTid INT, endGlobalTid INT, textId INT, domainId INT);
    """)
    ids = {}

    def sid(s):
        if s not in ids:
            ids[s] = len(ids) + 1
            db.execute("INSERT INTO StringIds VALUES (?, ?)", (ids[s], s))
        return ids[s]

    for i, (kind, name, s, e, stream) in enumerate(STEP):
        corr, launch = 100 + i, T0 - 1_000_000 + i * 1000  # host launch times: well before the GPU runs them
        db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 0, ?, ?, 0)", (launch, launch + 500, TID, corr))
        g = (T0 + s * 1000, T0 + e * 1000)
        if kind == "kernel":
            # one kernel keeps only its shortName (older exports): the reader falls back to it
            demangled = 0 if i == 13 else sid(name)
            short = sid(name.split("(")[0].replace("void ", "").split("<")[0])
            db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 1, ?, ?, 1, ?, ?, 0, 1)",
                       (*g, stream, corr, demangled, short))
        elif kind == "memcpy":
            db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?, ?, 0, ?, ?, 2, 4)", (*g, stream, corr))
        else:
            db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (?, ?, 0, ?, ?, 0, 1000)", (*g, stream, corr))
    # ranges over the launches: step 1 over all, forward 1-6, backward 7-13, norm 14-15, update 16; "norm" by textId
    launch = lambda i: T0 - 1_000_000 + i * 1000  # noqa: E731
    for text, text_id, lo, hi in [("step 1", None, 0, 16), ("forward", None, 1, 6), ("backward", None, 7, 13),
                                  (None, sid("norm"), 14, 15), ("update", None, 16, 16)]:
        db.execute("INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, 0, 0, 0, ?, ?, ?, ?, 0)",
                   (launch(lo) - 10, launch(hi) + 900, text, TID, TID, text_id))
    db.execute("INSERT INTO NVTX_EVENTS VALUES (?, ?, 34, 0, 0, 0, 'a mark', ?, ?, NULL, 0)", (launch(3), launch(3), TID, TID))
    db.commit()
    db.close()


def analyse(path):
    records, source = st.load_trace(path)
    st.assign_bands(records)
    return records, source, st.idle_stats(records)


def check_step(records, stats):
    check(len(records) == len(STEP), f"{len(records)} records")
    check([round(r["start"], 3) for r in records] == [float(s) for _, _, s, _, _ in STEP], "starts")
    check(abs(stats["span"] - 350) < 1e-6 and abs(stats["idle"] - 61) < 1e-6 and abs(stats["busy"] - 289) < 1e-6,
          f"span/idle/busy {stats['span']}, {stats['idle']}, {stats['busy']}")
    got = [(round(g["start"], 3), round(g["end"], 3)) for g in stats["gaps"]]
    check(got == [(float(a), float(b)) for a, b in GAPS], f"gaps {got}")
    check(abs(st.idle_pct(stats) - 100 * 61 / 350) < 1e-9, "idle fraction")
    check([r["band"] for r in records] == BANDS, f"bands {[r['band'] for r in records]}")
    for band, (busy, idle, count) in PER_BAND.items():
        b = stats["per_band"][band]
        check(abs(b["busy"] - busy) < 1e-6 and abs(b["idle"] - idle) < 1e-6 and b["count"] == count, f"{band}: {b}")
        check(abs(b["to"] - b["from"] - busy - idle) < 1e-6, f"{band}: its stretch {b['from']}-{b['to']} != busy + idle")
    check([round(stats["per_band"][b]["from"], 3) for b in PER_BAND] == [0.0, 90.0, 200.0, 270.0], "band stretches")
    # the gap 240-245 lies between stream 7's attention kernel and stream 9's reduction
    g = stats["gaps"][5]
    check("attention_backward_dq" in records[g["before"]]["name"] and "reduce_partials" in records[g["after"]]["name"],
          "gap neighbours")


TMP = tempfile.mkdtemp(prefix="flashgpt_timeline_")
CSV, DB = os.path.join(TMP, "step.csv"), os.path.join(TMP, "step.sqlite")
write_csv(CSV)
write_sqlite(DB)


@test
def step_timeline_csv_gaps_and_phases():
    records, source, stats = analyse(CSV)
    check(source == "CUPTI CSV", source)
    check_step(records, stats)
    check(all(r["nvtx"] is None for r in records), "a CSV has no NVTX")
    check(records[15]["phase"] == "backward" and records[15]["band"] == "optimizer", "memcpy after global_norm")


@test
def step_timeline_nsys_sqlite_gaps_phases_and_nvtx():
    records, source, stats = analyse(DB)
    check(source == "nsys", source)
    check_step(records, stats)
    check([r["nvtx"] for r in records] == [NVTX[i] for i in range(len(STEP))], f"nvtx {[r['nvtx'] for r in records]}")
    check(records[15]["phase"] == "optimizer", "the readback inside NVTX 'norm' is optimizer by the rule itself")
    check(records[13]["name"] == "wte_backward_kernel", f"shortName fallback: {records[13]['name']}")
    check(records[15]["name"] == "memcpy DtoH 4 B" and records[0]["name"] == "memset 1000 B", "memcpy/memset names")


@test
def step_timeline_one_stream_back_to_back_has_no_gap():
    path = os.path.join(TMP, "tight.csv")
    write_csv(path, [("kernel", "a_kernel", 0, 10, 1), ("kernel", "b_kernel", 10, 25, 1), ("kernel", "c_kernel", 12, 20, 2)])
    records, _, stats = analyse(path)
    check(stats["gaps"] == [] and stats["idle"] == 0 and abs(stats["busy"] - 25) < 1e-9, f"{stats}")
    check(all(r["band"] == "other" for r in records), "no fused_classifier: no band")


@test
def step_timeline_labels():
    check(st.label(NVJET_TNT) == "gemm 256x128 TNT", st.label(NVJET_TNT))
    check(st.label("void attention_backward_dq_hopper_ws_kernel<64>(AttentionBackwardParams)") == "attn_bwd_dq_hopper_ws",
          "attention label")
    name = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x128x64_warpgroupsize1x1x1_aux_bf16_dgelu_execute_segment_k_off_kernel__5x_cublas"
    check(st.label(name) == "gemm 128x128x64 dgelu", st.label(name))
    check(len(st.label("a_very_long_kernel_name_that_goes_on_and_on_and_on_for_ever_kernel")) <= 36, "length cap")


@test
def step_timeline_kernel_time_per_kind():
    # kernels only (the memset and memcpy are not): matmul 28 + 50 + 29, attention 20 + 25, layernorm 10 + 5 + 10,
    # optimizer 5 + 50, other 10 + 20 + 1 + 10 + 10; 283 µs in all
    out = subprocess.run([*PYTHON, SCRIPT, CSV, "--no-png", "--top-kernels", "2"], capture_output=True, text=True)
    check(out.returncode == 0, f"rc {out.returncode}: {out.stderr}")
    for line in ("kernel time 0.283 ms", "| matmul | 3 | 0.107 | 37.8 |", "| attention | 2 | 0.045 | 15.9 |",
                 "| layernorm | 3 | 0.025 | 8.8 |", "| other kernels | 5 | 0.051 | 18.0 |", "| optimizer | 2 | 0.055 | 19.4 |",
                 "| gemm 256x128 TNT | matmul | 2 | 0.078 | 27.6 |", "| adamw | optimizer | 1 | 0.050 | 17.7 |"):
        check(line in out.stdout, f"no '{line}' in:\n{out.stdout}")
    check("| gemm 256x128 NNT |" not in out.stdout, "--top-kernels 2 lists two")
    check(st.category({"kind": "kernel", "name": "matmul_dgelu_hopper_kernel"}) == "matmul", "flashgpt's GEMM is a matmul")
    check(st.category({"kind": "kernel", "name": "void fp8_cast_kernel<true>(unsigned char *, ...)"}) == "fp8 casts",
          "the FP8 casts are their own kind")


@test
def step_timeline_cli_rejects_bad_input():
    out = subprocess.run([*PYTHON, SCRIPT, os.path.join(TMP, "missing.csv")], capture_output=True, text=True)
    check(out.returncode != 0 and "no such file" in out.stderr, f"missing file: {out.returncode} {out.stderr}")
    empty = os.path.join(TMP, "empty.csv")
    open(empty, "w").write("kind,name,start_us,end_us,stream\n")
    out = subprocess.run([*PYTHON, SCRIPT, empty], capture_output=True, text=True)
    check(out.returncode != 0 and "at least one row" in out.stderr, f"empty CSV: {out.stderr}")


def have_matplotlib():
    return importlib.util.find_spec("matplotlib") is not None


def step_timeline_png_written():
    png = os.path.join(TMP, "step.png")
    out = subprocess.run([*PYTHON, SCRIPT, DB, "-o", png], capture_output=True, text=True)
    check(out.returncode == 0, f"rc {out.returncode}: {out.stderr}")
    check("idle 0.061 ms = 17.43% of the span, in 10 gaps" in out.stdout, out.stdout)
    check("| optimizer | 3 | 0.080 | 0.056 | 0.024 | 30.00 |" in out.stdout, out.stdout)
    check(f"wrote {png}" in out.stdout, "no 'wrote' line")
    with open(png, "rb") as f:
        head = f.read(8)
    check(head == b"\x89PNG\r\n\x1a\n" and os.path.getsize(png) > 10000, f"not a PNG: {head!r} {os.path.getsize(png)} B")


def step_timeline_summary_without_matplotlib():
    out = subprocess.run([*PYTHON, SCRIPT, CSV], capture_output=True, text=True)
    check(out.returncode == 3 and "17.43%" in out.stdout and "no PNG" in out.stdout, f"rc {out.returncode}: {out.stdout}")


if have_matplotlib():
    test(step_timeline_png_written)
else:
    skip("step_timeline_png_written (matplotlib is not installed)")
    test(step_timeline_summary_without_matplotlib)

subprocess.run(["rm", "-rf", TMP])
report("step_timeline")
