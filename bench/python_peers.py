#!/usr/bin/python3
"""Python training side by side: DDP over gloo, DDP over the hpctrain backend,
and hpctrain.torch's (Horovod-style) DistributedOptimizer.

  python_peers.py compare --hpctrain build/tools/hpctrain/hpctrain --models mlp,cnn --np 2 --repeats 3
      For each model and repeat, runs the three modes one after another (the
      order rotates every repeat, so drift hits each alike), every one as
      `hpctrain launch -np N -- python3 python_peers.py rank --mode M ...`
      (the same launcher for all: DDP over gloo finds torchrun's variables
      that hpctrain launch exports). Prints every run's JSON line (with the
      1-minute load average before it), then per model the median samples/s
      of each mode and the ratios to DDP over gloo.
  python_peers.py rank --mode ddp-gloo|ddp-hpctrain|hvd --model mlp ...
      One rank (started by the launcher); rank 0 prints the run's JSON line.

Settings as in bench/ddp_peer.py and shared/notes/peers.md: 1 intra-op thread
per rank, OPENBLAS_NUM_THREADS=1, batch 64 per rank, Fashion-MNIST from
/usr/share/datasets/fashion-mnist, SGD lr 0.01 momentum 0.9, 3 untimed
warm-up steps, the time of the slowest rank. Needs PYTHONPATH=build/python
(compare sets it from --hpctrain's build directory).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.dont_write_bytecode = True  # ddp_peer is imported from bench/: leave no __pycache__ there
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

MODES = ("ddp-gloo", "ddp-hpctrain", "hvd")


def rank_main(args):
    import torch
    from ddp_peer import DATA, make_model, read_idx, timed_steps
    from torch.utils.data.distributed import DistributedSampler

    torch.set_num_threads(args.threads)
    if args.mode == "hvd":
        import hpctrain.torch as hvd
        hvd.init()
        rank, size = hvd.rank(), hvd.size()
    else:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        if args.mode == "ddp-hpctrain":
            import hpctrain.torch  # noqa: F401  (the one changed line of a DDP script)
        dist.init_process_group("gloo" if args.mode == "ddp-gloo" else "hpctrain")
        rank, size = dist.get_rank(), dist.get_world_size()
    images = torch.from_numpy(read_idx(f"{DATA}/train-images-idx3-ubyte.gz").copy())
    labels = torch.from_numpy(read_idx(f"{DATA}/train-labels-idx1-ubyte.gz").copy()).long()
    x_all = ((images.float() / 255.0 - 0.2860) / 0.3530).unsqueeze(1)
    torch.manual_seed(42)
    model = make_model(args.model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    if args.mode == "hvd":
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    else:
        model = DDP(model)
    sampler = DistributedSampler(range(len(x_all)), num_replicas=size, rank=rank, seed=0, drop_last=True)
    order = list(sampler)
    pos = 0

    def next_batch():
        nonlocal pos
        if pos + args.batch > len(order):
            pos = 0
        t = torch.tensor(order[pos:pos + args.batch])
        pos += args.batch
        return x_all[t], labels[t]

    def slowest(seconds):
        t = torch.tensor([seconds])
        if args.mode == "hvd":
            return hvd.allreduce(t, op=hvd.Max, name="bench.elapsed").item()
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.item()

    seconds, loss = timed_steps(model, opt, next_batch, args.warmup, args.steps, lambda: slowest(0.0))
    elapsed = slowest(seconds)
    if rank == 0:
        print(json.dumps({"bench": "python_train", "mode": args.mode, "model": args.model, "np": size,
                          "batch_per_rank": args.batch, "steps": args.steps, "threads": args.threads,
                          "samples_per_s": size * args.batch * args.steps / elapsed,
                          "step_ms": elapsed / args.steps * 1e3, "final_loss": loss.item()}), flush=True)


def run_one(args, mode, model):
    load = os.getloadavg()[0]
    cmd = [args.hpctrain, "launch", "-np", str(args.np), *args.launch_arg, "--prefix", "none", "--",
           sys.executable, os.path.abspath(__file__), "rank", "--mode", mode, "--model", model,
           "--steps", str(args.steps), "--batch", str(args.batch), "--threads", str(args.threads)]
    env = dict(os.environ)
    build = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(args.hpctrain))))
    env["PYTHONPATH"] = os.path.join(build, "python") + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    line = [l for l in out.splitlines() if l.startswith("{")][-1]
    r = json.loads(line)
    r["load1_before"] = round(load, 2)
    print(json.dumps(r), flush=True)
    return r


def compare(args):
    results = {}
    for model in args.models.split(","):
        for rep in range(args.repeats):
            k = rep % len(MODES)
            for mode in MODES[k:] + MODES[:k]:
                r = run_one(args, mode, model)
                results.setdefault(model, {m: [] for m in MODES})[mode].append(r["samples_per_s"])
    for model, r in results.items():
        med = {m: statistics.median(v) for m, v in r.items()}
        print(json.dumps({"summary": model, "np": args.np, "repeats": args.repeats,
                          **{m + "_samples_per_s": round(v, 1) for m, v in med.items()},
                          "ratio_hvd_to_ddp_gloo": round(med["hvd"] / med["ddp-gloo"], 3),
                          "ratio_ddp_hpctrain_to_ddp_gloo": round(med["ddp-hpctrain"] / med["ddp-gloo"], 3),
                          "load1_now": round(os.getloadavg()[0], 2)}), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sp = p.add_subparsers(dest="cmd", required=True)
    r = sp.add_parser("rank")
    c = sp.add_parser("compare")
    for q in (r, c):
        q.add_argument("--steps", type=int, default=30)
        q.add_argument("--batch", type=int, default=64)
        q.add_argument("--threads", type=int, default=1)
    r.add_argument("--mode", choices=MODES, required=True)
    r.add_argument("--model", default="mlp")
    r.add_argument("--warmup", type=int, default=3)
    c.add_argument("--np", type=int, default=2)
    c.add_argument("--models", default="mlp,cnn")
    c.add_argument("--repeats", type=int, default=3)
    c.add_argument("--hpctrain", default="build/tools/hpctrain/hpctrain")
    c.add_argument("--launch-arg", action="append", default=[],
                   help="extra argument for hpctrain launch, e.g. --launch-arg=--hostfile=hosts")
    args = p.parse_args()
    rank_main(args) if args.cmd == "rank" else compare(args)


if __name__ == "__main__":
    main()
