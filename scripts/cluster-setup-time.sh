#!/usr/bin/env bash
# Time `hpctrain cluster setup` on N bare namespace hosts: the first run from
# bare hosts, then a rerun right after (0 changes), with the options of
# tests/cluster/setup_test.sh (--slurm, a GlusterFS scratch volume on RAM
# bricks, --packages bundle made by setup). Prints each run's wall time, the
# load average, and the playbooks' seconds by step and the slowest tasks
# (from last-run.json); tears the hosts down. docs/cluster.md quotes it.
#
#   scripts/cluster-setup-time.sh HPCTRAIN DEB [N] [-- EXTRA SETUP OPTIONS]
#   e.g. scripts/cluster-setup-time.sh build/tools/hpctrain/hpctrain build/hpctrain_*_amd64.deb 3
#        ... -- --playbooks OLD_TREE/deploy/ansible   (another tree's roles, to compare)
set -uo pipefail
hp=${1:?usage: cluster-setup-time.sh HPCTRAIN DEB [N] [-- SETUP OPTIONS]}
deb=${2:?usage: cluster-setup-time.sh HPCTRAIN DEB [N] [-- SETUP OPTIONS]}
n=${3:-3}
shift $(( $# < 3 ? $# : 3 ))
[[ "${1:-}" == -- ]] && shift
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
netns=$src/scripts/netns-cluster.sh
name="ct$(printf '%06d' $(( $$ % 1000000 )))"
work=$(mktemp -d /tmp/hpct-setup-time.XXXXXX)
trap '"$netns" down "$name" > /dev/null 2>&1' EXIT
up=$("$netns" up "$n" "$name" --bare 2>&1) || { echo "$up"; exit 1; }
eval "$(grep -E '^NETNS_[A-Z_]+=' <<< "$up")"
[[ -z "${NETNS_SKIP:-}" ]] || { echo "cannot make bare hosts: $NETNS_SKIP"; exit 1; }
for h in $NETNS_HOSTS; do echo "$h slots=1"; done > "$work/hosts"
for run in first rerun; do
  echo "$(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg): $run run on $n bare hosts"
  s=$(date +%s.%N)
  timeout 1800 "$hp" cluster setup --hostfile "$work/hosts" -i "$NETNS_KEY" --user alice --shared-dir /shared \
    --packages bundle --deb "$deb" --scratch-dir /mnt/parallel --scratch-type glusterfs --scratch-ram \
    --scratch-size 512M --slurm "$@" > "$work/$run.log" 2>&1
  rc=$?
  echo "$run: $(awk -v a="$s" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s, exit $rc," \
    "doctor READY lines $(grep -c 'READY: ' "$work/$run.log"), load after $(cut -d' ' -f1-3 /proc/loadavg)"
  grep -o 'packages: bundle .*' "$work/$run.log" | head -n 1
  # Which hosts installed and which got a copy of an install (setup's summary notes).
  grep -oE 'packages (installed|copied) from .*' "$work/$run.log" | sort | uniq -c | sed 's/^ */  /'
  cp "$work/hosts.cluster/last-run.json" "$work/$run.json" 2> /dev/null
  python3 - "$work/$run.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("  playbooks %.1f s:" % r["elapsed_s"], ", ".join("%s %.1f" % kv for kv in sorted(r["step_seconds"].items(), key=lambda kv: -kv[1])))
print("  slowest tasks:", "; ".join("%s %.1f" % tuple(kv) for kv in sorted(r["task_seconds"], key=lambda kv: -kv[1])[:6]))
PY
done
echo "logs: $work"
