#!/usr/bin/env bash
# The GPU check of hpctrain, for a machine with one or more NVIDIA GPUs and
# no network (docs/gpu.md). At most 10 minutes on 16 cores; each phase
# prints its elapsed time. From the repository root:
#
#   scripts/device-check.sh --prepare   # HERE, with network: what the GPU machine lacks,
#                                       # into .device-carry/ (git-ignored; about 45 MiB)
#   scripts/device-check.sh             # THERE: build, ctest -L gpu, train, compare, table
#
# With the device tool: run(command="bash scripts/device-check.sh",
# carry=[".device-carry"], timeout_s=600). What it does there:
#   1. unpacks the carried Debian packages (libraries and headers hpctrain
#      builds against: OpenMPI, gloo, CLI11, nlohmann-json, libcurl, ...)
#      into /tmp/hpct-root, never into /;
#   2. builds hpctrain, hpctrain-torch and the GPU tests with -j$(nproc)
#      against the torch that `python3 -c 'import torch'` finds there;
#   3. runs every GPU test (ctest -L gpu);
#   4. packs the carried Fashion-MNIST into shards, trains the CNN and the
#      MLP for STEPS steps on 1 GPU in float32 and with --amp bf16, and on 2
#      ranks sharing the GPU; prints samples/s, final loss and parameter CRC;
#   5. runs the plain PyTorch loop of the same model on the same GPU, and
#      DDP over NCCL on 2 GPUs where there are 2;
#   6. prints the table of the acceptance checks with pass/fail (also in
#      $OUT/device-check.md when OUT is set).
set -uo pipefail
cd "$(dirname "$0")/.."
CARRY=.device-carry
STEPS=${STEPS:-1500}
BATCH=${BATCH:-64}

if [[ "${1:-}" == "--prepare" ]]; then
  # Debian 12 packages the GPU image lacks (what CMakeLists.txt finds, and
  # the shared libraries those link to), downloaded, not installed.
  set -e
  mkdir -p "$CARRY/debs" "$CARRY/data"
  pkgs=(libopenmpi-dev libopenmpi3 openmpi-common libhwloc15 libhwloc-dev libevent-core-2.1-7 libevent-pthreads-2.1-7
        libpmix2 libfabric1 libucx0 libibverbs1 librdmacm1 libpsm2-2 libpsm-infinipath1 libnl-3-200 libnl-route-3-200
        libltdl7 libnuma1 libmunge2
        libgloo-dev libgloo0 libhiredis0.14 libcli11-dev nlohmann-json3-dev libgtest-dev
        libpng-dev libpng16-16 libjpeg62-turbo-dev libjpeg62-turbo libdeflate-dev libdeflate0
        libcurl4-openssl-dev libcurl4 libnghttp2-14 librtmp1 libssh2-1 libpsl5 libbrotli1 libldap-2.5-0 libsasl2-2
        libssl-dev zlib1g-dev prometheus-cpp-dev libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libprometheus-cpp-push1.0)
  (cd "$CARRY/debs" && apt-get download "${pkgs[@]}")
  cp /usr/share/datasets/fashion-mnist/*.gz "$CARRY/data/"
  du -sh "$CARRY"
  exit 0
fi

T0=$(date +%s)
PHASE_T=$T0
phase() {  # phase NAME: the time since the last phase, and in all
  local now; now=$(date +%s)
  echo "== [$((now - T0)) s total, last phase $((now - PHASE_T)) s] $*"
  PHASE_T=$now
}
OUTDIR=${OUT:-/tmp/hpct-device-check}
mkdir -p "$OUTDIR"
LOG=$OUTDIR/device-check.log
: > "$LOG"
declare -a ROWS=()
row() { ROWS+=("| $1 | $2 | $3 |"); }  # row CHECK RESULT PASS/FAIL

phase "facts: $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ)"
JOBS=$(nproc)
PY=$(command -v python3)
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader || echo "nvidia-smi failed"
GPUS=$("$PY" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' || { echo "python3 has no torch"; exit 1; }
echo "GPUs seen by torch: $GPUS"

phase "unpack carried packages"
ROOT=/tmp/hpct-root
if compgen -G "$CARRY/debs/*.deb" > /dev/null; then
  mkdir -p "$ROOT"
  for f in "$CARRY"/debs/*.deb; do dpkg -x "$f" "$ROOT"; done
  # CMake package files name /usr/...: point them into the prefix.
  grep -rlZ --include='*.cmake' '/usr/' "$ROOT/usr/lib" "$ROOT/usr/share" 2>/dev/null |
    xargs -0 -r sed -i "s#\([\"; ]\)/usr/#\1$ROOT/usr/#g"
  # Debian's OpenMPI keeps its libraries under openmpi/lib; the .so links are absolute.
  for l in $(find "$ROOT" -xtype l -name '*.so*'); do
    t=$(readlink "$l"); [[ "$t" == /* ]] && ln -sf "$ROOT$t" "$l"
  done
  ARCH=x86_64-linux-gnu
  export LD_LIBRARY_PATH="$ROOT/usr/lib/$ARCH:$ROOT/usr/lib/$ARCH/openmpi/lib:$ROOT/lib/$ARCH:${LD_LIBRARY_PATH:-}"
  export PKG_CONFIG_PATH="$ROOT/usr/lib/$ARCH/pkgconfig:$ROOT/usr/share/pkgconfig:${PKG_CONFIG_PATH:-}"
  export CPATH="$ROOT/usr/include:$ROOT/usr/include/$ARCH:${CPATH:-}"
  export LIBRARY_PATH="$ROOT/usr/lib/$ARCH:$ROOT/usr/lib/$ARCH/openmpi/lib:${LIBRARY_PATH:-}"
  export OPAL_PREFIX="$ROOT/usr/lib/$ARCH/openmpi"
  EXTRA_CMAKE=(-DCMAKE_PREFIX_PATH="$ROOT/usr" -DGloo_DIR="$ROOT/usr/share/cmake/Gloo"
               -DMPI_CXX_COMPILER="$ROOT/usr/bin/mpicxx.openmpi"
               -DMPI_CXX_LIB_NAMES=mpi_cxx\;mpi -DMPI_mpi_LIBRARY="$ROOT/usr/lib/$ARCH/libmpi.so"
               -DMPI_mpi_cxx_LIBRARY="$ROOT/usr/lib/$ARCH/libmpi_cxx.so"
               -DMPI_CXX_HEADER_DIR="$ROOT/usr/lib/$ARCH/openmpi/include")
else
  echo "no $CARRY/debs: building with what is installed"
  EXTRA_CMAKE=()
fi

phase "configure"
BUILD=build-device
command -v ninja >/dev/null || "$PY" -c 'import ninja' 2>/dev/null && export PATH="$PATH:$("$PY" -c 'import ninja, os; print(os.path.dirname(ninja.__file__))')/data/bin"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHPCT_TORCH_PYTHON="$PY" "${EXTRA_CMAKE[@]}" \
  >> "$LOG" 2>&1 || { tail -40 "$LOG"; row "build" "configure failed (see log)" FAIL; }

phase "build (-j $JOBS)"
# The CUDA plugin (train --device cuda loads it) and every test labelled gpu,
# each where this configuration has it (CUDA toolkit and NCCL found).
TARGETS=(hpctrain hpctrain-torch train_gpu_test train_device_test)
for t in hpctrain_cuda cuda_device_test comm_nccl_gpu_test comm_gpu_world_gpu_test; do
  if ninja -C "$BUILD" -t targets all 2>/dev/null | grep -q "^$t:"; then TARGETS+=("$t"); fi
done
echo "targets: ${TARGETS[*]}" >> "$LOG"
if cmake --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]}" \
    >> "$LOG" 2>&1; then
  row "build" "${TARGETS[*]}" pass
  BUILT=1
else
  tail -40 "$LOG"; row "build" "failed (see log)" FAIL; BUILT=0
fi
BIN=$BUILD/tools/hpctrain/hpctrain

if [[ $BUILT == 1 ]]; then
  phase "ctest -L gpu"
  if (cd "$BUILD" && ctest -L gpu --timeout 400 --output-on-failure) >> "$LOG" 2>&1; then
    row "ctest -L gpu" "$(grep -E 'tests passed' "$LOG" | tail -1)" pass
  else
    row "ctest -L gpu" "$(grep -E 'tests passed|tests failed' "$LOG" | tail -1)" FAIL
  fi

  phase "pack Fashion-MNIST"
  DATA=${CARRY}/data
  [[ -f $DATA/train-images-idx3-ubyte.gz ]] || DATA=/usr/share/datasets/fashion-mnist
  SH=/tmp/hpct-fm
  rm -rf "$SH"; mkdir -p "$SH"
  "$BIN" data pack --from fashion-mnist --dir "$DATA" --split train -q --max-count 10000 -o "$SH/train-%06d.tar" &&
    "$BIN" data pack --from fashion-mnist --dir "$DATA" --split test -q --max-count 10000 -o "$SH/test-%06d.tar"
  TRAIN="$SH/train-{000000..000005}.tar"

  train() {  # train NAME NP ARGS...: rank 0's summary line into $OUTDIR/NAME.json
    local name=$1 np=$2; shift 2
    local cmd=("$BIN" train --data "$TRAIN" --val "$SH/test-000000.tar" --batch "$BATCH" --max-steps "$STEPS"
               --epochs 10 --lr 0.05 --lr-schedule constant --threads 1 --data-threads 4 --seed 1
               --log-every 500 --progress lines "$@")
    if [[ $np -gt 1 ]]; then cmd=("$BIN" launch -np "$np" -- "${cmd[@]}"); fi
    timeout 240 "${cmd[@]}" > "$OUTDIR/$name.out" 2>&1
    grep '^{' "$OUTDIR/$name.out" | tail -1 > "$OUTDIR/$name.json"
    "$PY" - "$OUTDIR/$name.json" "$name" <<'PYEOF'
import json, sys
try:
    s = json.load(open(sys.argv[1]))
    print(f"{sys.argv[2]}: {s['train_samples_per_s']:.0f} samples/s, final loss {s['train_loss']:.4f}, "
          f"val accuracy {100 * s.get('val_accuracy', float('nan')):.2f}%, params crc32c {s['params_crc32c']}, "
          f"identical on every rank: {s['params_identical_across_ranks']}")
except Exception as e:
    print(f"{sys.argv[2]}: no summary ({e})")
PYEOF
  }
  field() { "$PY" -c "import json,sys; print(json.load(open(sys.argv[1])).get(sys.argv[2], ''))" "$1" "$2" 2>/dev/null; }

  for m in cnn mlp; do
    phase "train $m: 1 GPU float32, 1 GPU bf16, 2 ranks sharing the GPU (bf16)"
    train "$m-fp32" 1 --model "$m" --device cuda
    train "$m-bf16" 1 --model "$m" --device cuda --amp bf16
    train "$m-np2" 2 --model "$m" --device cuda --amp bf16
    phase "plain PyTorch loop of $m on the same GPU"
    "$PY" scripts/device_check_peer.py plain --model "$m" --data "$DATA" --steps "$STEPS" --batch "$BATCH" \
      > "$OUTDIR/$m-torch.json" 2>> "$LOG" && cat "$OUTDIR/$m-torch.json"
    if [[ $GPUS -ge 2 ]]; then
      "$PY" scripts/device_check_peer.py ddp --np 2 --model "$m" --data "$DATA" --steps "$STEPS" --batch "$BATCH" \
        > "$OUTDIR/$m-ddp.json" 2>> "$LOG" && cat "$OUTDIR/$m-ddp.json"
    fi
    ours=$(field "$OUTDIR/$m-fp32.json" train_samples_per_s)
    theirs=$(field "$OUTDIR/$m-torch.json" samples_per_s)
    ratio=$("$PY" -c "print(f'{float(\"$ours\") / float(\"$theirs\"):.3f}')" 2>/dev/null || echo "")
    ok=$("$PY" -c "print('pass' if float('$ratio') >= 0.95 else 'FAIL')" 2>/dev/null || echo FAIL)
    row "$m: samples/s, 1 GPU np 1, hpctrain / plain PyTorch >= 0.95" "${ours:-?} / ${theirs:-?} = ${ratio:-?}" "$ok"
    a32=$(field "$OUTDIR/$m-fp32.json" val_accuracy); a16=$(field "$OUTDIR/$m-bf16.json" val_accuracy)
    ok=$("$PY" -c "print('pass' if abs(float('$a16') - float('$a32')) * 100 <= 0.5 else 'FAIL')" 2>/dev/null || echo FAIL)
    row "$m: bf16 accuracy within 0.5 points of float32 ($STEPS steps)" "${a16:-?} vs ${a32:-?}" "$ok"
    same=$(field "$OUTDIR/$m-np2.json" params_identical_across_ranks)
    row "$m: 2 ranks sharing the GPU end with the same parameters" \
      "crc32c $(field "$OUTDIR/$m-np2.json" params_crc32c), identical: ${same:-?}" \
      "$([[ $same == True ]] && echo pass || echo FAIL)"
    if [[ $GPUS -ge 2 ]]; then
      row "$m: DDP over NCCL, 2 GPUs (for reference)" "$(field "$OUTDIR/$m-ddp.json" samples_per_s) samples/s" "-"
    fi
  done
fi

phase "done"
{
  echo "device check $(date -u +%Y-%m-%d), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), $(nproc) cores, $STEPS steps of batch $BATCH"
  echo
  echo "| check | result | pass |"
  echo "|---|---|---|"
  printf '%s\n' "${ROWS[@]}"
} | tee "$OUTDIR/device-check.md"
phase "total"
grep -q FAIL "$OUTDIR/device-check.md" && exit 1
exit 0
