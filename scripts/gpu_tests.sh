# GPU tests, sourced by scripts/run_tests.sh where a GPU is present; each run_gpu line is one test.
# attention, on the validation shapes (no benchmark). make test: every variant's first config in one run per harness:
# the shipped path (variant 0) on every shape at x1 and x8, the backward's determinism check included, the other
# variants on the shapes below 8M elements a tensor; make test-all (TEST_ALL=1): every config of every variant on all.
if [ "${TEST_ALL:-0}" = 1 ]; then
    run_gpu "attention_forward all --check" ./dev/cuda/attention_forward all --check
    run_gpu "attention_backward all --check" ./dev/cuda/attention_backward all --check
else
    run_gpu "attention_forward all --check --first-config" ./dev/cuda/attention_forward all --check --first-config
    run_gpu "attention_backward all --check --first-config" ./dev/cuda/attention_backward all --check --first-config
fi
# the general interface (non-causal, cross, GQA, head dims 8 to 256, decoding, bias, key lengths, packed sequences,
# gating) against the fp64 reference: inputs at scale 1 (make test-all: 1 and 8)
if [ "${TEST_ALL:-0}" = 1 ]; then
    run_gpu "attention_general --check" ./dev/cuda/attention_general --check
else
    run_gpu "attention_general --check --quick" ./dev/cuda/attention_general --check --quick
fi
# the fused classifier's kernels (loss and gradient in place) against the fp64 reference, GPT-2's vocabulary and one
# past the shared-memory kernel's limit, logits at scale 1 and 8
run_gpu "fused_classifier all --check" ./dev/cuda/fused_classifier all --check
# layernorm forward and backward, every variant against the fp64 reference at C = 768, 1024, 1600 (the register
# kernels bit-identical to the others)
run_gpu "layernorm all --check" ./dev/cuda/layernorm all --check
# the forward matmuls of a d12 layer: cuBLASLt, naive and the wgmma GEMM against fp64 (sampled rows)
run_gpu "matmul all --check" ./dev/cuda/matmul all --check
# python/flashgpt_attention.py (libflashgpt_attention.so through ctypes; make test builds the library here) against
# PyTorch's SDPA: out and q/k/v gradients by FlashAttention's rule, a nanoGPT attention block's loss and gradients
if python3 -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    run_gpu "python flash_attention vs SDPA" python3 tests/test_python_attention.py
    run_gpu "python Evoformer block vs fp32 PyTorch" python3 tests/test_evoformer.py
else
    echo "no torch with CUDA: tests/test_python_attention.py skipped"
fi
# training: test_gpt2cu against the PyTorch reference (written once into dev/data/gpt2_ref by scripts/train_gpt2.py),
# then a short d12 run. Both read tiny Shakespeare's token shards (the reference's 10 steps too), prepared once
# here first (if that fails, both tests fail on the missing files).
[ -f dev/data/tinyshakespeare/tiny_shakespeare_val.bin ] || python3 scripts/prepro_tinyshakespeare.py > /dev/null
run_gpu "test_gpt2cu" bash -c 'R=dev/data/gpt2_ref; [ -f $R/gpt2_124M_ref_losses.txt ] || python3 scripts/train_gpt2.py --write_reference $R -e d12 > /dev/null || exit 1; ./test_gpt2cu $R/gpt2_124M_bf16.bin $R/gpt2_124M_debug_state.bin $R/gpt2_124M_ref_losses.txt'
# generation: the KV cache against the full recompute on the same reference model, greedy, B = 1 and B = 4 prompts of
# different lengths (tests/test_generate_gpu.sh says what is compared)
for B in 1 4; do
    run_gpu "generate_gpt2cu KV cache vs full recompute B=$B" bash -c "R=dev/data/gpt2_ref; [ -f \$R/gpt2_124M_bf16.bin ] || python3 scripts/train_gpt2.py --write_reference \$R -e d12 > /dev/null || exit 1; bash tests/test_generate_gpu.sh \$R/gpt2_124M_bf16.bin $B"
done
run_gpu "train_gpt2cu d12 20 steps" ./train_gpt2cu -e d12 -b 4 -t 1024 -x 20 -v 10 -m 4 -s 20 -g 16
