#!/usr/bin/env bash
# deploy/slurm/train.sbatch on the real local Slurm (scripts/slurm-local.sh,
# the CTest fixture launch_slurm): 2 ranks of the cnn on Fashion-MNIST.
#  A. an uninterrupted run;
#  B. the same job interrupted twice: USR1 to its tasks (what
#     `#SBATCH --signal=USR1@120` sends before the time limit), after which
#     the script requeues itself; then `scontrol requeue` (SIGTERM, as a
#     preemption). Each time the ranks checkpoint, the next run resumes from
#     that checkpoint, and the job finishes.
# B's final parameters must equal A's (the summary's CRC32C). Labels deploy, slurm.
# Usage: sbatch_requeue_test.sh HPCTRAIN-BINARY SLURM-DIR
# check() evaluates its single-quoted conditions later; the helpers run through wait_for.
# shellcheck disable=SC2016,SC2317
set -euo pipefail
hpctrain="$1"
slurm_dir="$2"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if [ -f "$slurm_dir/skip" ]; then echo "skip: $(cat "$slurm_dir/skip")"; exit 77; fi
export SLURM_CONF="$slurm_dir/slurm.conf"
[ -f "$SLURM_CONF" ] || { echo "no local Slurm at $slurm_dir (fixture launch_slurm)"; exit 1; }
bin_dir="$(dirname "$hpctrain")"
export PATH="$bin_dir:$PATH"
tmp="$(mktemp -d /tmp/hpct-sbatch.XXXXXX)"
jobs_started=()
cleanup() {
  local j
  for j in "${jobs_started[@]}"; do scancel "$j" 2>/dev/null || true; done
  # Bounded wait (10 s) for cancelled jobs to stop writing into $tmp.
  for _ in $(seq 20); do
    busy=0
    for j in "${jobs_started[@]}"; do
      case "$(state "$j")" in RUNNING|COMPLETING|CONFIGURING) busy=1 ;; esac
    done
    [ "$busy" = 0 ] && break
    sleep 0.5
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
start=$SECONDS
say() { echo "[$((SECONDS - start)) s] $*"; }

hpctrain data pack --from fashion-mnist --split test -q --max-count 2500 -o "$tmp/fmnist/fm-%06d.tar"
# 600 steps over 4 epochs of 156: each run lasts seconds, not the ~1.5 s of
# one epoch, so a requeue sent 50 steps into a run lands well before its end
# even when the poll below is late (a requeue after the last step found the
# job done: the check of "stopped twice" failed in CI when runs were short).
total_steps=600
export SHARED="$tmp" MODEL=cnn BATCH=32 SEED=7 EPOCHS=4 CKPT_EVERY=1000
export DATA="$tmp/fmnist/fm-{000000..000003}.tar"
export TRAIN_ARGS="--log-every 10 --max-steps $total_steps --lr 0.05"

submit() {  # NAME -> job id; 2 ranks on the one local node
  local id
  id=$(CKPT_DIR="$tmp/ckpt-$1" sbatch --parsable -N1 -n2 --ntasks-per-node=2 -c1 --time=10 \
       -o "$tmp/$1.out" "$repo/deploy/slurm/train.sbatch")
  jobs_started+=("$id")
  echo "$id"
}
state() { scontrol -o show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2 || true; }
# wait_for DESCRIPTION SECONDS COMMAND...: poll every 0.5 s, bounded.
wait_for() {
  local what="$1" limit="$2"
  shift 2
  local deadline=$((SECONDS + limit))
  until "$@"; do
    if [ $SECONDS -ge $deadline ]; then
      say "FAIL: no $what within $limit s"
      for f in "$tmp"/*.out; do echo "--- $f"; tail -20 "$f"; done
      exit 1
    fi
    sleep 0.5
  done
}
# A finished run's summary (a run stopped by a signal prints one too).
final_summary() { grep '"type":"summary"' "$tmp/$1.out" 2>/dev/null | grep '"stopped_by_signal":false' | tail -1; }
summary_in() { [ -n "$(final_summary "$1")" ]; }
# The newest run's step lines: "epoch 1 step N ..." after the run's banner.
run_reached() {  # NAME RUN STEP
  awk -v run="job [0-9]+ run $2 " -v want="$3" '
    $0 ~ run { on = 1 }
    on && /^epoch [0-9]+ step [0-9]+/ { if ($4 + 0 >= want) found = 1 }
    END { exit !found }' "$tmp/$1.out" 2>/dev/null
}
# A requeued job waits ~2 minutes (Reason=BeginTime), set when its
# completion ends: push its start to now, again while it still waits, until
# its next run prints its banner.
started_or_released() {  # JOB NAME RUN
  grep -q "job $1 run $3 " "$tmp/$2.out" 2>/dev/null && return 0
  if [ "$(state "$1")" = PENDING ]; then scontrol update JobId="$1" StartTime=now 2>/dev/null || true; fi
  sleep 1
  return 1
}
release() { wait_for "run $3 of requeued job $1" 90 started_or_released "$1" "$2" "$3"; }
crc() { final_summary "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["params_crc32c"])'; }
field() { final_summary "$1" | python3 -c "import json,sys; print(json.load(sys.stdin)[\"$2\"])"; }

say "A: uninterrupted"
job_a=$(submit a)
say "A is job $job_a"
wait_for "summary of A" 180 summary_in a
say "A done: crc $(crc a), steps $(field a steps)"

say "B: interrupted by USR1, then by scontrol requeue"
b=$(submit b)
wait_for "step 100 of B's first run" 120 run_reached b 0 100
scancel --signal=USR1 "$b"
say "B: USR1 sent"
release "$b" b 1
first_stop=$(grep -o 'stopped on a signal after step [0-9]*' "$tmp/b.out" | sed -n 1p | awk '{print $NF}')
wait_for "B's second run 50 steps past step ${first_stop:-?}" 120 run_reached b 1 $((${first_stop:-100} + 50))
scontrol requeue "$b"
say "B: scontrol requeue"
release "$b" b 2
wait_for "summary of B" 180 summary_in b
say "B done: crc $(crc b), steps $(field b steps), resumed from step $(field b resumed_from_step)"

fail=0
check() { if eval "$2"; then echo "ok   $1"; else echo "FAIL $1"; fail=1; fi; }
check "A ran $total_steps steps uninterrupted" '[ "$(field a steps)" = $total_steps ] && [ "$(field a resumed_from_step)" = -1 ]'
check "B stopped on a signal twice, each time after its checkpoint" \
  '[ "$(grep -c "stopped on a signal after step" "$tmp/b.out")" = 2 ]'
check "B requeued itself after USR1" 'grep -q "stopped on a signal after a checkpoint; requeueing job $b" "$tmp/b.out"'
check "B ran three times" 'grep -q "job $b run 2 " "$tmp/b.out"'
s1=$(grep -o 'stopped on a signal after step [0-9]*' "$tmp/b.out" | sed -n 1p | awk '{print $NF}')
s2=$(grep -o 'stopped on a signal after step [0-9]*' "$tmp/b.out" | sed -n 2p | awk '{print $NF}')
check "each run resumed from the step the one before stopped at ($s1, $s2)" \
  'grep -q "resumed from .* (step $s1)" "$tmp/b.out" && [ "$(field b resumed_from_step)" = "$s2" ]'
check "B ended at step $total_steps with A's parameters ($(crc a))" '[ "$(field b steps)" = $total_steps ] && [ "$(crc b)" = "$(crc a)" ]'
say "done"
if [ $fail -ne 0 ]; then echo "--- b.out"; cat "$tmp/b.out"; fi
exit $fail
