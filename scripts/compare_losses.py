"""
Compares two training-loss curves: the PyTorch reference's and train_gpt2cu's step by step, or two train_gpt2cu runs
(bf16 and -fp8 1, scripts/compare_fp8.sh) by windows of steps and by their validation losses.

    python scripts/compare_losses.py REF_FILE CUDA_FILE [--tol 0.01] [--steps N] [--window W] [--val]

Both files may be in any of these line formats (steps are compared counted from 0; other lines are ignored):
    "s:12 trl:3.1234 ..."            train_gpt2cu's main.log (-o DIR), step counted from 0 ("tel:"/"eval:" lines skipped)
    "step   13/50 | loss 3.123456 |" train_gpt2cu's or train_gpt2.py's stdout, step counted from 1
    "12 3.123456"                    train_gpt2.py --loss_out, step counted from 0
    "3.123456"                       one loss per line, line i is step i
--window W compares the means of steps 0..W-1, W..2W-1, ... instead of single steps (a window missing a step in
either file fails). --val compares the validation losses instead: train_gpt2cu's "val loss X" lines of stdout (the
i-th of each file) or main.log's "s:N tel:X" (by step).
Prints both curves side by side with the relative difference (cuda - ref) / |ref|, and exits 1 if any compared point
differs by more than --tol (relative, default 1%), if a point of the first N steps (--steps, default: every step of
REF) is missing from either file, or if any loss is not finite.
"""

import argparse
import math
import re
import sys

PATTERNS = [
    (re.compile(r"^s:(\d+)\s+trl:(\S+)"), 0),
    (re.compile(r"^step\s+(\d+)/\d+\s*\|\s*loss\s+(\S+)"), -1),
    (re.compile(r"^(\d+)\s+([-+0-9.eEinfaINFA]+)\s*$"), 0),
]
BARE_FLOAT = re.compile(r"^([-+0-9.eEinfaINFA]+)\s*$")

def read_losses(path):
    """{step counted from 0: loss} from a log or loss file."""
    losses = {}
    try:
        lines = open(path).read().splitlines()
    except OSError as e:
        sys.exit(f"error: cannot read {path}: {e}")
    bare = []
    for line in lines:
        line = line.strip()
        for pattern, offset in PATTERNS:
            m = pattern.match(line)
            if m:
                losses[int(m.group(1)) + offset] = float(m.group(2))
                break
        else:
            m = BARE_FLOAT.match(line)
            if m:
                try:
                    bare.append(float(m.group(1)))
                except ValueError:   # a rule of dashes or the like, not a number
                    pass
    if not losses and bare:
        losses = dict(enumerate(bare))
    if not losses:
        sys.exit(f"error: no loss lines found in {path}")
    return losses

VAL_PATTERNS = [re.compile(r"^s:(\d+)\s+tel:(\S+)"), re.compile(r"^val loss\s+(\S+)")]

def read_val_losses(path):
    """{step (main.log) or the i-th evaluation (stdout): validation loss}"""
    losses, order = {}, []
    try:
        lines = open(path).read().splitlines()
    except OSError as e:
        sys.exit(f"error: cannot read {path}: {e}")
    for line in lines:
        line = line.strip()
        m = VAL_PATTERNS[0].match(line)
        if m:
            losses[int(m.group(1))] = float(m.group(2))
            continue
        m = VAL_PATTERNS[1].match(line)
        if m:
            order.append(float(m.group(1)))
    if not losses and order:
        losses = dict(enumerate(order))
    if not losses:
        sys.exit(f"error: no validation loss lines found in {path}")
    return losses

def window_means(losses, steps, width):
    """{first step of each window: mean over it, or None where a step is missing}"""
    out = {}
    for start in range(0, len(steps), width):
        window = steps[start:start + width]
        vals = [losses.get(s) for s in window]
        out[window[0]] = None if any(v is None for v in vals) else sum(vals) / len(vals)
    return out

def main():
    p = argparse.ArgumentParser(description="compare two loss curves step by step")
    p.add_argument("ref", help="PyTorch reference losses (train_gpt2.py --loss_out, or its stdout)")
    p.add_argument("cuda", help="train_gpt2cu's main.log or stdout")
    p.add_argument("--tol", type=float, default=0.01, help="max relative difference per step")
    p.add_argument("--steps", type=int, default=None, help="compare steps 0..N-1 (default: every step in ref)")
    p.add_argument("--window", type=int, default=1, help="compare the means of windows of this many steps")
    p.add_argument("--val", action="store_true", help="compare the validation losses")
    args = p.parse_args()

    if args.val:
        ref, cuda = read_val_losses(args.ref), read_val_losses(args.cuda)
        steps = sorted(ref)
    else:
        ref, cuda = read_losses(args.ref), read_losses(args.cuda)
        steps = list(range(args.steps)) if args.steps else sorted(ref)
        if args.window > 1:
            ref, cuda = window_means(ref, steps, args.window), window_means(cuda, steps, args.window)
            steps = sorted(ref)
            ref = {k: v for k, v in ref.items() if v is not None}
            cuda = {k: v for k, v in cuda.items() if v is not None}
    what = "val" if args.val else "from step" if args.window > 1 else "step"
    print(f"{what:>9} {'ref':>10} {'cuda':>10} {'rel diff':>9}")
    failures, worst = [], 0.0
    for s in steps:
        a, b = ref.get(s), cuda.get(s)
        if a is None or b is None:
            print(f"{s:9d} {'-' if a is None else f'{a:10.4f}':>10} {'-' if b is None else f'{b:10.4f}':>10}   missing")
            failures.append(s)
            continue
        rel = (b - a) / abs(a) if a != 0 else math.inf
        bad = not (math.isfinite(a) and math.isfinite(b)) or not abs(rel) <= args.tol
        worst = max(worst, abs(rel)) if math.isfinite(rel) else math.inf
        print(f"{s:9d} {a:10.4f} {b:10.4f} {100 * rel:+8.3f}%{'  FAIL' if bad else ''}")
        if bad:
            failures.append(s)
    points = "validation losses" if args.val else f"windows of {args.window} steps" if args.window > 1 else "steps"
    print(f"{len(steps)} {points} compared, max |rel diff| {100 * worst:.3f}% (tolerance {100 * args.tol:g}%): "
          f"{'FAIL at ' + ', '.join(map(str, failures[:10])) if failures else 'OK'}")
    sys.exit(1 if failures else 0)

if __name__ == "__main__":
    main()
