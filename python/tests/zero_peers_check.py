"""Runs bench/zero_peers.py compare at 2 ranks for a few steps (test python_zero_peers).

A part of the modes, to keep the test short (each is a job of its own):
the unsharded baseline, hpctrain.torch's stage 2, ZeroRedundancyOptimizer,
FSDP2 with resharding, and the C++ stages 1 and 3 (`hpctrain bench train
--shard K`). Every mode prints one JSON line that is plausible: samples/s
above 0, the same loss from the same start and data within float rounding
(the Python modes; the C++ side reads its own sample order), a peak
resident memory, and optimizer state that shows the sharding (about half
of the unsharded state per rank, ZeroRedundancyOptimizer never more than
all of it); then a summary with the ratios to the peers.

Environment (set by CTest): PYTHONPATH=build/python, HPCTRAIN (the CLI), PYTHON_FOR_TESTS.
"""
import json
import math
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "bench", "zero_peers.py")
PY = os.environ.get("PYTHON_FOR_TESTS", sys.executable)
PY_MODES = ["hvd-shard0", "hvd-shard2", "torch-zero", "fsdp2-reshard"]


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def main():
    cmd = [PY, SCRIPT, "compare", "--hpctrain", os.environ["HPCTRAIN"], "--np", "2", "--model", "cnn",
           "--steps", "3", "--warmup", "1", "--timeout-s", "200",
           "--modes", ",".join(PY_MODES), "--cpp-shard", "1,3"]
    print("+ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=500)
    print(p.stdout)
    if p.returncode != 0:
        fail("zero_peers.py exited %d" % p.returncode)
    lines = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    rows = {r["mode"]: r for r in lines if r.get("bench") == "zero_peers"}
    summary = [r for r in lines if r.get("summary") == "zero_peers"]
    expected = PY_MODES
    missing = [m for m in expected + ["cpp-shard1", "cpp-shard3"] if m not in rows]
    if missing or len(summary) != 1:
        fail("missing rows %s or summary (%d)" % (missing, len(summary)))
    loss0 = rows["hvd-shard0"]["final_loss"]
    full = rows["hvd-shard0"]["optimizer_state_bytes"]
    for m in expected:
        r = rows[m]
        if not (r["samples_per_s"] > 0 and r["np"] == 2 and r["peak_rss_bytes"] > 100e6):
            fail("%s: implausible row %s" % (m, r))
        if not math.isclose(r["final_loss"], loss0, rel_tol=1e-3):
            fail("%s: loss %g after the same steps as hvd-shard0's %g" % (m, r["final_loss"], loss0))
    for m in ("hvd-shard2", "fsdp2-reshard", "cpp-shard1", "cpp-shard3"):
        got = rows[m]["optimizer_state_bytes"]
        if not 0.45 * full <= got <= 0.55 * full:
            fail("%s: %d bytes of optimizer state per rank, not about half of %d" % (m, got, full))
    if not 0 < rows["torch-zero"]["optimizer_state_bytes"] <= full:
        fail("torch-zero: optimizer state %d of %d" % (rows["torch-zero"]["optimizer_state_bytes"], full))
    for k in (1, 3):
        r = rows["cpp-shard%d" % k]
        if not (r.get("samples_per_s", 0) > 0 and r.get("shard") == k and r.get("optimizer") == "adam"):
            fail("cpp-shard%d: implausible row %s" % (k, r))
    for ratio in ("ratio_cpp-shard1_to_torch-zero", "ratio_cpp-shard3_to_fsdp2-reshard"):
        if not summary[0].get(ratio, 0) > 0:
            fail("summary lacks %s: %s" % (ratio, summary[0]))
    print("zero_peers: %d rows and the summary, plausible" % len(rows))


if __name__ == "__main__":
    main()
