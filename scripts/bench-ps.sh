#!/usr/bin/env bash
# The parameter-server bandwidth benchmark of docs/ps.md: W workers on
# namespace hosts 1..W, with K servers on hosts W+1..W+K (--sync ps) against
# the same W workers with the engine's allreduce (Gloo's ring), alternating
# repeats, one JSON line per run (bench ps) with the host's load.
#
#   scripts/netns-cluster.sh up 8 NAME --rate 1gbit
#   scripts/bench-ps.sh NAME WORKERS SERVERS REPEATS MB [BUILD_DIR] >> results.jsonl
#   scripts/netns-cluster.sh down NAME
set -euo pipefail
name=$1 workers=$2 servers=$3 repeats=${4:-3} mb=${5:-32} build=${6:-build}
dir=/tmp/hpct-netns-$name
# shellcheck disable=SC1090,SC1091
eval "$(sed 's/^/export /' "$dir/env")"
read -r -a hosts <<<"$NETNS_HOSTS"
H=$(readlink -f "$build/tools/hpctrain/hpctrain")
ssh_opts=(-i "$NETNS_KEY" --ssh-option StrictHostKeyChecking=no --ssh-option UserKnownHostsFile=/dev/null)
wl=$(IFS=,; echo "${hosts[*]:0:workers}" | sed 's/,/:1,/g'):1
sl=$(IFS=,; echo "${hosts[*]:workers:servers}")
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
for ((r = 0; r < repeats; r++)); do
  for mode in allreduce ps; do
    extra=()
    [[ $mode == ps ]] && extra=(--servers "$servers" --server-hosts "$sl")
    timeout 600 "$H" launch -H "$wl" "${ssh_opts[@]}" "${extra[@]}" -- \
      "$H" bench ps --sync "$mode" --mb "$mb" --steps 5 --warmup 1 2>&1 |
      grep '"type":"bench_ps"' | sed 's/^\[0\] //' | sed "s/}\$/,\"repeat\":$r}/"
  done
done
