#!/usr/bin/python3
"""Two builds of the hpctrain Python package side by side, in pairs.

  python_before_after.py --before DIR --after DIR [--pairs 5] [--models mlp,cnn] [--modes hvd,ddp-hpctrain]

DIR is a build directory (DIR/python on PYTHONPATH, DIR/tools/hpctrain/hpctrain
launches). Each pair runs `python_peers.py rank` once with each build, the
order alternating from pair to pair, so a machine's drift reaches both alike;
prints every run's JSON line and, per model and mode, the median of the paired
ratios after/before (the figure to quote on a shared, noisy machine).
"""
import argparse
import json
import os
import statistics
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))


def run(build, mode, model, steps):
    env = dict(os.environ, PYTHONPATH=os.path.join(build, "python"), OMP_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1")
    cmd = [os.path.join(build, "tools", "hpctrain", "hpctrain"), "launch", "-np", "2", "--prefix", "none",
           "--", sys.executable, os.path.join(HERE, "python_peers.py"), "rank", "--mode", mode,
           "--model", model, "--steps", str(steps), "--batch", "64", "--threads", "1"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads([l for l in out.splitlines() if l.startswith("{")][-1])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before", required=True)
    p.add_argument("--after", required=True)
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--models", default="mlp,cnn")
    p.add_argument("--modes", default="hvd,ddp-hpctrain")
    p.add_argument("--steps", type=int, default=40)
    a = p.parse_args()
    builds = {"before": os.path.abspath(a.before), "after": os.path.abspath(a.after)}
    for model in a.models.split(","):
        for mode in a.modes.split(","):
            ratios, got = [], {"before": [], "after": []}
            for i in range(a.pairs):
                order = ["before", "after"] if i % 2 == 0 else ["after", "before"]
                pair = {}
                for which in order:
                    r = run(builds[which], mode, model, a.steps)
                    r["build"], r["load1"] = which, round(os.getloadavg()[0], 2)
                    print(json.dumps(r), flush=True)
                    pair[which] = r["samples_per_s"]
                    got[which].append(r["samples_per_s"])
                ratios.append(pair["after"] / pair["before"])
            print(json.dumps({"summary": model, "mode": mode, "pairs": a.pairs,
                              "before_median": round(statistics.median(got["before"]), 1),
                              "after_median": round(statistics.median(got["after"]), 1),
                              "median_paired_ratio_after_to_before": round(statistics.median(ratios), 3),
                              "ratios": [round(x, 3) for x in ratios]}), flush=True)


if __name__ == "__main__":
    main()
