#!/usr/bin/env bash
# An apt proxy on the head for hosts that reach no package mirror but reach
# the head: Debian's apt-cacher-ng, bound to the head's cluster address only,
# caching what it fetches so the second host (and the second run) download
# nothing. `hpctrain cluster setup --packages proxy` points every host's apt
# at http://HEAD:3142 (docs/cluster.md).
#
#   scripts/package-proxy.sh start ADDRESS DIR [PORT]   prints PROXY_URL=, PROXY_PID=, PROXY_DIR=
#   scripts/package-proxy.sh stop DIR                   stops the one started with DIR
#
# DIR holds its pid, socket and logs (DIR/log). The cache is shared by every
# proxy started this way: /var/cache/hpctrain/apt-cacher-ng (HPCT_PROXY_CACHE).
# No init system is used: the daemon runs in the foreground of a background
# process, and `stop` kills that pid only.
set -euo pipefail

die() { echo "package-proxy: $*" >&2; exit 1; }
cmd=${1:-}
case "$cmd" in
  start)
    addr=${2:?usage: package-proxy.sh start ADDRESS DIR [PORT]}
    dir=${3:?usage: package-proxy.sh start ADDRESS DIR [PORT]}
    port=${4:-3142}
    command -v apt-cacher-ng > /dev/null || die "apt-cacher-ng is missing: fix: apt-get install apt-cacher-ng (scripts/install-deps.sh)"
    cache=${HPCT_PROXY_CACHE:-/var/cache/hpctrain/apt-cacher-ng}
    mkdir -p "$dir/log" "$cache"
    dir=$(cd "$dir" && pwd)
    if [[ -s "$dir/pid" ]] && kill -0 "$(cat "$dir/pid")" 2> /dev/null; then
      die "a proxy started with $dir runs already (pid $(cat "$dir/pid")): fix: package-proxy.sh stop $dir"
    fi
    # Debian requests go to this machine's own Debian mirror (its apt sources), not to
    # whatever /etc/apt-cacher-ng/backends_debian says (empty on some machines: every
    # request then fails with 503).
    mirror=${HPCT_DEBIAN_MIRROR:-$(apt-cache policy 2> /dev/null |
      awk '/ bookworm\/main / && $2 ~ /^https?:/ { print $2; exit }')}
    mirror=${mirror:-http://deb.debian.org/debian}
    setsid apt-cacher-ng -c /etc/apt-cacher-ng ForeGround=1 "BindAddress=$addr" "Port=$port" \
      "CacheDir=$cache" "LogDir=$dir/log" "SocketPath=$dir/socket" "PidFile=$dir/acng.pid" \
      "Remap-debrep=file:deb_mirror*.gz /debian ; ${mirror%/}/" \
      > "$dir/log/stdout" 2>&1 < /dev/null &
    pid=$!
    echo "$pid" > "$dir/pid"
    # Ready when it answers on the address (bounded: 10 s).
    for _ in $(seq 100); do
      if (exec 3<> "/dev/tcp/$addr/$port") 2> /dev/null; then
        echo "PROXY_URL=http://$addr:$port"
        echo "PROXY_PID=$pid"
        echo "PROXY_DIR=$dir"
        exit 0
      fi
      kill -0 "$pid" 2> /dev/null || { cat "$dir/log/stdout" >&2; die "apt-cacher-ng exited at start (logs in $dir/log)"; }
      sleep 0.1
    done
    kill "$pid" 2> /dev/null || true
    die "apt-cacher-ng did not answer on $addr:$port within 10 s (logs in $dir/log): fix: is the address this machine's, the port free?"
    ;;
  stop)
    dir=${2:?usage: package-proxy.sh stop DIR}
    [[ -s "$dir/pid" ]] || exit 0
    pid=$(cat "$dir/pid")
    if kill "$pid" 2> /dev/null; then
      for _ in $(seq 50); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2> /dev/null || true
    fi
    rm -f "$dir/pid"
    ;;
  *) echo "usage: $0 start ADDRESS DIR [PORT] | stop DIR" >&2; exit 2 ;;
esac
