#!/usr/bin/env bash
# Lossy compression against DDP on a slow link (docs/compression.md): 2
# namespace hosts at RATE, one rank each; per repeat, alternating, our side
# with each of MODES, then DDP with each of HOOKS (bench train --peer ddp;
# HOOK@MB also sets DDP's bucket size, e.g. powersgd:4@128 for one bucket).
# Every line goes to OUT/runs.jsonl; the medians are printed at the end.
#   RATE=1gbit MODEL=mlp REPEATS=3 bench/compression_speed.sh
# RATE=local: both ranks on this host (no namespace hosts). Extra settings
# of our side go in the environment (e.g. HPCT_ALLOW_LOSSY=1 with MODES=auto).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
RATE=${RATE:-1gbit} MODEL=${MODEL:-mlp} REPEATS=${REPEATS:-3}
MODES=${MODES:-powersgd:4 int8 none}
HOOKS=${HOOKS-none fp16 powersgd:4}   # set and empty: no DDP runs
if [[ $MODEL == mlp ]]; then STEPS=${STEPS:-20}; else STEPS=${STEPS:-40}; fi
bench_out "${OUT:-/tmp/hpct-compression-speed}"
export HPCT_COMPRESSION_START_STEP=5
if [[ $RATE == local ]]; then
  HOSTS=()
else
  "$S" up 2 cs --rate "$RATE" > "$OUT/env" || exit 1
  trap '"$S" down cs > /dev/null 2>&1' EXIT
  eval "$(grep -E '^NETNS_(HOSTS|KEY)=' "$OUT/env")"
  read -r h1 h2 _ <<<"$NETNS_HOSTS"
  HOSTS=(-H "$h1:1,$h2:1" -i "$NETNS_KEY" --ssh-option StrictHostKeyChecking=no --ssh-option UserKnownHostsFile=/dev/null)
fi
common=(--model "$MODEL" --np 2 --steps "$STEPS" --warmup 5 --batch 64 "${HOSTS[@]}")
for rep in $(seq 1 "$REPEATS"); do
  for c in $MODES; do
    log "repeat $rep: ours $c"
    timeout 900 "$B" bench train "${common[@]}" --compression "$c" 2>>"$OUT/err" |
      grep '"impl"' | sed "s/^{/{\"repeat\":$rep,\"mode\":\"$c\",/" >> "$OUT/runs.jsonl"
  done
  for spec in $HOOKS; do   # HOOK[@BUCKET_MB]: DDP's comm hook, and its bucket_cap_mb
    hook=${spec%@*}; bucket=0; [[ $spec == *@* ]] && bucket=${spec#*@}
    log "repeat $rep: ddp hook $hook (bucket $bucket MB)"
    timeout 1800 "$B" bench train "${common[@]}" --compression none --peer ddp --peer-hook "$hook" \
      --peer-bucket-mb "$bucket" 2>>"$OUT/err" |
      grep '"pytorch-ddp"' | sed "s/^{/{\"repeat\":$rep,/" >> "$OUT/runs.jsonl"
  done
done
summarise <<'PY'
by = {}
for r in rows:
    bucket = r.get("bucket_mb", "default")
    key = ("ddp " + r.get("hook", "none") + ("" if bucket == "default" else "@%g" % bucket)
           if r.get("impl") == "pytorch-ddp" else r["mode"])
    by.setdefault(key, []).append(None if r.get("failed") else r["samples_per_s"])
med = {}
for k, v in by.items():
    ok = [x for x in v if x is not None]
    med[k] = statistics.median(ok) if ok and len(ok) == len(v) else None
    print(json.dumps({"run": k, "samples_per_s": v, "median": med[k]}))
for k in med:
    if k.startswith("ddp") or med[k] is None: continue
    print(json.dumps({"ours": k, **{"/" + d: round(med[k] / med[d], 2) for d in med if d.startswith("ddp") and med[d]}}))
PY
