"""
Compares two training-loss curves step by step: the PyTorch reference's and train_gpt2cu's.

    python scripts/compare_losses.py REF_FILE CUDA_FILE [--tol 0.01] [--steps N]

Both files may be in any of these line formats (steps are compared counted from 0; other lines are ignored):
    "s:12 trl:3.1234 ..."            train_gpt2cu's main.log (-o DIR), step counted from 0 ("tel:"/"eval:" lines skipped)
    "step   13/50 | loss 3.123456 |" train_gpt2cu's or train_gpt2.py's stdout, step counted from 1
    "12 3.123456"                    train_gpt2.py --loss_out, step counted from 0
    "3.123456"                       one loss per line, line i is step i
Prints both curves side by side with the relative difference (cuda - ref) / |ref|, and exits 1 if any compared step
differs by more than --tol (relative, default 1%), if a step of the first N (--steps, default: every step of REF) is
missing from either file, or if any loss is not finite.
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
                bare.append(float(m.group(1)))
    if not losses and bare:
        losses = dict(enumerate(bare))
    if not losses:
        sys.exit(f"error: no loss lines found in {path}")
    return losses

def main():
    p = argparse.ArgumentParser(description="compare two loss curves step by step")
    p.add_argument("ref", help="PyTorch reference losses (train_gpt2.py --loss_out, or its stdout)")
    p.add_argument("cuda", help="train_gpt2cu's main.log or stdout")
    p.add_argument("--tol", type=float, default=0.01, help="max relative difference per step")
    p.add_argument("--steps", type=int, default=None, help="compare steps 0..N-1 (default: every step in ref)")
    args = p.parse_args()

    ref, cuda = read_losses(args.ref), read_losses(args.cuda)
    steps = list(range(args.steps)) if args.steps else sorted(ref)
    print(f"{'step':>5} {'pytorch':>10} {'cuda':>10} {'rel diff':>9}")
    failures, worst = [], 0.0
    for s in steps:
        a, b = ref.get(s), cuda.get(s)
        if a is None or b is None:
            print(f"{s:5d} {'-' if a is None else f'{a:10.4f}':>10} {'-' if b is None else f'{b:10.4f}':>10}   missing")
            failures.append(s)
            continue
        rel = (b - a) / abs(a) if a != 0 else math.inf
        bad = not (math.isfinite(a) and math.isfinite(b)) or not abs(rel) <= args.tol
        worst = max(worst, abs(rel)) if math.isfinite(rel) else math.inf
        print(f"{s:5d} {a:10.4f} {b:10.4f} {100 * rel:+8.3f}%{'  FAIL' if bad else ''}")
        if bad:
            failures.append(s)
    print(f"{len(steps)} steps compared, max |rel diff| {100 * worst:.3f}% (tolerance {100 * args.tol:g}%): "
          f"{'FAIL at steps ' + ', '.join(map(str, failures[:10])) if failures else 'OK'}")
    sys.exit(1 if failures else 0)

if __name__ == "__main__":
    main()
