#!/usr/bin/env bash
# Installs, with apt-get, everything hpctrain needs to build, test and run its demo.
# Idempotent: packages already present are not fetched again, and apt's lists are
# refreshed only when something is missing. Must run as root on Debian 12.
#
#   scripts/install-deps.sh          everything: the build, the tests, the benchmarks' peers
#   scripts/install-deps.sh --demo   only what configuring, building the two programs and
#                                    running the demo take (`make demo`): no browser, servers,
#                                    Slurm, Ansible or PyTorch peer; `make test` adds the rest
set -euo pipefail

demo_only=0
case "${1:-}" in
  --demo) demo_only=1 ;;
  "") ;;
  *) echo "usage: $0 [--demo]" >&2; exit 2 ;;
esac

# Configure (every REQUIRED find_package of CMakeLists.txt), build and the demo.
demo_packages=(
  g++ cmake make ninja-build pkg-config git ccache
  # libtorch, on OpenBLAS (the reference BLAS is 5-20x slower here)
  libtorch-dev libopenblas0-pthread
  # communication
  libopenmpi-dev openmpi-bin libgloo-dev
  # CLI, JSON, crypto, HTTP, images, metrics endpoints (prometheus-cpp)
  libcli11-dev nlohmann-json3-dev libssl-dev libcurl4-openssl-dev libjpeg62-turbo-dev libpng-dev zlib1g-dev
  libdeflate-dev prometheus-cpp-dev
  # the tests' framework is found at configure time (the same build folder serves make test)
  libgtest-dev libgmock-dev python3
  # the demo's data
  dataset-fashion-mnist
)

packages=(
  "${demo_packages[@]}"
  # benchmarks
  libbenchmark-dev
  # tf.Example through libprotobuf (formats/example_bench.cc)
  libprotobuf-dev protobuf-compiler
  # a real Prometheus and promtool for the metrics endpoints' test
  prometheus
  # the browser that opens hpctrain report's page in its test (headless)
  chromium
  # hpctrain top read off a real terminal in its test
  tmux
  # multi-host tests: sshd in network namespaces, a real Slurm
  openssh-server openssh-client iproute2 iptables slurm-wlm
  # bare test hosts (netns-cluster.sh --bare), the .deb and its bundle, the apt proxy
  debootstrap dpkg-dev apt-utils apt-cacher-ng
  # the bundle's packages recompressed from xz to zstd (scripts/package-bundle.sh)
  binutils xz-utils zstd
  # hpctrain cluster setup: the playbooks' engine and linter, sshfs for the shared directory
  ansible-core ansible-lint sshfs
  # offline checks of the deploy recipes (scripts/check-deploy.sh; HCL through npm's @cdktf/hcl2json)
  python3-yaml python3-jsonschema shellcheck nodejs
  # shards in object storage (tests/objstore): nginx for HTTP(S), the AWS CLI and botocore
  # (the signature check in front of s3rver), boto3 for scripts
  nginx awscli python3-botocore python3-boto3 openssl
  # the peer baseline (PyTorch DDP) for benchmarks only
  python3-torch
  # the Python package hpctrain.torch (python/) and its tests
  pybind11-dev python3-dev python3-numpy
)
if [ "$demo_only" = 1 ]; then
  packages=("${demo_packages[@]}")
fi

# Debian's npm, unless a nodejs from elsewhere brings its own (it then conflicts with Debian's npm).
[ "$demo_only" = 1 ] || command -v npm >/dev/null || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# The HCL parser for scripts/check-deploy.sh, into a cache folder once (npm is
# the only source; without it the Terraform check says it skipped).
hcl_cache=/var/cache/hpctrain/hcl2json
hcl_parser() {
  [ -f "$hcl_cache/node_modules/@cdktf/hcl2json/package.json" ] && return 0
  command -v npm >/dev/null || return 0
  mkdir -p "$hcl_cache" 2>/dev/null || return 0
  timeout 180 npm install --prefix "$hcl_cache" --no-audit --no-fund @cdktf/hcl2json@0.21.0 >/dev/null 2>&1 ||
    echo "install-deps: npm could not install @cdktf/hcl2json; check-deploy will skip Terraform" >&2
}

# s3rver, the S3 server of tests/objstore, into a cache folder once (npm only).
s3rver_cache=/var/cache/hpctrain/s3rver
s3rver_server() {
  [ -f "$s3rver_cache/node_modules/s3rver/package.json" ] && return 0
  command -v npm >/dev/null || return 0
  mkdir -p "$s3rver_cache" 2>/dev/null || return 0
  timeout 300 npm install --prefix "$s3rver_cache" --no-audit --no-fund s3rver@3.7.1 >/dev/null 2>&1 ||
    echo "install-deps: npm could not install s3rver; the objstore tests will fail" >&2
}

# The npm caches serve the tests only.
npm_caches() {
  [ "$demo_only" = 1 ] && return 0
  hcl_parser
  s3rver_server
}

if [ ${#missing[@]} -eq 0 ]; then
  npm_caches
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages: ${missing[*]}" >&2
  echo "install-deps: run as root (sudo $0) to install them" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
npm_caches
echo "install-deps: done"
