#!/usr/bin/env bash
# What the flight record costs (docs/why.md, "Overhead"): `hpctrain bench
# train` with the record on (HPCT_FLIGHT_RECORD_ENTRIES=2000, the default)
# and off (0), side by side in one run, for each model in MODELS. Each
# repeat runs both, the order alternating from repeat to repeat (ABBA: drift
# hits both alike); every JSON line goes to OUT/runs.jsonl with "record"
# (on/off) and "repeat" added. Then per model: the medians of samples/s and
# the median of the paired on/off ratios (1.0 = no cost; the issue allows
# 0.99).
#   MODELS="mlp cnn" REPEATS=5 STEPS=100 bench/flight_record_overhead.sh
#   RATE=10gbit ... bench/flight_record_overhead.sh   # one rank on each of 2
#                                                    # namespace hosts at RATE
# One intra-op thread per rank (common.sh), 2 ranks, MPI on one host (shared
# memory), and across hosts the launcher's ssh with Gloo.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
MODELS=${MODELS:-"mlp cnn"} REPEATS=${REPEATS:-5} STEPS=${STEPS:-100} WARMUP=${WARMUP:-10}
bench_out "${OUT:-/tmp/hpct-flight-overhead}"
where=()
if [[ -n ${RATE:-} ]]; then
  NAME=fro
  "$S" up 2 "$NAME" --rate "$RATE" > "$OUT/env" || exit 1
  trap '"$S" down "$NAME" > /dev/null 2>&1' EXIT
  eval "$(grep -E '^NETNS_(HOSTS|KEY)=' "$OUT/env")"
  read -r h1 h2 <<<"$NETNS_HOSTS"
  where=(-H "$h1:1,$h2:1" -i "$NETNS_KEY" --ssh-option StrictHostKeyChecking=no
         --ssh-option UserKnownHostsFile=/dev/null --backend gloo)
  export GLOO_SOCKET_IFNAME=eth0
fi
for model in $MODELS; do
  for rep in $(seq 1 "$REPEATS"); do
    order="on off"; (( rep % 2 == 0 )) && order="off on"
    for record in $order; do
      entries=2000; [[ $record == off ]] && entries=0
      log "$model repeat $rep: record $record"
      HPCT_FLIGHT_RECORD_ENTRIES=$entries timeout 900 "$B" bench train --model "$model" --np 2 \
        --steps "$STEPS" --warmup "$WARMUP" "${where[@]}" > "$OUT/out-$model-$rep-$record" 2>&1 ||
        log "failed (see $OUT/out-$model-$rep-$record)"
      grep '"bench":"train"' "$OUT/out-$model-$rep-$record" | tail -1 |
        sed "s/^{/{\"record\":\"$record\",\"repeat\":$rep,/" >> "$OUT/runs.jsonl"
    done
  done
done
summarise <<'PY'
for model in sorted({r["model"] for r in rows}):
    mine = [r for r in rows if r["model"] == model]
    by = {}
    for r in mine:
        by.setdefault(r["repeat"], {})[r["record"]] = r["samples_per_s"]
    ratios = [d["on"] / d["off"] for d in by.values() if "on" in d and "off" in d]
    on = [r["samples_per_s"] for r in mine if r["record"] == "on"]
    off = [r["samples_per_s"] for r in mine if r["record"] == "off"]
    if ratios:
        print(json.dumps({"model": model, "repeats": len(ratios),
                          "on_samples_per_s": round(statistics.median(on), 1),
                          "off_samples_per_s": round(statistics.median(off), 1),
                          "median_ratio_on_to_off": round(statistics.median(ratios), 4),
                          "ratios": [round(x, 4) for x in ratios]}))
PY
