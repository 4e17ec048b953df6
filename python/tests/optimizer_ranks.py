# Rank program: hvd.DistributedOptimizer. After training, parameters must be
# bit-identical on every rank, and equal (within float tolerance) to one
# process that trains the same start on the combined batch of all ranks.
# argv: overlap mode for HPCT_OVERLAP (on | off).
import copy
import os
import sys

os.environ["HPCT_OVERLAP"] = sys.argv[1]

import torch  # noqa: E402

import hpctrain.torch as hvd  # noqa: E402
from rank_checks import flat, identical_everywhere  # noqa: E402

torch.set_num_threads(1)
hvd.init()
r, n = hvd.rank(), hvd.size()


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(20, 32)
        self.fc2 = torch.nn.Linear(32, 5)
        self.unused = torch.nn.Linear(3, 3)  # only rank 0 uses it, only in the first step

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))

    def extra(self, x):  # a loss term of a layer that only rank 0 uses, only in step 0
        return (self.unused(x[:, :3]) ** 2).mean()


def batch(step, k, part=0):
    g = torch.Generator().manual_seed(10000 * step + 100 * k + part)
    return torch.randn(8, 20, generator=g), torch.randint(0, 5, (8,), generator=g)


def run(opt_name, passes, steps=4):
    torch.manual_seed(r)  # a different start on every rank: broadcast must fix it
    model = Net()
    make = {"sgd": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
            "adam": lambda ps: torch.optim.Adam(ps, lr=0.01)}[opt_name]
    opt = make(model.parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    ref = copy.deepcopy(model)
    ref_opt = make(ref.parameters())
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                   backward_passes_per_step=passes)
    loss_fn = torch.nn.CrossEntropyLoss()
    for step in range(steps):
        opt.zero_grad()
        for part in range(passes):
            x, y = batch(step, r, part)
            loss = loss_fn(model(x), y)
            if r == 0 and step == 0:
                loss = loss + model.extra(x)
            loss.backward()
        opt.step()
        # the reference: every rank's data in one batch (mean over ranks of mean losses).
        # A parameter no rank used in a step gets a zero gradient from
        # DistributedOptimizer, as from Horovod's (not None, which torch 2.x's
        # zero_grad() leaves and which makes a lone process skip it): the
        # reference keeps zeros too.
        ref_opt.zero_grad(set_to_none=False)
        for part in range(passes):
            xs, ys = zip(*[batch(step, k, part) for k in range(n)])
            out = ref(torch.cat(xs))
            loss = loss_fn(out, torch.cat(ys))
            if step == 0:  # rank 0's extra term, averaged over ranks as gradients are
                loss = loss + ref.extra(xs[0]) / n
            loss.backward()
        ref_opt.step()
    identical_everywhere(model, "%s, %d pass(es), HPCT_OVERLAP=%s" % (opt_name, passes, sys.argv[1]))
    diff = (flat(model) - flat(ref)).abs().max().item()
    assert diff < 1e-5, "%s: differs from one process on the combined batch by %g" % (opt_name, diff)
    return diff


d1 = run("sgd", 1)
d2 = run("adam", 2)
d3 = run("sgd", 2)
print("optimizer ok rank %d of %d: max diff to one process %.2e %.2e %.2e" % (r, n, d1, d2, d3))
