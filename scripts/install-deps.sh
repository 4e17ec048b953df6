#!/usr/bin/env bash
# Installs, with apt-get, everything hpctrain needs to build, test and run its demo.
# Idempotent: packages already present are not fetched again, and apt's lists are
# refreshed only when something is missing. Must run as root on Debian 12.
set -euo pipefail

packages=(
  # build
  g++ cmake make ninja-build pkg-config git ccache
  # libtorch, on OpenBLAS (the reference BLAS is 5-20x slower here)
  libtorch-dev libopenblas0-pthread
  # communication
  libopenmpi-dev openmpi-bin libgloo-dev
  # CLI, JSON, crypto, HTTP, images
  libcli11-dev nlohmann-json3-dev libssl-dev libcurl4-openssl-dev libjpeg62-turbo-dev libpng-dev zlib1g-dev libdeflate-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev python3
  # multi-host tests: sshd in network namespaces, a real Slurm
  openssh-server openssh-client iproute2 iptables slurm-wlm
  # bare test hosts (netns-cluster.sh --bare), the .deb and its bundle, the apt proxy
  debootstrap dpkg-dev apt-utils apt-cacher-ng
  # hpctrain cluster setup: the playbooks' engine and linter, sshfs for the shared directory
  ansible-core ansible-lint sshfs
  # real data
  dataset-fashion-mnist
  # the peer baseline (PyTorch DDP) for benchmarks only
  python3-torch
  # the Python package hpctrain.torch (python/) and its tests
  pybind11-dev python3-dev python3-numpy
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
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
echo "install-deps: done"
