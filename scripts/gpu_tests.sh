# GPU tests, sourced by scripts/run_tests.sh where a GPU is present: each start_gpu line is one test, started at once
# (they share the GPU; scripts/run_tests.sh reports them in this order). The longest first.
# the general interface (non-causal, cross, GQA, head dims 8 to 256, decoding, bias, key lengths, packed sequences,
# gating) against the fp64 reference, in three shards run side by side: inputs at scale 1 (make test-all: 1 and 8)
for shard in 0 1 2; do
    if [ "${TEST_ALL:-0}" = 1 ]; then
        start_gpu "attention_general --check --shard $shard/3" ./dev/cuda/attention_general --check --shard $shard/3
    else
        start_gpu "attention_general --check --quick --shard $shard/3" ./dev/cuda/attention_general --check --quick --shard $shard/3
    fi
done
# training: test_gpt2cu against the PyTorch reference (written once into dev/data/gpt2_ref by scripts/train_gpt2.py,
# the step the three tests below wait for), then a short d12 run. Both read tiny Shakespeare's token shards (the
# reference's 10 steps too); where the prep script could not write them, it runs here (it downloads).
R=dev/data/gpt2_ref
start_step reference bash -c "wait_for_shards; [ -f dev/data/tinyshakespeare/tiny_shakespeare_val.bin ] || python3 scripts/prepro_tinyshakespeare.py > /dev/null; [ -f $R/gpt2_124M_ref_losses.txt ] || python3 scripts/train_gpt2.py --write_reference $R -e d12 > /dev/null"
start_gpu "test_gpt2cu" bash -c "wait_for reference || exit 1; ./test_gpt2cu $R/gpt2_124M_bf16.bin $R/gpt2_124M_debug_state.bin $R/gpt2_124M_ref_losses.txt"
# generation: the KV cache against the full recompute on the same reference model, greedy, B = 1 and B = 4 prompts of
# different lengths (tests/test_generate_gpu.sh says what is compared)
for B in 1 4; do
    start_gpu "generate_gpt2cu KV cache vs full recompute B=$B" bash -c "wait_for reference || exit 1; bash tests/test_generate_gpu.sh $R/gpt2_124M_bf16.bin $B"
done
start_gpu "train_gpt2cu d12 20 steps" bash -c "wait_for reference || exit 1; ./train_gpt2cu -e d12 -b 4 -t 1024 -x 20 -v 10 -m 4 -s 20 -g 16"
# attention: make test runs the shipped path (variant 0) on every validation shape at x1 and x8, the backward's
# determinism check included, and the first config of every other variant on one shape; make test-all (TEST_ALL=1)
# every config of every variant on every shape
if [ "${TEST_ALL:-0}" = 1 ]; then
    start_gpu "attention_forward all --check" ./dev/cuda/attention_forward all --check
    start_gpu "attention_backward all --check" ./dev/cuda/attention_backward all --check
else
    start_gpu "attention_forward all --check --first-config" ./dev/cuda/attention_forward all --check --first-config
    start_gpu "attention_backward all --check --first-config" ./dev/cuda/attention_backward all --check --first-config
fi
# the forward matmuls of a d12 layer: cuBLASLt, naive and the wgmma GEMM against fp64 (sampled rows)
start_gpu "matmul all --check" ./dev/cuda/matmul all --check
# the fused classifier's kernels (loss and gradient in place) against the fp64 reference, GPT-2's vocabulary and one
# past the shared-memory kernel's limit, logits at scale 1 and 8
start_gpu "fused_classifier all --check" ./dev/cuda/fused_classifier all --check
# layernorm forward and backward, every variant against the fp64 reference at C = 768, 1024, 1600 (the register
# kernels bit-identical to the others)
start_gpu "layernorm all --check" ./dev/cuda/layernorm all --check
# python/flashgpt_attention.py (libflashgpt_attention.so through ctypes; make test builds the library here) against
# PyTorch's SDPA: out and q/k/v gradients by FlashAttention's rule, a nanoGPT attention block's loss and gradients;
# the Evoformer block against fp32 PyTorch; FlashAttention's Python API (python/flashgpt) on a slice of its test grid
# (make test-all: and 2,000 cases drawn from the whole grid), its KV-cache call on draws from its KV-cache grid
if python3 -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    # torch.compile: AOTAutograd's trace run eagerly (make test-all: Inductor too)
    if [ "${TEST_ALL:-0}" = 1 ]; then
        start_gpu "python flash_attention vs SDPA" python3 tests/test_python_attention.py --inductor
    else
        start_gpu "python flash_attention vs SDPA" python3 tests/test_python_attention.py
    fi
    start_gpu "python Evoformer block vs fp32 PyTorch" python3 tests/test_evoformer.py
    start_gpu "python flash_attn_interface vs fp32 PyTorch" python3 tests/test_flash_attn_interface.py
    if [ "${TEST_ALL:-0}" = 1 ]; then
        start_gpu "python flash_attn_interface, FlashAttention's grid sampled" python3 tests/test_flash_attn_interface.py --sample 2000
    fi
    start_gpu "python flash_attn_with_kvcache vs fp64 PyTorch" python3 tests/test_kvcache.py
else
    echo "no torch with CUDA: the Python GPU tests skipped"
fi
