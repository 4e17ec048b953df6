#!/usr/bin/env bash
# Times a new user's first run, `make demo` on a fresh Debian 12 machine, on
# this machine: in a fresh root file system (an overlay over the minimal
# Debian 12 of scripts/bare-root.sh, in its own mount namespace, chrooted),
# with nothing of hpctrain's installed, an empty apt cache, an empty ccache
# and packages fetched from the Debian mirror. What the machine kind itself
# provides comes along: the CUDA toolkit (read-only), DNS, and the CA bundle
# and pip configuration of its network. The checkout is cloned into
# the root first (untimed); then `apt-get install make` (a minimal image has
# no make) and `make demo` are timed, and the phases are read off the log:
#
#   apt      install-deps.sh --demo: Debian's packages (apt-get update and install)
#   torch    install-deps.sh --demo: torch from the package index into a new
#            environment in the cache folder (empty in the fresh root), beside
#            apt once python3 is in: the two overlap
#   deps     install-deps.sh --demo in all (wall time: apt and torch overlapped)
#   cmake    the configure step
#   build    ninja's build of the two programs
#   demo     packing the shards and training (scripts/demo.sh)
#
# One JSON line at the end: {"what":"first_run", "seconds":..., phases...}.
#
#   scripts/first-run-time.sh [--keep] [REPO]   REPO defaults to this checkout
#
# Root only (mounts, chroot). Bounded: the whole run is stopped after 60
# minutes. The root's upper layer is in /var/tmp/hpct-first-run.*, deleted at
# the end unless --keep. DEMO_EPOCHS etc. pass through to the demo.
set -euo pipefail

keep=0
if [[ "${1:-}" == --keep ]]; then keep=1; shift; fi
repo=${1:-$(cd "$(dirname "$0")/.." && pwd)}
[[ $(id -u) -eq 0 ]] || { echo "first-run-time: must run as root (mounts, chroot)" >&2; exit 1; }
git -C "$repo" rev-parse HEAD >/dev/null 2>&1 || { echo "first-run-time: $repo is not a git checkout" >&2; exit 1; }

lower=$("$repo/scripts/bare-root.sh" | tail -n 1)
work=$(mktemp -d /var/tmp/hpct-first-run.XXXXXX)
cleanup() { if [[ $keep == 1 ]]; then echo "first-run-time: kept $work" >&2; else rm -rf --one-file-system "$work"; fi; }
trap cleanup EXIT
mkdir -p "$work"/{upper,work,merged}
log="$work/first-run.log"
rev=$(git -C "$repo" rev-parse --short HEAD)

# Everything below runs in a private mount namespace: the mounts vanish with it.
unshare --mount --propagation private bash -s "$lower" "$work" "$repo" "$log" "${DEMO_EPOCHS:-3}" <<'INNER'
set -euo pipefail
lower=$1 work=$2 repo=$3 log=$4 epochs=$5
root="$work/merged"
mount -t overlay overlay -o "lowerdir=$lower,upperdir=$work/upper,workdir=$work/work" "$root"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
mount -t tmpfs -o size=4g tmpfs "$root/tmp"
# A machine of this kind comes with the CUDA toolkit (CUDA code compiles and
# links there; install-deps.sh's light torch leaves out what it has): the
# same toolkit, read-only, and its entry for the dynamic linker.
if [[ -d /usr/local/cuda/ ]]; then
  cuda_real=$(readlink -f /usr/local/cuda)
  mkdir -p "$root$cuda_real"
  mount --bind -o ro "$cuda_real" "$root$cuda_real"
  ln -sfn "$cuda_real" "$root/usr/local/cuda"
  for f in /etc/ld.so.conf.d/*cuda*; do [[ -f $f ]] && cp "$f" "$root/etc/ld.so.conf.d/"; done
  chroot "$root" /sbin/ldconfig
fi
# The machine's own way out to the network, nothing of hpctrain's: its DNS,
# and where an egress proxy signs with its own CA, its CA bundle and pip's
# configuration naming it (pip does not read the system's bundle otherwise).
cp /etc/resolv.conf "$root/etc/resolv.conf"
if [[ -f /etc/pip.conf ]]; then
  cp /etc/pip.conf "$root/etc/pip.conf"
  mkdir -p "$root/etc/ssl/certs"
  cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
  # Kept when apt's ca-certificates rebuilds the bundle.
  if compgen -G "/usr/local/share/ca-certificates/*.crt" > /dev/null; then
    mkdir -p "$root/usr/local/share/ca-certificates"
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
  fi
fi
git clone -q "$repo" "$root/root/hpctrain"
# Every line prefixed with its time (bash's clock, no process per line), for the phases.
timeout 3600 chroot "$root" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive DEMO_EPOCHS="$epochs" /bin/bash -c '
    set -eo pipefail
    cd /root/hpctrain
    echo "@@ apt make"
    apt-get update -q && apt-get install -y -q --no-install-recommends make
    echo "@@ make demo"
    make demo
    echo "@@ end"
  ' 2>&1 | while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done | tee "$log"
INNER

# The phases, from the log's first line of each.
python3 - "$log" "$rev" <<'PY'
import json, re, sys
lines = [l.rstrip("\n").split(" ", 1) for l in open(sys.argv[1]) if " " in l]
t0 = float(lines[0][0])
t = lambda cond: next((float(a) - t0 for a, b in lines if cond(b)), None)
start = 0.0
make_demo = t(lambda b: b.startswith("@@ make demo"))
torch = t(lambda b: b.startswith("torch: install-deps: torch ") or b.startswith("install-deps: torch "))
apt_done = t(lambda b: b.startswith("install-deps: Debian packages installed"))
torch_done = t(lambda b: b.startswith("install-deps: torch ready"))
cmake = t(lambda b: b.startswith("cmake -S ") or b.startswith("-- The C"))
build = t(lambda b: re.match(r"\[\d+/\d+ ", b) is not None or b.startswith("NINJA_STATUS"))
demo = t(lambda b: b.startswith("bash scripts/demo.sh"))
end = t(lambda b: b.startswith("@@ end"))
wall = t(lambda b: b.startswith("demo: wall time"))
if end is None:
    print(json.dumps({"what": "first_run", "ok": False, "log": sys.argv[1]}))
    sys.exit(1)
out = {"what": "first_run", "ok": True, "commit": sys.argv[2], "seconds": round(end - start, 1),
       "apt_make_s": round(make_demo - start, 1),
       "apt_s": round((apt_done or torch or cmake or make_demo) - make_demo, 1),
       "torch_s": round((torch_done or cmake or torch) - torch, 1) if torch else None,
       "deps_s": round((cmake or make_demo) - make_demo, 1),
       "cmake_s": round((build or cmake) - cmake, 1) if cmake else None,
       "build_s": round(demo - build, 1) if build and demo else None,
       "demo_s": round(end - demo, 1) if demo else None}
print(json.dumps(out))
PY
