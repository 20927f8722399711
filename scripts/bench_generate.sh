#!/usr/bin/env bash
# d12 generation throughput, one markdown table: generate_gpt2cu with the KV cache (contiguous, and paged: -pg), the
# full recompute (-kv 0: every new token reruns the whole forward, the baseline) and PyTorch with a KV cache
# (scripts/generate_torch.py: eager, SDPA, bf16), each at B = 1 and B = 64, NEW new tokens after a 24-token prompt,
# top-k 40, temperature 0.8, from the same model file. Every run does one untimed warmup first and reads each step's
# tokens back to the host.
#   bash scripts/bench_generate.sh [model.bin]    (default: dev/data/gpt2_ref/gpt2_124M_bf16.bin, written if missing)
# Settings: NEW (1000), BATCHES ("1 64"), RECOMPUTE (1: include -kv 0), TORCH (1: include PyTorch, where torch has
# CUDA), PAGED (256: the paged cache's page size; 0: no paged run), OUT (the logs; /tmp/flashgpt_bench). Needs generate_gpt2cu built and gpt2_tokenizer.bin (scripts/prepro_tinyshakespeare.py).
set -u
cd "$(dirname "$0")/.."
NEW=${NEW:-1000}; BATCHES=${BATCHES:-"1 64"}; RECOMPUTE=${RECOMPUTE:-1}; TORCH=${TORCH:-1}; PAGED=${PAGED:-256}
OUT=${OUT:-/tmp/flashgpt_bench}; mkdir -p "$OUT"
MODEL=${1:-dev/data/gpt2_ref/gpt2_124M_bf16.bin}
# 24 tokens (GPT-2 BPE); the PyTorch run takes the val shard's first 24 tokens: the timing depends on the length only
PROMPT="First Citizen: Before we proceed any further, hear me speak. All: Speak, speak. First Citizen: You are"
if [ ! -f "$MODEL" ] && [ "$MODEL" = dev/data/gpt2_ref/gpt2_124M_bf16.bin ]; then
    [ -f dev/data/tinyshakespeare/tiny_shakespeare_val.bin ] || python3 scripts/prepro_tinyshakespeare.py > "$OUT/prepro.log" 2>&1
    python3 scripts/train_gpt2.py --write_reference dev/data/gpt2_ref -e d12 > "$OUT/write_reference.log" 2>&1 ||
        { echo "writing the reference checkpoint failed: $OUT/write_reference.log"; exit 1; }
fi
[ -x ./generate_gpt2cu ] || { echo "build generate_gpt2cu first (make generate_gpt2cu)"; exit 1; }
nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1
SAMPLING="-k 40 -T 0.8 -s 42"
rc=0
run() {   # name log command...
    local name=$1 log=$2; shift 2
    local t0=$SECONDS
    if ! timeout 300 "$@" > "$OUT/$log" 2>&1; then echo "$name failed: $OUT/$log"; tail -3 "$OUT/$log"; rc=1; fi
    grep "^RESULT" "$OUT/$log" | sed "s/^RESULT generate /RESULT $name /" >> "$OUT/results.txt"
    echo "$name: $((SECONDS - t0)) s"
}
: > "$OUT/results.txt"
for B in $BATCHES; do
    run "kv" "kv_b$B.log" ./generate_gpt2cu -e "$MODEL" -p "$PROMPT" -b "$B" -n "$NEW" $SAMPLING -eos -1 -q 1
    [ "$PAGED" != 0 ] && run "kv_paged" "kv_paged_b$B.log" ./generate_gpt2cu -e "$MODEL" -p "$PROMPT" -b "$B" -n "$NEW" $SAMPLING -eos -1 -pg "$PAGED" -q 1
    [ "$RECOMPUTE" = 1 ] && run "recompute" "recompute_b$B.log" ./generate_gpt2cu -e "$MODEL" -p "$PROMPT" -b "$B" -n "$NEW" $SAMPLING -eos -1 -kv 0 -q 1
    if [ "$TORCH" = 1 ] && python3 -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
        run "torch" "torch_b$B.log" python3 scripts/generate_torch.py --init "$MODEL" -b "$B" -n "$NEW" --prompt_len 24 -k 40 -T 0.8 --seed 42
    fi
done
grep -h "^| device\|^PyTorch" "$OUT"/kv_b*.log "$OUT"/torch_b*.log 2>/dev/null | sort -u | head -3
python3 - "$OUT/results.txt" <<'EOF'
import sys
rows = []
for line in open(sys.argv[1]):
    f = line.split()
    kv = dict(x.split("=", 1) for x in f[2:] if "=" in x)
    rows.append((f[1], kv))
names = {"kv": "generate_gpt2cu, KV cache", "kv_paged": "generate_gpt2cu -pg, paged KV cache",
         "recompute": "generate_gpt2cu -kv 0, full recompute", "torch": "PyTorch eager, SDPA, KV cache"}
base = {kv["B"]: float(kv["total_tok_s"]) for name, kv in rows if name == "recompute"}
print(f"| path | B | prompt | new | prefill ms | decode ms/step | decode tok/s | total tok/s | x recompute |")
print("|---|---|---|---|---|---|---|---|---|")
for name, kv in rows:
    n = int(kv["new"])
    step_ms = float(kv["decode_ms"]) / max(n - 1, 1)
    ratio = f"{float(kv['total_tok_s']) / base[kv['B']]:.1f}" if kv["B"] in base else "-"
    print(f"| {names.get(name, name)} | {kv['B']} | {kv['prompt']} | {n} | {float(kv['prefill_ms']):.2f} | {step_ms:.3f} | "
          f"{float(kv['decode_tok_s']):,.0f} | {float(kv['total_tok_s']):,.0f} | {ratio} |")
EOF
exit $rc
