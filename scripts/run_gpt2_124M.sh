#!/usr/bin/env bash
# GPT-2 124M on 10B tokens of FineWeb: llm.c's reproduction run (scripts/run_gpt2_124M.sh there), with our flags.
# 18,865 steps of 524,288 tokens (B=64 × T=1024 × grad accumulation over NUM_GPUS), lr 6e-4 with 700 warmup steps and
# cosine decay to 0, weight decay 0.1, val loss every 250 steps, a sample every 20,000, a checkpoint every 5,000.
# The loop resumes from the latest checkpoint (-y 1) after a crash, until the final DONE file exists.
# llm.c reports ~94 min on 8×A100 80GB; at 305K tok/s (llm.c on one H100, own attention) it is ~9 h on one GPU.
#
#     TRAIN_GLOB=... VAL_GLOB=... NUM_GPUS=1 ./scripts/run_gpt2_124M.sh
#
# The shards are llm.c's format (magic 20240520, uint16 GPT-2 tokens, fineweb_{train,val}_%06d.bin, 10^8 tokens each),
# e.g. made by llm.c's dev/data/fineweb.py. NUM_GPUS > 1 launches one process per GPU with mpirun (ZeRO-1 on);
# MAX_RESTARTS (20) bounds the resume loop.
set -euo pipefail
cd "$(dirname "$0")/.."

TRAIN_GLOB=${TRAIN_GLOB:-"dev/data/fineweb10B/fineweb_train_*.bin"}
VAL_GLOB=${VAL_GLOB:-"dev/data/fineweb10B/fineweb_val_*.bin"}
OUT_DIR=${OUT_DIR:-log_gpt2_124M}
NUM_GPUS=${NUM_GPUS:-1}
STEPS=18865
DONE_FILE=$(printf "%s/DONE_%08d" "$OUT_DIR" "$STEPS")

compgen -G "$TRAIN_GLOB" >/dev/null || { echo "error: no train shards match $TRAIN_GLOB"; exit 1; }
compgen -G "$VAL_GLOB" >/dev/null || { echo "error: no val shards match $VAL_GLOB"; exit 1; }
make train_gpt2cu

launch=()
if [ "$NUM_GPUS" -gt 1 ]; then launch=(mpirun -np "$NUM_GPUS"); fi
zero_stage=$([ "$NUM_GPUS" -gt 1 ] && echo 1 || echo 0)

restarts=0
until [ -f "$DONE_FILE" ]; do
    if [ "$restarts" -ge "${MAX_RESTARTS:-20}" ]; then echo "error: gave up after $restarts restarts"; exit 1; fi
    restarts=$((restarts + 1))
    "${launch[@]}" ./train_gpt2cu \
        -i "$TRAIN_GLOB" \
        -j "$VAL_GLOB" \
        -o "$OUT_DIR" \
        -e d12 \
        -b 64 -t 1024 -d 524288 \
        -x "$STEPS" \
        -l 0.0006 -u 700 -q 0.0 -c 0.1 -k cosine \
        -v 250 -m 20 \
        -s 20000 \
        -n 5000 -y 1 \
        -r 0 -z "$zero_stage" \
        || echo "train_gpt2cu exited with status $?; resuming from the latest checkpoint"
    sleep 1
done
echo "done: $DONE_FILE"
