"""Fashion-MNIST for the example scripts beside this file: the images from
Debian's dataset-fashion-mnist package, and one rank's batches of an epoch.
"""
import gzip

import numpy as np
import torch

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(raw[3])]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * raw[3]).reshape(dims)


def load(split):
    """Images (N x 1 x 28 x 28, normalised) and labels of "train" or "t10k"."""
    x = torch.from_numpy(read_idx(f"{DATA}/{split}-images-idx3-ubyte.gz").copy())
    y = torch.from_numpy(read_idx(f"{DATA}/{split}-labels-idx1-ubyte.gz").copy()).long()
    return ((x.float() / 255.0 - 0.2860) / 0.3530).unsqueeze(1), y


def batches(sampler, epoch, batch_size, max_steps=0):
    """This rank's full batches of one epoch as (step, steps, indices), at
    most max_steps of them (0: all)."""
    sampler.set_epoch(epoch)
    idx = torch.tensor(list(sampler))
    steps = len(idx) // batch_size
    if max_steps:
        steps = min(steps, max_steps)
    for step in range(steps):
        yield step, steps, idx[step * batch_size:(step + 1) * batch_size]


def train_step(model, optimizer, x, y):
    """One step of plain training: forward, cross-entropy, backward, the
    optimizer's step (the distributed wrapper syncs the gradients). Returns
    the loss."""
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss
