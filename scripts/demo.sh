#!/usr/bin/env bash
# The demo job: the small CNN trained on Fashion-MNIST (Debian's
# dataset-fashion-mnist) by 2 ranks under `hpctrain launch`, evaluated on the
# test split after each epoch, then the summary. Packs the data into shards
# first when they are not there yet. One intra-op thread per rank (2 ranks on
# 2 cores).
set -euo pipefail
build=${1:-build}
bin="$build/tools/hpctrain/hpctrain"
[ -x "$bin" ] || { echo "demo: $bin is missing; run 'make build' first" >&2; exit 1; }
data="$build/fashion-mnist"
epochs=${DEMO_EPOCHS:-3}
mkdir -p "$data"
if [ ! -f "$data/test-000000.tar" ] || [ ! -f "$data/train-000005.tar" ]; then
  echo "demo: packing Fashion-MNIST into $data (train: 6 shards, test: 1)"
  "$bin" data pack --from fashion-mnist --split train -o "$data/train-%06d.tar" --quiet
  "$bin" data pack --from fashion-mnist --split test -o "$data/test-%06d.tar" --quiet
fi
rm -rf "$build/demo-checkpoints" "$build/demo-metrics.jsonl"
echo "demo: training cnn on 2 ranks, $epochs epochs, batch 64 per rank (global 128)"
start=$(date +%s)
OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
"$bin" launch -np 2 --env OMP_NUM_THREADS=1 --env OPENBLAS_NUM_THREADS=1 ${DEMO_LAUNCH_ARGS:-} -- \
  "$bin" train --model cnn --data "$data/train-{000000..000005}.tar" --val "$data/test-000000.tar" \
    --epochs "$epochs" --batch 64 --lr 0.1 --warmup-epochs 0.3 --optimizer sgd --momentum 0.9 \
    --threads 1 --seed 1 --log-every 100 --progress lines \
    --checkpoint-dir "$build/demo-checkpoints" --metrics "$build/demo-metrics.jsonl" ${DEMO_TRAIN_ARGS:-} \
  | tee "$build/demo-train.log"
echo "demo: wall time $(( $(date +%s) - start )) s; metrics in $build/demo-metrics.jsonl"
