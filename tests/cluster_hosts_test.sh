#!/usr/bin/env bash
# Bare test hosts and hpctrain's Debian package on them (label cluster):
#
#   cluster_hosts_test.sh root            build the cached bare root if missing (a fixture:
#                                         1-4 minutes once per machine, then milliseconds)
#   cluster_hosts_test.sh bare            3 bare hosts are separate machines: own root, own
#                                         hostname and host keys, sshd with the cluster key
#                                         only, nothing of ours installed; `down` leaves nothing
#   cluster_hosts_test.sh package BUILD   the .deb of `--target hpctrain-deb` installs on a bare
#                                         host with dpkg -i plus its declared dependencies from
#                                         a bundle (no mirror), and reports the build's version
#   cluster_hosts_test.sh proxy           a bare host installs a package through apt-cacher-ng
#                                         on the head (the head reaches Debian's mirror)
#
# Exit 77 (CTest SKIP_RETURN_CODE) only when this machine cannot make the
# namespaces; the reason is printed.
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
netns=$src/scripts/netns-cluster.sh
mode=${1:?usage: cluster_hosts_test.sh root|bare|package BUILD|proxy}
name=""
tmp=$(mktemp -d /tmp/hpct-cluster-test.XXXXXX)
proxy_dir=""
cleanup() {
  [[ -n "$proxy_dir" ]] && "$src/scripts/package-proxy.sh" stop "$proxy_dir"
  [[ -n "$name" ]] && "$netns" down "$name"
  rm -rf "$tmp"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "--- $(date +%T) $*"; }

# up N NAME: a bare cluster; its KEY=VALUE lines become shell variables.
up() {
  name=$2
  local out
  out=$("$netns" up "$1" "$2" --bare) || fail "netns-cluster.sh up $1 $2 --bare failed: $out"
  if grep -q '^NETNS_SKIP=' <<< "$out"; then
    echo "SKIP: $(sed -n 's/^NETNS_SKIP=//p' <<< "$out")"
    exit 77
  fi
  eval "$out"
  read -r -a hosts <<< "$NETNS_HOSTS"
  read -r -a roots <<< "$NETNS_ROOTS"
  read -r -a names <<< "$NETNS_HOSTNAMES"
  [[ ${#hosts[@]} -eq $1 && ${#roots[@]} -eq $1 && ${#names[@]} -eq $1 ]] ||
    fail "up printed ${#hosts[@]} hosts, ${#roots[@]} roots, ${#names[@]} host names for $1 hosts: $out"
}
# As root on a host, over ssh with the cluster key (one shell command line, as ssh joins its words).
on() { local h=$1; shift; "$NETNS_SSH" "$h" "$@"; }

test_bare() {
  step "up 3 bare hosts"
  local t0=$SECONDS
  up 3 ch1
  echo "up took $((SECONDS - t0)) s"
  local holders=() mntns=()
  for i in 1 2 3; do
    local h=${hosts[i-1]} facts
    # One ssh per host (each costs ~0.3 s here): what a user would look at first.
    # shellcheck disable=SC2016
    facts=$(on "$h" 'echo "hostname=$(hostname)"
      echo "ownline=$(grep -c "^127.0.1.1[[:space:]]*$(hostname)\$" /etc/hosts)"
      echo "python3=$(python3 -c "print(1)")"
      echo "ours=$(command -v mpirun hpctrain | tr "\n" " ")"
      echo "users=$(awk -F: "\$3 >= 1000 && \$3 < 65534 {print \$1}" /etc/passwd | tr "\n" " ")"
      echo "keys=$(md5sum < /root/.ssh/authorized_keys | cut -c1-32)"
      echo "default_route=$(ip route | grep -c ^default)"') || fail "ssh to bare host $i ($h) failed"
    fact() { sed -n "s/^$1=//p" <<< "$facts"; }
    [[ "$(fact hostname)" == "h$i" ]] || fail "host $h says hostname '$(fact hostname)', want h$i"
    [[ "$(fact ownline)" == 1 ]] || fail "host $i's /etc/hosts lacks '127.0.1.1 h$i' (a cloud image has it)"
    # Bare as a cloud image: python3 for Ansible; no MPI, no hpctrain, no training user.
    [[ "$(fact python3)" == 1 ]] || fail "no python3 on bare host $i (Ansible needs it)"
    [[ -z "$(fact ours)" ]] || fail "bare host $i has $(fact ours)"
    [[ -z "$(fact users)" ]] || fail "bare host $i has user accounts besides root: $(fact users)"
    [[ "$(fact keys)" == "$(md5sum < "$NETNS_KEY.pub" | cut -c1-32)" ]] ||
      fail "root's authorized_keys on host $i is not exactly the cluster key"
    [[ "$(fact default_route)" == 0 ]] || fail "bare host $i has a default route (it must reach no mirror)"
    [[ "$("$netns" exec ch1 "$i" hostname)" == "h$i" ]] || fail "exec ch1 $i hostname is not h$i"
    holders+=("$(cut -d/ -f3 <<< "${roots[i-1]}")")
    mntns+=("$(readlink "/proc/${holders[i-1]}/ns/mnt")")
  done
  [[ "${mntns[0]}" != "$(readlink /proc/self/ns/mnt)" ]] || fail "host 1 shares the head's mount namespace"

  step "a user and a file made on host 1 are on no other host nor on the head"
  local user=hpctbare$$ marker=/etc/hpct-bare-marker-$$
  on "${hosts[0]}" "useradd -m $user && echo one > $marker"
  on "${hosts[0]}" id "$user" > /dev/null || fail "useradd $user on host 1 did not make the user"
  for i in 2 3; do
    if on "${hosts[i-1]}" id "$user" > /dev/null 2>&1; then fail "user $user made on host 1 exists on host $i"; fi
    if on "${hosts[i-1]}" test -e "$marker"; then fail "$marker made on host 1 exists on host $i"; fi
  done
  if id "$user" > /dev/null 2>&1; then fail "user $user made on host 1 exists on the head"; fi
  [[ ! -e "$marker" ]] || fail "$marker made on host 1 exists on the head"
  [[ "$(cat "${roots[0]}$marker")" == one ]] || fail "NETNS_ROOTS[0]=${roots[0]} does not show host 1's root"
  # The cached root under every host is untouched.
  [[ ! -e "$("$src/scripts/bare-root.sh" --path)$marker" ]] || fail "a file made on host 1 reached the cached root"

  step "each host has its own host key; sshd takes the cluster key only"
  local keys
  keys=$(for h in "${hosts[@]}"; do ssh-keyscan -T 5 -t ed25519 "$h" 2> /dev/null | awk '{print $3}'; done | sort -u | wc -l)
  [[ "$keys" -eq 3 ]] || fail "3 hosts show $keys distinct ed25519 host keys, want 3"
  ssh-keygen -q -t ed25519 -N '' -f "$tmp/other"
  if ssh -F /dev/null -i "$tmp/other" -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=no \
       -o UserKnownHostsFile=/dev/null -o ConnectTimeout=5 "root@${hosts[1]}" true 2> /dev/null; then
    fail "host 2's sshd let in a key that is not the cluster key"
  fi
  "$netns" sshd-stop ch1 2
  if on "${hosts[1]}" true 2> /dev/null; then fail "host 2 still answers ssh after sshd-stop"; fi
  "$netns" sshd-start ch1 2
  on "${hosts[1]}" true || fail "host 2 does not answer ssh after sshd-start"

  step "down leaves nothing"
  on "${hosts[2]}" "sleep 300 > /dev/null 2>&1 &"  # a process left on a host goes too
  "$netns" down ch1
  name=""
  for i in 1 2 3; do
    ! kill -0 "${holders[i-1]}" 2> /dev/null || fail "host $i's holder ${holders[i-1]} survived down"
    local pat left
    pat=${mntns[i-1]//[/\\[}; pat=${pat//]/\\]}
    left=$(find /proc -mindepth 3 -maxdepth 3 -path '/proc/[0-9]*/ns/mnt' -lname "$pat" 2> /dev/null || true)
    [[ -z "$left" ]] || fail "processes still in host $i's mount namespace after down: $left"
  done
  [[ ! -e /tmp/hpct-netns-ch1 ]] || fail "down left /tmp/hpct-netns-ch1"
  if ip netns list | grep -q 'hpct-ch1-'; then fail "down left a namespace: $(ip netns list | grep hpct-ch1-)"; fi
  if ip link show hbch1 > /dev/null 2>&1; then fail "down left the bridge hbch1"; fi
  if grep -q hpct-netns-ch1 /proc/self/mountinfo; then fail "down left a mount of /tmp/hpct-netns-ch1 on the head"; fi
  echo "PASS bare hosts"
}

test_package() {
  local build=${1:?usage: cluster_hosts_test.sh package BUILD_DIR}
  step "build the package (cmake --build $build --target hpctrain-deb)"
  cmake --build "$build" --target hpctrain-deb > "$tmp/deb.log" 2>&1 || { cat "$tmp/deb.log"; fail "the hpctrain-deb target failed"; }
  local deb
  deb=$(ls -t "$build"/hpctrain_*_amd64.deb | head -n 1)
  [[ -f "$deb" ]] || fail "no $build/hpctrain_*_amd64.deb after the hpctrain-deb target"
  local want; want=$("$build/tools/hpctrain/hpctrain" --version)
  echo "package $(basename "$deb"); build says: $want"

  step "bundle it with its dependencies that a bare host lacks"
  "$src/scripts/package-bundle.sh" "$tmp/bundle" --deb "$deb" || fail "package-bundle.sh failed"
  [[ -s "$tmp/bundle/Packages" ]] || fail "the bundle has no Packages index"

  up 1 ch2
  local h=${hosts[0]}
  step "copy the bundle to the host and install from it (no mirror)"
  tar -C "$tmp" -cf - bundle | on "$h" "mkdir -p /opt && tar -C /opt -xf - && mv /opt/bundle /opt/hpctrain-bundle" ||
    fail "copying the bundle to the host over ssh failed"
  on "$h" "echo 'deb [trusted=yes] file:/opt/hpctrain-bundle ./' > /etc/apt/sources.list.d/hpctrain-bundle.list"
  on "$h" apt-get -q update -o Dir::Etc::sourcelist=sources.list.d/hpctrain-bundle.list \
    -o Dir::Etc::sourceparts=- -o APT::Get::List-Cleanup=0 > "$tmp/update.log" 2>&1 ||
    { cat "$tmp/update.log"; fail "apt-get update from the bundle failed on the host"; }
  # dpkg -i first, as the acceptance says; it stops at the missing dependencies, which
  # apt then installs from the bundle.
  on "$h" "dpkg -i /opt/hpctrain-bundle/$(basename "$deb")" > "$tmp/dpkg.log" 2>&1 || true
  on "$h" DEBIAN_FRONTEND=noninteractive apt-get -q -y -f --no-install-recommends install > "$tmp/apt.log" 2>&1 ||
    { tail -n 30 "$tmp/dpkg.log" "$tmp/apt.log"; fail "apt-get -f install of hpctrain's dependencies from the bundle failed"; }
  [[ "$(on "$h" dpkg-query -W -f='\${Status}' hpctrain)" == "install ok installed" ]] ||
    { tail -n 30 "$tmp/dpkg.log" "$tmp/apt.log"; fail "hpctrain is not installed on the host after dpkg -i + apt-get -f install"; }

  step "the installed hpctrain is this build"
  local got; got=$(on "$h" hpctrain --version)
  [[ "$got" == "$want" ]] || fail "hpctrain --version on the host: '$got', the build: '$want'"
  [[ "$(on "$h" readlink -f /usr/bin/hpctrain)" == /usr/lib/hpctrain/hpctrain ]] || fail "/usr/bin/hpctrain does not lead to /usr/lib/hpctrain/hpctrain"
  # hpctrain-torch starts (libtorch and its BLAS resolve), exec'd by hpctrain beside it.
  on "$h" hpctrain train --help > "$tmp/train-help.log" 2>&1 || { cat "$tmp/train-help.log"; fail "hpctrain train --help (hpctrain-torch) does not run on the host"; }
  if on "$h" "ldd /usr/lib/hpctrain/hpctrain /usr/lib/hpctrain/hpctrain-torch | grep 'not found'"; then
    fail "a library of hpctrain is missing on the host: the package's Depends are incomplete"
  fi
  on "$h" mpirun --version > /dev/null || fail "mpirun (openmpi-bin, a declared dependency) does not run on the host"
  echo "PASS package on a bare host: $got"
}

test_proxy() {
  up 1 ch3
  local h=${hosts[0]}
  proxy_dir=$tmp/proxy
  step "apt-cacher-ng on the head at $NETNS_HEAD"
  local out
  out=$("$src/scripts/package-proxy.sh" start "$NETNS_HEAD" "$proxy_dir") || fail "package-proxy.sh start failed"
  eval "$out"
  on "$h" "echo 'Acquire::http::Proxy \"$PROXY_URL\";' > /etc/apt/apt.conf.d/01hpctrain-proxy"
  step "the host installs a package through it"
  on "$h" apt-get -q update > "$tmp/update.log" 2>&1 ||
    { cat "$tmp/update.log"; tail -n 5 "$proxy_dir"/log/*; fail "apt-get update through the proxy failed (can the head reach deb.debian.org?)"; }
  if grep -q '^[WE]:' "$tmp/update.log"; then cat "$tmp/update.log"; fail "apt-get update through the proxy warned or failed"; fi
  on "$h" DEBIAN_FRONTEND=noninteractive apt-get -q -y --no-install-recommends install hello > "$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log"; fail "apt-get install hello through the proxy failed"; }
  [[ "$(on "$h" hello)" == "Hello, world!" ]] || fail "hello installed through the proxy does not run"
  find "${HPCT_PROXY_CACHE:-/var/cache/hpctrain/apt-cacher-ng}" -name 'hello_*.deb' | grep -q . ||
    fail "the proxy's cache has no hello_*.deb: the host did not fetch through it"
  "$src/scripts/package-proxy.sh" stop "$proxy_dir"
  proxy_dir=""
  ! kill -0 "$PROXY_PID" 2> /dev/null || fail "apt-cacher-ng $PROXY_PID still runs after stop"
  echo "PASS proxy"
}

case "$mode" in
  root)
    if [[ $(id -u) -ne 0 ]]; then echo "SKIP: not root (debootstrap and namespaces need root)"; exit 77; fi
    "$src/scripts/bare-root.sh" ;;
  bare) test_bare ;;
  package) test_package "${2:-}" ;;
  proxy) test_proxy ;;
  *) echo "usage: $0 root|bare|package BUILD|proxy" >&2; exit 2 ;;
esac
