#!/usr/bin/env bash
# The staleness benchmark of docs/ps.md, on this host: `hpctrain train` (cnn,
# batch 64, real Fashion-MNIST shards) with 1 rank, and with 2 ranks under
# allreduce, ps (1 server) and ps-async --staleness S (1 server), in
# alternating repeats; prints one JSON line per run with samples/s, the
# scaling efficiency against the same repeat's 1-rank run, and the load.
#
#   scripts/bench-ps-staleness.sh SHARD_DIR [REPEATS] [STEPS] [S] [BUILD_DIR]
# SHARD_DIR holds fm-000000.tar.. (hpctrain data pack --from fashion-mnist).
set -euo pipefail
data=$1 repeats=${2:-3} steps=${3:-300} staleness=${4:-2} build=${5:-build}
H=$(readlink -f "$build/tools/hpctrain/hpctrain")
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
train=("$H" train --model cnn --data "$data/fm-{000000..000002}.tar" --epochs 100 --batch 64
       --lr 0.05 --threads 1 --seed 1 --log-every 100000 --progress lines --max-steps "$steps")
sps() { grep '"type":"summary"' | sed 's/^\[0\] //' | python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["train_samples_per_s"])'; }
for ((r = 0; r < repeats; r++)); do
  one=$("$H" launch -np 1 -- "${train[@]}" 2>&1 | sps)
  for mode in allreduce ps ps-async; do
    extra=()
    [[ $mode != allreduce ]] && extra=(--servers 1)
    two=$("$H" launch -np 2 "${extra[@]}" -- "${train[@]}" --sync "$mode" --staleness "$staleness" 2>&1 | sps)
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    python3 -c "import json; print(json.dumps({'type':'bench_ps_staleness','repeat':$r,'sync':'$mode','staleness':$staleness,'samples_per_s_1':$one,'samples_per_s_2':$two,'scaling_efficiency':$two/(2*$one),'loadavg':'$load'}))"
  done
done
