#!/usr/bin/env bash
# A test cluster on this machine: N "hosts" made of network namespaces on a
# bridge, each with its own address and an sshd that accepts a key pair made
# for the cluster. All hosts share this machine's file system (like an NFS
# home), so a binary built here runs on every host. The root namespace is the
# head node: the bridge carries an address, so a launcher run here reaches
# every host.
#
#   scripts/netns-cluster.sh up N [NAME] [--rate RATE] [--etc-hosts] [--bare]
#                                 make hosts, print KEY=VALUE lines
#   scripts/netns-cluster.sh down NAME                   tear everything down
#   scripts/netns-cluster.sh exec NAME I CMD...          run CMD on host I (its network
#                                 namespace; on a bare host also its mount and UTS
#                                 namespaces and root, with a clean login-like environment)
#   scripts/netns-cluster.sh rate NAME RATE|none         shape both ends of every host's link
#                                 of a running cluster (as up --rate), or take the shaping off
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
# `up ... --bare` makes hosts that are really separate machines, as fresh cloud
# VMs are: each has its own root file system, an overlay whose lower layer is
# the Debian 12 root that scripts/bare-root.sh makes once per machine and whose
# upper layer is in the state directory, mounted in the host's own mount and
# UTS namespaces (hostname hI), so a user, package or file under /etc made on
# one host is on no other host nor on the head. sshd is the root's own Debian
# sshd with its default config, its own host keys, and only root's
# authorized_keys (the cluster key); /etc/hosts has `127.0.1.1 hI` as the
# Debian installer and cloud-init write it. No training user, no MPI, no
# hpctrain, and no route to a package mirror (the hosts are on the bridge
# only). Each host's namespaces are held by one process (`hpct-NAME-hI
# infinity`, pid in STATE/hI/holder.pid) whose root is the host's root;
# `exec` enters them with nsenter, and /proc/PID/root is that root seen from
# the head (printed as NETNS_ROOTS). The first --bare `up` on a machine builds
# the cached root (1-3 minutes, see bare-root.sh); then `up 3 NAME --bare`
# takes a few seconds.
#
# NAME (default: c<pid>) keeps parallel and leftover clusters apart: it is in
# every namespace, link, and the state directory /tmp/hpct-netns-NAME.
# `up` first removes a leftover cluster of the same NAME, then picks a
# 10.77.X.0/24 subnet no route uses yet. --rate 5gbit shapes both ends of
# every link with tbf (netem is not available on this kernel: no delay).
# Needs root, `ip netns` and /usr/sbin/sshd. Where namespaces are forbidden,
# `up` writes the reason to STATE/skip and exits 0, so tests skip with it.
# Everything made is recorded in the state directory; `down` removes only
# that: sshd by its pid file, namespaces, the bridge, the state directory; on
# bare hosts also every process in the host's mount namespace (the holder
# included, so the overlay goes with the namespace), each by its pid.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

cmd=${1:-}
state_of() { echo "/tmp/hpct-netns-$1"; }
ns_of() { echo "hpct-$1-h$2"; }

check_name() {
  if [[ ! "$1" =~ ^[a-z0-9]{1,8}$ ]]; then
    echo "netns-cluster: NAME must be 1-8 of [a-z0-9] (it goes into interface names): '$1'" >&2
    exit 2
  fi
}

# A bare host's holder pid, checked: it is still the process we started.
holder_of() {  # dir name i
  local pidfile="$1/h$3/holder.pid" pid
  [[ -s "$pidfile" ]] || return 1
  pid=$(cat "$pidfile")
  [[ "$(tr '\0' ' ' 2>/dev/null < "/proc/$pid/cmdline")" == "hpct-$2-h$3 infinity " ]] || return 1
  echo "$pid"
}

# Runs a command in bare host i's namespaces and root (nsenter: net, mount, uts, root, cwd).
in_host() {  # dir name i cmd...
  local dir=$1 name=$2 i=$3 hp; shift 3
  hp=$(holder_of "$dir" "$name" "$i") || {
    echo "netns-cluster: bare host $i of '$name' is not running (no holder process; run up again)" >&2
    return 1
  }
  nsenter -t "$hp" -m -u -n -r -w -- /usr/bin/env -i HOME=/root LANG=C.UTF-8 \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
}

start_sshd() {  # dir name i
  local dir=$1 name=$2 i=$3
  local ns; ns=$(ns_of "$name" "$i")
  if [[ -f "$dir/bare" ]]; then
    local hp; hp=$(holder_of "$dir" "$name" "$i") || { in_host "$dir" "$name" "$i" true; return 1; }
    rm -f "/proc/$hp/root/run/sshd.pid"
    in_host "$dir" "$name" "$i" /usr/sbin/sshd
    for _ in $(seq 1 50); do  # bounded: 5 s
      [[ -s "/proc/$hp/root/run/sshd.pid" ]] && return 0
      sleep 0.1
    done
    echo "netns-cluster: sshd on bare host $i did not write /run/sshd.pid (try: $0 exec $name $i /usr/sbin/sshd -t)" >&2
    return 1
  fi
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
  if [[ -f "$1/bare" ]]; then
    local hp; hp=$(holder_of "$1" "$(cat "$1/name")" "$2") || return 0
    local spid; spid=$(cat "/proc/$hp/root/run/sshd.pid" 2>/dev/null) || return 0
    # Only that host's sshd: same mount namespace as its holder.
    if [[ "$(readlink "/proc/$spid/ns/mnt" 2>/dev/null)" == "$(readlink "/proc/$hp/ns/mnt")" ]] &&
       grep -q sshd "/proc/$spid/comm" 2>/dev/null; then
      kill "$spid" 2>/dev/null || true
      for _ in $(seq 1 30); do kill -0 "$spid" 2>/dev/null || break; sleep 0.1; done
    fi
    rm -f "/proc/$hp/root/run/sshd.pid"
    return 0
  fi
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
  # Bare hosts: everything in them at once (sshd included, no need to be gentle).
  [[ -f "$dir/bare" ]] && down_bare_hosts "$dir" "$name" "$n"
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
  rm -rf --one-file-system "$dir"
}

# Ends every process in the bare hosts' mount namespaces at once, each by its
# pid (processes that left a host's network namespace included); the overlay
# and the other mounts of a host go with its namespace when its last process
# has gone. One find over /proc: a readlink per process costs a fork each,
# ~30 ms on a loaded machine.
down_bare_hosts() {  # dir name n
  local dir=$1 name=$2 n=$3 i hp mnts="" holders=""
  for i in $(seq 1 "$n"); do
    hp=$(holder_of "$dir" "$name" "$i") || continue
    mnts="$mnts $(readlink "/proc/$hp/ns/mnt")" && holders="$holders $hp"
  done
  [[ -n "$holders" ]] || return 0
  local pids
  pids=$(find /proc -mindepth 3 -maxdepth 3 -path '/proc/[0-9]*/ns/mnt' -printf '%h %l\n' 2>/dev/null |
    awk -v m="$mnts" 'BEGIN { k = split(m, a, " "); for (j = 1; j <= k; j++) want[a[j]] = 1 }
                      ($2 in want) { split($1, p, "/"); print p[3] }' || true)
  # shellcheck disable=SC2086
  [[ -n "$pids" ]] && kill -9 $pids 2>/dev/null
  for hp in $holders; do
    for _ in $(seq 1 50); do  # bounded: 5 s
      kill -0 "$hp" 2>/dev/null || continue 2
      sleep 0.1
    done
    echo "netns-cluster: bare host holder $hp did not end; its overlay stays mounted until it does" >&2
  done
}

# What each bare host's holder runs, with this machine's tools, inside fresh
# mount and UTS namespaces and the host's network namespace: mount the host's
# root (overlay) and its /proc, /sys, /dev, /run, switch to it with pivot_root
# (the head's file system is then gone from this namespace), and wait.
# shellcheck disable=SC2016
HOLDER_SCRIPT='set -e
name=$1 i=$2 lower=$3 d=$4
echo $$ > "$d/holder.pid"
m=$d/merged
mount --make-rprivate /
mount -t overlay overlay -o "lowerdir=$lower,upperdir=$d/upper,workdir=$d/work" "$m"
mount -t proc proc "$m/proc"
mount -t sysfs sysfs "$m/sys"
# A VM has its cgroup file system mounted (slurmd will not start without one).
if [ -d /sys/fs/cgroup ]; then mount --rbind /sys/fs/cgroup "$m/sys/fs/cgroup"; fi
mount --rbind /dev "$m/dev"
mount -t tmpfs -o mode=1777,size=256m tmpfs "$m/dev/shm"
mount -t tmpfs -o mode=755,size=64m tmpfs "$m/run"
mkdir -p "$m/run/sshd" "$m/run/lock"
hostname "h$i"
cd "$m"
pivot_root . mnt
exec /bin/bash -c "umount -l /mnt; cd /; exec -a hpct-$name-h$i sleep infinity"'

# Bare host i: its own root in its own namespaces, its own host keys, root's key only.
up_bare_host() {  # dir name i ns lower
  local dir=$1 name=$2 i=$3 ns=$4 lower=$5
  local d="$dir/h$i" u="$dir/h$i/upper"
  mkdir -p "$d/work" "$d/merged" "$u/etc/ssh" "$u/root/.ssh"
  chmod 700 "$u/root" "$u/root/.ssh"
  echo "h$i" > "$u/etc/hostname"
  printf '127.0.0.1\tlocalhost\n127.0.1.1\th%s\n\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' "$i" > "$u/etc/hosts"
  ssh-keygen -q -t ed25519 -N '' -C "root@h$i" -f "$u/etc/ssh/ssh_host_ed25519_key"
  ssh-keygen -q -t ecdsa -N '' -C "root@h$i" -f "$u/etc/ssh/ssh_host_ecdsa_key"
  install -m 600 "$dir/id_ed25519.pub" "$u/root/.ssh/authorized_keys"
  setsid nsenter --net="/run/netns/$ns" -- unshare --mount --uts --propagation private -- \
    bash -c "$HOLDER_SCRIPT" holder "$name" "$i" "$lower" "$d" </dev/null >"$d/holder.log" 2>&1 &
  for _ in $(seq 1 100); do  # bounded: 10 s
    holder_of "$dir" "$name" "$i" >/dev/null && return 0
    if [[ -s "$d/holder.pid" ]] && ! kill -0 "$(cat "$d/holder.pid")" 2>/dev/null; then break; fi
    sleep 0.1
  done
  echo "netns-cluster: bare host $i's root did not come up: $(tr '\n' ' ' < "$d/holder.log")" >&2
  return 1
}

up() {
  local n=$1 name=$2 rate=$3 etc_hosts=${4:-} bare=${5:-}
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
  if [[ -z "$why" && -n "$bare" ]]; then
    if ! command -v nsenter >/dev/null || ! command -v unshare >/dev/null; then
      why="no nsenter/unshare (util-linux)"
    elif ! grep -qw overlay /proc/filesystems && ! modprobe overlay 2>/dev/null; then
      why="the kernel has no overlay file system"
    elif ! unshare --mount --uts true 2>/dev/null; then
      why="mount/UTS namespaces are forbidden here (unshare --mount --uts failed)"
    fi
  fi
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
  echo "$name" > "$dir/name"
  local lower=""
  if [[ -n "$bare" ]]; then
    lower=$("$here/bare-root.sh" | tail -n 1)
    touch "$dir/bare"
  fi

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
    if [[ -n "$rate" ]]; then shape_link "$name" "$i" "$rate"; fi
    if [[ -n "$etc_hosts" ]]; then
      mkdir -p "/etc/netns/$ns"
      { echo "127.0.0.1 localhost"; echo "$addr $(hostname) h$i"
        for j in $(seq 1 "$n"); do [[ $j -ne $i ]] && echo "10.77.$x.$j h$j"; done; true
      } > "/etc/netns/$ns/hosts"
    fi
    if [[ -n "$bare" ]]; then
      up_bare_host "$dir" "$name" "$i" "$ns" "$lower"
      start_sshd "$dir" "$name" "$i"
      hosts="$hosts $addr"
      continue
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
  if [[ -n "$bare" ]]; then
    local roots="" names="" hp
    for i in $(seq 1 "$n"); do
      hp=$(holder_of "$dir" "$name" "$i")
      roots="$roots /proc/$hp/root"; names="$names h$i"
    done
    { echo "NETNS_ROOTS=\"${roots# }\""; echo "NETNS_HOSTNAMES=\"${names# }\""; } >> "$dir/env"
  fi
  cat "$dir/env"
}

# Both ends of host i's link at RATE (tbf; qdiscs shape egress only), or
# back to the default qdisc with RATE none.
shape_link() {
  local name=$1 i=$2 rate=$3 ns; ns=$(ns_of "$1" "$2")
  if [[ "$rate" == none ]]; then
    tc qdisc del dev "hv$name$i" root 2>/dev/null || true
    tc -n "$ns" qdisc del dev eth0 root 2>/dev/null || true
  else
    tc qdisc replace dev "hv$name$i" root tbf rate "$rate" burst 1mb latency 10ms
    tc -n "$ns" qdisc replace dev eth0 root tbf rate "$rate" burst 1mb latency 10ms
  fi
}

case "$cmd" in
  rate)
    check_name "${2:?usage: netns-cluster.sh rate NAME RATE|none}"; name=$2; rate=${3:?usage: netns-cluster.sh rate NAME RATE|none}
    dir=$(state_of "$name")
    [[ -f "$dir/count" ]] || { echo "netns-cluster: no cluster '$name' (up N $name first)" >&2; exit 2; }
    for i in $(seq 1 "$(cat "$dir/count")"); do shape_link "$name" "$i" "$rate"; done ;;
  up)
    shift
    n=${1:?usage: netns-cluster.sh up N [NAME] [--rate RATE]}; shift
    name="c$$"; rate=""; etc_hosts=""; bare=""
    while [[ $# -gt 0 ]]; do
      case "$1" in
        --rate) rate=$2; shift 2 ;;
        --etc-hosts) etc_hosts=1; shift ;;
        --bare) bare=1; shift ;;
        *) name=$1; shift ;;
      esac
    done
    check_name "$name"
    # A failed `up` leaves nothing behind.
    trap 'rc=$?; if [[ $rc -ne 0 ]]; then down "$name"; fi' EXIT
    [[ -n "$bare" && -n "$etc_hosts" ]] && {
      echo "netns-cluster: --etc-hosts is for shared-root hosts; a bare host has its own /etc/hosts" >&2; exit 2; }
    up "$n" "$name" "$rate" "$etc_hosts" "$bare"
    ;;
  down)
    check_name "${2:?usage: netns-cluster.sh down NAME}"
    down "$2"
    ;;
  sshd-stop)
    check_name "$2"; stop_sshd "$(state_of "$2")" "${3:?host index}" ;;
  sshd-start)
    check_name "$2"; start_sshd "$(state_of "$2")" "$2" "${3:?host index}" ;;
  exec)
    check_name "${2:?usage: netns-cluster.sh exec NAME I CMD...}"; name=$2; i=${3:?host index}
    shift 3; [[ $# -gt 0 ]] || { echo "netns-cluster: exec NAME I CMD...: no command" >&2; exit 2; }
    dir=$(state_of "$name")
    [[ -f "$dir/count" && "$i" =~ ^[0-9]+$ && "$i" -ge 1 && "$i" -le "$(cat "$dir/count")" ]] || {
      echo "netns-cluster: no host $i in cluster '$name' (up N $name first)" >&2; exit 2; }
    if [[ -f "$dir/bare" ]]; then in_host "$dir" "$name" "$i" "$@"; exit; fi
    exec ip netns exec "$(ns_of "$name" "$i")" "$@" ;;
  sshd-start-bind)
    check_name "$2"; i=${3:?host index}; src=${4:?source}; dst=${5:?target}
    dir=$(state_of "$2")
    [[ -f "$dir/bare" ]] && { echo "netns-cluster: sshd-start-bind is for shared-root hosts; a bare host has its own files (use exec)" >&2; exit 2; }
    stop_sshd "$dir" "$i"
    ip netns exec "$(ns_of "$2" "$i")" unshare -m --propagation private \
      sh -c 'mount --bind "$1" "$2" && exec /usr/sbin/sshd -f "$3"' sh "$src" "$dst" "$dir/sshd_config.h$i"
    for _ in $(seq 1 50); do [[ -s "$dir/sshd.h$i.pid" ]] && exit 0; sleep 0.1; done
    echo "netns-cluster: sshd on host $i did not write its pid file" >&2; exit 1 ;;
  *)
    echo "usage: $0 up N [NAME] [--rate RATE] [--etc-hosts] [--bare] | down NAME | rate NAME RATE|none | exec NAME I CMD... | sshd-stop NAME I | sshd-start NAME I | sshd-start-bind NAME I SRC DST" >&2
    exit 2 ;;
esac
