#!/usr/bin/env python3
"""CPU test of scripts/compare_losses.py on hand-made logs: step by step, by windows of steps (--window) and by the
validation losses (--val), the exit status, and lines that only look like numbers. Prints one PASS/FAIL line per
test, like tests/test_cpu, for scripts/run_tests.sh to count.

  python3 tests/test_compare_losses.py
"""
import os
import subprocess
import sys
import tempfile

from cpu_check import check, report, test

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SCRIPT = os.path.join(ROOT, "scripts", "compare_losses.py")


def stdout_log(losses, vals, val_every):
    """train_gpt2cu's stdout: a rule of dashes, 'val loss' before each val_every-th step, then the step lines"""
    lines = ["+" + "-" * 40, "| model: d12"]
    for i, loss in enumerate(losses):
        if i % val_every == 0:
            lines.append(f"val loss {vals[i // val_every]:.6f}")
        lines.append(f"step {i + 1:4d}/{len(losses)} | loss {loss:.6f} (+0.00z)| norm 1.0 (+0.00z)| lr 3.00e-04 | 10.0 ms")
    return "\n".join(lines) + "\n"


def run(a_text, b_text, *args):
    with tempfile.TemporaryDirectory() as d:
        a, b = os.path.join(d, "a.log"), os.path.join(d, "b.log")
        open(a, "w").write(a_text)
        open(b, "w").write(b_text)
        out = subprocess.run([sys.executable, SCRIPT, a, b, *args], capture_output=True, text=True)
    return out.returncode, out.stdout + out.stderr


BASE = [4.0 - 0.01 * i for i in range(8)]
VALS = [5.0, 4.5]


@test
def steps_within_tolerance_pass():
    rc, out = run(stdout_log(BASE, VALS, 4), stdout_log([x * 1.005 for x in BASE], VALS, 4))
    check(rc == 0 and "8 steps compared" in out and "OK" in out, f"rc {rc}: {out[-200:]}")


@test
def one_step_out_fails():
    b = list(BASE)
    b[5] *= 1.02
    rc, out = run(stdout_log(BASE, VALS, 4), stdout_log(b, VALS, 4))
    check(rc == 1 and "FAIL at 5" in out, f"rc {rc}: {out[-200:]}")


@test
def windows_average_out_a_step():
    # step 5 2% high and step 6 2% low: each step fails at 1%, their window of 4 (steps 4-7) does not
    b = list(BASE)
    b[5] *= 1.02
    b[6] *= 0.98
    rc, out = run(stdout_log(BASE, VALS, 4), stdout_log(b, VALS, 4), "--window", "4")
    check(rc == 0 and "2 windows of 4 steps compared" in out, f"rc {rc}: {out[-200:]}")
    rc, out = run(stdout_log(BASE, VALS, 4), stdout_log([x * 1.03 for x in BASE], VALS, 4), "--window", "4")
    check(rc == 1 and "FAIL at 0, 4" in out, f"windows 3% high: rc {rc}: {out[-200:]}")


@test
def window_mean_is_the_steps_mean():
    rc, out = run(stdout_log(BASE, VALS, 4), stdout_log(BASE, VALS, 4), "--window", "4")
    want = sum(BASE[:4]) / 4
    check(f"{want:10.4f}" in out, f"mean {want:.4f} not in {out[:300]}")


@test
def validation_losses_in_order():
    rc, out = run(stdout_log(BASE, VALS, 4), stdout_log(BASE, [5.0, 4.6], 4), "--val")
    check(rc == 1 and "2 validation losses compared" in out and "FAIL at 1" in out, f"rc {rc}: {out[-200:]}")
    rc, out = run(stdout_log(BASE, VALS, 4), stdout_log(BASE, [5.01, 4.49], 4), "--val")
    check(rc == 0, f"within 1%: rc {rc}: {out[-200:]}")


@test
def main_log_validation_by_step():
    a = "s:0 tel:5.0\ns:0 trl:4.0\ns:4 tel:4.5\n"
    b = "s:0 tel:5.0\ns:0 trl:4.0\ns:4 tel:4.52\n"
    rc, out = run(a, b, "--val")
    check(rc == 0 and "2 validation losses compared" in out, f"rc {rc}: {out[-200:]}")


report("compare_losses")
