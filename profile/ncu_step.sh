#!/usr/bin/env bash
# One training step under Nsight Compute -> per-kernel and per-phase markdown tables (profile/ncu_table.py).
#   bash profile/ncu_step.sh [B=64] [T=1024]        (writes $OUT/ncu_step.csv, ncu_step.log, ncu_table.md)
# Steps: build profile_gpt2cu; time the step without ncu (its "one step ... ms" line, so the table's
# "% of step" can be set against real time); run ncu on the step between cudaProfilerStart/Stop; tabulate.
#
# The ncu command (NCU_METRICS overrides the metric list):
#   ncu --clock-control none --profile-from-start off --replay-mode application --nvtx --csv --page raw \
#       --print-units base --metrics $METRICS ./profile_gpt2cu 64 1024 > $OUT/ncu_step.csv
# --clock-control none: leave the clocks where the driver puts them (ncu's default locks them to base, which
#   is slower than what training sees). --profile-from-start off: only kernels after cudaProfilerStart, i.e.
#   the second step; the first one (cuBLASLt heuristics, lazy loading) is the warmup. --nvtx: adds the NVTX
#   range column ncu_table.py reads phases from.
# --replay-mode application: each metric pass reruns the whole program (~15 s) instead of saving and restoring
#   the GPU memory around every one of the step's ~400 kernels; kernel replay at B=64 did not finish one step
#   in 200 s on an H200 (2026-11-21). The default metrics (time, DRAM bytes, bf16 tensor ops) fit in few
#   passes; NCU_FULL=1 adds the SM / memory throughput percentages, which cost many more.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/flashgpt_out}; mkdir -p "$OUT"
B=${1:-64}; T=${2:-1024}
# PROFILE_DIR: another checkout whose profile_gpt2cu to build and profile (e.g. an older commit, for a
# before/after pair); TAG names this run's files (ncu_step$TAG.csv, ncu_table$TAG.md)
DIR=${PROFILE_DIR:-.}; TAG=${TAG:-}
METRICS=${NCU_METRICS:-gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__ops_path_tensor_src_bf16_dst_fp32.sum}
[ -n "${NCU_FULL:-}" ] && METRICS="$METRICS,sm__throughput.avg.pct_of_peak_sustained_elapsed,\
gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed"

rm -f "$OUT/ncu_table$TAG.md" "$OUT/ncu_step$TAG.csv"
make -C "$DIR" profile_gpt2cu >> "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
command -v ncu >/dev/null || { echo "ncu not found (Nsight Compute is part of the CUDA toolkit: add its bin to PATH)"; exit 1; }
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)

# the step without ncu
"$DIR/profile_gpt2cu" "$B" "$T" > "$OUT/step_wall.log" 2>&1 || { echo "profile_gpt2cu failed:"; tail -20 "$OUT/step_wall.log"; exit 1; }
STEP_MS=$(grep -oE "one step [0-9.]+ ms" "$OUT/step_wall.log" | grep -oE "[0-9.]+" | head -n 1)
echo "without ncu: $(grep 'one step' "$OUT/step_wall.log")"

# keep only the metrics whose base name (before the first '.') this ncu lists for this GPU
ncu --query-metrics > "$OUT/ncu_query_metrics.txt" 2>&1
if [ -z "${NCU_NO_FILTER:-}" ] && grep -q "^sm__" "$OUT/ncu_query_metrics.txt"; then
    kept=""
    for m in ${METRICS//,/ }; do
        if grep -qE "^${m%%.*}([[:space:]]|$)" "$OUT/ncu_query_metrics.txt"; then kept="$kept,$m"
        else echo "ncu does not list ${m%%.*}: dropped"; fi
    done
    METRICS=${kept#,}
fi

start=$(date +%s)
ncu --clock-control none --profile-from-start off --replay-mode application --nvtx --csv --page raw --print-units base \
    --metrics "$METRICS" "$DIR/profile_gpt2cu" "$B" "$T" > "$OUT/ncu_step$TAG.csv" 2> "$OUT/ncu_step$TAG.log"
rc=$?
echo "ncu rc=$rc in $(( $(date +%s) - start )) s; kernel rows: $(grep -c '^"[0-9]' "$OUT/ncu_step$TAG.csv")"
[ $rc -eq 0 ] || { tail -20 "$OUT/ncu_step$TAG.log"; grep "==ERROR==\|==WARNING==" "$OUT/ncu_step$TAG.csv" | head; exit 1; }

python3 profile/ncu_table.py "$OUT/ncu_step$TAG.csv" --gpu "$GPU" ${STEP_MS:+--step-ms $STEP_MS} | tee "$OUT/ncu_table$TAG.md"
