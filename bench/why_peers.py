#!/usr/bin/env python3
"""The same planted faults under DDP with torch.distributed's gloo backend
and its Flight Recorder, and under hpctrain with its flight record, side by
side (docs/why.md).

The training loop (one script, both systems): a DDP model whose gradients
DDP allreduces in backward, then the loop's own metric averaged across the
ranks with dist.all_reduce, where the fault is planted:

  skip:   rank 1 does not allreduce its metric at step 3;
  shape:  rank 2's metric has 11 elements, not 10, at step 2.

torch: `torchrun --nproc-per-node 3` and the gloo backend, with the Flight
Recorder on (TORCH_FR_BUFFER_SIZE) and dumping to TORCH_FR_DUMP_TEMP_FILE;
then its analyzer, `python -m torch.distributed.flight_recorder.fr_trace`,
over the dumps. hpctrain: `hpctrain launch -np 3` and the "hpctrain"
backend (import hpctrain.torch), the flight record in HPCT_JOB_DIR, launch's
`why:` summary and `hpctrain why JOBDIR`. Both wait at most 4 s for a
collective (gloo: init_process_group's timeout; hpctrain: HPCT_STALL_ABORT_S;
hpctrain's ranks meet within HPCT_TIMEOUT_S, 60 s), with one thread per rank.

Usage:
  why_peers.py --hpctrain PATH [--python-path DIR] [--faults skip,shape]
               [--systems torch,hpctrain] [--out DIR] [--json]
Prints, per fault, what each system showed the user; with --json, one JSON
line per fault and system as well. Exit 0 when every run ended (a planted
fault must make each job fail: a run that succeeded exits 1).

Rank mode (what both launchers start): why_peers.py rank BACKEND FAULT
"""
import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import time

STEPS = 6
TIMEOUT_S = 4  # a collective's bound
START_TIMEOUT_S = 60  # the ranks' meeting
FAULT_RANK = {"skip": (1, 3), "shape": (2, 2)}  # fault -> (rank, step)


def rank_main(backend, fault):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    phase = lambda name, step: None  # noqa: E731
    if backend == "hpctrain":
        import hpctrain.torch as hvd  # registers the backend

        phase = hvd.set_phase
    # The default group only: fr_trace knows no other (a new_group's entries
    # make it fail with a KeyError). hpctrain's ranks meet within
    # HPCT_TIMEOUT_S (START_TIMEOUT_S) and its collectives stall out after
    # HPCT_STALL_ABORT_S (TIMEOUT_S).
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=TIMEOUT_S))
    group = None
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(20, 10), process_group=group)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    fault_rank, fault_step = FAULT_RANK[fault]
    try:
        for step in range(STEPS):
            here = rank == fault_rank and step == fault_step
            phase("data", step)
            x = torch.randn(8, 20)
            phase("forward", step)
            loss = model(x).square().mean()
            phase("backward", step)
            loss.backward()  # DDP allreduces the gradients
            phase("optimizer", step)
            opt.step()
            opt.zero_grad()
            metric = torch.ones(11 if (here and fault == "shape") else 10)
            if not (here and fault == "skip"):
                dist.all_reduce(metric, group=group)  # the loop's metric, averaged across ranks
            print(f"rank {rank} step {step} done", flush=True)
    except Exception as e:  # what the rank's user sees
        print(f"rank {rank}: {type(e).__name__}: {str(e)[:600]}", file=sys.stderr, flush=True)
        if backend == "gloo":
            # The recorder dumps by itself on a timeout only; a failed
            # collective is dumped here, with the API torch offers for it.
            try:
                torch._C._distributed_c10d._dump_fr_trace_file(rank)
            except Exception as d:
                print(f"rank {rank}: no Flight Recorder dump: {d}", file=sys.stderr, flush=True)
        sys.exit(1)
    dist.destroy_process_group()


def run(cmd, env, timeout_s):
    start = time.monotonic()
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=timeout_s)
        code, out = p.returncode, p.stdout
    except subprocess.TimeoutExpired as e:
        code, out = None, (e.stdout or b"").decode(errors="replace") + f"\n[timed out after {timeout_s} s]"
    return code, out, time.monotonic() - start


def base_env():
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    return env


def run_torch(fault, out_dir):
    dump = os.path.join(out_dir, "torch-" + fault)
    shutil.rmtree(dump, ignore_errors=True)
    os.makedirs(dump)
    env = base_env()
    env.update(TORCH_FR_BUFFER_SIZE="2000", TORCH_FR_DUMP_TEMP_FILE=os.path.join(dump, "rank_"),
               TORCH_FR_DUMP_ON_TIMEOUT="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3",
           os.path.abspath(__file__), "rank", "gloo", fault]
    code, out, seconds = run(cmd, env, 120)
    files = sorted(os.listdir(dump))
    analysis = "(no Flight Recorder dump was written)"
    if files:
        fr_trace = [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace"]
        _, analysis, _ = run(fr_trace + [dump], base_env(), 60)
        if "Missing dump files" in analysis:  # what it offers then
            _, more, _ = run(fr_trace + ["--allow-incomplete-ranks", dump], base_env(), 60)
            analysis += "\n---- fr_trace --allow-incomplete-ranks\n" + more
    return {"system": "torch", "fault": fault, "exit_code": code, "seconds": round(seconds, 1),
            "launcher_output": out, "dumps": files, "analysis": analysis, "last_entries": last_entries(dump)}


def last_entries(dump, n=3):
    """Each dump's last n entries, as a user reading the pickles finds them."""
    import pickle

    lines = []
    for f in sorted(os.listdir(dump)):
        with open(os.path.join(dump, f), "rb") as fh:
            entries = pickle.load(fh)["entries"]
        lines.append(f"{f}: {len(entries)} entries, the last {min(n, len(entries))}:")
        for e in entries[-n:]:
            lines.append(f"  #{e['collective_seq_id']} {e['profiling_name']} {e['input_sizes']} "
                         f"{e['input_dtypes']} state {e['state']}")
    return "\n".join(lines)


def run_hpctrain(fault, out_dir, hpctrain, python_path):
    job = os.path.join(out_dir, "hpctrain-" + fault)
    shutil.rmtree(job, ignore_errors=True)
    env = base_env()
    env.update(HPCT_JOB_DIR=job, HPCT_TIMEOUT_S=str(START_TIMEOUT_S), HPCT_STALL_ABORT_S=str(TIMEOUT_S))
    if python_path:
        env["PYTHONPATH"] = python_path + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [hpctrain, "launch", "-np", "3", "--grace", "1", "--", sys.executable, os.path.abspath(__file__),
           "rank", "hpctrain", fault]
    code, out, seconds = run(cmd, env, 120)
    _, why, _ = run([hpctrain, "why", job], env, 60)
    return {"system": "hpctrain", "fault": fault, "exit_code": code, "seconds": round(seconds, 1),
            "launcher_output": out, "analysis": why}


def show(r):
    print(f"==== {r['system']}, fault {r['fault']}: exit code {r['exit_code']}, {r['seconds']} s")
    print("---- the launcher's output")
    print(r["launcher_output"].rstrip())
    print("---- " + ("fr_trace over the Flight Recorder dumps " + str(r["dumps"]) if r["system"] == "torch"
                     else "hpctrain why JOBDIR"))
    print(r["analysis"].rstrip())
    if r.get("last_entries"):
        print("---- the dumps' last entries")
        print(r["last_entries"])
    print()


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "rank":
        rank_main(sys.argv[2], sys.argv[3])
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hpctrain", required=True, help="the hpctrain binary")
    ap.add_argument("--python-path", default="", help="where the hpctrain Python package is (build/python)")
    ap.add_argument("--faults", default="skip,shape")
    ap.add_argument("--systems", default="torch,hpctrain")
    ap.add_argument("--out", default="/tmp/hpct-why-peers")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    ok = True
    for fault in a.faults.split(","):
        if fault not in FAULT_RANK:
            ap.error(f"--faults: unknown fault '{fault}' (skip, shape)")
        for system in a.systems.split(","):
            if system == "torch":
                r = run_torch(fault, a.out)
            elif system == "hpctrain":
                r = run_hpctrain(fault, a.out, a.hpctrain, a.python_path)
            else:
                ap.error(f"--systems: unknown system '{system}' (torch, hpctrain)")
            show(r)
            if a.json:
                print(json.dumps({"bench": "why_peers", **r}))
            ok = ok and r["exit_code"] not in (0, None)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
