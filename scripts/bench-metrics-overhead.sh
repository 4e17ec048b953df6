#!/usr/bin/env bash
# The cost of the Prometheus endpoint to training (docs/metrics.md): one rank
# of `hpctrain train` pinned to one core (taskset), alternately without and
# with HPCT_METRICS_PORT while a scraper reads /metrics every second from the
# other core (a Prometheus scrape_interval of 1 s; the default is 15 s).
# Per run: the trainer's samples/s (wall time, the training loop only) and
# the CPU time of the whole process (user + system, start-up included),
# which a loaded machine disturbs less than wall time. One JSON line per
# run, then one with the medians and their ratios.
#
#   scripts/bench-metrics-overhead.sh [REPEATS] [STEPS] [MODEL] [BUILD_DIR]
set -euo pipefail
repeats=${1:-7} steps=${2:-300} model=${3:-cnn} build=${4:-build}
H=$(readlink -f "$build/tools/hpctrain/hpctrain")
[[ -x $H ]] || { echo "bench-metrics-overhead: no $H (build the hpctrain target first)" >&2; exit 2; }
tmp=$(mktemp -d /tmp/hpct-metrics-overhead.XXXXXX)
scraper=
cleanup() {
  if [[ -n $scraper ]]; then kill "$scraper" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
"$H" data pack --from fashion-mnist --split test --max-count 10000 -q -o "$tmp/fm-%06d.tar"
shards=("$tmp"/fm-*.tar)
# A port below the ephemeral range that nothing listens on.
port=$((20000 + $$ % 10000))
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
for ((r = 0; r < repeats; r++)); do
  for mode in off on; do
    env=()
    if [[ $mode == on ]]; then
      env=(HPCT_METRICS_PORT=$port)
      # Ends with the run (killed below); each read is bounded to 1 s.
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
    # The trainer's summary line, then its CPU seconds (the child's rusage).
    out=$(env "${env[@]}" python3 -c '
import resource, subprocess, sys
p = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=900)
line = [l for l in p.stdout.splitlines() if "\"type\":\"summary\"" in l][-1]
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(line)
print(r.ru_utime + r.ru_stime)' taskset -c 1 "$H" train --model "$model" --data "${shards[@]}" --epochs 1 \
      --max-steps "$steps" --batch 64 --threads 1 --data-threads 1 --log-every 100000)
    if [[ -n $scraper ]]; then
      kill "$scraper" 2>/dev/null || true
      wait "$scraper" 2>/dev/null || true
      scraper=
    fi
    python3 -c '
import json, sys
s = json.loads(sys.argv[1])
print(json.dumps({"bench": "metrics_overhead", "model": sys.argv[3], "metrics": sys.argv[4], "repeat": int(sys.argv[5]),
                  "steps": s["steps"], "samples_per_s": round(s["train_samples_per_s"], 2),
                  "cpu_s": round(float(sys.argv[2]), 3), "load1": float(open("/proc/loadavg").read().split()[0])}))' \
      "$(head -1 <<<"$out")" "$(tail -1 <<<"$out")" "$model" "$mode" "$r"
  done
done | tee "$tmp/runs.jsonl"
python3 - "$tmp/runs.jsonl" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
med = lambda key, m: statistics.median(r[key] for r in runs if r["metrics"] == m)
out = {"bench": "metrics_overhead", "summary": True, "runs_each": len(runs) // 2}
for key in ("samples_per_s", "cpu_s"):
    out["median_%s_off" % key] = med(key, "off")
    out["median_%s_on" % key] = med(key, "on")
    out["%s_on_over_off" % key] = round(med(key, "on") / med(key, "off"), 4)
print(json.dumps(out))
PY
