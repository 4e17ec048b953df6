#!/usr/bin/env bash
# Installs everything hpctrain needs to build, test and run its demo:
#   - Debian 12 packages, with apt-get;
#   - PyTorch from the Python package index, into a virtual environment kept in
#     a machine-wide cache folder (so a second checkout or a CI clone reuses it);
#   - for the tests only: the test servers and parsers from the index (moto's S3
#     server, python-hcl2), into a second environment in the same cache folder.
# Idempotent: packages already present are not fetched again, apt's lists are
# refreshed only when something is missing, and an environment is built again
# only when its stamp (written last, after every install in it succeeded) is absent.
# Must run as root on Debian 12.
#
#   scripts/install-deps.sh          everything: the build, the tests, the benchmarks' peers
#   scripts/install-deps.sh --demo   only what configuring, building and the demo take
#                                    (`make demo`): no browser, servers, Slurm or Ansible;
#                                    `make test` adds the rest
#   scripts/install-deps.sh --print-python
#                                    prints the torch environment's python3 and exits
#   scripts/install-deps.sh --torch-env DIR [VERSION]
#                                    only a torch environment at DIR (torch VERSION,
#                                    default the pinned one), installed the same way:
#                                    for building hpctrain against another torch
#
# HPCT_CACHE (default /var/cache/hpctrain) chooses the cache folder.
set -euo pipefail

# The one pinned torch: the newest release on the index (2026-10). Its default
# Linux build is the CUDA 13 one, which runs on the CPU too.
torch_version=2.15.0
cache=${HPCT_CACHE:-/var/cache/hpctrain}
torch_env="$cache/torch-$torch_version"
tools_env="$cache/test-tools-1"

demo_only=0
torch_only=0
case "${1:-}" in
  --demo) demo_only=1 ;;
  --print-python) ;;
  --torch-env)
    [ -n "${2:-}" ] || { echo "usage: $0 --torch-env DIR [VERSION]" >&2; exit 2; }
    torch_only=1 torch_env=$2 torch_version=${3:-$torch_version} ;;
  "") ;;
  *) echo "usage: $0 [--demo|--print-python|--torch-env DIR [VERSION]]" >&2; exit 2 ;;
esac

if [ "${1:-}" = --print-python ]; then
  echo "$torch_env/bin/python3"
  exit 0
fi

# Configure (every REQUIRED find_package of CMakeLists.txt), build and the demo.
demo_packages=(
  g++ cmake make ninja-build pkg-config git ccache
  # the environment torch goes into, and the headers the Python module builds with
  python3 python3-venv python3-dev
  # communication (libgloo-dev: see src/comm/gloo/CMakeLists.txt)
  libopenmpi-dev openmpi-bin libgloo-dev
  # CLI, JSON, crypto, HTTP, images, metrics endpoints (prometheus-cpp)
  libcli11-dev nlohmann-json3-dev libssl-dev libcurl4-openssl-dev libjpeg62-turbo-dev libpng-dev zlib1g-dev
  libdeflate-dev prometheus-cpp-dev
  # the tests' framework is found at configure time (the same build folder serves make test)
  libgtest-dev libgmock-dev
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
  # offline checks of the deploy recipes (scripts/check-deploy.sh)
  python3-yaml python3-jsonschema shellcheck
  # shards in object storage (tests/objstore): nginx for HTTP(S), the AWS CLI and
  # botocore to cross-check, boto3 for scripts
  nginx awscli python3-botocore python3-boto3 openssl
)
if [ "$demo_only" = 1 ]; then
  packages=("${demo_packages[@]}")
fi

# pip inside an environment, bounded: a stalled download fails instead of hanging.
# pip's note that torch names packages not installed is expected after the
# light install below, and left out.
pip_in() {
  local env=$1; shift
  timeout 900 "$env/bin/pip" install --quiet --disable-pip-version-check --no-input \
    --timeout 60 --retries 3 "$@" \
    2> >(grep -vE "dependency resolver does not currently take|^torch [^ ]+ requires .*which is not installed" >&2)
}

# A fresh environment at $1 (any half-built one from an interrupted run is removed).
new_env() {
  rm -rf "$1"
  mkdir -p "$(dirname "$1")"
  /usr/bin/python3 -m venv "$1"
}

# torch without the CUDA wheels it names that this machine already has under
# /usr/local/cuda (cuBLAS, cuDNN, cuFFT, cuSPARSE, ...; about 3 GB less to
# fetch and unpack): only the CUDA libraries that are missing there, or older
# there than torch needs, come from the index. On a machine without that
# toolkit, torch comes with every dependency it names. docs/python.md says
# what each way costs.
torch_env_install() {
  [ -f "$torch_env/.hpct-ready" ] && return 0
  [ "$(id -u)" -eq 0 ] || [ -w "$cache" ] || {
    echo "install-deps: $torch_env is missing; run as root (sudo $0) to create it" >&2; exit 1; }
  echo "install-deps: torch $torch_version into $torch_env"
  new_env "$torch_env"
  pip_in "$torch_env" --upgrade "pip>=23"
  if ldconfig -p | grep -q "libcublas.so.13 " && ldconfig -p | grep -q "libcudnn.so.9 "; then
    pip_in "$torch_env" --no-deps "torch==$torch_version"
    # torch's own requirements, as its wheel names them, less what the CUDA
    # toolkit here has (cuda-toolkit's libraries but cuFile, cuDNN) and what
    # only GPU code generation takes (triton, cuda-bindings).
    local reqs
    reqs=$("$torch_env/bin/python3" - <<'PY'
import importlib.metadata as md, re
for r in md.requires("torch") or []:
    spec, _, marker = r.partition(";")
    if "extra" in marker:
        continue
    spec = spec.strip()
    name = re.split(r"[\[<>=!~ ]", spec, maxsplit=1)[0].lower()
    if name in ("triton", "cuda-bindings") or name.startswith("nvidia-cudnn"):
        continue
    if name == "cuda-toolkit":
        spec = "cuda-toolkit[cufile]" + spec[spec.index("]") + 1:] if "]" in spec else spec
    print(spec)
PY
)
    # numpy with it: torch warns on import without it ("Failed to initialize
    # NumPy"), and every user's torch environment has it.
    # shellcheck disable=SC2086
    pip_in "$torch_env" $reqs numpy
  else
    pip_in "$torch_env" "torch==$torch_version" numpy
  fi
  "$torch_env/bin/python3" -c "import torch, torch.distributed as d; assert d.is_gloo_available()" || {
    echo "install-deps: torch $torch_version in $torch_env does not import; see the error above" >&2; exit 1; }
  touch "$torch_env/.hpct-ready"
}

# Beside torch: numpy for its tensor interop in the tests and examples; wheel
# and setuptools let `pip install --no-build-isolation ./python` build the
# package in this environment; pytest and packaging run Horovod's own test
# suite against hpctrain.torch (docs/python.md). Installed again whenever
# this list changes (the stamp holds it).
torch_env_extras() {
  local want="numpy wheel pytest packaging"
  [ "$(cat "$torch_env/.hpct-extras" 2>/dev/null)" = "$want" ] && return 0
  # shellcheck disable=SC2086
  pip_in "$torch_env" $want
  echo "$want" > "$torch_env/.hpct-extras"
}

# The tests' servers and parsers: moto's S3 server (it checks every SigV4
# signature once INITIAL_NO_AUTH_ACTION_COUNT is set; tests/objstore) and
# python-hcl2 (scripts/check-deploy.sh's Terraform check).
tools_env_install() {
  [ -f "$tools_env/.hpct-ready" ] && return 0
  echo "install-deps: the test servers (moto, python-hcl2) into $tools_env"
  new_env "$tools_env"
  pip_in "$tools_env" "moto[server]==5.2.1" "python-hcl2==7.3.1" "boto3" "pyyaml"
  touch "$tools_env/.hpct-ready"
}

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# torch comes from the package index while apt installs the rest: the two
# downloads overlap (a new user's first run waits for the longer one only).
# apt first installs what the torch environment needs (python3, venv), then
# the rest; torch's install runs beside it, its lines prefixed "torch:".
torch_pid=
torch_beside_apt() {
  [ -f "$torch_env/.hpct-ready" ] && return 0
  ( torch_env_install && torch_env_extras ) > >(sed -u 's/^/torch: /') 2>&1 &
  torch_pid=$!
}
torch_join() {
  [ -n "$torch_pid" ] || return 0
  if ! wait "$torch_pid"; then
    echo "install-deps: torch $torch_version could not be installed into $torch_env (its lines above, prefixed torch:)" >&2
    exit 1
  fi
  torch_pid=
  echo "install-deps: torch ready"
}

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing packages: ${missing[*]}" >&2
    echo "install-deps: run as root (sudo $0) to install them" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  first=()
  for p in python3 python3-venv; do
    if [[ " ${missing[*]} " == *" $p "* ]]; then first+=("$p"); fi
  done
  [ ${#first[@]} -eq 0 ] || apt-get install -y -q --no-install-recommends "${first[@]}"
  # A bounded wait: a stuck apt or pip ends the run (timeout below, pip_in's own).
  torch_beside_apt
  if ! timeout 1800 apt-get install -y -q --no-install-recommends "${missing[@]}"; then
    [ -z "$torch_pid" ] || kill "$torch_pid" 2>/dev/null || true
    echo "install-deps: apt-get install failed (above); nothing of torch's was kept half-done" >&2
    exit 1
  fi
  echo "install-deps: Debian packages installed"
else
  echo "install-deps: all ${#packages[@]} Debian packages present"
fi

if [ -n "$torch_pid" ]; then
  torch_join
else
  torch_env_install
  torch_env_extras
fi
[ "$demo_only" = 1 ] || [ "$torch_only" = 1 ] || tools_env_install
echo "install-deps: done (torch: $torch_env/bin/python3)"
