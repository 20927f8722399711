#!/usr/bin/env bash
# One call on a GPU machine: build, validate and time what changed, print a short table last.
#   bash scripts/device_run.sh fwd bwd sanitize anchor tests
# Sections run in the order given. Logs go to $OUT (when set) for fetching.
# The anchor (PyTorch FA2 / cuDNN) is .carry/sdpa_anchor.py, a copy of ../shared/bench/sdpa_anchor.py.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/flashgpt_out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
for bin in dev/cuda/attention_forward dev/cuda/attention_backward; do
    [ -f $bin.cu ] || continue
    make GPU_ARCH=90a $bin >> "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
done
FWD_SHAPES="64,12,1024,64 4,12,4096,64 4,16,8192,128"
for section in "$@"; do
    case $section in
    fwd)      ./dev/cuda/attention_forward all --check > "$OUT/fwd_check.log" 2>&1; echo "fwd check rc=$?"; grep -E "FAIL|passed" "$OUT/fwd_check.log" | tail -15
              ./dev/cuda/attention_forward all --shapes bench > "$OUT/fwd_bench.log" 2>&1; echo "fwd bench rc=$?"; grep RESULT "$OUT/fwd_bench.log" | sed 's/RESULT attention_forward //' ;;
    fwd0)     ./dev/cuda/attention_forward 0 --shapes bench > "$OUT/fwd_bench0.log" 2>&1; echo "fwd0 bench rc=$?"; grep RESULT "$OUT/fwd_bench0.log" | sed 's/RESULT attention_forward //' ;;
    bwd)      ./dev/cuda/attention_backward all --check > "$OUT/bwd_check.log" 2>&1; echo "bwd check rc=$?"; grep -E "FAIL|passed" "$OUT/bwd_check.log" | tail -15
              ./dev/cuda/attention_backward all --shapes bench > "$OUT/bwd_bench.log" 2>&1; echo "bwd bench rc=$?"; grep RESULT "$OUT/bwd_bench.log" | sed 's/RESULT attention_backward //' ;;
    sanitize) for tool in memcheck racecheck synccheck; do
                  compute-sanitizer --tool $tool --error-exitcode 9 ./dev/cuda/attention_forward 0 --no-bench -b 2 -t 200 -n 2 -d 64 > "$OUT/san_fwd_$tool.log" 2>&1; echo "sanitizer $tool fwd HS64 rc=$?"
                  compute-sanitizer --tool $tool --error-exitcode 9 ./dev/cuda/attention_forward 0 --no-bench -b 1 -t 77 -n 2 -d 128 >> "$OUT/san_fwd_$tool.log" 2>&1; echo "sanitizer $tool fwd HS128 rc=$?"
                  if [ -x dev/cuda/attention_backward ]; then
                  compute-sanitizer --tool $tool --error-exitcode 9 ./dev/cuda/attention_backward 0 --no-bench -b 2 -t 200 -n 2 -d 64 > "$OUT/san_bwd_$tool.log" 2>&1; echo "sanitizer $tool bwd HS64 rc=$?"; fi
              done ;;
    anchor)   python3 .carry/sdpa_anchor.py $FWD_SHAPES 8,12,1024,64 1,12,16384,64 2>&1 | tee "$OUT/anchor.log" ;;
    tests)    make GPU_ARCH=90a test > "$OUT/make_test.log" 2>&1; echo "make test rc=$?"; grep -E "^(FAIL|failed)|passed, " "$OUT/make_test.log" | tail -20 ;;
    *)        echo "unknown section $section" ;;
    esac
done
