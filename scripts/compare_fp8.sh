#!/usr/bin/env bash
# -fp8 against bf16 in one call, as issue 48's acceptance reads them: the losses on tiny Shakespeare (B=8, T=1024,
# validation every 50 steps, one init: the 50-step means of the training loss and every validation loss, each within
# 1% of bf16's), then tok/s and peak memory at each depth's B, bf16 and FP8 alternating twice.
#
#     bash scripts/compare_fp8.sh
#     SEEDS="42 1 2 3" BAND=1 SPEED= bash scripts/compare_fp8.sh      the losses at four inits, with bf16's own band
#
# Settings from the environment: FP8 (the -fp8 mode, 1), LOSS ("12:600 24:300": depth:steps), SEEDS (the inits, -sd;
# "42", train_gpt2cu's default), BAND (1: also bf16 with its weights rounded to nearest, -sr 0, against bf16: how far
# a change of rounding alone moves these losses; tiny Shakespeare is memorised from about step 300, and from there
# the runs' losses part by more than 1% whatever changes), SPEED ("12:64 48:28": depth:B), SPEED_STEPS (30; 10 at d36
# and d48, whose random init takes long), OUT (logs; /tmp/flashgpt_fp8). Exits 1 if an FP8 loss is off by more than 1%.
set -u
cd "$(dirname "$0")/.."
FP8=${FP8:-1}
LOSS=${LOSS-"12:600 24:300"}
SEEDS=${SEEDS:-42}
BAND=${BAND:-0}
SPEED=${SPEED-"12:64 48:28"}
OUT=${OUT:-/tmp/flashgpt_fp8}; mkdir -p "$OUT"
TRAIN=dev/data/tinyshakespeare/tiny_shakespeare_train.bin VAL=dev/data/tinyshakespeare/tiny_shakespeare_val.bin
[ -f "$VAL" ] || python3 scripts/prepro_tinyshakespeare.py > "$OUT/prepro.log" 2>&1 || { echo "error: data preparation failed"; exit 1; }
make train_gpt2cu > "$OUT/build_fp8.log" 2>&1 || { echo "error: build failed:"; tail -20 "$OUT/build_fp8.log"; exit 1; }
DATA="-i $TRAIN -j $VAL -s 0"
status=0

for spec in $LOSS; do
    d=${spec%%:*} steps=${spec##*:}
    for sd in $SEEDS; do
        runs="fp80:-fp8 0;fp8$FP8:-fp8 $FP8"
        [ "$BAND" = 1 ] && runs="$runs;sr0:-fp8 0 -sr 0"
        IFS=';' read -ra specs <<< "$runs"
        for run in "${specs[@]}"; do
            log="$OUT/loss_d${d}_sd${sd}_${run%%:*}.log"
            ./train_gpt2cu $DATA -e d$d -b 8 -t 1024 -x "$steps" -v 50 -m 20 -sd "$sd" ${run#*:} > "$log" 2>&1 ||
                { echo "error: d$d ${run#*:} -sd $sd failed (see $log)"; exit 1; }
        done
        for run in "${specs[@]:1}"; do
            name=${run%%:*}
            for what in window val; do
                cmp="$OUT/cmp_d${d}_sd${sd}_${name}_$what.txt"
                flag="--$what"; [ $what = window ] && flag="--window 50"
                if python3 scripts/compare_losses.py "$OUT/loss_d${d}_sd${sd}_fp80.log" "$OUT/loss_d${d}_sd${sd}_$name.log" $flag > "$cmp"; then :
                elif [ "$name" != sr0 ]; then status=1; fi
                echo "d$d, $steps steps, -sd $sd, ${run#*:} against bf16, $what: $(tail -1 "$cmp")"
            done
        done
    done
done

[ -z "$SPEED" ] || echo "| model | B | bf16 tok/s | -fp8 $FP8 tok/s | x | bf16 / FP8 peak MiB |"
[ -z "$SPEED" ] || echo "|---|---|---|---|---|---|"
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
