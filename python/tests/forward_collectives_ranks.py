# Rank program: a model whose forward pass calls hvd.allreduce (batch
# statistics over every rank, as sync batch norm does) and hvd.allgather
# (every rank's embeddings, for a loss over the whole batch) trains across
# ranks, and at every step its gradients and parameters match one process
# training on the whole batch without any collective, within 1e-5.
#
# Each rank computes the same loss on the gathered batch, so with Horovod's
# gradients (an allreduce's is the allreduce of the gradient, an allgather's
# this rank's rows of the averaged gradient) the sum over ranks of the local
# gradients is the whole batch's gradient: DistributedOptimizer with op=Sum.
import sys

import torch
import torch.nn.functional as F

import hpctrain.torch as hvd

torch.set_default_dtype(torch.float64)  # compare to 1e-5 without float32 noise
hvd.init()
r, n = hvd.rank(), hvd.size()
B, STEPS, EPS = 12 * n, 5, 1e-5
assert B % n == 0


def make_model():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 6))


def batch(step):
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(B, 8, generator=g), torch.randint(0, 6, (B,), generator=g)


def loss_on_whole_batch(z, y):
    # class scores from the normalized embeddings, plus a decorrelation term
    # that needs every row of the batch at once
    ce = F.cross_entropy(z * 2.0, y)
    cov = z.t() @ z / z.shape[0]
    return ce + 0.1 * (cov - torch.eye(z.shape[1])).pow(2).sum()


def normalize(e, total_sum, total_sq):
    mean = total_sum / B
    return (e - mean) / torch.sqrt(total_sq / B + EPS)


def reference_forward(model, x, y):
    e = model(x)
    mean = e.sum(0) / B
    z = normalize(e, e.sum(0), (e - mean).pow(2).sum(0))
    return loss_on_whole_batch(z, y)


def distributed_forward(model, x, y, step):
    mine = slice(r * (B // n), (r + 1) * (B // n))
    e = model(x[mine])
    total_sum = hvd.allreduce(e.sum(0), op=hvd.Sum, name="sum.%d" % step)
    mean = total_sum / B
    total_sq = hvd.allreduce((e - mean).pow(2).sum(0), op=hvd.Sum, name="sq.%d" % step)
    z = hvd.allgather(normalize(e, total_sum, total_sq), name="z.%d" % step)
    return loss_on_whole_batch(z, y)


ref = make_model()
ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
model = make_model()
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                               named_parameters=model.named_parameters(), op=hvd.Sum)
worst = 0.0
for step in range(STEPS):
    x, y = batch(step)
    ref_opt.zero_grad()
    ref_loss = reference_forward(ref, x, y)
    ref_loss.backward()
    opt.zero_grad()
    loss = distributed_forward(model, x, y, step)
    loss.backward()
    opt.synchronize()
    assert abs(loss.item() - ref_loss.item()) < 1e-9, (loss.item(), ref_loss.item())
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        diff = (p.grad - q.grad).abs().max().item()
        worst = max(worst, diff)
        assert diff < 1e-5, "step %d: gradient of %s differs by %g" % (step, name, diff)
    with opt.skip_synchronize():
        opt.step()
    ref_opt.step()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert (p - q).abs().max().item() < 1e-5, "step %d: %s drifted" % (step, name)
assert loss.item() < float(sys.argv[1]) if len(sys.argv) > 1 else True
print("forward collectives: %d steps on %d ranks, loss %.4f -> matches one process "
      "(largest gradient difference %.2e)" % (STEPS, n, loss.item(), worst), flush=True)
