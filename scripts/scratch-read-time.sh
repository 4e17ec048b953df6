#!/usr/bin/env bash
# Aggregate read throughput of the GlusterFS scratch volume against the
# shared directory, in the layout of a cluster with a head: N+1 bare namespace
# hosts set up by `hpctrain cluster setup` (--shared-dir /shared held by the
# last host, the head; the scratch volume over every host's RAM), every link
# capped at RATE, then the N compute hosts (not the head) reading different
# shards of the same 140 MB at once with `hpctrain bench data --source DIR`,
# /shared and /mnt/parallel alternating. Prints each aggregate line and the
# ratio of each pair; tears the hosts down. docs/cluster.md quotes it.
#
#   scripts/scratch-read-time.sh HPCTRAIN DEB [N] [RATE] [PAIRS]
#   e.g. scripts/scratch-read-time.sh build/tools/hpctrain/hpctrain build/hpctrain_*_amd64.deb 3 1gbit 3
set -uo pipefail
hp=${1:?usage: scratch-read-time.sh HPCTRAIN DEB [N] [RATE] [PAIRS]}
deb=${2:?usage: scratch-read-time.sh HPCTRAIN DEB [N] [RATE] [PAIRS]}
n=${3:-3}
rate=${4:-1gbit}
pairs=${5:-3}
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
netns=$src/scripts/netns-cluster.sh
name="sr$(printf '%06d' $(( $$ % 1000000 )))"
work=$(mktemp -d /tmp/hpct-scratch-read.XXXXXX)
trap '"$netns" down "$name" > /dev/null 2>&1' EXIT
up=$("$netns" up "$((n + 1))" "$name" --bare 2>&1) || { echo "$up"; exit 1; }
eval "$(grep -E '^NETNS_[A-Z_]+=' <<< "$up")"
[[ -z "${NETNS_SKIP:-}" ]] || { echo "cannot make bare hosts: $NETNS_SKIP"; exit 1; }
read -r -a hosts <<< "$NETNS_HOSTS"
head=${hosts[$n]}
for h in "${hosts[@]}"; do echo "$h slots=1"; done > "$work/hosts"
echo "$(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg): setup of $((n + 1)) bare hosts, /shared on $head"
timeout 1800 "$hp" cluster setup --hostfile "$work/hosts" -i "$NETNS_KEY" --user alice --shared-dir /shared \
  --shared-from "$head" --packages bundle --deb "$deb" --scratch-dir /mnt/parallel --scratch-type glusterfs \
  --scratch-ram --scratch-size 512M > "$work/setup.log" 2>&1 || { tail -20 "$work/setup.log"; exit 1; }
as_alice() { timeout 900 ssh -F "$work/hosts.cluster/ssh_config" "${hosts[0]}" "$@"; }
"$hp" data pack --from fashion-mnist --split train --max-size 8M -o "$work/big/train-%06d.tar" --quiet \
  > "$work/pack.log" 2>&1 || { cat "$work/pack.log"; exit 1; }
for d in /shared /mnt/parallel; do
  tar -C "$work/big" -cf - . | as_alice "mkdir -p $d/big && tar -C $d/big -xf -" || { echo "copying into $d failed"; exit 1; }
done
# The readers: the compute hosts, not the head.
printf '%s slots=1\n' "${hosts[@]:0:$n}" | as_alice "cat > /tmp/readers"
"$netns" rate "$name" "$rate" || exit 1
for p in $(seq 1 "$pairs"); do
  for d in /shared /mnt/parallel; do
    echo "pair $p $d: load $(cut -d' ' -f1-3 /proc/loadavg)"
    as_alice "hpctrain bench data --source $d/big --hostfile /tmp/readers --rounds 1 --timeout-s 300" \
      > "$work/read.$p.${d//\//_}.json" 2>&1 || { tail -5 "$work/read.$p.${d//\//_}.json"; exit 1; }
  done
done
"$netns" rate "$name" none
python3 - "$work" "$pairs" <<'PY'
import glob, json, sys
work, pairs = sys.argv[1], int(sys.argv[2])
def agg(p, d):
    for line in open("%s/read.%d.%s.json" % (work, p, d.replace("/", "_"))):
        if '"aggregate_read"' in line:
            return json.loads(line)
for p in range(1, pairs + 1):
    s, v = agg(p, "/shared"), agg(p, "/mnt/parallel")
    print("pair %d: /shared %.0f MB/s, /mnt/parallel %.0f MB/s (%d hosts, %d bytes each side): %.2fx"
          % (p, s["mb_per_s"], v["mb_per_s"], v["hosts"], v["bytes"], v["mb_per_s"] / s["mb_per_s"]))
PY
echo "logs: $work"
