#!/usr/bin/env bash
# GPT-2 350M, 774M and 1558M (d24: C=1024 NH=16, d36: C=1280 NH=20, d48: C=1600 NH=25; head size 64 in each) on one
# GPU: for each depth, the largest micro-batch B that fits (train_gpt2cu -pm 1 prints the memory plan and exits),
# then a short timed run at that B from a random init on tiny Shakespeare, no validation or sampling.
# Prints one markdown table line per model: B, ms a step and tok/s (averaged over the steps after the first), MFU
# of the last step, and the device memory in use after the last step beside the plan's total.
#
#     bash scripts/run_big_models.sh
#
# Settings from the environment: DEPTHS ("24 36 48"), STEPS (30), T (1024), RECOMPUTE (1), B (the plan's largest B
# for every depth when unset), TRAIN_BIN (tiny Shakespeare's train shard, prepared if missing), OUT (logs, one
# big_d<depth>.log and plan_d<depth>.log per model; /tmp/flashgpt_out). B is also capped so one batch fits in the
# shard (B*T + 1 tokens).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/flashgpt_out}; mkdir -p "$OUT"
DEPTHS=${DEPTHS:-"24 36 48"}
STEPS=${STEPS:-30}
T=${T:-1024}
RECOMPUTE=${RECOMPUTE:-1}
TRAIN_BIN=${TRAIN_BIN:-dev/data/tinyshakespeare/tiny_shakespeare_train.bin}

if [ ! -f "$TRAIN_BIN" ]; then
    python3 scripts/prepro_tinyshakespeare.py > "$OUT/prepro.log" 2>&1 || { echo "error: data preparation failed:"; tail -5 "$OUT/prepro.log"; exit 1; }
fi
make train_gpt2cu > "$OUT/build_big_models.log" 2>&1 || { echo "error: build failed:"; tail -20 "$OUT/build_big_models.log"; exit 1; }
tokens=$(( ($(stat -c %s "$TRAIN_BIN") - 1024) / 2 ))   # llm.c shard: a 256-int header, then uint16 tokens
b_data=$(( (tokens - 1) / T ))

echo "| model | params | B | T | recompute | ms/step | tok/s | MFU | memory in use | plan | largest B (plan) |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
status=0
for depth in $DEPTHS; do
    plan_log="$OUT/plan_d$depth.log"; log="$OUT/big_d$depth.log"
    ./train_gpt2cu -e "d$depth" -b 1 -t "$T" -r "$RECOMPUTE" -pm 1 > "$plan_log" 2>&1
    largest=$(grep -oE "largest B that fits: [0-9]+" "$plan_log" | grep -oE "[0-9]+$")
    if [ -z "$largest" ] || [ "$largest" -lt 1 ]; then
        echo "| d$depth | - | - | $T | $RECOMPUTE | - | - | - | - | - | ${largest:-?} (see $plan_log) |"; status=1; continue
    fi
    b=${B:-$largest}
    [ "$b" -gt "$b_data" ] && b=$b_data
    ./train_gpt2cu -e "d$depth" -b "$b" -t "$T" -r "$RECOMPUTE" -x "$STEPS" -v 0 -s 0 -i "$TRAIN_BIN" > "$log" 2>&1
    rc=$?
    params=$(grep -oE "[0-9]+ parameters" "$log" | head -n 1 | grep -oE "^[0-9]+")
    avg=$(grep -E "^average over" "$log")
    ms=$(grep -oE "[0-9.]+ ms/step" <<<"$avg" | grep -oE "^[0-9.]+")
    toks=$(grep -oE "[0-9]+ tok/s" <<<"$avg" | grep -oE "^[0-9]+")
    mfu=$(grep -E "^step " "$log" | tail -n 1 | grep -oE "[0-9.]+% bf16 MFU" | grep -oE "^[0-9.]+%")
    mem=$(grep -E "^device memory in use after the last step" "$log")
    used=$(grep -oE "step: [0-9.]+ MiB" <<<"$mem" | grep -oE "[0-9.]+ MiB")
    plan=$(grep -oE "plan [0-9.]+ MiB" <<<"$mem" | grep -oE "[0-9.]+ MiB")
    params_m=$([ -n "$params" ] && awk -v p="$params" 'BEGIN { printf "%.0fM", p / 1e6 }')
    if [ $rc -ne 0 ]; then status=1; ms="failed (rc=$rc, see $log)"; fi
    printf "| d%s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n" "$depth" \
        "${params_m:--}" "$b" "$T" "$RECOMPUTE" "${ms:--}" "${toks:--}" \
        "${mfu:--}" "${used:--}" "${plan:--}" "$largest"
    [ $rc -ne 0 ] && tail -3 "$log" | sed 's/^/    /'
done
exit $status
