#!/usr/bin/env bash
# flashgpt's test runner (what `make test` and `make test-all` call). Runs the CPU tests everywhere and,
# where a GPU is present, the GPU tests too; every test binary is built by `make` before this runs.
#   bash scripts/run_tests.sh         the shipped attention on the full validation set, one config of each other variant
#   bash scripts/run_tests.sh --all   every variant on every config (make test-all)
# Ends with one line "N passed, N failed" and exits non-zero if anything failed.
set -u
cd "$(dirname "$0")/.."
TEST_ALL=0   # read by scripts/gpu_tests.sh
for arg in "$@"; do
    case $arg in
    --all) TEST_ALL=1 ;;
    *)     echo "usage: bash scripts/run_tests.sh [--all]"; exit 2 ;;
    esac
done
passed=0; failed=0; failed_names=()

# tiny Shakespeare's token shards, which the tokenizer's full-corpus CPU test compares against (the GPU tests read
# them too): written once by the prep script, only where its inputs are on disk (it would try to download them). It
# runs in the background while the GPU tests start; what reads the shards waits for it (wait_for_shards).
shard_dir=dev/data/tinyshakespeare
work=$(mktemp -d /tmp/flashgpt_tests_XXXXXX)
if [ ! -f $shard_dir/tiny_shakespeare_val.bin ] || [ ! -f $shard_dir/tiny_shakespeare_train.bin ]; then
    (for d in ../shared/data shared/data; do
        if [ -f $d/tinyshakespeare.txt ] && [ -f $d/gpt2.tiktoken ] && command -v python3 >/dev/null; then
            python3 scripts/prepro_tinyshakespeare.py --text $d/tinyshakespeare.txt --ranks $d/gpt2.tiktoken > /dev/null ||
                echo "scripts/prepro_tinyshakespeare.py failed: the tokenizer's full-corpus test is skipped"
            break
        fi
    done; touch $work/shards.done) &
else
    touch $work/shards.done
fi
wait_for_shards() { while [ ! -f $work/shards.done ]; do sleep 0.2; done; }

# GPU tests (where a GPU is present): each is one command judged by its exit code, started in the background as
# scripts/gpu_tests.sh lists them (they run at once on the one GPU: each checks its own results, none is timed) and
# reported in that order after the CPU tests
gpu_names=(); gpu_pids=(); gpu_cmds=()
start_gpu() {   # name command...: its output goes to $work/gpu_N.log, its exit code and seconds to .rc
    local name="$1"; shift
    local n=${#gpu_names[@]}
    (t0=$SECONDS; "$@" > $work/gpu_$n.log 2>&1; echo "$? $((SECONDS - t0))" > $work/gpu_$n.rc) &
    gpu_names+=("$name"); gpu_pids+=($!); gpu_cmds+=("$*")
}
# a step other GPU tests wait for (wait_for NAME): the reference model and its losses, which three tests read
start_step() {   # name command...
    local name="$1"; shift
    ("$@"; echo $? > $work/step_$name.rc) &
}
wait_for() { while [ ! -f $work/step_$1.rc ]; do sleep 0.2; done; [ "$(cat $work/step_$1.rc)" = 0 ]; }
export -f wait_for wait_for_shards; export work
if nvidia-smi -L >/dev/null 2>&1; then
    source scripts/gpu_tests.sh
else
    echo "no GPU found: GPU tests skipped (they run where nvidia-smi sees a GPU)"
fi

# CPU tests: one PASS/FAIL line per test
wait_for_shards
cpu_out=$(./tests/test_cpu 2>&1); echo "$cpu_out"
p=$(grep -c '^PASS: ' <<<"$cpu_out"); f=$(grep -c '^FAIL: ' <<<"$cpu_out")
passed=$((passed + p)); failed=$((failed + f))
[ "$p" -gt 0 ] || { failed=$((failed + 1)); failed_names+=("test_cpu ran nothing"); }
while read -r name; do [ -n "$name" ] && failed_names+=("$name"); done < <(grep '^FAIL: ' <<<"$cpu_out" | sed 's/^FAIL: //')

# Python CPU tests (profile/ncu_table.py on a fixture CSV, profile/step_timeline.py on a synthetic step,
# scripts/compare_losses.py on hand-made logs, python/flashgpt_attention.py's calls against a stub library built from
# src/attention_capi.h): the same PASS/FAIL lines (SKIP lines, for what the machine lacks, are not counted; a test
# that only skips is not a failure)
for py_test in tests/test_ncu_table.py tests/test_step_timeline.py tests/test_compare_losses.py tests/test_python_call_layout.py; do
    if ! command -v python3 >/dev/null; then echo "no python3: $py_test skipped"; continue; fi
    py_out=$(python3 "$py_test" 2>&1); echo "$py_out"
    p=$(grep -c '^PASS: ' <<<"$py_out"); f=$(grep -c '^FAIL: ' <<<"$py_out")
    passed=$((passed + p)); failed=$((failed + f))
    [ "$p" -gt 0 ] || grep -q '^SKIP: ' <<<"$py_out" || { failed=$((failed + 1)); failed_names+=("$(basename "$py_test") ran nothing"); }
    while read -r name; do [ -n "$name" ] && failed_names+=("$name"); done < <(grep '^FAIL: ' <<<"$py_out" | sed 's/^FAIL: //')
done

# libflashgpt_attention.so, where it is built (make lib; make test builds it where a GPU is present): it exports the
# functions src/attention_capi.h declares and nothing else
lib=libflashgpt_attention.so
if [ -f $lib ]; then
    exported=$(nm -D --defined-only $lib | awk '{print $3}' | sort | tr '\n' ' ')
    declared=$(grep -o 'flashgpt_attention_[a-z_]*(' src/attention_capi.h | tr -d '(' | sort -u | tr '\n' ' ')
    if [ "$exported" = "$declared" ]; then passed=$((passed + 1)); echo "PASS: $lib exports src/attention_capi.h's functions"
    else
        failed=$((failed + 1)); failed_names+=("$lib exports")
        echo "FAIL: $lib exports [$exported], src/attention_capi.h declares [$declared]"
    fi
else
    echo "$lib not built (make lib): its export check skipped"
fi

# the GPU tests' results, in the order they were started
for i in "${!gpu_names[@]}"; do
    wait "${gpu_pids[$i]}"
    echo "=== ${gpu_names[$i]}: ${gpu_cmds[$i]}"
    cat $work/gpu_$i.log
    read -r rc secs < $work/gpu_$i.rc
    if [ "$rc" = 0 ]; then passed=$((passed + 1)); echo "PASS: ${gpu_names[$i]} ($secs s)"
    else failed=$((failed + 1)); failed_names+=("${gpu_names[$i]}"); echo "FAIL: ${gpu_names[$i]} ($secs s)"; fi
done
wait   # the background steps
rm -rf $work

for n in "${failed_names[@]}"; do echo "failed: $n"; done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
