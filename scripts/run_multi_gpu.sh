#!/usr/bin/env bash
# GPT-2 on every GPU of one node, one train_gpt2cu process per GPU, data parallel over NCCL (no MPI): the ranks meet
# through a file in a fresh directory (-pi fs -pf DIR). Extra arguments go to every rank.
#   bash scripts/run_multi_gpu.sh                       d12, B=64, T=1024, 50 steps on all GPUs
#   NGPU=2 bash scripts/run_multi_gpu.sh -x 200 -d 262144
# torchrun works too (it sets RANK, WORLD_SIZE, LOCAL_RANK): torchrun --nproc_per_node=N ./train_gpt2cu -pi tcp ...
# A rank that fails makes the others exit (NCCL errors and stalls are checked; see src/distributed.h and wait_stream).
set -u
cd "$(dirname "$0")/.."
NGPU=${NGPU:-$(nvidia-smi -L 2>/dev/null | wc -l)}
[ "$NGPU" -ge 1 ] || { echo "no GPU found (set NGPU)"; exit 1; }
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}   # NVLink multicast off, as the lent multi-GPU machines require
RDV=$(mktemp -d /tmp/flashgpt_rdv_XXXXXX)
pids=()
for ((r = 0; r < NGPU; r++)); do
    ./train_gpt2cu -e d12 -b 64 -t 1024 -x 50 -v 0 -s 0 -pn "$NGPU" -pr "$r" -pi fs -pf "$RDV" "$@" &
    pids+=($!)
done
rc=0
for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
rm -rf "$RDV"
exit $rc
