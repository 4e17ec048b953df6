#!/usr/bin/python3
"""A Horovod PyTorch training script on Fashion-MNIST, run by hpctrain.

Only the marked import differs from the Horovod original. Run it with

    PYTHONPATH=build/python hpctrain launch -np 2 -- python3 examples/python/horovod_fashion_mnist.py

(or mpirun -np 2, or srun -n 2). It trains a small CNN with batch norm using
Adam, averages gradients with hvd.DistributedOptimizer, gathers every rank's
accuracy with hvd.allgather, and checks at the end that the parameters are
the same on every rank.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import hpctrain.torch as hvd  # <-- the one changed line (was: import horovod.torch as hvd)
from fashion_mnist import batches, load, train_step  # this folder's data and step helpers

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(32)
        self.fc = nn.Linear(32 * 7 * 7, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(x.flatten(1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--steps", type=int, default=0, help="stop each epoch after this many steps (0: all)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.001)
    args = p.parse_args()

    hvd.init()
    torch.manual_seed(hvd.rank())  # different starts: broadcast_parameters makes them equal
    torch.set_num_threads(1)
    x_train, y_train = load("train")
    x_test, y_test = load("t10k")
    sampler = torch.utils.data.distributed.DistributedSampler(
        range(len(x_train)), num_replicas=hvd.size(), rank=hvd.rank())

    model = Net()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr * hvd.size())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                         compression=hvd.Compression.none, op=hvd.Average)

    for epoch in range(args.epochs):
        model.train()
        for step, steps, b in batches(sampler, epoch, args.batch_size, args.steps):
            loss = train_step(model, optimizer, x_train[b], y_train[b])
            if step % 50 == 0:
                avg = hvd.allreduce(loss.detach(), name="loss")
                if hvd.rank() == 0:
                    print("epoch %d step %d/%d loss %.4f" % (epoch, step, steps, avg.item()), flush=True)

        # every rank evaluates its share of the test set; allgather collects the results
        model.eval()
        mine = torch.arange(hvd.rank(), len(x_test), hvd.size())
        with torch.no_grad():
            correct = (model(x_test[mine]).argmax(1) == y_test[mine]).sum()
        per_rank = hvd.allgather(torch.tensor([[correct.item(), len(mine)]]), name="accuracy")
        if hvd.rank() == 0:
            acc = per_rank[:, 0].sum().item() / per_rank[:, 1].sum().item()
            print("epoch %d test accuracy %.4f (per rank: %s)" % (epoch, acc, per_rank[:, 0].tolist()), flush=True)

    # the parameters must be identical on every rank
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    every = hvd.allgather(flat.unsqueeze(0), name="final_parameters")
    same = all(torch.equal(every[k], flat) for k in range(hvd.size()))
    print("rank %d: parameters identical on all %d ranks: %s" % (hvd.rank(), hvd.size(), same), flush=True)
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
