"""Runs bench/why_peers.py for one planted fault (test python_why_peers).

The skip fault (rank 1 does not allreduce its metric at step 3) under DDP
with torch's gloo and its Flight Recorder, and under hpctrain: both jobs
must fail; hpctrain's launch summary and `hpctrain why` must name rank 1 and
say that it skipped the collective. What torch showed (torchrun's summary,
fr_trace's output, the dumps' last entries) is printed, not checked: only
that the run ended.

Environment (set by CTest): PYTHONPATH=build/python, HPCTRAIN (the CLI), PYTHON_FOR_TESTS.
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "bench", "why_peers.py")
PY = os.environ.get("PYTHON_FOR_TESTS", sys.executable)


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def main():
    out = "/tmp/hpct-why-peers-test-%d" % os.getpid()
    cmd = [PY, SCRIPT, "--hpctrain", os.environ["HPCTRAIN"], "--python-path", os.environ.get("PYTHONPATH", ""),
           "--faults", "skip", "--out", out, "--json"]
    print("+ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=400)
    print(p.stdout)
    subprocess.run(["rm", "-rf", out])
    rows = {r["system"]: r for r in (json.loads(l) for l in p.stdout.splitlines() if l.startswith("{"))}
    if sorted(rows) != ["hpctrain", "torch"]:
        fail("expected one line per system, got %s" % sorted(rows))
    torch_run = rows["torch"]
    if torch_run["exit_code"] in (0, None):
        fail("the torch job with a planted fault did not fail within its bound: %s" % torch_run["exit_code"])
    ours = rows["hpctrain"]
    if ours["exit_code"] in (0, None):
        fail("the hpctrain job with a planted fault did not fail within its bound: %s" % ours["exit_code"])
    for where, text in (("launch's summary", ours["launcher_output"]), ("hpctrain why", ours["analysis"])):
        if "rank 1 (host " not in text or ") skipped it: its operation #" not in text:
            fail("%s does not name rank 1 as the rank that skipped the collective:\n%s" % (where, text))
    print("OK: hpctrain named rank 1; torch's job ended with exit code %s" % torch_run["exit_code"])


if __name__ == "__main__":
    main()
