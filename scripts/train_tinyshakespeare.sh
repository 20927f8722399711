#!/usr/bin/env bash
# Quick start: prepare tiny Shakespeare (if not done yet), build train_gpt2cu, and train GPT-2 124M (d12, random init)
# on it for a few hundred steps, printing the loss every step, the val loss every 50 steps and a sample every 100; the
# last step writes its checkpoint, $OUT_DIR/model_<STEPS, 8 digits>.bin, which generate_gpt2cu -e samples from.
#
#     ./scripts/train_tinyshakespeare.sh [extra train_gpt2cu flags, e.g. -x 500]
#
# Settings come from the environment: TEXT, RANKS (inputs of scripts/prepro_tinyshakespeare.py; default
# ../shared/data/*), DATA_DIR (dev/data/tinyshakespeare), OUT_DIR (log_tinyshakespeare), STEPS (300), B (4), T (1024).
# Data preparation needs python3 with tiktoken or the `regex` module; it downloads the inputs only if they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."

DATA_DIR=${DATA_DIR:-dev/data/tinyshakespeare}
OUT_DIR=${OUT_DIR:-log_tinyshakespeare}
STEPS=${STEPS:-300}
B=${B:-4}
T=${T:-1024}
TRAIN_BIN="$DATA_DIR/tiny_shakespeare_train.bin"
VAL_BIN="$DATA_DIR/tiny_shakespeare_val.bin"

# 1. data: token shards + gpt2_tokenizer.bin (the tokenizer decodes the samples)
if [ ! -f "$TRAIN_BIN" ] || [ ! -f "$VAL_BIN" ] || [ ! -f gpt2_tokenizer.bin ]; then
    prepro_args=(--out_dir "$DATA_DIR" --tokenizer_out gpt2_tokenizer.bin)
    [ -n "${TEXT:-}" ] && prepro_args+=(--text "$TEXT")
    [ -n "${RANKS:-}" ] && prepro_args+=(--ranks "$RANKS")
    python3 scripts/prepro_tinyshakespeare.py "${prepro_args[@]}"
fi

# 2. build
make train_gpt2cu

# 3. train: the val shard (32,768 tokens) holds (32768 - 1) / (B*T) full batches; evaluate on all of them
VAL_STEPS=$(( (32768 - 1) / (B * T) ))
[ "$VAL_STEPS" -ge 1 ] || { echo "error: B*T = $((B * T)) is larger than the val shard"; exit 1; }
./train_gpt2cu \
    -i "$TRAIN_BIN" \
    -j "$VAL_BIN" \
    -e d12 \
    -o "$OUT_DIR" \
    -b "$B" -t "$T" -d $((B * T)) \
    -x "$STEPS" \
    -l 0.0003 -u 20 -q 0.1 -c 0.1 -k cosine \
    -v 50 -m "$VAL_STEPS" \
    -s 100 \
    -n "$STEPS" -y 0 \
    -r 1 -z 0 \
    "$@"
