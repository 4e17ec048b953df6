#!/usr/bin/python3
"""A PyTorch DistributedDataParallel script on Fashion-MNIST, over hpctrain.

Compared with the same script on gloo, two marked lines change: the import
that registers the backend, and the backend's name. Run it with

    PYTHONPATH=build/python hpctrain launch -np 2 -- python3 examples/python/ddp_fashion_mnist.py

(or mpirun -np 2, or srun -n 2: init_process_group needs no other argument
under any of them). DDP's gradient buckets are then allreduced by hpctrain's
engine. At the end it checks that the parameters are the same on every rank.
"""
import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import hpctrain.torch  # noqa: F401  <-- added: registers the "hpctrain" backend
from fashion_mnist import batches, load, train_step  # this folder's data and step helpers

def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--steps", type=int, default=0, help="stop each epoch after this many steps (0: all)")
    p.add_argument("--batch-size", type=int, default=64)
    args = p.parse_args()

    dist.init_process_group("hpctrain")  # <-- the changed word (was: "gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    x_train, y_train = load("train")
    sampler = torch.utils.data.distributed.DistributedSampler(range(len(x_train)))
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for epoch in range(args.epochs):
        for step, steps, b in batches(sampler, epoch, args.batch_size, args.steps):
            loss = train_step(model, optimizer, x_train[b], y_train[b])
            if step % 50 == 0:
                dist.all_reduce(loss := loss.detach().clone())
                if rank == 0:
                    print("epoch %d step %d/%d loss %.4f" % (epoch, step, steps, loss.item() / size), flush=True)

    flat = torch.cat([q.detach().reshape(-1) for q in model.parameters()])
    every = [torch.empty_like(flat) for _ in range(size)]
    dist.all_gather(every, flat)
    same = all(torch.equal(e, flat) for e in every)
    print("rank %d: parameters identical on all %d ranks: %s" % (rank, size, same), flush=True)
    dist.destroy_process_group()
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
