#!/usr/bin/env bash
# The cost of the Prometheus endpoint to training (docs/metrics.md): one rank
# of `hpctrain train` pinned to one core (taskset), alternately without and
# with HPCT_METRICS_PORT while a scraper reads /metrics every second from the
# other core (a Prometheus scrape_interval of 1 s; the default is 15 s).
# One JSON line per run, then one with the medians and their ratio.
#
#   scripts/bench-metrics-overhead.sh [REPEATS] [STEPS] [MODEL] [BUILD_DIR]
set -euo pipefail
repeats=${1:-7} steps=${2:-300} model=${3:-cnn} build=${4:-build}
H=$(readlink -f "$build/tools/hpctrain/hpctrain")
[[ -x $H ]] || { echo "bench-metrics-overhead: no $H (build the hpctrain target first)" >&2; exit 2; }
tmp=$(mktemp -d /tmp/hpct-metrics-overhead.XXXXXX)
scraper=
cleanup() {
  [[ -n $scraper ]] && kill "$scraper" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
"$H" data pack --from fashion-mnist --split train --max-count 20000 -q -o "$tmp/fm-%06d.tar"
shards=$(ls "$tmp"/fm-*.tar | paste -sd' ')
# A port below the ephemeral range that nothing listens on.
port=$(( 20000 + $$ % 10000 ))
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
for ((r = 0; r < repeats; r++)); do
  for mode in off on; do
    env=()
    if [[ $mode == on ]]; then
      env=(HPCT_METRICS_PORT=$port)
      # Bounded: it ends with the run (killed below) and each read has a 1 s bound.
      taskset -c 0 python3 -c "
import time, urllib.request
while True:
    try:
        urllib.request.urlopen('http://127.0.0.1:$port/metrics', timeout=1).read()
    except OSError:
        pass
    time.sleep(1)" &
      scraper=$!
    fi
    # shellcheck disable=SC2086
    line=$(env "${env[@]}" timeout 600 taskset -c 1 "$H" train --model "$model" --data $shards --epochs 1 \
             --max-steps "$steps" --batch 64 --threads 1 --data-threads 1 --log-every 100000 2>/dev/null |
           grep '"type":"summary"')
    if [[ -n $scraper ]]; then kill "$scraper" 2>/dev/null || true; wait "$scraper" 2>/dev/null || true; scraper=; fi
    sps=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["train_samples_per_s"])' "$line")
    echo "{\"bench\":\"metrics_overhead\",\"model\":\"$model\",\"metrics\":\"$mode\",\"repeat\":$r,\"steps\":$steps,\"samples_per_s\":$sps,\"load1\":$(cut -d' ' -f1 /proc/loadavg)}"
  done
done | tee "$tmp/runs.jsonl"
python3 - "$tmp/runs.jsonl" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
med = {m: statistics.median(r["samples_per_s"] for r in runs if r["metrics"] == m) for m in ("off", "on")}
print(json.dumps({"bench": "metrics_overhead", "summary": True, "runs_each": len(runs) // 2,
                  "median_off": round(med["off"], 1), "median_on": round(med["on"], 1),
                  "on_over_off": round(med["on"] / med["off"], 4)}))
PY
