#!/usr/bin/env bash
# A/B rounds on one shape: each config runs alone (validated, then timed) in turn, ROUNDS times, so that no config
# always gets the first (coolest) slot. Prints a table of ms_med/ms_min per round.
#   bash scripts/ab_rounds.sh ROUNDS BIN VARIANT "-b 4 -t 8192 -n 16 -d 128" CFG1 CFG2 ...
#   e.g. bash scripts/ab_rounds.sh 3 dev/cuda/attention_forward 5 "-b 64 -t 1024 -n 12 -d 64" 128x128/2wg/pp/s3 128x128/2wg/pp/s4
set -u
rounds=$1 bin=$2 variant=$3 shape=$4; shift 4
declare -A med
for ((r = 1; r <= rounds; r++)); do
    for cfg in "$@"; do
        line=$($bin $variant $shape --cfg "$cfg" --repeats 50 2>&1 | grep "RESULT.* $variant cfg=$cfg " | head -1)
        ms=$(sed -n 's/.*ms_med=\([0-9.]*\).*/\1/p' <<<"$line"); mn=$(sed -n 's/.*ms_min=\([0-9.]*\).*/\1/p' <<<"$line")
        [ -n "$ms" ] || ms="FAIL"
        med[$cfg]="${med[$cfg]:-} $ms/${mn:-?}"
    done
done
echo "ab $bin $variant $shape (ms_med/ms_min per round)"
for cfg in "$@"; do printf '  %-28s %s\n' "$cfg" "${med[$cfg]}"; done
