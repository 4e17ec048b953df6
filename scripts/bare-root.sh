#!/usr/bin/env bash
# The root file system of a bare test host: a minimal Debian 12 made once per
# machine with debootstrap, plus what a cloud image has (openssh-server,
# python3 for Ansible, sudo, iproute2, procps) and nothing of ours: no training
# user, no MPI, no hpctrain. `netns-cluster.sh up N NAME --bare` uses it,
# read-only, as the lower layer of an overlay per host.
#
#   scripts/bare-root.sh            build it if missing; print its path (last line)
#   scripts/bare-root.sh --path     print the path it has or would have
#   scripts/bare-root.sh --remove   delete it (the next call builds it again)
#
# Cached at /var/cache/hpctrain/bare-root-debian12-rREV (HPCT_BARE_ROOT_CACHE
# overrides the parent). The revision is in the name: change what goes in, bump
# REV, and old caches are simply not used. Built into a temporary directory
# beside it and renamed when complete, under a lock, so an interrupted build
# leaves no half root and two concurrent callers build it once. The .deb files
# are kept in debootstrap-debs/ next to it so a rebuild fetches nothing.
# The packages come from this machine's configured Debian mirror
# (HPCT_DEBIAN_MIRROR overrides). First build here: about 1-2.5 minutes and
# ~235 MB; every later call: a few milliseconds.
set -euo pipefail

REV=r1
SUITE=bookworm
INCLUDE=openssh-server,python3,sudo,iproute2,procps,ca-certificates
cache=${HPCT_BARE_ROOT_CACHE:-/var/cache/hpctrain}
root="$cache/bare-root-debian12-$REV"

case "${1:-}" in
  --path) echo "$root"; exit 0 ;;
  --remove) rm -rf --one-file-system "$root"; exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--path|--remove]" >&2; exit 2 ;;
esac

# Already built: the common case, no lock needed (the rename is atomic).
if [[ -x "$root/usr/sbin/sshd" ]]; then echo "$root"; exit 0; fi

if [[ $(id -u) -ne 0 ]]; then
  echo "bare-root: must run as root (debootstrap); the root would be at $root" >&2
  exit 1
fi
command -v debootstrap >/dev/null || {
  echo "bare-root: debootstrap is missing: apt-get install debootstrap (scripts/install-deps.sh)" >&2
  exit 1
}

# The Debian mirror this machine's apt uses for bookworm/main.
mirror=${HPCT_DEBIAN_MIRROR:-}
if [[ -z "$mirror" ]]; then
  mirror=$(apt-cache policy 2>/dev/null |
    awk -v s=" $SUITE/main " 'index($0, s) && $2 ~ /^https?:/ { print $2; exit }')
fi
if [[ -z "$mirror" ]]; then
  echo "bare-root: no Debian $SUITE/main mirror in this machine's apt sources; set HPCT_DEBIAN_MIRROR=http://deb.debian.org/debian" >&2
  exit 1
fi

mkdir -p "$cache"
exec 9>"$cache/bare-root.lock"
# Another caller may be building it: wait for it (bounded) instead of building twice.
if ! flock -w 900 9; then
  echo "bare-root: waited 15 minutes for the lock $cache/bare-root.lock (another build?); remove it if no build runs" >&2
  exit 1
fi
if [[ -x "$root/usr/sbin/sshd" ]]; then echo "$root"; exit 0; fi

start=$(date +%s)
tmp="$cache/.bare-root-debian12-$REV.tmp.$$"
rm -rf --one-file-system "$cache"/.bare-root-debian12-"$REV".tmp.*
trap 'rm -rf --one-file-system "$tmp"' EXIT
mkdir -p "$cache/debootstrap-debs"
echo "bare-root: building $root from $mirror (once per machine; 1-3 minutes)" >&2
if ! debootstrap --variant=minbase --include="$INCLUDE" --cache-dir="$cache/debootstrap-debs" \
    "$SUITE" "$tmp" "$mirror" > "$cache/bare-root-build.log" 2>&1; then
  tail -n 20 "$cache/bare-root-build.log" >&2
  echo "bare-root: debootstrap failed (log: $cache/bare-root-build.log); is $mirror reachable? (curl -I $mirror/dists/$SUITE/Release)" >&2
  exit 1
fi

# Per-host things are made per host by netns-cluster.sh, in each overlay's upper layer:
# host keys (a shared one would make every host the same to ssh), hostname, hosts.
rm -f "$tmp"/etc/ssh/ssh_host_*
rm -f "$tmp"/etc/hostname
# Like a cloud image: root logs in with a key only, no password.
mkdir -p "$tmp/root/.ssh"
chmod 700 "$tmp/root" "$tmp/root/.ssh"
# The package lists are what a host would fetch itself; the .deb files stay in our cache.
rm -rf "$tmp"/var/cache/apt/archives/*.deb "$tmp"/var/lib/apt/lists/*_Packages
echo "$REV $SUITE $INCLUDE $mirror $(date -u +%FT%TZ)" > "$tmp/etc/hpctrain-bare-root"

mv -T "$tmp" "$root"
trap - EXIT
size=$(du -sm --one-file-system "$root" | cut -f1)
echo "bare-root: built in $(( $(date +%s) - start )) s, ${size} MB: $root" >&2
echo "$root"
