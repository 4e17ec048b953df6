#!/usr/bin/env bash
# A bundle of .deb files for hosts that reach no package mirror: hpctrain's
# own .deb plus every package it and the cluster's base software need that a
# minimal Debian 12 root lacks, with a Packages index, so that a host can use
# the folder as an apt source:
#
#   deb [trusted=yes] file:/path/to/bundle ./
#
# `hpctrain cluster setup --packages bundle:DIR` copies it to every host and
# installs from it (docs/cluster.md).
#
#   scripts/package-bundle.sh DIR --deb hpctrain_VERSION_amd64.deb [--for FEATURE]... [--slurm] [--have STATUS] [PACKAGE...]
#
#   --deb FILE     hpctrain's package (cmake --build BUILD --target hpctrain-deb)
#   --for FEATURE  add what the roles install for FEATURE: sshfs, nfs, slurm or glusterfs
#                  (hpct_feature_packages in deploy/ansible/roles/packages/defaults/main.yml;
#                  `cluster setup --packages bundle` passes the ones its options use)
#   --slurm        the same as --for slurm
#   --have STATUS  a dpkg status file of what the hosts already have (default:
#                  the bare test root's, scripts/bare-root.sh, when it exists;
#                  else only Debian's required packages are taken as present)
#   PACKAGE...     more packages (e.g. sshfs for --shared-type sshfs)
#
# Always added: the playbooks' base packages (hpct_base_packages in
# deploy/ansible/roles/packages/defaults/main.yml). Which versions is decided
# by this machine's apt (its sources and lists, which should be Debian 12's, as
# the hosts'). Downloaded .deb files are kept in /var/cache/hpctrain/bundle-debs
# (HPCT_BUNDLE_CACHE) and taken from /var/cache/apt/archives when there, so a
# second bundle fetches nothing; the bundle holds them recompressed with zstd
# (made once, in the cache's zstd/ folder: 1-3 minutes for 350 packages here;
# HPCT_BUNDLE_REPACK=0 keeps Debian's xz files). The last line printed is a
# one-line summary.
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
usage() { echo "usage: $0 DIR --deb FILE [--for FEATURE]... [--slurm] [--have STATUS] [PACKAGE...]" >&2; exit 2; }
die() { echo "package-bundle: $*" >&2; exit 1; }

dir=${1:-}
[[ -n "$dir" && "$dir" != -* ]] || usage
shift
deb="" have="" extra=() features=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --deb) deb=${2:?--deb needs a file}; shift 2 ;;
    --for) features+=("${2:?--for needs a feature: sshfs, nfs, slurm or glusterfs}"); shift 2 ;;
    --slurm) features+=(slurm); shift ;;
    --have) have=${2:?--have needs a dpkg status file}; shift 2 ;;
    -*) usage ;;
    *) extra+=("$1"); shift ;;
  esac
done
[[ -f "$deb" ]] || die "no hpctrain package '$deb': fix: build it with make package (or cmake --build BUILD --target hpctrain-deb) and give it with --deb"
deb=$(cd "$(dirname "$deb")" && pwd)/$(basename "$deb")
for tool in apt-get apt-ftparchive dpkg-deb; do
  command -v "$tool" > /dev/null || die "$tool is missing: fix: apt-get install apt-utils dpkg-dev (scripts/install-deps.sh)"
done

# The base packages, from the one place the playbooks declare them.
defaults=$src/deploy/ansible/roles/packages/defaults/main.yml
[[ -f "$defaults" ]] || defaults=/usr/share/hpctrain/ansible/roles/packages/defaults/main.yml
base=$(sed -n 's/^hpct_base_packages: *\[\(.*\)\]/\1/p' "$defaults" | tr -d ' ' | tr ',' ' ')
[[ -n "$base" ]] || die "no hpct_base_packages line in $defaults"
# Each feature's packages, from the same file (lines "  FEATURE: [a, b]").
for f in "${features[@]}"; do
  list=$(sed -n '/^hpct_feature_packages:/,/^[^ ]/s/^  '"$f"': *\[\(.*\)\]/\1/p' "$defaults" | tr -d ' ' | tr ',' ' ')
  [[ -n "$list" ]] || die "--for $f: no such feature in $defaults (choose sshfs, nfs, slurm or glusterfs)"
  # shellcheck disable=SC2206
  extra+=($list)
done
# shellcheck disable=SC2206
wanted=($base "${extra[@]}")

# What the hosts have: a status file to resolve against.
tmp=$(mktemp -d /tmp/hpct-bundle.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
if [[ -z "$have" ]]; then
  bare=""
  [[ -f "$src/scripts/bare-root.sh" ]] && bare=$(bash "$src/scripts/bare-root.sh" --path 2> /dev/null || true)
  if [[ -n "$bare" && -f "$bare/var/lib/dpkg/status" ]]; then
    have=$bare/var/lib/dpkg/status
  else
    # Debian's required packages and what they depend on, as installed on this
    # machine, as a status file.
    mapfile -t required < <(dpkg-query -W -f='${Package} ${Priority} ${db:Status-Status}\n' |
      awk '$2 == "required" && $3 == "installed" { print $1 }')
    mapfile -t closure < <(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
      --no-breaks --no-replaces --no-enhances "${required[@]}" 2> /dev/null | grep -v '^ ' | grep -v '^<' | sort -u)
    { dpkg-query -W -f='${db:Status-Status} Package: ${Package}\nStatus: install ok installed\nPriority: ${Priority}\nArchitecture: ${Architecture}\nMulti-Arch: ${Multi-Arch}\nVersion: ${Version}\nProvides: ${Provides}\nDepends: ${Depends}\nPre-Depends: ${Pre-Depends}\n\n' \
      "${closure[@]}" 2> /dev/null || true; } | awk '/^installed Package: / { sub(/^installed /, ""); ok = 1 } /^[a-z-]+ Package: / && !/^installed / { ok = 0 } ok' |
      grep -v ': $' > "$tmp/status"
    have=$tmp/status
  fi
fi
[[ -f "$have" ]] || die "no dpkg status file '$have'"

cache=${HPCT_BUNDLE_CACHE:-/var/cache/hpctrain/bundle-debs}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)

# What apt would install on such a host: hpctrain's .deb and the wanted packages.
# apt resolves against this machine's lists without its binary cache (Debian's
# images turn pkgcache.bin off), 4-6 s here; the plan is kept in the cache
# keyed by everything it depends on: the .deb (name, size, time), the wanted
# packages, the status file, this machine's apt lists and sources, and this script.
plan_key=$({ printf '%s\n' "${wanted[@]}"; stat -c '%n %s %Y' "$deb" "$have" "${BASH_SOURCE[0]}";
             stat -c '%n %s %Y' /var/lib/apt/lists/* /etc/apt/sources.list /etc/apt/sources.list.d/* 2> /dev/null || true
           } | sha256sum | cut -c1-32)
mkdir -p "$cache/plans"
if [[ -s "$cache/plans/$plan_key" ]]; then
  cp "$cache/plans/$plan_key" "$tmp/plan"
else
  apt_have=(-o "Dir::State::status=$have" -o "Dir::State::extended_states=$tmp/extended_states"
            -o APT::Install-Recommends=false -o Debug::NoLocking=true)
  if ! apt-get -s -q "${apt_have[@]}" install "$deb" "${wanted[@]}" > "$tmp/plan" 2> "$tmp/plan.err"; then
    cat "$tmp/plan" "$tmp/plan.err" >&2
    die "apt cannot resolve hpctrain's dependencies here: fix: apt-get update, or check the Depends of $deb"
  fi
  # Old plans go (an apt update or a new .deb makes a new key); written whole, then renamed.
  find "$cache/plans" -type f -mtime +7 -delete 2> /dev/null || true
  cp "$tmp/plan" "$cache/plans/.$plan_key.$$" && mv "$cache/plans/.$plan_key.$$" "$cache/plans/$plan_key"
fi
# "Inst NAME [OLD VERSION] (VERSION SOURCES [ARCH]) [BROKEN]": upgrades of what the hosts have come too.
awk '$1 == "Inst" && $2 != "hpctrain" {
       for (i = 3; i <= NF; i++) if ($i ~ /^\(/) { v = substr($i, 2); break }
       # the architecture closes the parenthesis ("[amd64])"); a trailing "[]" may follow
       for (i = NF; i > 3; i--) if ($i ~ /\]\)$/) { a = $i; break }
       gsub(/[\[\]()]/, "", a); print $2, v, a }' "$tmp/plan" > "$tmp/list"

exec 9> "$cache/.lock"
flock -w 600 9 || die "another package-bundle.sh holds $cache/.lock for 10 minutes"
fetch=()
while read -r pkg ver arch; do
  f="${pkg}_${ver//:/%3a}_${arch}.deb"
  [[ -s "$cache/$f" ]] && continue
  if [[ -s "/var/cache/apt/archives/$f" ]]; then cp "/var/cache/apt/archives/$f" "$cache/$f"; continue; fi
  fetch+=("$pkg=$ver")
done < "$tmp/list"
if [[ ${#fetch[@]} -gt 0 ]]; then
  echo "package-bundle: downloading ${#fetch[@]} package(s) into $cache"
  (cd "$cache" && apt-get -q -o APT::Sandbox::User=root download "${fetch[@]}") ||
    die "apt-get download failed: fix: apt-get update (this machine must reach its mirror)"
fi
flock -u 9

# Each Debian package's data (xz) recompressed with zstd, cached beside the
# originals (zstd/): the same files, owners and modes, as Debian's dpkg 1.21
# reads them, but a host unpacks them with about a third less CPU (xz
# decompression was ~13 s of the ~33 s per host for the 350 packages of
# libtorch's closure). Made once per package, two at a time; the bundle's
# Packages index has the repacked files' sums. HPCT_BUNDLE_REPACK=0 keeps
# Debian's own files.
repack() {  # SRC DEST: DEST is SRC with data.tar.zst (or a link to SRC when not xz)
  local w members data ctrl
  w=$(mktemp -d "$2.work.XXXXXX")
  members=$(cd "$w" && ar t "$1" | tr '\n' ' ')
  data=$(tr ' ' '\n' <<< "$members" | grep '^data\.tar') ctrl=$(tr ' ' '\n' <<< "$members" | grep '^control\.tar')
  if [[ "$data" != data.tar.xz || "$members" != "debian-binary $ctrl $data " ]]; then
    rm -rf "$w"; ln -f "$1" "$2" 2> /dev/null || cp "$1" "$2"; return
  fi
  (cd "$w" && ar x "$1" && xz -dc data.tar.xz | zstd -q -3 -o data.tar.zst && rm data.tar.xz &&
   ar rcD "$2.tmp" debian-binary "$ctrl" data.tar.zst) || { rm -rf "$w" "$2.tmp"; return 1; }
  rm -rf "$w"; mv "$2.tmp" "$2"
}
src_dir=$cache
if [[ "${HPCT_BUNDLE_REPACK:-1}" != 0 ]]; then
  for tool in ar xz zstd; do
    command -v "$tool" > /dev/null || die "$tool is missing: fix: apt-get install binutils xz-utils zstd (scripts/install-deps.sh), or HPCT_BUNDLE_REPACK=0"
  done
  src_dir=$cache/zstd
  mkdir -p "$src_dir"
  exec 9> "$cache/.lock"
  flock -w 600 9 || die "another package-bundle.sh holds $cache/.lock for 10 minutes"
  todo=()
  while read -r pkg ver arch; do
    f="${pkg}_${ver//:/%3a}_${arch}.deb"
    [[ -s "$src_dir/$f" ]] || todo+=("$f")
  done < "$tmp/list"
  if [[ ${#todo[@]} -gt 0 ]]; then
    echo "package-bundle: recompressing ${#todo[@]} package(s) with zstd into $src_dir"
    export -f repack
    # shellcheck disable=SC2016
    printf '%s\n' "${todo[@]}" |
      xargs -P 2 -n 1 bash -c 'repack "$1/$3" "$2/$3"' _ "$cache" "$src_dir" ||
      die "recompressing the packages in $cache failed: fix: check the free space there, or HPCT_BUNDLE_REPACK=0"
  fi
  flock -u 9
fi

# The bundle: a folder of exactly these files and their index.
if [[ -d "$dir" ]] && [[ -n "$(ls -A "$dir")" ]] && [[ ! -f "$dir/Packages" ]]; then
  die "$dir exists and is not a bundle (no Packages index): fix: give a new or empty folder"
fi
mkdir -p "$dir"
# The .deb may be the bundle's own copy (refreshing a bundle in place): keep it aside first.
cp "$deb" "$tmp/"
deb=$tmp/$(basename "$deb")
rm -f "$dir"/*.deb "$dir/Packages" "$dir/Packages.gz"
while read -r pkg ver arch; do
  f="${pkg}_${ver//:/%3a}_${arch}.deb"
  ln "$src_dir/$f" "$dir/$f" 2> /dev/null || cp "$src_dir/$f" "$dir/$f"
done < "$tmp/list"
cp "$deb" "$dir/"
# The index names each file by its SHA256 only: apt on a host then hashes each
# file it installs once (with Debian's four sums, its file method spent ~1.3
# CPU-seconds a host on the 350 packages), and the index takes ~0.5 s instead
# of 2-3 s. (apt-ftparchive's --db cache is not used: it gave a rebuilt
# hpctrain .deb of the same name its old sums.)
(cd "$dir" && apt-ftparchive -o APT::FTPArchive::MD5=false -o APT::FTPArchive::SHA1=false \
   -o APT::FTPArchive::SHA512=false packages . > Packages 2> "$tmp/ftparchive.err") ||
  { cat "$tmp/ftparchive.err" >&2; die "apt-ftparchive failed in $dir"; }
n=$(grep -c '^Package: ' "$dir/Packages")
echo "bundle $dir: $n packages, $(du -sm "$dir" | cut -f1) MB, hpctrain $(dpkg-deb --field "$deb" Version)"
