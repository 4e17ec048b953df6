"""Checks the rank programs share: a model's parameters as one flat tensor,
and that every rank holds the same ones (an AssertionError names the first
rank that differs and by how much)."""
import torch

import hpctrain.torch as hvd


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def identical_everywhere(model, what):
    r, n = hvd.rank(), hvd.size()
    mine = flat(model)
    every = hvd.allgather(mine.reshape(1, -1))
    for k in range(n):
        if not torch.equal(every[k], mine):
            diff = (every[k] - mine).abs().max().item()
            raise AssertionError("%s: rank %d and rank %d differ (max %g)" % (what, r, k, diff))
