#!/usr/bin/env bash
# A test cluster on this machine: N "hosts" made of network namespaces on a
# bridge, each with its own address and an sshd that accepts a key pair made
# for the cluster. All hosts share this machine's file system (like an NFS
# home), so a binary built here runs on every host. The root namespace is the
# head node: the bridge carries an address, so a launcher run here reaches
# every host.
#
#   scripts/netns-cluster.sh up N [NAME] [--rate RATE]   make hosts, print KEY=VALUE lines
#   scripts/netns-cluster.sh down NAME                   tear everything down
#   scripts/netns-cluster.sh sshd-stop NAME I            stop host I's sshd (fault tests)
#   scripts/netns-cluster.sh sshd-start NAME I           start it again
#   scripts/netns-cluster.sh sshd-start-bind NAME I SRC DST
#                                 restart host I's sshd in its own mount namespace with SRC
#                                 bind-mounted over DST (another binary, a private "shared" dir)
#
# `up ... --etc-hosts` gives every host its own /etc/hosts (ip netns exec
# bind-mounts /etc/netns/NS/hosts for sshd and its sessions) in which this
# machine's hostname and hN resolve to the host's own address, as on a
# well-configured cluster; tests rewrite that file in place to inject faults.
#
# NAME (default: c<pid>) keeps parallel and leftover clusters apart: it is in
# every namespace, link, and the state directory /tmp/hpct-netns-NAME.
# `up` first removes a leftover cluster of the same NAME, then picks a
# 10.77.X.0/24 subnet no route uses yet. --rate 5gbit shapes both ends of
# every link with tbf (netem is not available on this kernel: no delay).
# Needs root, `ip netns` and /usr/sbin/sshd. Where namespaces are forbidden,
# `up` writes the reason to STATE/skip and exits 0, so tests skip with it.
# Everything made is recorded in the state directory; `down` removes only
# that: sshd by its pid file, namespaces, the bridge, the state directory.
set -euo pipefail

cmd=${1:-}
state_of() { echo "/tmp/hpct-netns-$1"; }
ns_of() { echo "hpct-$1-h$2"; }

check_name() {
  if [[ ! "$1" =~ ^[a-z0-9]{1,8}$ ]]; then
    echo "netns-cluster: NAME must be 1-8 of [a-z0-9] (it goes into interface names): '$1'" >&2
    exit 2
  fi
}

start_sshd() {  # dir name i
  local dir=$1 name=$2 i=$3
  local ns; ns=$(ns_of "$name" "$i")
  mkdir -p /run/sshd
  ip netns exec "$ns" /usr/sbin/sshd -f "$dir/sshd_config.h$i"
  for _ in $(seq 1 50); do  # bounded: 5 s
    [[ -s "$dir/sshd.h$i.pid" ]] && return 0
    sleep 0.1
  done
  echo "netns-cluster: sshd on host $i did not write its pid file" >&2
  return 1
}

stop_sshd() {  # dir i
  local pidfile="$1/sshd.h$2.pid"
  [[ -s "$pidfile" ]] || return 0
  local pid; pid=$(cat "$pidfile")
  # Only our sshd: its command line names our config file.
  if tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q "$1/sshd_config"; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$pidfile"
}

down() {
  local name=$1 dir; dir=$(state_of "$name")
  [[ -d "$dir" ]] || return 0
  local n; n=$(cat "$dir/count" 2>/dev/null || echo 0)
  for i in $(seq 1 "$n"); do
    stop_sshd "$dir" "$i"
    local ns; ns=$(ns_of "$name" "$i")
    rm -rf "/etc/netns/$ns"
    if ip netns list | grep -qw "$ns"; then
      # Whatever our tests left inside this host (ranks, wrappers) goes with it.
      for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
      ip netns del "$ns" 2>/dev/null || true
    fi
  done
  ip link del "hb$name" 2>/dev/null || true
  rm -rf "$dir"
}

up() {
  local n=$1 name=$2 rate=$3 etc_hosts=${4:-}
  [[ "$n" =~ ^[0-9]+$ && "$n" -ge 1 && "$n" -le 16 ]] || { echo "netns-cluster: N must be 1..16" >&2; exit 2; }
  check_name "$name"
  down "$name"
  local dir; dir=$(state_of "$name")
  mkdir -p "$dir"
  chmod 700 "$dir"

  # Can this machine make namespaces at all? If not, tests skip with this reason.
  local why=""
  if [[ $(id -u) -ne 0 ]]; then why="not root (network namespaces need root)";
  elif ! command -v ip >/dev/null; then why="no 'ip' command (iproute2)";
  elif [[ ! -x /usr/sbin/sshd ]]; then why="no /usr/sbin/sshd (openssh-server)";
  elif ! ip netns add "hpct-$name-probe" 2>/dev/null; then why="'ip netns add' is forbidden here";
  else ip netns del "hpct-$name-probe"; fi
  if [[ -n "$why" ]]; then
    echo "$why" > "$dir/skip"
    echo "NETNS_SKIP=\"$why\""
    return 0
  fi

  local x=""
  local start=$(( $(echo -n "$name" | cksum | cut -d' ' -f1) % 200 + 20 ))
  for k in $(seq 0 49); do
    local cand=$(( (start + k) % 230 + 20 ))
    if [[ -z "$(ip route show "10.77.$cand.0/24")" ]] && ! ip -o addr | grep -q " 10\.77\.$cand\."; then
      x=$cand; break
    fi
  done
  [[ -n "$x" ]] || { echo "netns-cluster: no free 10.77.X.0/24 subnet" >&2; exit 1; }
  echo "$n" > "$dir/count"

  ip link add "hb$name" type bridge
  ip addr add "10.77.$x.254/24" dev "hb$name"
  ip link set "hb$name" up
  ssh-keygen -q -t ed25519 -N '' -C "hpct-netns-$name" -f "$dir/id_ed25519"
  ssh-keygen -q -t ed25519 -N '' -C "hpct-netns-$name-host" -f "$dir/hostkey"
  cp "$dir/id_ed25519.pub" "$dir/authorized_keys"
  local hosts=""
  for i in $(seq 1 "$n"); do
    local ns; ns=$(ns_of "$name" "$i")
    local addr="10.77.$x.$i"
    ip netns add "$ns"
    ip link add "hv$name$i" type veth peer name eth0 netns "$ns"
    ip link set "hv$name$i" master "hb$name" up
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    if [[ -n "$rate" ]]; then
      tc qdisc replace dev "hv$name$i" root tbf rate "$rate" burst 1mb latency 10ms
      tc -n "$ns" qdisc replace dev eth0 root tbf rate "$rate" burst 1mb latency 10ms
    fi
    if [[ -n "$etc_hosts" ]]; then
      mkdir -p "/etc/netns/$ns"
      { echo "127.0.0.1 localhost"; echo "$addr $(hostname) h$i"
        for j in $(seq 1 "$n"); do [[ $j -ne $i ]] && echo "10.77.$x.$j h$j"; done; true
      } > "/etc/netns/$ns/hosts"
    fi
    cat > "$dir/sshd_config.h$i" <<CONF
ListenAddress $addr
Port 22
HostKey $dir/hostkey
PidFile $dir/sshd.h$i.pid
AuthorizedKeysFile $dir/authorized_keys
StrictModes no
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PrintMotd no
LogLevel ERROR
CONF
    start_sshd "$dir" "$name" "$i"
    hosts="$hosts $addr"
  done
  hosts=${hosts# }
  cat > "$dir/ssh_config" <<CONF
Host *
  User root
  IdentityFile $dir/id_ed25519
  IdentitiesOnly yes
  BatchMode yes
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  LogLevel ERROR
  ConnectTimeout 5
CONF
  printf '#!/bin/sh\nexec ssh -F %s "$@"\n' "$dir/ssh_config" > "$dir/ssh"
  chmod +x "$dir/ssh"
  # Wait until every sshd answers (bounded: 10 s).
  for h in $hosts; do
    local ok=""
    for _ in $(seq 1 50); do
      if "$dir/ssh" "$h" true 2>/dev/null; then ok=1; break; fi
      sleep 0.2
    done
    [[ -n "$ok" ]] || { echo "netns-cluster: cannot ssh to $h" >&2; exit 1; }
  done
  cat > "$dir/env" <<ENV
NETNS_NAME=$name
NETNS_DIR=$dir
NETNS_HOSTS="$hosts"
NETNS_SUBNET=10.77.$x.0/24
NETNS_HEAD=10.77.$x.254
NETNS_KEY=$dir/id_ed25519
NETNS_SSH=$dir/ssh
ENV
  cat "$dir/env"
}

case "$cmd" in
  up)
    shift
    n=${1:?usage: netns-cluster.sh up N [NAME] [--rate RATE]}; shift
    name="c$$"; rate=""; etc_hosts=""
    while [[ $# -gt 0 ]]; do
      case "$1" in
        --rate) rate=$2; shift 2 ;;
        --etc-hosts) etc_hosts=1; shift ;;
        *) name=$1; shift ;;
      esac
    done
    check_name "$name"
    # A failed `up` leaves nothing behind.
    trap 'rc=$?; if [[ $rc -ne 0 ]]; then down "$name"; fi' EXIT
    up "$n" "$name" "$rate" "$etc_hosts"
    ;;
  down)
    check_name "${2:?usage: netns-cluster.sh down NAME}"
    down "$2"
    ;;
  sshd-stop)
    check_name "$2"; stop_sshd "$(state_of "$2")" "${3:?host index}" ;;
  sshd-start)
    check_name "$2"; start_sshd "$(state_of "$2")" "$2" "${3:?host index}" ;;
  sshd-start-bind)
    check_name "$2"; i=${3:?host index}; src=${4:?source}; dst=${5:?target}
    dir=$(state_of "$2"); stop_sshd "$dir" "$i"
    ip netns exec "$(ns_of "$2" "$i")" unshare -m --propagation private \
      sh -c 'mount --bind "$1" "$2" && exec /usr/sbin/sshd -f "$3"' sh "$src" "$dst" "$dir/sshd_config.h$i"
    for _ in $(seq 1 50); do [[ -s "$dir/sshd.h$i.pid" ]] && exit 0; sleep 0.1; done
    echo "netns-cluster: sshd on host $i did not write its pid file" >&2; exit 1 ;;
  *)
    echo "usage: $0 up N [NAME] [--rate RATE] [--etc-hosts] | down NAME | sshd-stop NAME I | sshd-start NAME I | sshd-start-bind NAME I SRC DST" >&2
    exit 2 ;;
esac
