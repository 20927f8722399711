#!/usr/bin/env bash
# -fp8 against bf16 in one call, as issue 48's acceptance reads them: the losses on tiny Shakespeare (B=8, T=1024,
# validation every 50 steps, one init: the 50-step means of the training loss and every validation loss, each within
# 1% of bf16's), then tok/s and peak memory at each depth's B, bf16 and FP8 alternating twice.
#
#     bash scripts/compare_fp8.sh
#
# Settings from the environment: FP8 (the -fp8 mode, 1), LOSS ("12:600 24:300": depth:steps), SPEED ("12:64 48:28":
# depth:B), SPEED_STEPS (30; 10 at d36 and d48, whose random init takes long), OUT (logs; /tmp/flashgpt_fp8).
set -u
cd "$(dirname "$0")/.."
FP8=${FP8:-1}
LOSS=${LOSS:-"12:600 24:300"}
SPEED=${SPEED:-"12:64 48:28"}
OUT=${OUT:-/tmp/flashgpt_fp8}; mkdir -p "$OUT"
TRAIN=dev/data/tinyshakespeare/tiny_shakespeare_train.bin VAL=dev/data/tinyshakespeare/tiny_shakespeare_val.bin
[ -f "$VAL" ] || python3 scripts/prepro_tinyshakespeare.py > "$OUT/prepro.log" 2>&1 || { echo "error: data preparation failed"; exit 1; }
make train_gpt2cu > "$OUT/build_fp8.log" 2>&1 || { echo "error: build failed:"; tail -20 "$OUT/build_fp8.log"; exit 1; }
DATA="-i $TRAIN -j $VAL -s 0"
status=0

for spec in $LOSS; do
    d=${spec%%:*} steps=${spec##*:}
    for mode in 0 "$FP8"; do
        ./train_gpt2cu $DATA -e d$d -b 8 -t 1024 -x "$steps" -v 50 -m 20 -fp8 "$mode" > "$OUT/loss_d${d}_fp8$mode.log" 2>&1 ||
            { echo "error: d$d -fp8 $mode failed (see $OUT/loss_d${d}_fp8$mode.log)"; exit 1; }
    done
    for what in "--window 50" "--val"; do
        python3 scripts/compare_losses.py "$OUT/loss_d${d}_fp80.log" "$OUT/loss_d${d}_fp8$FP8.log" $what > "$OUT/cmp_d${d}_${what#--}.txt" || status=1
        echo "d$d, $steps steps, -fp8 $FP8 against bf16, ${what#--}: $(tail -1 "$OUT/cmp_d${d}_${what#--}.txt")"
    done
done

echo "| model | B | bf16 tok/s | -fp8 $FP8 tok/s | x | bf16 / FP8 peak MiB |"
echo "|---|---|---|---|---|---|"
for spec in $SPEED; do
    d=${spec%%:*} B=${spec##*:}
    n=${SPEED_STEPS:-$([ "$d" -ge 36 ] && echo 10 || echo 30)}
    for round in 1 2; do
        for mode in 0 "$FP8"; do
            ./train_gpt2cu $DATA -e d$d -b "$B" -t 1024 -x "$n" -v 0 -fp8 "$mode" > "$OUT/speed_d${d}_fp8${mode}_$round.log" 2>&1 ||
                { echo "error: d$d B=$B -fp8 $mode failed (see $OUT/speed_d${d}_fp8${mode}_$round.log)"; exit 1; }
        done
    done
    toks() { sed -n 's/^average over .* ms\/step, \([0-9]*\) tok\/s.*/\1/p' "$1"; }
    peak() { sed -n 's/^device memory in use after the last step: \([0-9.]*\) MiB.*/\1/p' "$1"; }
    for round in 1 2; do
        a=$(toks "$OUT/speed_d${d}_fp80_$round.log") b=$(toks "$OUT/speed_d${d}_fp8${FP8}_$round.log")
        echo "| d$d | $B | $a | $b | $(python3 -c "print(f'{$b / $a:.3f}')") | $(peak "$OUT/speed_d${d}_fp80_$round.log") / $(peak "$OUT/speed_d${d}_fp8${FP8}_$round.log") |"
    done
done
exit $status
