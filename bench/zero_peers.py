#!/usr/bin/python3
"""Sharded data parallel side by side: torch's ZeroRedundancyOptimizer and FSDP2
against hpctrain's DistributedOptimizer(shard=1|2), on one model and data.

  zero_peers.py compare --hpctrain build/tools/hpctrain/hpctrain --np 2 --repeats 1
      Runs every mode one after another (the order rotates every repeat, so
      drift hits each alike), each as `hpctrain launch -np N -- python3
      zero_peers.py rank --mode M ...` (torch.distributed over gloo finds the
      torchrun variables hpctrain launch exports). Prints every run's JSON
      line (with the 1-minute load average before it), then a summary line:
      the median samples/s of each mode and the ratios of hpctrain's stages to
      their peers (stage 1 : ZeroRedundancyOptimizer, stage 2 : FSDP2 without
      resharding; stage 3 : FSDP2 with resharding when the C++ path is there).
  zero_peers.py compare ... --netns [--rate 10gbit]
      The same with the ranks on 2 network-namespace hosts (scripts/
      netns-cluster.sh up 2, links capped at --rate), half the ranks on each,
      started over ssh; torch.distributed and our Gloo on their eth0. The
      hosts are torn down at the end.
  zero_peers.py rank --mode MODE ...
      One rank (started by the launcher); rank 0 prints the run's JSON line.

Modes:
  hvd-shard0        hpctrain.torch.DistributedOptimizer, no sharding (the baseline)
  hvd-shard1        DistributedOptimizer(shard=1): optimizer state sharded
  hvd-shard2        DistributedOptimizer(shard=2): also the gradients
  torch-zero        DDP + torch.distributed.optim.ZeroRedundancyOptimizer, gloo   (peer of stage 1)
  fsdp2             fully_shard(reshard_after_forward=False) per Linear and the model, gloo (peer of stage 2)
  fsdp2-reshard     fully_shard(reshard_after_forward=True), gloo                  (peer of stage 3)
The C++ stages join the run with --cpp-shard K,... (default 1,2,3): `hpctrain
bench train --shard K --optimizer OPT` on the same ranks, model, batch and
threads (its own backend: MPI with shared memory between local ranks; its
own sample order from the same data, so its loss is not the Python modes').

Each line has samples_per_s and step_ms (the slowest rank), peak_rss_bytes
(the largest VmHWM over the ranks: the process's peak resident memory,
Fashion-MNIST's 60000 images as float32, 188 MB, included),
optimizer_state_bytes (the largest over the ranks of the bytes of tensors
in the optimizer's state: a sharded one counts its own part) and
param_bytes (this rank's parameters after a step: FSDP2 with resharding
keeps its shards only).

Settings as bench/ddp_peer.py and bench/python_peers.py (the model and data of
`hpctrain bench train`): MLP 784-4096-4096-10 (20M parameters), batch 64 per
rank, Fashion-MNIST from /usr/share/datasets/fashion-mnist, 1 intra-op thread
per rank, OMP_NUM_THREADS=1, OPENBLAS_NUM_THREADS=1, 3 untimed warm-up steps.
The optimizer is Adam (lr 1e-3; its two moments are what sharding splits);
--optimizer sgd gives bench train's SGD lr 0.01 momentum 0.9. Needs
PYTHONPATH=build/python (compare sets it from --hpctrain's build directory).
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

MODES = ("hvd-shard0", "hvd-shard1", "hvd-shard2", "torch-zero", "fsdp2", "fsdp2-reshard")
# hpctrain's mode -> its peer, for the summary's ratios.
PEERS = {"hvd-shard1": "torch-zero", "hvd-shard2": "fsdp2", "cpp-shard1": "torch-zero",
         "cpp-shard2": "fsdp2", "cpp-shard3": "fsdp2-reshard"}


def peak_rss_bytes():
    """VmHWM of /proc/self/status: this process's peak resident memory."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def local_bytes(t):
    t = getattr(t, "_local_tensor", t)  # a DTensor (FSDP2): this rank's shard
    return t.numel() * t.element_size()


def optimizer_state_bytes(opt):
    import torch
    inner = getattr(opt, "_hvd_inner", None) or getattr(opt, "optim", None) or opt
    return sum(local_bytes(v) for st in inner.state.values() for v in st.values() if torch.is_tensor(v))


def make_optimizer(name, params, zero=False):
    import torch
    if name == "adam":
        cls, kw = torch.optim.Adam, {"lr": 1e-3}
    else:
        cls, kw = torch.optim.SGD, {"lr": 0.01, "momentum": 0.9}
    if zero:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        return ZeroRedundancyOptimizer(params, optimizer_class=cls, **kw)
    return cls(params, **kw)


def setup(args):
    """(model, optimizer, rank, size, reduce_max) for the mode."""
    import torch
    from ddp_peer import make_model
    torch.manual_seed(42)
    model = make_model(args.model)
    if args.mode.startswith("hvd-"):
        import hpctrain.torch as hvd
        hvd.init()
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        opt = hvd.DistributedOptimizer(make_optimizer(args.optimizer, model.parameters()),
                                       named_parameters=model.named_parameters(),
                                       shard=int(args.mode[-1]))
        return model, opt, hvd.rank(), hvd.size(), (
            lambda t: hvd.allreduce(t, op=hvd.Max, name="bench.max.%d" % next(_names)))
    import torch.distributed as dist
    dist.init_process_group("gloo")

    def reduce_max(t):
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t
    if args.mode == "torch-zero":
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(model)
        opt = make_optimizer(args.optimizer, model.parameters(), zero=True)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        reshard = args.mode == "fsdp2-reshard"
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh, reshard_after_forward=reshard)
        fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
        opt = make_optimizer(args.optimizer, model.parameters())
    return model, opt, dist.get_rank(), dist.get_world_size(), reduce_max


def _counter():
    k = 0
    while True:
        yield k
        k += 1


_names = _counter()


def rank_main(args):
    import torch
    from ddp_peer import DATA, read_idx, timed_steps
    from torch.utils.data.distributed import DistributedSampler

    torch.set_num_threads(args.threads)
    model, opt, rank, size, reduce_max = setup(args)
    images = torch.from_numpy(read_idx(f"{DATA}/train-images-idx3-ubyte.gz").copy())
    labels = torch.from_numpy(read_idx(f"{DATA}/train-labels-idx1-ubyte.gz").copy()).long()
    x_all = ((images.float() / 255.0 - 0.2860) / 0.3530).unsqueeze(1)
    order = list(DistributedSampler(range(len(x_all)), num_replicas=size, rank=rank, seed=0,
                                    drop_last=True))
    pos = 0

    def next_batch():
        nonlocal pos
        if pos + args.batch > len(order):
            pos = 0
        t = torch.tensor(order[pos:pos + args.batch])
        pos += args.batch
        return x_all[t], labels[t]

    seconds, loss = timed_steps(model, opt, next_batch, args.warmup, args.steps,
                                lambda: reduce_max(torch.zeros(1)))
    mine = torch.tensor([seconds, float(peak_rss_bytes()), float(optimizer_state_bytes(opt)),
                         float(sum(local_bytes(p) for p in model.parameters()))], dtype=torch.float64)
    worst = reduce_max(mine.clone())
    if rank == 0:
        elapsed = worst[0].item()
        print(json.dumps({"bench": "zero_peers", "mode": args.mode, "model": args.model, "np": size,
                          "optimizer": args.optimizer, "batch_per_rank": args.batch, "steps": args.steps,
                          "threads": args.threads,
                          "samples_per_s": size * args.batch * args.steps / elapsed,
                          "step_ms": elapsed / args.steps * 1e3, "final_loss": loss.item(),
                          "peak_rss_bytes": int(worst[1].item()),
                          "optimizer_state_bytes": int(worst[2].item()),
                          "param_bytes": int(worst[3].item())}), flush=True)


class Netns:
    """2 namespace hosts from scripts/netns-cluster.sh at a capped rate, torn down on close."""

    SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts",
                          "netns-cluster.sh")

    def __init__(self, name, rate):
        self.name = name
        out = subprocess.run([self.SCRIPT, "up", "2", name, "--rate", rate], capture_output=True, text=True,
                             timeout=180)
        if out.returncode != 0:
            raise SystemExit("netns-cluster.sh up failed:\n" + out.stdout + out.stderr)
        env = dict(l.split("=", 1) for l in out.stdout.splitlines() if l.startswith("NETNS_"))
        self.hosts = env["NETNS_HOSTS"].strip('"').split()
        self.key = env["NETNS_KEY"]

    def host_args(self, np):
        """The launcher's options for np ranks, half on each host."""
        per = [np - np // 2, np // 2]
        return ["-H", ",".join("%s:%d" % (h, k) for h, k in zip(self.hosts, per) if k), "-i", self.key,
                "--ssh-option", "StrictHostKeyChecking=no", "--ssh-option", "UserKnownHostsFile=/dev/null"]

    def close(self):
        subprocess.run([self.SCRIPT, "down", self.name], capture_output=True, timeout=120)


def cpp_shard_line(args, stage):
    """`hpctrain bench train --shard STAGE --optimizer OPT` on the same ranks, model and batch."""
    cmd = [args.hpctrain, "bench", "train", "--model", args.model, "--np", str(args.np),
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--batch", str(args.batch),
           "--threads", str(args.threads), "--shard", str(stage), "--optimizer", args.optimizer,
           "--timeout-s", str(args.timeout_s)]
    if args.net:
        cmd += args.net.host_args(args.np)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=args.timeout_s).stdout
    r = json.loads([l for l in out.splitlines() if l.startswith("{")][-1])
    r.update({"bench": "zero_peers", "mode": "cpp-shard%d" % stage})
    return r


def run_one(args, mode):
    load = os.getloadavg()[0]
    if mode.startswith("cpp-"):
        r = cpp_shard_line(args, int(mode[-1]))
    else:
        where = []
        if args.net:
            build = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(args.hpctrain))))
            where = args.net.host_args(args.np) + [
                "--env", "GLOO_SOCKET_IFNAME=eth0", "--env", "OMP_NUM_THREADS=1", "--env", "OPENBLAS_NUM_THREADS=1",
                "--env", "PYTHONPATH=" + os.path.join(build, "python")]
        cmd = [args.hpctrain, "launch", "-np", str(args.np), "--prefix", "none"] + where + ["--",
               sys.executable, os.path.abspath(__file__), "rank", "--mode", mode, "--model", args.model,
               "--steps", str(args.steps), "--batch", str(args.batch), "--threads", str(args.threads),
               "--optimizer", args.optimizer, "--warmup", str(args.warmup)]
        env = dict(os.environ)
        build = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(args.hpctrain))))
        env["PYTHONPATH"] = os.path.join(build, "python") + os.pathsep + env.get("PYTHONPATH", "")
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout_s)
        if p.returncode != 0:
            sys.exit("zero_peers: %s exited %d:\n%s%s" % (mode, p.returncode, p.stdout[-3000:],
                                                         p.stderr[-3000:]))
        r = json.loads([l for l in p.stdout.splitlines() if l.startswith("{")][-1])
    r["load1_before"] = round(load, 2)
    print(json.dumps(r), flush=True)
    return r


def compare(args):
    modes = [m for m in args.modes.split(",") if m]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        sys.exit("zero_peers: unknown mode(s) %s; choose from %s" % (",".join(unknown), ",".join(MODES)))
    modes += ["cpp-shard%s" % k for k in args.cpp_shard.split(",") if k]
    args.net = Netns("zp", args.rate) if args.netns else None
    try:
        compare_modes(args, modes)
    finally:
        if args.net:
            args.net.close()


def compare_modes(args, modes):
    speeds = {m: [] for m in modes}
    for rep in range(args.repeats):
        k = rep % len(modes)
        for mode in modes[k:] + modes[:k]:
            r = run_one(args, mode)
            if "samples_per_s" in r:
                speeds[mode].append(r["samples_per_s"])
    med = {m: statistics.median(v) for m, v in speeds.items() if v}
    summary = {"summary": "zero_peers", "model": args.model, "np": args.np, "repeats": args.repeats,
               "hosts": "netns %s" % args.rate if args.net else "local",
               **{m + "_samples_per_s": round(v, 1) for m, v in med.items()}}
    for ours, peer in PEERS.items():
        if ours in med and peer in med:
            summary["ratio_%s_to_%s" % (ours, peer)] = round(med[ours] / med[peer], 3)
    summary["load1_now"] = round(os.getloadavg()[0], 2)
    print(json.dumps(summary), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sp = p.add_subparsers(dest="cmd", required=True)
    r = sp.add_parser("rank")
    c = sp.add_parser("compare")
    for q in (r, c):
        q.add_argument("--steps", type=int, default=20)
        q.add_argument("--batch", type=int, default=64)
        q.add_argument("--threads", type=int, default=1)
        q.add_argument("--model", default="mlp", choices=("mlp", "cnn"))
        q.add_argument("--optimizer", default="adam", choices=("adam", "sgd"))
        q.add_argument("--warmup", type=int, default=3)
    r.add_argument("--mode", choices=MODES, required=True)
    c.add_argument("--np", type=int, default=2)
    c.add_argument("--modes", default=",".join(MODES))
    c.add_argument("--cpp-shard", default="1,2,3",
                   help="C++ stages to run with `hpctrain bench train --shard K` (empty: none)")
    c.add_argument("--repeats", type=int, default=1)
    c.add_argument("--netns", action="store_true", help="the ranks on 2 network-namespace hosts")
    c.add_argument("--rate", default="10gbit", help="with --netns: each host's link rate (tc tbf)")
    c.add_argument("--timeout-s", type=float, default=600)
    c.add_argument("--hpctrain", default="build/tools/hpctrain/hpctrain")
    args = p.parse_args()
    rank_main(args) if args.cmd == "rank" else compare(args)


if __name__ == "__main__":
    main()
