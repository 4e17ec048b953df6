#!/usr/bin/env bash
# Training the cnn from shards served over a capped link against the same
# shards on local disk (docs/data.md, "Training from a namespace host"): 2
# namespace hosts at RATE; nginx on host 1 serves Fashion-MNIST's training
# split packed into 6 shards (with sidecars); 2 ranks on host 2 train one
# epoch, alternating SRC between the local directory and http://h1:8080
# (local first in odd repeats, http first in even ones).
# Every summary goes to OUT/runs.jsonl; per repeat the http/local ratio of
# train_samples_per_s is printed, then the medians.
#   RATE=1gbit REPEATS=3 bench/train_remote.sh
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
RATE=${RATE:-1gbit} REPEATS=${REPEATS:-3} EPOCHS=${EPOCHS:-1}
bench_out "${OUT:-/tmp/hpct-train-remote}"
NAME=trr
if [[ ! -f $OUT/shards/train-000005.tar ]]; then
  rm -rf "$OUT/shards" && mkdir -p "$OUT/shards"
  "$B" data pack --from fashion-mnist --split train -q --max-count 10000 \
    -o "$OUT/shards/train-%06d.tar" > /dev/null || exit 1
fi
"$S" up 2 "$NAME" --rate "$RATE" > "$OUT/env" || exit 1
stop() {
  [[ -f $OUT/nginx.pid ]] && kill "$(cat "$OUT/nginx.pid")" 2>/dev/null
  "$S" down "$NAME" > /dev/null 2>&1
}
trap stop EXIT
eval "$(grep -E '^NETNS_HOSTS=' "$OUT/env")"
read -r h1 _ <<<"$NETNS_HOSTS"
nginx_conf "$h1:8080" "$OUT/shards"
"$S" exec "$NAME" 1 /usr/sbin/nginx -c "$OUT/nginx/nginx.conf" -p "$OUT/nginx" || exit 1
for i in $(seq 1 50); do [[ -s $OUT/nginx.pid ]] && break; sleep 0.1; done
declare -A SRC=([local]="$OUT/shards" [http]="http://$h1:8080")
for rep in $(seq 1 "$REPEATS"); do
  order="local http"; (( rep % 2 == 0 )) && order="http local"  # ABBA: drift cancels
  for kind in $order; do
    log "repeat $rep: $kind"
    rm -f "$OUT/m.jsonl"
    timeout 900 "$S" exec "$NAME" 2 "$B" launch -np 2 -- "$B" train --model cnn \
      --data "${SRC[$kind]}/train-{000000..000005}.tar" --epochs "$EPOCHS" --batch 64 --threads 1 \
      --seed 3 --metrics "$OUT/m.jsonl" > "$OUT/out-$rep-$kind" 2>&1 || log "failed (see $OUT/out-$rep-$kind)"
    grep '"type":"summary"' "$OUT/m.jsonl" 2>/dev/null | tail -1 |
      sed "s/^{/{\"repeat\":$rep,\"source\":\"$kind\",/" >> "$OUT/runs.jsonl"
  done
done
summarise <<'PY'
per_repeat = {}
for r in rows:
    per_repeat.setdefault(r["repeat"], {})[r["source"]] = r
ratios = []
for rep, d in sorted(per_repeat.items()):
    if "local" in d and "http" in d:
        ratio = d["http"]["train_samples_per_s"] / d["local"]["train_samples_per_s"]
        ratios.append(ratio)
        print(json.dumps({"repeat": rep, "local_samples_per_s": d["local"]["train_samples_per_s"],
                          "http_samples_per_s": d["http"]["train_samples_per_s"],
                          "ratio": round(ratio, 3), "remote_reads": d["http"].get("remote_reads")}))
if ratios:
    print(json.dumps({"median_ratio": round(statistics.median(ratios), 3), "ratios": [round(x, 3) for x in ratios]}))
PY
