#!/usr/bin/python3
"""The PyTorch DDP peer of `hpctrain bench train`, and the side-by-side run.

  ddp_peer.py ddp --model mlp --np 2 --steps 50 --batch 64
      PyTorch DistributedDataParallel (gloo backend, the torch of the python3 that runs this),
      the same model, data, optimizer and timing as `hpctrain bench train`;
      prints one JSON line like it.
  hpctrain launch -H h1:1,h2:1 --env GLOO_SOCKET_IFNAME=eth0 --env MASTER_ADDR=<h1's address> \
      --env MASTER_PORT=29555 -- python3 ddp_peer.py ddp-rank --model mlp --steps 50
      One DDP rank per process started by a launcher (rank and size from
      HPCT_RANK/HPCT_SIZE, RANK/WORLD_SIZE, OMPI_COMM_WORLD_* or SLURM_*):
      DDP across hosts, started the way hpctrain's ranks are; rank 0 prints
      the JSON line.
  Both take --hook none|fp16|powersgd:R[:START]: DDP's own comm hook
  (default_hooks.fp16_compress_hook, or powerSGD_hook with PowerSGDState(
  matrix_approximation_rank=R, start_powerSGD_iter=START, default max(2,
  --warmup))); --fp16-hook is --hook fp16. --evaluate adds the test set's
  accuracy after training; --max-samples N trains on the first N images only;
  --bucket-mb M sets DDP's bucket_cap_mb and its first bucket's size
  (dist._DEFAULT_FIRST_BUCKET_BYTES) to M MiB; --timeout-s bounds every collective (the process group's timeout) and every
  step (a watchdog: a hang in a hook ends the rank with its stacks);
  --result-file names where rank 0 writes its line; --log-dir DIR copies
  stderr (rank r's in ddp-rank mode) to DIR/stderr[.r], where a crash that
  Python cannot catch (a C++ abort in gloo) still leaves its text.
  ddp_peer.py compare --hpctrain build/tools/hpctrain/hpctrain --models mlp,cnn --np 2 --repeats 3
      Alternates hpctrain and DDP runs (so drift hits both), prints every run's
      JSON line, then per model the median samples/s of each and the ratio.

Pinned as in shared/notes/peers.md: 1 intra-op thread per rank,
OPENBLAS_NUM_THREADS=1, OMP_NUM_THREADS=1, batch 64 per rank, Fashion-MNIST
from /usr/share/datasets/fashion-mnist, SGD lr 0.01 momentum 0.9, 3 untimed
warm-up steps, time of the slowest rank.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    import gzip
    import numpy as np
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def make_model(name):
    import torch.nn as nn
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 4096), nn.ReLU(), nn.Linear(4096, 4096),
                             nn.ReLU(), nn.Linear(4096, 10))
    if name == "cnn":
        return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
    raise SystemExit(f"unknown model {name}")


def parse_hook(spec):
    """none, fp16 or powersgd:R[:START] -> (kind, rank, start or None)."""
    if spec in ("none", "fp16"):
        return spec, 0, None
    parts = spec.split(":")
    if parts[0] == "powersgd" and len(parts) in (2, 3) and all(p.isdigit() for p in parts[1:]) \
            and int(parts[1]) >= 1:
        return "powersgd", int(parts[1]), int(parts[2]) if len(parts) == 3 else None
    sys.exit(f"--hook {spec}: choose none, fp16 or powersgd:RANK[:START] (RANK >= 1)")


def register_hook(model, args):
    kind, rank, start = parse_hook(args.hook)
    if kind == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif kind == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
        # DDP refuses a start below 2 with error feedback and warm start on.
        state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=rank,
            start_powerSGD_iter=start if start is not None else max(2, args.warmup))
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)


def test_accuracy(model, rank, size):
    """Fashion-MNIST's test set, split over the ranks; (accuracy, loss) over all of it."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    images = torch.from_numpy(read_idx(f"{DATA}/t10k-images-idx3-ubyte.gz").copy())
    labels = torch.from_numpy(read_idx(f"{DATA}/t10k-labels-idx1-ubyte.gz").copy()).long()
    x = ((images.float() / 255.0 - 0.2860) / 0.3530).unsqueeze(1)[rank::size]
    y = labels[rank::size]
    model.eval()
    correct = loss = 0.0
    with torch.no_grad():
        for i in range(0, len(x), 1000):
            out = model(x[i:i + 1000])
            loss += F.cross_entropy(out, y[i:i + 1000], reduction="sum").item()
            correct += (out.argmax(1) == y[i:i + 1000]).sum().item()
    t = torch.tensor([correct, loss, float(len(y))], dtype=torch.float64)
    dist.all_reduce(t)
    return t[0].item() / t[2].item(), t[1].item() / t[2].item()


def timed_steps(model, opt, next_batch, warmup, steps, barrier, on_step=lambda: None):
    """Runs warmup untimed steps, barrier(), then steps timed ones (on_step()
    before each); returns this rank's seconds and the last loss."""
    import time
    import torch.nn.functional as F
    loss = None
    for s in range(warmup + steps):
        on_step()
        if s == warmup:
            barrier()
            start = time.perf_counter()
        x, y = next_batch()
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    return time.perf_counter() - start, loss


def copy_stderr(path):
    """From now on fd 2 (and that of every child) goes to stderr and to path."""
    tee = subprocess.Popen(["tee", "-a", path], stdin=subprocess.PIPE, stdout=sys.stderr.fileno())
    os.dup2(tee.stdin.fileno(), 2)
    tee.stdin.close()


class StallWatchdog:
    """Ends this rank when it makes no progress for `seconds`.

    DDP's PowerSGD hook can hang rather than abort when the ranks' collectives
    get out of step (seen on the MLP over a fast link), and gloo's timeout does
    not end that wait. faulthandler's own thread (it needs no GIL, which a
    hung rank may hold) then writes "Timeout (H:MM:SS)!" and every thread's
    stack on stderr, and exits with code 1.
    """

    def __init__(self, seconds):
        self.seconds = seconds
        self.progress()

    def progress(self):
        import faulthandler
        faulthandler.dump_traceback_later(self.seconds, exit=True)


def ddp_rank(rank, args, port, out, master="127.0.0.1"):
    import datetime
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data.distributed import DistributedSampler

    torch.set_num_threads(args.threads)
    os.environ["MASTER_ADDR"] = master
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=args.np,
                            timeout=datetime.timedelta(seconds=args.timeout_s))
    watchdog = StallWatchdog(args.timeout_s)
    images = torch.from_numpy(read_idx(f"{DATA}/train-images-idx3-ubyte.gz").copy())
    labels = torch.from_numpy(read_idx(f"{DATA}/train-labels-idx1-ubyte.gz").copy()).long()
    if args.max_samples > 0:
        images, labels = images[:args.max_samples], labels[:args.max_samples]
    x_all = ((images.float() / 255.0 - 0.2860) / 0.3530).unsqueeze(1)
    torch.manual_seed(42)
    if args.bucket_mb > 0:
        # DDP's documented knob for its first bucket (1 MiB by default), and
        # bucket_cap_mb for the others: one bucket when both exceed the model.
        dist._DEFAULT_FIRST_BUCKET_BYTES = int(args.bucket_mb * 1024 * 1024)
        model = DDP(make_model(args.model), bucket_cap_mb=args.bucket_mb)
    else:
        model = DDP(make_model(args.model))
    register_hook(model, args)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    sampler = DistributedSampler(range(len(x_all)), num_replicas=args.np, rank=rank, seed=0,
                                 drop_last=True)
    epoch = 0
    it = iter(list(sampler))

    def next_batch():
        nonlocal it, epoch
        idx = []
        while len(idx) < args.batch:
            try:
                idx.append(next(it))
            except StopIteration:
                epoch += 1
                sampler.set_epoch(epoch)
                it = iter(list(sampler))
                idx = []
        t = torch.tensor(idx)
        return x_all[t], labels[t]

    seconds, loss = timed_steps(model, opt, next_batch, args.warmup, args.steps, dist.barrier,
                                watchdog.progress)
    elapsed = torch.tensor([seconds])
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    watchdog.progress()
    accuracy = test_accuracy(model.module, rank, args.np) if args.evaluate else None
    if rank == 0:
        line = {"bench": "train", "impl": "pytorch-ddp", "torch": torch.__version__,
                "backend": "gloo", "model": args.model, "np": args.np,
                "batch_per_rank": args.batch, "steps": args.steps, "warmup": args.warmup,
                "threads": args.threads, "data": "fashion-mnist",
                "train_samples": len(x_all), "hook": args.hook,
                "bucket_mb": args.bucket_mb if args.bucket_mb > 0 else "default",
                "compression": "none" if args.hook == "none" else args.hook.split(":")[0] + "-hook",
                "samples_per_s": args.np * args.batch * args.steps / elapsed.item(),
                "step_ms": elapsed.item() / args.steps * 1e3,
                "final_loss": loss.item()}
        if accuracy is not None:
            line["test_accuracy"], line["test_loss"] = accuracy
        with open(out, "w") as f:
            json.dump(line, f)
    dist.destroy_process_group()


def launched_rank(args):
    """One rank of a job some launcher started: rank and size from its variables."""
    env = os.environ
    for r, n in (("HPCT_RANK", "HPCT_SIZE"), ("RANK", "WORLD_SIZE"),
                 ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS")):
        if r in env and n in env:
            rank, size = int(env[r]), int(env[n])
            break
    else:
        sys.exit("ddp-rank: no rank variables (start it with hpctrain launch, mpirun or srun)")
    if "MASTER_ADDR" not in env or "MASTER_PORT" not in env:
        sys.exit("ddp-rank: set MASTER_ADDR and MASTER_PORT (rank 0's host and a free port)")
    if size > 1 and "GLOO_SOCKET_IFNAME" not in env:
        print("ddp-rank: GLOO_SOCKET_IFNAME is not set; across hosts gloo may bind the wrong "
              "interface", file=sys.stderr)
    args.np = size
    if args.log_dir:
        copy_stderr(os.path.join(args.log_dir, f"stderr.{rank}"))
    import tempfile
    with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
        ddp_rank(rank, args, int(env["MASTER_PORT"]), tmp.name, env["MASTER_ADDR"])
        if rank == 0:
            with open(tmp.name) as f:
                line = f.read()
            if args.result_file:  # the caller prints it
                with open(args.result_file, "w") as f:
                    f.write(line + "\n")
            else:
                print(line, flush=True)


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ddp(args):
    import tempfile
    import torch.multiprocessing as mp
    if args.log_dir:
        copy_stderr(os.path.join(args.log_dir, "stderr"))
    with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
        mp.spawn(ddp_rank, args=(args, free_port(), tmp.name), nprocs=args.np, join=True)
        with open(tmp.name) as f:
            result = json.load(f)
    if args.result_file:  # the caller prints it
        with open(args.result_file, "w") as f:
            f.write(json.dumps(result) + "\n")
    else:
        print(json.dumps(result), flush=True)
    return result


def run_hpctrain(binary, model, np_, steps, batch, threads):
    cmd = [binary, "bench", "train", "--model", model, "--np", str(np_), "--steps", str(steps),
           "--batch", str(batch), "--threads", str(threads), "--warmup", "3"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    line = [l for l in out.splitlines() if l.startswith("{")][-1]
    print(line, flush=True)
    return json.loads(line)


def compare(args):
    results = {}
    for model in args.models.split(","):
        for _ in range(args.repeats):
            h = run_hpctrain(args.hpctrain, model, args.np, args.steps, args.batch, args.threads)
            d = subprocess.run([sys.executable, __file__, "ddp", "--model", model, "--np",
                                str(args.np), "--steps", str(args.steps), "--batch",
                                str(args.batch), "--threads", str(args.threads)],
                               check=True, capture_output=True, text=True).stdout
            d = json.loads([l for l in d.splitlines() if l.startswith("{")][-1])
            print(json.dumps(d), flush=True)
            results.setdefault(model, {"hpctrain": [], "ddp": []})
            results[model]["hpctrain"].append(h["samples_per_s"])
            results[model]["ddp"].append(d["samples_per_s"])
    for model, r in results.items():
        h, d = statistics.median(r["hpctrain"]), statistics.median(r["ddp"])
        print(json.dumps({"summary": model, "np": args.np, "hpctrain_samples_per_s": round(h, 1),
                          "ddp_samples_per_s": round(d, 1), "ratio": round(h / d, 3),
                          "repeats": args.repeats}), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sp = p.add_subparsers(dest="cmd", required=True)
    d = sp.add_parser("ddp")
    lr = sp.add_parser("ddp-rank")
    c = sp.add_parser("compare")
    for q in (d, lr):
        q.add_argument("--hook", default="none", help="none, fp16 or powersgd:RANK[:START]")
        q.add_argument("--fp16-hook", action="store_const", dest="hook", const="fp16")
        q.add_argument("--evaluate", action="store_true", help="report the test set's accuracy")
        q.add_argument("--max-samples", type=int, default=0, help="train on the first N images")
        q.add_argument("--timeout-s", type=float, default=300, help="bound on every collective and step")
        q.add_argument("--bucket-mb", type=float, default=0,
                       help="DDP's bucket size and first bucket's, in MiB (0: DDP's defaults)")
        q.add_argument("--log-dir", default="", help="also write stderr to DIR/stderr[.RANK]")
        q.add_argument("--result-file", default="", help="rank 0 writes its JSON line here, not on stdout")
    for q in (d, c):
        q.add_argument("--np", type=int, default=2)
        q.add_argument("--steps", type=int, default=50)
        q.add_argument("--batch", type=int, default=64)
        q.add_argument("--threads", type=int, default=1)
    for q in (d, lr):
        q.add_argument("--model", default="mlp")
        q.add_argument("--warmup", type=int, default=3)
    lr.add_argument("--steps", type=int, default=50)
    lr.add_argument("--batch", type=int, default=64)
    lr.add_argument("--threads", type=int, default=1)
    c.add_argument("--models", default="mlp,cnn")
    c.add_argument("--repeats", type=int, default=3)
    c.add_argument("--hpctrain", default="build/tools/hpctrain/hpctrain")
    args = p.parse_args()
    if args.cmd != "compare":
        parse_hook(args.hook)  # a bad spec ends here, before any rank starts
    if args.cmd == "ddp":
        run_ddp(args)
    elif args.cmd == "ddp-rank":
        launched_rank(args)
    else:
        compare(args)


if __name__ == "__main__":
    main()
