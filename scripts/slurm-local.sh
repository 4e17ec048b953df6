#!/usr/bin/env bash
# A real single-node Slurm (Debian slurm-wlm) in a directory, for tests and
# for trying `hpctrain launch --spawner srun` by hand. No systemd, no munge:
# auth/none, and every file (config, state, spool, logs, pids) under DIR.
#
#   scripts/slurm-local.sh up DIR     start slurmctld + slurmd, wait for idle (bounded 30 s);
#                                     prints SLURM_CONF=DIR/slurm.conf (export it for clients)
#   scripts/slurm-local.sh down DIR   stop both daemons by their pid files, remove DIR
#
# Ports are picked per DIR so parallel clusters do not collide. Where Slurm
# is missing or not root, `up` writes the reason to DIR/skip and exits 0 so
# tests skip with it. Never touches munge (libmunge2 stays installed).
set -euo pipefail

cmd=${1:-}; dir=${2:-}
[[ -n "$dir" ]] || { echo "usage: $0 up|down DIR" >&2; exit 2; }

stop_daemon() {  # pidfile name
  [[ -s "$1" ]] || return 0
  local pid; pid=$(cat "$1")
  if tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q "$2"; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
}

down() {
  [[ -d "$dir" ]] || return 0
  stop_daemon "$dir/slurmd.pid" slurmd
  stop_daemon "$dir/slurmctld.pid" slurmctld
  # Job steps the tests left (slurmstepd) die with their daemons' directory.
  for pid in $(pgrep -f "slurmstepd" 2>/dev/null); do
    if grep -q "$dir" "/proc/$pid/environ" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
  done
  rm -rf "$dir"
}

up() {
  down
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  local why=""
  if [[ $(id -u) -ne 0 ]]; then why="not root (this test Slurm runs its daemons as root)";
  elif ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null; then why="Slurm is not installed (slurm-wlm)"; fi
  if [[ -n "$why" ]]; then echo "$why" > "$dir/skip"; echo "SLURM_SKIP=\"$why\""; return 0; fi

  local node; node=$(hostname -s)
  local base=$(( $(echo -n "$dir" | cksum | cut -d' ' -f1) % 20000 + 20000 ))
  local ctl=$base slurmd_port=$((base + 1))
  for _ in $(seq 1 20); do
    if ! ss -ltn | grep -qE ":($ctl|$slurmd_port)\b"; then break; fi
    ctl=$((ctl + 2)); slurmd_port=$((ctl + 1))
  done
  mkdir -p "$dir/state" "$dir/spool"
  cat > "$dir/slurm.conf" <<CONF
ClusterName=hpcttest
SlurmctldHost=$node
SlurmctldPort=$ctl
SlurmdPort=$slurmd_port
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
InactiveLimit=0
KillWait=2
MinJobAge=5
NodeName=$node CPUs=$(nproc) State=UNKNOWN
PartitionName=test Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
  export SLURM_CONF=$dir/slurm.conf
  slurmctld -D -f "$SLURM_CONF" > "$dir/slurmctld.out" 2>&1 &
  echo $! > "$dir/slurmctld.pid"
  slurmd -D -f "$SLURM_CONF" -N "$node" > "$dir/slurmd.out" 2>&1 &
  echo $! > "$dir/slurmd.pid"
  for _ in $(seq 1 150); do  # bounded: 30 s
    if [[ "$(sinfo -h -o %T 2>/dev/null)" == "idle" ]]; then
      echo "SLURM_CONF=$SLURM_CONF"
      return 0
    fi
    sleep 0.2
  done
  echo "slurm-local: node did not become idle in 30 s; logs in $dir" >&2
  tail -5 "$dir/slurmctld.log" "$dir/slurmd.log" >&2 || true
  return 1
}

case "$cmd" in
  up) trap 'rc=$?; if [[ $rc -ne 0 ]]; then down; fi' EXIT; up ;;
  down) down ;;
  *) echo "usage: $0 up|down DIR" >&2; exit 2 ;;
esac
