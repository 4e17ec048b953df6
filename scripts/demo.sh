#!/usr/bin/env bash
# The demo job. Until `hpctrain train` lands, it is a 2-rank allreduce over
# both backends (MPI shared memory and Gloo TCP), each timed next to the raw
# library call.
set -euo pipefail
build=${1:-build}
bin="$build/tools/hpctrain/hpctrain"
[ -x "$bin" ] || { echo "demo: $bin is missing; run 'make build' first" >&2; exit 1; }
echo "demo: 2 ranks on this host, allreduce of float32, MPI and Gloo"
"$bin" bench comm --backend all --np 2 --sizes 64K,1M,16M --iters 20 | tee "$build/demo-comm.jsonl"
python3 - "$build/demo-comm.jsonl" <<'PY'
import json, sys
print(f"{'backend':8} {'bytes':>10} {'ours us':>10} {'raw us':>10} {'ratio':>6} {'busbw GB/s':>10}")
for line in open(sys.argv[1]):
    j = json.loads(line)
    print(f"{j['backend']:8} {j['bytes']:>10} {j['time_us']:>10.1f} {j.get('raw_time_us', 0):>10.1f} "
          f"{j.get('overhead_ratio', 0):>6.3f} {j['busbw_GBps']:>10.3f}")
PY
