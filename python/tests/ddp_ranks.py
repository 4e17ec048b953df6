# Rank program: DDP over the "hpctrain" backend against DDP over gloo. Both
# train the same start on the same data (a gloo group made next to the
# hpctrain default group); their parameters must agree within float
# tolerance and be bit-identical across ranks. Small buckets (several per
# step) and batch norm (DDP broadcasts its buffers every forward) make DDP
# use allreduce, broadcast and allgather.
import torch
import torch.distributed as dist

import hpctrain.torch  # noqa: F401  (registers the backend)

torch.set_num_threads(1)
dist.init_process_group("hpctrain")  # no other argument, under any launcher
assert dist.get_backend() == "hpctrain", dist.get_backend()
r, n = dist.get_rank(), dist.get_world_size()
gloo = dist.new_group(backend="gloo")


def make_model():
    torch.manual_seed(1234 + r)  # different on every rank: DDP's start broadcast must fix it
    return torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.BatchNorm1d(256), torch.nn.ReLU(),
        torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))


ours = torch.nn.parallel.DistributedDataParallel(make_model(), bucket_cap_mb=0.1)
theirs = torch.nn.parallel.DistributedDataParallel(make_model(), bucket_cap_mb=0.1, process_group=gloo)
opts = [torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for m in (ours, theirs)]
loss_fn = torch.nn.CrossEntropyLoss()
for step in range(6):
    g = torch.Generator().manual_seed(100 * step + r)
    x, y = torch.randn(16, 64, generator=g), torch.randint(0, 10, (16,), generator=g)
    for m, o in zip((ours, theirs), opts):
        o.zero_grad()
        loss_fn(m(x), y).backward()
        o.step()


def flat(tensors):
    return torch.cat([t.detach().reshape(-1) for t in tensors if t.dtype == torch.float32])


# buffers (batch norm's running statistics) are each rank's own after its
# forward, in both; parameters must be the same everywhere
diff = (flat(list(ours.parameters()) + list(ours.buffers())) -
        flat(list(theirs.parameters()) + list(theirs.buffers()))).abs().max().item()
assert diff < 1e-4, "rank %d: DDP over hpctrain differs from DDP over gloo by %g" % (r, diff)
a = flat(ours.parameters())
every = [torch.empty_like(a) for _ in range(n)]
dist.all_gather(every, a)
for k in range(n):
    assert torch.equal(every[k], a), "rank %d and rank %d differ after DDP over hpctrain" % (r, k)
t = torch.full((5,), float(r + 1))
dist.all_reduce(t, op=dist.ReduceOp.MAX)
assert t.tolist() == [float(n)] * 5, t
# a second hpctrain group beside the default one: their collectives in
# flight at once must not be confused (each group names its own)
first, second = dist.new_group(), dist.new_group()
u, v = torch.full((4,), float(r)), torch.full((4,), 10.0 * (r + 1))
w1 = dist.all_reduce(u, group=first, async_op=True)
w2 = dist.all_reduce(v, group=second, async_op=True)
w2.wait()
w1.wait()
assert u.tolist() == [n * (n - 1) / 2] * 4 and v.tolist() == [10.0 * n * (n + 1) / 2] * 4, (u, v)
# more same-shaped allreduces in flight than a signature has name slots (16):
# a reused name waits for its previous holder, every result is right
many = [torch.full((3,), float(k * n + r)) for k in range(40)]
works = [dist.all_reduce(x, async_op=True) for x in many]
for w in works:
    w.wait()
for k, x in enumerate(many):
    assert x.tolist() == [float(k * n * n + n * (n - 1) / 2)] * 3, (k, x)
dist.barrier()
print("ddp ok rank %d of %d: max diff to gloo %.2e" % (r, n, diff))
