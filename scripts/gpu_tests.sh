# GPU tests, sourced by scripts/run_tests.sh where a GPU is present; each run_gpu line is one test.
# attention: every variant on the small validation shapes (no benchmark)
run_gpu "attention_forward --check" ./dev/cuda/attention_forward all --check
