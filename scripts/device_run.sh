#!/usr/bin/env bash
# One call on a GPU machine: build, validate and time what changed, print a short table last.
#   bash scripts/device_run.sh fwd bwd sanitize sass anchor      (attention: validate, time, check, anchors)
#   bash scripts/device_run.sh tests train                       (make test; training throughput and loss curve)
#   bash scripts/device_run.sh testsall                          (make test-all: every attention variant on every config)
#   bash scripts/device_run.sh tests checkall                    (make all and make test, timed; then all --check of both harnesses)
#   bash scripts/device_run.sh profile                           (ncu on one d12 step, B=64 T=1024: kernel and phase tables)
#   bash scripts/device_run.sh ncu                               (ncu limiter sections of the shipped Hopper attention kernels)
#   NO_BUILD=1 bash scripts/device_run.sh anchor fwd0 bwd0 ...   (binaries built here and carried: no make on the device)
# Sections run in the order given. Logs go to $OUT (when set) for fetching.
# The anchor (PyTorch FA2 / cuDNN) is .carry/sdpa_anchor.py, a copy of ../shared/bench/sdpa_anchor.py.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/flashgpt_out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
for bin in dev/cuda/attention_forward dev/cuda/attention_backward; do
    [ -f $bin.cu ] && [ -z "${NO_BUILD:-}" ] || continue
    make GPU_ARCH=90a $bin >> "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
done
FWD_SHAPES="64,12,1024,64 4,12,4096,64 4,16,8192,128"
for section in "$@"; do
    case $section in
    fwd)      ./dev/cuda/attention_forward all --check > "$OUT/fwd_check.log" 2>&1; echo "fwd check rc=$?"; grep -E "FAIL|passed" "$OUT/fwd_check.log" | tail -15
              ./dev/cuda/attention_forward all --shapes bench > "$OUT/fwd_bench.log" 2>&1; echo "fwd bench rc=$?"; grep RESULT "$OUT/fwd_bench.log" | sed 's/RESULT attention_forward //' ;;
    fwdbench) ./dev/cuda/attention_forward all --shapes bench > "$OUT/fwd_bench.log" 2>&1; echo "fwd bench rc=$?"; grep RESULT "$OUT/fwd_bench.log" | sed 's/RESULT attention_forward //' ;;
    fwd0)     ./dev/cuda/attention_forward 0 --shapes bench > "$OUT/fwd_bench0.log" 2>&1; echo "fwd0 bench rc=$?"; grep RESULT "$OUT/fwd_bench0.log" | sed 's/RESULT attention_forward //' ;;
    bwd0)     ./dev/cuda/attention_backward 0 --shapes bench > "$OUT/bwd_bench0.log" 2>&1; echo "bwd0 bench rc=$?"; grep RESULT "$OUT/bwd_bench0.log" | sed 's/RESULT attention_backward //' ;;
    nondet)   FLASHGPT_ATTN_NONDETERMINISTIC=1 ./dev/cuda/attention_backward 0 -b 4 -t 8192 -n 16 -d 128 > "$OUT/bwd_nondet.log" 2>&1; echo "bwd0 NONDETERMINISTIC=1 rc=$?"; grep RESULT "$OUT/bwd_nondet.log" | sed 's/RESULT attention_backward //' ;;
    check0)   ./dev/cuda/attention_forward 0 --check > "$OUT/fwd_check0.log" 2>&1; echo "fwd 0 check rc=$?"; grep -E "FAIL|passed" "$OUT/fwd_check0.log" | tail -5
              ./dev/cuda/attention_backward 0,6,7 --check > "$OUT/bwd_check0.log" 2>&1; echo "bwd 0,6,7 check rc=$?"; grep -E "FAIL|passed" "$OUT/bwd_check0.log" | tail -5 ;;
    bwd)      ./dev/cuda/attention_backward all --check > "$OUT/bwd_check.log" 2>&1; echo "bwd check rc=$?"; grep -E "FAIL|passed" "$OUT/bwd_check.log" | tail -15
              ./dev/cuda/attention_backward all --shapes bench > "$OUT/bwd_bench.log" 2>&1; echo "bwd bench rc=$?"; grep RESULT "$OUT/bwd_bench.log" | sed 's/RESULT attention_backward //' ;;
    sanitize) for tool in memcheck racecheck synccheck; do
                  compute-sanitizer --tool $tool --error-exitcode 9 ./dev/cuda/attention_forward 0 --no-bench -b 2 -t 200 -n 2 -d 64 > "$OUT/san_fwd_$tool.log" 2>&1; echo "sanitizer $tool fwd HS64 rc=$?"
                  compute-sanitizer --tool $tool --error-exitcode 9 ./dev/cuda/attention_forward 0,4,5 --no-bench -b 1 -t 77 -n 2 -d 128 >> "$OUT/san_fwd_$tool.log" 2>&1; echo "sanitizer $tool fwd HS128 rc=$?"
                  if [ -x dev/cuda/attention_backward ]; then
                  compute-sanitizer --tool $tool --error-exitcode 9 ./dev/cuda/attention_backward 0 --no-bench -b 2 -t 200 -n 2 -d 64 > "$OUT/san_bwd_$tool.log" 2>&1; echo "sanitizer $tool bwd HS64 rc=$?"
                  # T = 8192 at HS 128: the ordered 5-GEMM backward and the claimed schedule, as shipped
                  timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 ./dev/cuda/attention_backward 0 --no-bench -b 1 -t 8192 -n 1 -d 128 >> "$OUT/san_bwd_$tool.log" 2>&1; echo "sanitizer $tool bwd HS128 T8192 (ordered) rc=$?"; fi
              done ;;
    anchor)   python3 .carry/sdpa_anchor.py $FWD_SHAPES 8,12,1024,64 1,12,16384,64 2>&1 | tee "$OUT/anchor.log" ;;
    sass)     for bin in attention_forward attention_backward; do
                  cuobjdump --dump-sass dev/cuda/$bin > /tmp/$bin.sass 2>&1
                  echo "SASS of dev/cuda/$bin:"; grep -oE "HGMMA\.[0-9A-Za-z]+|HMMA\.[0-9A-Z]+|UTMALDG|UTMAREDG|LDL|STL" /tmp/$bin.sass | sort | uniq -c
              done ;;
    gputests) bash scripts/run_tests.sh > "$OUT/run_tests.log" 2>&1; echo "run_tests.sh (binaries as carried) rc=$?"; grep -E "^(FAIL|failed)|passed, |overall okay|step +20|val loss" "$OUT/run_tests.log" | tail -12 ;;
    smi)      nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv,noheader ;;
    tests)    t0=$SECONDS; make -j16 GPU_ARCH=90a all > "$OUT/make_all.log" 2>&1; echo "make all rc=$? in $((SECONDS - t0)) s"
              t0=$SECONDS; make -j16 GPU_ARCH=90a test > "$OUT/make_test.log" 2>&1; echo "make test rc=$? in $((SECONDS - t0)) s (built)"
              grep -E "^(FAIL|failed)|passed, |overall okay" "$OUT/make_test.log" | tail -20 ;;
    checkall) for h in forward backward; do
                  t0=$SECONDS; ./dev/cuda/attention_$h all --check > "$OUT/${h}_all_check.log" 2>&1
                  echo "attention_$h all --check rc=$? in $((SECONDS - t0)) s"; grep -E "FAIL|passed" "$OUT/${h}_all_check.log" | tail -4
              done ;;
    testsall) make -j8 GPU_ARCH=90a test-all > "$OUT/make_test_all.log" 2>&1; echo "make test-all rc=$?"; grep -E "^(FAIL|failed)|passed, |overall okay" "$OUT/make_test_all.log" | tail -20 ;;
    train)    R=dev/data/gpt2_ref   # written by the test_gpt2cu step of make test
              ./train_gpt2cu -e d12 -b 64 -t 1024 -x 40 -v 0 -s 0 > "$OUT/tput.log" 2>&1; echo "train_gpt2cu d12 B=64 T=1024 rc=$?"; grep -E "attention|gelu|average|step +40" "$OUT/tput.log"
              python3 scripts/train_gpt2.py --bench -x 30 --bench_skip 10 > "$OUT/bench_pt.log" 2>&1; echo "pytorch compile bench rc=$?"; tail -2 "$OUT/bench_pt.log" | cut -c1-200
              python3 scripts/train_gpt2.py --train --init $R/gpt2_124M_bf16.bin -B 4 -T 1024 -x 50 --loss_out "$OUT/pt_losses.txt" > "$OUT/pt_train.log" 2>&1; echo "pytorch 50 steps rc=$?"
              ./train_gpt2cu -e $R/gpt2_124M_bf16.bin -b 4 -t 1024 -x 50 -sf 0 -v 0 -s 0 -o "$OUT/logc" > "$OUT/c_train.log" 2>&1; echo "train_gpt2cu 50 steps rc=$?"
              python3 scripts/compare_losses.py "$OUT/pt_losses.txt" "$OUT/logc/main.log" > "$OUT/curves.txt" 2>&1; echo "compare_losses rc=$?"; tail -4 "$OUT/curves.txt" ;;
    profile)  bash profile/ncu_step.sh 64 1024 > "$OUT/profile.log" 2>&1; echo "profile (ncu one step) rc=$?"
              grep -vE "^\|" "$OUT/profile.log" | grep -vE "^$" | head -20
              [ -f "$OUT/ncu_table.md" ] && { grep -E "^\| kernel|^\|---" -m 2 "$OUT/ncu_table.md"; grep -E "^\| " "$OUT/ncu_table.md" | sed -n '2,16p'
                                             echo; sed -n '/^| phase/,$p' "$OUT/ncu_table.md"; } ;;
    ncu)      # limiter analysis of the shipped Hopper kernels, one launch each (dev/cuda/RESULTS.md, "ncu, call 5")
              N="ncu --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy"
              $N -k regex:forward_hopper_ws -c 1 ./dev/cuda/attention_forward 0 --no-bench -b 64 -t 1024 -n 12 -d 64 > "$OUT/ncu_f1024.txt" 2>&1
              $N -k regex:forward_hopper_ws -c 1 ./dev/cuda/attention_forward 0 --no-bench -b 4 -t 4096 -n 16 -d 128 > "$OUT/ncu_f128.txt" 2>&1
              $N -k regex:hopper_ws -c 2 ./dev/cuda/attention_backward 0 --no-bench -b 1 -t 16384 -n 12 -d 64 > "$OUT/ncu_b16k.txt" 2>&1
              $N -k regex:hopper_ws -c 2 ./dev/cuda/attention_backward 0 --no-bench -b 4 -t 4096 -n 16 -d 128 > "$OUT/ncu_b128.txt" 2>&1
              for f in "$OUT"/ncu_*.txt; do echo "== $f"; grep -E "hopper_ws_kernel<|Compute \(SM\) Throughput|DRAM Throughput|L2 Cache Throughput|highest-utilized|Issue Slots Busy" "$f" | sed 's/  */ /g' | cut -c1-120; done ;;
    *)        echo "unknown section $section" ;;
    esac
done
