#!/usr/bin/env bash
# Two builds of `hpctrain bench data --source` side by side on loopback
# (docs/data.md, "Shards in object storage"): Fashion-MNIST's training split
# packed into shards of at most 100 MB (100 MB and 34 MB), served by nginx on
# 127.0.0.1 as in tests/objstore (worker_processes 1, sendfile on); each pair
# runs BEFORE and AFTER once, the order alternating from pair to pair, and
# every JSON line goes to OUT/runs.jsonl. Prints per pair ratio_to_curl and
# first_sample_to_curl_first_byte of each build, then the medians over the
# pairs and the median of the paired after/before ratios.
#   BEFORE=/path/hpctrain AFTER=/path/hpctrain PAIRS=5 ROUNDS=15 \
#     OUT=/tmp/hpct-stream bench/stream_before_after.sh ['/s/train-{000000..000001}.tar']
# AFTER defaults to this checkout's build; BEFORE to AFTER (a build against
# itself shows the noise). The shards and nginx stay in OUT between runs only
# as files; nginx is stopped at exit. With RATE (e.g. RATE=1gbit) the
# shards are served from namespace host 1 and read on host 2 across a link
# capped at RATE (scripts/netns-cluster.sh), torn down at exit.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
AFTER=${AFTER:-$B} BEFORE=${BEFORE:-$AFTER} PAIRS=${PAIRS:-5} ROUNDS=${ROUNDS:-15}
SHARDS=${1:-'/s/train-{000000..000001}.tar'}
bench_out "${OUT:-/tmp/hpct-stream}"
if [[ ! -f $OUT/www/s/train-000001.tar ]]; then
  rm -rf "$OUT/www" && mkdir -p "$OUT/www/s"
  "$AFTER" data pack --from fashion-mnist --split train -q --max-count 1000000 --max-size 100M \
    -o "$OUT/www/s/train-%06d.tar" > /dev/null || exit 1
fi
on_host() { "$@"; }  # where the reader runs: here, or on namespace host 2
if [[ -n ${RATE:-} ]]; then
  NAME=sba
  "$S" up 2 "$NAME" --rate "$RATE" > "$OUT/env" || exit 1
  eval "$(grep -E '^NETNS_HOSTS=' "$OUT/env")"
  read -r ADDR _ <<<"$NETNS_HOSTS"
  PORT=8080
  nginx_conf "$ADDR:$PORT" "$OUT/www"
  "$S" exec "$NAME" 1 /usr/sbin/nginx -c "$OUT/nginx/nginx.conf" -p "$OUT/nginx" || exit 1
  on_host() { "$S" exec "$NAME" 2 "$@"; }
else
  ADDR=127.0.0.1
  PORT=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  nginx_conf "$ADDR:$PORT" "$OUT/www"
  /usr/sbin/nginx -c "$OUT/nginx/nginx.conf" -p "$OUT/nginx" || exit 1
fi
stop() {
  [[ -s $OUT/nginx.pid ]] && kill "$(cat "$OUT/nginx.pid")" 2>/dev/null
  [[ -n ${RATE:-} ]] && "$S" down "$NAME" > /dev/null 2>&1
}
trap stop EXIT
for i in $(seq 1 50); do [[ -s $OUT/nginx.pid ]] && break; sleep 0.1; done
URL="http://$ADDR:$PORT$SHARDS"
log "source $URL, $PAIRS pairs of $ROUNDS rounds; before $BEFORE, after $AFTER"
for pair in $(seq 1 "$PAIRS"); do
  order="before after"; (( pair % 2 == 0 )) && order="after before"
  for build in $order; do
    bin=$BEFORE; [[ $build == after ]] && bin=$AFTER
    line=$(on_host timeout 600 "$bin" bench data --source "$URL" --rounds "$ROUNDS" | grep '"what":"stream"')
    [[ -n $line ]] || { log "pair $pair: $build failed"; continue; }
    echo "$line" | sed "s/^{/{\"pair\":$pair,\"build\":\"$build\",\"load\":\"$(cut -d' ' -f1 /proc/loadavg)\",/" \
      >> "$OUT/runs.jsonl"
  done
  log "pair $pair done"
done
summarise <<'PY'
pairs = {}
for r in rows:
    pairs.setdefault(r["pair"], {})[r["build"]] = r
keys = ("ratio_to_curl", "first_sample_to_curl_first_byte")
paired = {k: [] for k in keys}
for p, d in sorted(pairs.items()):
    for b in ("before", "after"):
        if b in d:
            r = d[b]
            print(json.dumps({"pair": p, "build": b, "load": r["load"],
                              "mb_per_s": round(r["bytes_per_s"] / 1e6), "curl_mb_per_s": round(r["curl_bytes_per_s"] / 1e6),
                              "ratio_to_curl": round(r["ratio_to_curl"], 3),
                              "first_sample_ms": round(r["first_sample_s"] * 1e3, 2),
                              "first_sample_min_ms": round(r["first_sample_min_s"] * 1e3, 2),
                              "curl_first_byte_ms": round(r["curl_first_byte_s"] * 1e3, 2),
                              "first_sample_to_curl_first_byte": round(r["first_sample_to_curl_first_byte"], 2)}))
    if "before" in d and "after" in d:
        for k in keys:
            paired[k].append(d["after"][k] / d["before"][k])
summary = {}
for b in ("before", "after"):
    for k in keys:
        v = [d[b][k] for d in pairs.values() if b in d]
        if v:
            summary[b + "_" + k] = round(statistics.median(v), 3)
for k in keys:
    if paired[k]:
        summary["after_over_before_" + k] = round(statistics.median(paired[k]), 3)
print(json.dumps(summary))
PY
