#!/usr/bin/env bash
# flashgpt's train_gpt2cu against llm.c's, one model after the other in one call: tok/s and peak device memory for
# each depth at each program's largest micro-batch B (T=1024, recompute 1, random init, tiny Shakespeare), d12 first
# at B=64 (issue 27's shape). llm.c is not part of this repository: build it yourself (its Makefile, with cuDNN for
# its fast attention) and point LLMC_BIN at the binary.
#
#     LLMC_BIN=~/llm.c/train_gpt2cu bash scripts/compare_llmc.sh
#
# Settings from the environment: LLMC_BIN (required), LLMC_ENV (a command to run it with, e.g. "env
# LD_LIBRARY_PATH=..."), LLMC_FLAGS (extra flags for llm.c, e.g. "-ge 2"), DEPTHS ("12 24 36 48"), STEPS (20), OUT
# (logs; /tmp/flashgpt_out). Our B is the memory plan's largest (train_gpt2cu -pm 1); llm.c's is the largest that
# runs, tried downwards from ours in steps of 4 (llm.c has no plan to ask). d12 runs both at B=64 instead.
# tok/s: ours from "average over N steps", llm.c's from "total average iteration time" (both leave out step 1);
# peak memory: nvidia-smi's memory.used, sampled every 200 ms while each runs.
set -u
cd "$(dirname "$0")/.."
[ -n "${LLMC_BIN:-}" ] && [ -x "$LLMC_BIN" ] || { echo "error: set LLMC_BIN to llm.c's train_gpt2cu"; exit 1; }
OUT=${OUT:-/tmp/flashgpt_out}; mkdir -p "$OUT"
DEPTHS=${DEPTHS:-"12 24 36 48"}
STEPS=${STEPS:-20}
TRAIN_BIN=dev/data/tinyshakespeare/tiny_shakespeare_train.bin
[ -f "$TRAIN_BIN" ] || python3 scripts/prepro_tinyshakespeare.py > "$OUT/prepro.log" 2>&1 || { echo "error: data preparation failed"; exit 1; }
make train_gpt2cu > "$OUT/build_compare.log" 2>&1 || { echo "error: build failed:"; tail -20 "$OUT/build_compare.log"; exit 1; }
# llm.c validates on -j too: its val shard is shorter than one batch, so both read the train shard
LLMC_ARGS="-i $TRAIN_BIN -j $TRAIN_BIN -t 1024 -v 100000 -m 1 -s 0 -r 1 -z 0 -y 0 ${LLMC_FLAGS:-}"

peak_mib() {   # runs "$@" while sampling memory.used; prints the peak MiB, returns the command's status
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 > "$OUT/mem.txt" 2>/dev/null &
    local watcher=$! rc
    "$@"; rc=$?
    kill $watcher 2>/dev/null; wait $watcher 2>/dev/null
    PEAK=$(sort -n "$OUT/mem.txt" | tail -n 1)
    return $rc
}
ours() {   # depth B -> OURS_TOKS
    peak_mib ./train_gpt2cu -e "d$1" -b "$2" -t 1024 -r 1 -x "$STEPS" -v 0 -s 0 -i "$TRAIN_BIN" > "$OUT/ours_d$1.log" 2>&1 || return 1
    OURS_TOKS=$(grep -E "^average over" "$OUT/ours_d$1.log" | grep -oE "[0-9]+ tok/s" | grep -oE "^[0-9]+")
}
llmc() {   # depth B -> LLMC_TOKS
    peak_mib ${LLMC_ENV:-} "$LLMC_BIN" -e "d$1" -b "$2" -x "$STEPS" $LLMC_ARGS > "$OUT/llmc_d$1_b$2.log" 2>&1 || return 1
    local ms=$(grep -oE "total average iteration time: [0-9.]+" "$OUT/llmc_d$1_b$2.log" | grep -oE "[0-9.]+$")
    [ -n "$ms" ] || return 1
    LLMC_TOKS=$(awk -v b="$2" -v ms="$ms" 'BEGIN { printf "%.0f", b * 1024 / (ms / 1000) }')
}

echo "| model | flashgpt B | tok/s | peak MiB | llm.c B | tok/s | peak MiB | flashgpt / llm.c |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
status=0
for depth in $DEPTHS; do
    if [ "$depth" = 12 ]; then b=64; else
        ./train_gpt2cu -e "d$depth" -b 1 -t 1024 -r 1 -pm 1 > "$OUT/plan_d$depth.log" 2>&1
        b=$(grep -oE "largest B that fits: [0-9]+" "$OUT/plan_d$depth.log" | grep -oE "[0-9]+$")
        [ -n "$b" ] || { echo "| d$depth | no plan (see $OUT/plan_d$depth.log) |"; status=1; continue; }
    fi
    OURS_TOKS=""; ours "$depth" "$b" || { echo "| d$depth | $b | failed (see $OUT/ours_d$depth.log) |"; status=1; continue; }
    ours_peak=$PEAK
    lb=$b; LLMC_TOKS=""
    until llmc "$depth" "$lb"; do
        lb=$(( depth == 12 ? 0 : (lb - 1) / 4 * 4 ))   # down to the next multiple of 4
        [ "$lb" -gt 0 ] || break
    done
    if [ -z "$LLMC_TOKS" ]; then echo "| d$depth | $b | $OURS_TOKS | $ours_peak | - | failed (see $OUT/llmc_d${depth}_b*.log) | | |"; status=1; continue; fi
    printf "| d%s | %s | %s | %s | %s | %s | %s | %.2f |\n" "$depth" "$b" "$OURS_TOKS" "$ours_peak" "$lb" "$LLMC_TOKS" "$PEAK" \
        "$(awk -v a="$OURS_TOKS" -v c="$LLMC_TOKS" 'BEGIN { print a / c }')"
done
exit $status
