#!/usr/bin/env python3
"""The PyTorch side of scripts/device-check.sh, on the same GPU machine.

plain: one process, the same model as `hpctrain train --model M` (the
definitions in bench/ddp_peer.py), the same batch, SGD with momentum 0.9,
Fashion-MNIST normalized as hpctrain's loader does ((x/255 - 0.5) / 0.5),
kept on the GPU, shuffled every epoch; --steps timed steps after --warmup.
ddp: the same, in NP processes, each on its own GPU, DistributedDataParallel
over NCCL (only where the machine has NP GPUs).

Prints one JSON line: samples_per_s, final loss, steps.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
from ddp_peer import make_model, read_idx  # noqa: E402


def load(data_dir, device):
    import torch
    x = torch.from_numpy(read_idx(f"{data_dir}/train-images-idx3-ubyte.gz").copy())
    y = torch.from_numpy(read_idx(f"{data_dir}/train-labels-idx1-ubyte.gz").copy()).long()
    x = (x.float().div_(255).sub_(0.5).div_(0.5)).unsqueeze(1)
    return x.to(device), y.to(device)


def train(rank, size, args, result):
    import torch
    import torch.nn.functional as F
    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    torch.manual_seed(args.seed)
    model = make_model(args.model).to(device)
    if size > 1:
        import torch.distributed as dist
        dist.init_process_group("nccl", rank=rank, world_size=size)
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    x, y = load(args.data, device)
    n = x.shape[0] // size
    x, y = x[rank * n:(rank + 1) * n], y[rank * n:(rank + 1) * n]
    g = torch.Generator(device=device)
    g.manual_seed(args.seed)
    perm, pos = torch.randperm(n, device=device, generator=g), 0
    amp = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}[args.amp]

    def step():
        nonlocal perm, pos
        if pos + args.batch > n:
            perm, pos = torch.randperm(n, device=device, generator=g), 0
        i = perm[pos:pos + args.batch]
        pos += args.batch
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=amp, enabled=amp is not None):
            loss = F.cross_entropy(model(x[i]), y[i])
        loss.backward()
        opt.step()
        return loss

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    final = loss.item()  # waits for the last step
    seconds = time.perf_counter() - t0
    if size > 1:
        torch.distributed.destroy_process_group()
    if rank == 0:
        result.update({"mode": args.mode, "model": args.model, "np": size, "amp": args.amp,
                       "steps": args.steps, "batch": args.batch, "final_loss": final,
                       "samples_per_s": args.steps * args.batch * size / seconds, "seconds": seconds,
                       "torch": torch.__version__, "gpu": torch.cuda.get_device_name(device)})


def ddp_worker(rank, size, args, queue):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    result = {}
    train(rank, size, args, result)
    if rank == 0:
        queue.put(result)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["plain", "ddp"])
    p.add_argument("--model", default="cnn")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--amp", default="none", choices=["none", "bf16", "fp16"])
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--port", type=int, default=29533)
    args = p.parse_args()
    import torch
    if not torch.cuda.is_available():
        sys.exit("device_check_peer.py: no GPU (torch.cuda.is_available() is False)")
    if args.mode == "plain":
        result = {}
        train(0, 1, args, result)
    else:
        if torch.cuda.device_count() < args.np:
            sys.exit(f"device_check_peer.py ddp: {torch.cuda.device_count()} GPU(s), {args.np} needed")
        import torch.multiprocessing as mp
        ctx = mp.get_context("spawn")
        queue = ctx.SimpleQueue()
        mp.spawn(ddp_worker, args=(args.np, args, queue), nprocs=args.np, join=True)
        result = queue.get()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
