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

# CPU tests: one PASS/FAIL line per test
cpu_out=$(./tests/test_cpu 2>&1); echo "$cpu_out"
p=$(grep -c '^PASS: ' <<<"$cpu_out"); f=$(grep -c '^FAIL: ' <<<"$cpu_out")
passed=$((passed + p)); failed=$((failed + f))
[ "$p" -gt 0 ] || { failed=$((failed + 1)); failed_names+=("test_cpu ran nothing"); }
while read -r name; do [ -n "$name" ] && failed_names+=("$name"); done < <(grep '^FAIL: ' <<<"$cpu_out" | sed 's/^FAIL: //')

# Python CPU tests (profile/ncu_table.py on a fixture CSV): the same PASS/FAIL lines
if command -v python3 >/dev/null; then
    py_out=$(python3 tests/test_ncu_table.py 2>&1); echo "$py_out"
    p=$(grep -c '^PASS: ' <<<"$py_out"); f=$(grep -c '^FAIL: ' <<<"$py_out")
    passed=$((passed + p)); failed=$((failed + f))
    [ "$p" -gt 0 ] || { failed=$((failed + 1)); failed_names+=("test_ncu_table.py ran nothing"); }
    while read -r name; do [ -n "$name" ] && failed_names+=("$name"); done < <(grep '^FAIL: ' <<<"$py_out" | sed 's/^FAIL: //')
else
    echo "no python3: tests/test_ncu_table.py skipped"
fi

# GPU tests: each command is one test, judged by its exit code
run_gpu() {
    local name="$1"; shift
    echo "=== $name: $*"
    local t0=$SECONDS
    if "$@"; then passed=$((passed + 1)); echo "PASS: $name ($((SECONDS - t0)) s)"
    else failed=$((failed + 1)); failed_names+=("$name"); echo "FAIL: $name ($((SECONDS - t0)) s)"; fi
}
if nvidia-smi -L >/dev/null 2>&1; then
    source scripts/gpu_tests.sh
else
    echo "no GPU found: GPU tests skipped (they run where nvidia-smi sees a GPU)"
fi

for n in "${failed_names[@]}"; do echo "failed: $n"; done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
