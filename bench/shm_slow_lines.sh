#!/usr/bin/env bash
# The shared-memory allreduce against MPI_Allreduce in two settings,
# alternating, each run after a 1 s sample of how fast cache lines cross
# between the 2 CPUs (bench/cross_core_lines.cc: the median round trip).
# docs/comm.md, "Slow stretches". SETTINGS names them: "0 auto" (the
# default) compares slot stores kept plain (HPCT_SHM_STREAM=0) with the
# shipped choice by the copies' speed; "reused fresh" compares bench comm's
# --input reused (each call takes the bytes the last call left) with fresh
# (each call's input just written by its rank). Prints per run the round
# trip and each size's time against MPI_Allreduce's (paired median ratio);
# then per setting the runs at 0.5x or better at every size, and the
# ratios of the runs in a slow stretch (round trip above 300 ns).
# "base" runs another build's hpctrain ($BASE_BIN/hpctrain) with its own
# choice of stores, beside "auto" (this build's), to compare two commits:
#   git worktree add /tmp/base <commit> && cmake -S /tmp/base -B /tmp/base/build \
#     -G Ninja -DCMAKE_BUILD_TYPE=Release && ninja -C /tmp/base/build tools/hpctrain/hpctrain
#   RUNS=20 SETTINGS="base auto" BASE_BIN=/tmp/base/build/tools/hpctrain bench/shm_slow_lines.sh
#   RUNS=20 SETTINGS="reused fresh" OUT=/tmp/hpct-shm-lines bench/shm_slow_lines.sh
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
bench_out "${OUT:-/tmp/hpct-shm-lines}"
g++ -O2 -mavx2 -pthread -o "$OUT/cross_core_lines" "$here/bench/cross_core_lines.cc" || exit 1
round_trip() {
  "$OUT/cross_core_lines" 1 | /usr/bin/python3 -c '
import json, statistics, sys
print(round(statistics.median(json.loads(l)["round_trip_ns"] for l in sys.stdin)))'
}
SETTINGS=${SETTINGS:-0 auto}
for k in $(seq 1 "${RUNS:-20}"); do
  for setting in $SETTINGS; do
    rt=$(round_trip)
    log "run $k setting $setting round trip ${rt} ns"
    binary=$B
    case $setting in
      reused|fresh) stream=auto input=$setting ;;
      base) stream=auto input=fresh binary=${BASE_BIN:?set BASE_BIN to the tools/hpctrain folder of the other build}/hpctrain ;;
      *) stream=$setting input=fresh ;;
    esac
    HPCT_SHM_STREAM=$stream timeout 120 "$binary" bench comm --backend mpi --np 2 --sizes 1M,4M,16M,64M \
      --budget-s 1.0 --input "$input" 2>/dev/null | /usr/bin/python3 -c '
import json, sys
for l in sys.stdin:
    if l.startswith("{"):
        j = json.loads(l)
        print(json.dumps({"run": int(sys.argv[1]), "setting": sys.argv[2], "round_trip_ns": int(sys.argv[3]),
                          "bytes": j["bytes"], "time_us": j["time_us"], "raw_time_us": j["raw_time_us"],
                          "ratio": j["overhead_ratio"]}))' "$k" "$setting" "$rt" >> "$OUT/runs.jsonl"
  done
done
summarise <<'PY'
runs = {}
for r in rows:
    runs.setdefault((r['setting'], r['run']), []).append(r)
for setting in dict.fromkeys(r['setting'] for r in rows):
    mine = {k: v for k, v in runs.items() if k[0] == setting}
    held = sum(all(r['ratio'] <= 0.5 for r in v) for v in mine.values())
    print(f'{setting}: {held} of {len(mine)} runs at 0.5x MPI_Allreduce or better at every size')
    for (_, run), v in sorted(mine.items()):
        line = ' '.join(f"{r['bytes'] >> 20}M {r['time_us']:.0f}/{r['raw_time_us']:.0f} us {r['ratio']:.2f}" for r in v)
        slow = ' (slow stretch)' if v[0]['round_trip_ns'] > 300 else ''
        print(f"  run {run}: round trip {v[0]['round_trip_ns']} ns{slow}: {line}")
PY
