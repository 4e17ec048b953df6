#!/usr/bin/env bash
# The validation of hpctrain plan (docs/plan.md), in one batch on 3
# namespace hosts: per link rate (RATES), bench comm (the links'
# calibration), then per model a 1-rank profile (plan calibrate --no-comm:
# the gradients' bytes and when backward makes them), and per shape one
# bench train run of --np 1,N: the 1-rank job (on the first host) and the
# N-rank job take turns of --phase-steps steps, so the 1-rank calibration
# and the measured job see the same minute of a shared machine. Per model
# also allcores.RATE.MODEL: bench train --np 1,2 with both ranks on one
# host (the 2 cores all busy), for plan calibrate --all-cores.
# Then: bench/plan_validation.py OUT prints predicted against measured.
# Runs at normal priority (it is a benchmark); every line of OUT/log has the
# load average.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${BIN:-$here/build/tools/hpctrain}
B=$BIN/hpctrain
S=$here/scripts/netns-cluster.sh
OUT=${OUT:-/tmp/hpct-plan-validation}
mkdir -p $OUT
export HPCT_COMPRESSION=none OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
log() { echo "$(date -u +%H:%M:%S) load=$(cut -d' ' -f1-3 /proc/loadavg) $*" | tee -a $OUT/log; }
for rate in ${RATES:-10gbit 1gbit}; do
  $S up 3 pv --rate $rate > $OUT/env.$rate
  eval "$(grep -E '^NETNS_(HOSTS|KEY)=' $OUT/env.$rate)"
  read -r h1 h2 h3 <<<"$NETNS_HOSTS"
  SSH="-i $NETNS_KEY --ssh-option StrictHostKeyChecking=no --ssh-option UserKnownHostsFile=/dev/null"
  # Each link 3 times, in turns: plan calibrate fits each size's median, so
  # a run that caught one of the machine's stalls does not set the link.
  : > $OUT/comm.$rate.2x1; : > $OUT/comm.$rate.1x2
  for run in 1 2 3; do
    log "comm $rate 2x1 (run $run)"
    timeout 300 $B bench comm -H $h1:1,$h2:1 $SSH --sizes 4K,64K,1M,4M,16M,64M --budget-s 0.3 >> $OUT/comm.$rate.2x1 2>>$OUT/comm.$rate.2x1.err
    log "comm $rate 1x2 (run $run)"
    timeout 300 $B bench comm --np 2 -H $h1:2 $SSH --sizes 4K,64K,1M,4M,16M,64M --budget-s 0.3 >> $OUT/comm.$rate.1x2 2>>$OUT/comm.$rate.1x2.err
  done
  for model in ${MODELS:-mlp cnn}; do
    if [[ $model == mlp ]]; then steps=16; else steps=40; fi
    log "profile $rate $model"
    timeout 300 $B plan calibrate --model $model --no-comm --profile-steps 15 --save $OUT/profile.$rate.$model.json > /dev/null 2>&1
    log "allcores $rate $model (np 1,2 on one host)"
    # Twice the steps in the same turns: the factor scales every prediction
    # whose ranks fill the cores, so its noise counts most.
    timeout 900 $B bench train --model $model --np 1,2 --steps $((steps * 2)) --phase-steps $((steps / 2)) --warmup 3 \
      -H $h1:2 $SSH > $OUT/allcores.$rate.$model 2>$OUT/allcores.$rate.$model.err
    for cfg in ${CFGS:-1x2 2x1 2x2 3x1 3x2}; do
      [[ $rate == 1gbit && ${cfg%x*} == 1 ]] && continue   # one host: no link
      H=${cfg%x*}; L=${cfg#*x}; hs=""
      for i in $(seq 1 $H); do hv=h$i; hs+="${!hv}:$L,"; done
      np=$((H * L))
      log "train $rate $model $cfg (np 1,$np in turns)"
      timeout 900 $B bench train --model $model --np 1,$np --steps $steps --phase-steps $((steps / 2)) --warmup 3 \
        -H ${hs%,} $SSH > $OUT/train.$rate.$model.$cfg 2>$OUT/train.$rate.$model.$cfg.err
      log "  rc=$? $(grep -o '"np":[0-9]*\|"samples_per_s":[0-9.]*' $OUT/train.$rate.$model.$cfg | paste -sd' ')"
    done
  done
  $S down pv
done
log done
