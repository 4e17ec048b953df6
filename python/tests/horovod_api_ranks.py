# Rank program: Horovod's PyTorch API as its scripts use it, behaviour by
# behaviour (the CPU-applicable behaviours Horovod's own test_torch.py checks,
# written here from scratch). Every rank runs the checks in the same order;
# the first wrong result raises AssertionError and fails the job.
import itertools
import os
import sys
import warnings

import torch
import torch.nn.functional as F

import hpctrain.torch as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
assert n == int(sys.argv[1]), "size %d, launched with -np %s" % (n, sys.argv[1])
# hpctrain launch exports horovodrun's variables for scripts that read them
assert (os.environ["HOROVOD_RANK"], os.environ["HOROVOD_SIZE"]) == (str(r), str(n))
assert os.environ["HOROVOD_LOCAL_RANK"] == str(hvd.local_rank())

ALL_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
              torch.float16, torch.float32, torch.float64]


def data(rank, shape, dtype, seed=0, lo=-20, hi=20):
    g = torch.Generator().manual_seed(1000 * seed + rank)
    if dtype == torch.uint8:
        lo = 0
    return torch.randint(lo, hi, shape, generator=g).to(dtype)


def expect_raises(kinds, fn, what):
    try:
        fn()
    except kinds as e:
        return e
    raise AssertionError("%s: no %s raised" % (what, kinds))


def done(name):
    print("ok %s (rank %d of %d)" % (name, r, n), flush=True)


def reinit():
    before = (hvd.rank(), hvd.size())
    hvd.shutdown()
    assert not hvd.is_initialized()
    hvd.init()
    assert hvd.is_initialized() and (hvd.rank(), hvd.size()) == before
    done("init, shutdown, init again")


def allreduce_every_dtype_and_op():
    for dtype, dim in itertools.product(ALL_DTYPES, [1, 2, 3]):
        shape = [5] * dim
        every = [data(k, shape, dtype).double() for k in range(n)]
        mine = data(r, shape, dtype)
        total = torch.stack(every).sum(0)
        got = hvd.allreduce(mine, op=hvd.Sum)
        assert got.dtype == dtype and torch.equal(got.double(), total), "sum %s" % dtype
        assert torch.equal(mine, data(r, shape, dtype)), "allreduce changed its input"
        avg = hvd.allreduce(mine, average=True)
        want = total / n
        if not dtype.is_floating_point:
            want = torch.trunc(want)  # Horovod: sum, then divide and truncate toward zero
        tol = 1e-2 if dtype == torch.float16 else 1e-6
        assert torch.allclose(avg.double(), want, atol=tol), "average %s: %s vs %s" % (dtype, avg, want)
        assert torch.equal(hvd.allreduce(mine, op=hvd.Min).double(), torch.stack(every).min(0).values)
        assert torch.equal(hvd.allreduce(mine, op=hvd.Max).double(), torch.stack(every).max(0).values)
    ones = torch.full((4,), 2, dtype=torch.int32)
    assert torch.equal(hvd.allreduce(ones, op=hvd.Product), torch.full((4,), 2 ** n, dtype=torch.int32))
    done("allreduce sum/average/min/max/product on every dtype")


def allreduce_forms():
    t = data(r, [6, 3], torch.float32)
    total = sum(data(k, [6, 3], torch.float32) for k in range(n))
    ret = hvd.allreduce_(t, op=hvd.Sum, name="inplace")
    assert ret is t and torch.equal(t, total)
    nc = data(r, [3, 6], torch.float32).t()  # not contiguous
    hvd.allreduce_(nc, op=hvd.Sum)
    assert torch.equal(nc, sum(data(k, [3, 6], torch.float32) for k in range(n)).t())
    hs = [hvd.allreduce_async(data(r, [9], torch.float64, seed=s), op=hvd.Sum, name="a.%d" % s)
          for s in range(4)]
    for s in reversed(range(4)):
        assert torch.equal(hvd.synchronize(hs[s]), sum(data(k, [9], torch.float64, seed=s) for k in range(n)))
    h = hvd.allreduce_async(data(r, [2], torch.float32), op=hvd.Sum)
    while not hvd.poll(h):
        pass
    hvd.synchronize(h)
    # grouped: out of place and in place, sums and averages
    ts = [data(r, [4, k + 1], torch.float32, seed=k) for k in range(5)]
    want = [sum(data(q, [4, k + 1], torch.float32, seed=k) for q in range(n)) for k in range(5)]
    for got, w in zip(hvd.grouped_allreduce(ts, op=hvd.Sum), want):
        assert torch.equal(got, w)
    for got, w in zip(hvd.grouped_allreduce(ts, average=True), want):
        assert torch.allclose(got, w / n)
    hvd.grouped_allreduce_(ts, op=hvd.Sum)
    assert all(torch.equal(a, b) for a, b in zip(ts, want))
    h = hvd.grouped_allreduce_async([torch.ones(3), torch.ones(2, dtype=torch.int64)], op=hvd.Sum)
    a, b = hvd.synchronize(h)
    assert torch.equal(a, torch.full((3,), float(n))) and torch.equal(b, torch.full((2,), n))
    done("allreduce in place, async, grouped")


def scaling():
    factor = 0.37
    for dtype in [torch.int32, torch.int64, torch.float16, torch.float32, torch.float64]:
        t = data(r, [17], dtype)
        got = hvd.allreduce(t, op=hvd.Sum, prescale_factor=factor)
        # Horovod's arithmetic: float64 then truncation for integers, float32 for half
        wide = torch.float64 if not dtype.is_floating_point else (
            torch.float32 if dtype == torch.float16 else dtype)
        want = sum((data(k, [17], dtype).to(wide) * factor).to(dtype).double() for k in range(n))
        tol = 1e-2 if dtype == torch.float16 else 1e-5
        assert torch.allclose(got.double(), want, atol=tol), "prescale %s" % dtype
        got = hvd.allreduce(t, op=hvd.Sum, postscale_factor=factor)
        total = sum(data(k, [17], dtype).to(wide) for k in range(n)).to(dtype)
        want = (total.to(wide) * factor).to(dtype)
        assert torch.allclose(got.double(), want.double(), atol=tol), "postscale %s" % dtype
    done("prescale and postscale")


def mismatches_fail_everywhere():
    if n == 1:
        return
    bad = torch.zeros(17 + r, 3)
    e = expect_raises(RuntimeError, lambda: hvd.allreduce(bad, name="shape"), "shape mismatch")
    assert e.code == "mismatch" and "shape" in str(e), str(e)
    bad = torch.zeros(4, dtype=torch.int32 if r % 2 else torch.float32)
    expect_raises(RuntimeError, lambda: hvd.allreduce(bad, name="dtype"), "dtype mismatch")
    bad = torch.zeros(2, 3 + r)
    expect_raises(RuntimeError, lambda: hvd.allgather(bad, name="gshape"), "allgather shape mismatch")
    expect_raises(RuntimeError, lambda: hvd.broadcast(torch.zeros(3), root_rank=r, name="roots"),
                  "broadcast from different roots")
    expect_raises(ValueError, lambda: hvd.broadcast(torch.zeros(3), root_rank=n), "root out of range")
    hvd.barrier()
    done("mismatched shapes, dtypes and roots fail on every rank")


def duplicate_names():
    t = torch.zeros(3)
    h = hvd.allreduce_async(t, name="dup")
    e = expect_raises(ValueError, lambda: hvd.allreduce_async(t, name="dup"), "duplicate name")
    assert isinstance(e, hvd.HpctError) and "dup" in str(e)
    hvd.synchronize(h)
    done("a duplicate pending name raises ValueError at once")


def autograd():
    for dtype in [torch.float32, torch.float64]:
        # allreduce: sum gives size, average gives 1
        x = torch.ones(3, 4, dtype=dtype, requires_grad=True)
        hvd.allreduce(x, op=hvd.Sum).backward(torch.ones(3, 4, dtype=dtype))
        assert torch.equal(x.grad, torch.full((3, 4), float(n), dtype=dtype))
        x = torch.ones(3, dtype=dtype, requires_grad=True)
        hvd.allreduce(x, average=True).backward(torch.ones(3, dtype=dtype))
        assert torch.equal(x.grad, torch.ones(3, dtype=dtype))
        xs = [torch.ones(k + 1, dtype=dtype, requires_grad=True) for k in range(3)]
        outs = hvd.grouped_allreduce(xs, op=hvd.Sum)
        torch.autograd.backward(outs, [torch.ones_like(o) for o in outs])
        assert all(torch.equal(x.grad, torch.full_like(x, float(n))) for x in xs)
        # allgather with first dimensions 1..n: this rank's rows of the averaged gradient
        x = torch.full((r + 1, 2), float(r), dtype=dtype, requires_grad=True)
        g = hvd.allgather(x)
        assert g.shape == (n * (n + 1) // 2, 2)
        grad = torch.cat([torch.full((k + 1, 2), float(k), dtype=dtype) for k in range(n)])
        g.backward(grad)
        assert torch.equal(x.grad, torch.full((r + 1, 2), float(r), dtype=dtype))
        xs = [torch.full((r + 1, 2), float(r), dtype=dtype, requires_grad=True) for _ in range(2)]
        gs = hvd.grouped_allgather(xs)
        torch.autograd.backward(gs, [grad, grad * 2])
        assert torch.equal(xs[0].grad, x.grad) and torch.equal(xs[1].grad, x.grad * 2)
        # broadcast: the root keeps the average of the gradients, the others zero
        x = torch.full((4,), float(r), dtype=dtype, requires_grad=True)
        b = hvd.broadcast(x, root_rank=0)
        assert torch.equal(b.detach(), torch.zeros(4, dtype=dtype))
        b.backward(torch.full((4,), float(r + 1), dtype=dtype))
        want = sum(k + 1 for k in range(n)) / n if r == 0 else 0.0
        assert torch.allclose(x.grad, torch.full((4,), want, dtype=dtype)), x.grad
        # reducescatter: Horovod's scaling (a Sum's gradient times the size)
        x = torch.ones(2 * n, 3, dtype=dtype, requires_grad=True)
        out = hvd.reducescatter(x, op=hvd.Sum)
        out.backward(torch.ones_like(out))
        assert torch.equal(x.grad, torch.full((2 * n, 3), float(n), dtype=dtype))
        x = torch.ones(2 * n, dtype=dtype, requires_grad=True)
        out = hvd.reducescatter(x, op=hvd.Average)
        out.backward(torch.ones_like(out))
        assert torch.equal(x.grad, torch.ones(2 * n, dtype=dtype))
        # alltoall: the gradient's rows go back where the rows came from
        x = torch.arange(n * 2, dtype=dtype).reshape(n * 2, 1).requires_grad_()
        y = hvd.alltoall(x)
        y.backward(y.detach() * 0 + float(r))
        assert torch.equal(x.grad.reshape(-1), torch.arange(n, dtype=dtype).repeat_interleave(2))
    done("gradients of allreduce, allgather, broadcast, reducescatter, alltoall and grouped forms")


def allgather_and_broadcast():
    for dtype in ALL_DTYPES:
        x = torch.full((r + 1, 3), r, dtype=dtype)
        g = hvd.allgather(x)
        want = torch.cat([torch.full((k + 1, 3), k, dtype=dtype) for k in range(n)])
        assert torch.equal(g, want), dtype
        b = hvd.broadcast(torch.full((3,), r + 1, dtype=dtype), root_rank=n - 1)
        assert torch.equal(b, torch.full((3,), n, dtype=dtype))
    s = hvd.allgather(torch.tensor(float(r)))  # a scalar gathers to [n]
    assert torch.equal(s, torch.arange(n, dtype=torch.float32))
    outs = hvd.grouped_allgather([torch.full((2,), r), torch.full((1, 2), float(r))])
    assert torch.equal(outs[0], torch.arange(n).repeat_interleave(2))
    assert outs[1].shape == (n, 2)
    t = torch.full((5,), float(r))
    hvd.broadcast_(t, root_rank=0)
    assert torch.equal(t, torch.zeros(5))
    h = hvd.broadcast_async_(torch.full((2,), float(r)), root_rank=n - 1)
    assert torch.equal(hvd.synchronize(h), torch.full((2,), float(n - 1)))
    done("allgather (variable first dimension, scalars, grouped) and broadcast on every dtype")


def alltoall():
    for dtype in ALL_DTYPES:
        # rank r sends r+1 rows to every rank; rows carry the destination rank
        x = torch.cat([torch.full((r + 1, 2), k, dtype=dtype) for k in range(n)])
        out, received = hvd.alltoall(x, splits=torch.tensor([r + 1] * n, dtype=torch.int32))
        assert received.dtype == torch.int32 and received.tolist() == [k + 1 for k in range(n)]
        assert out.shape == (n * (n + 1) // 2, 2) and bool((out == r).all()), dtype
    out = hvd.alltoall(torch.arange(2 * n) + 100 * r)  # equal split, no splits returned
    assert isinstance(out, torch.Tensor) and out.tolist() == [
        100 * k + 2 * r + j for k in range(n) for j in range(2)]
    h = hvd.alltoall_async(torch.arange(n, dtype=torch.int64), splits=[1] * n)
    out, received = hvd.synchronize(h)
    assert out.tolist() == [r] * n and received.tolist() == [1] * n
    expect_raises(ValueError, lambda: hvd.alltoall(torch.zeros(n + 1)), "rows not a multiple") \
        if n > 1 else None
    expect_raises(ValueError, lambda: hvd.alltoall(torch.zeros(max(n - 1, 0)),
                                                   torch.ones(n, dtype=torch.int32)), "splits too big")
    expect_raises(ValueError, lambda: hvd.alltoall(torch.zeros(n), torch.ones(n)), "float splits")
    if n > 1:
        bad = torch.zeros(n, dtype=torch.int32 if r % 2 else torch.float32)
        expect_raises(RuntimeError, lambda: hvd.alltoall(bad, name="a2a.dtype"), "alltoall dtypes")
    done("alltoall with splits, equal splits, received splits and its errors")


def reducescatter():
    for dtype in [torch.int32, torch.int64, torch.float16, torch.float32, torch.float64]:
        t = data(r, [4 * n, 3], dtype)
        total = sum(data(k, [4 * n, 3], dtype).double() for k in range(n))
        got = hvd.reducescatter(t, op=hvd.Sum)
        assert torch.equal(got.double(), total[4 * r:4 * (r + 1)]), dtype
        avg = hvd.reducescatter(t)  # Average is the default
        want = total[4 * r:4 * (r + 1)] / n
        if not dtype.is_floating_point:
            want = torch.trunc(want)
        assert torch.allclose(avg.double(), want, atol=1e-2), dtype
    # uneven rows: the first rows % n ranks get one more
    rows = 2 * n + 1
    got = hvd.reducescatter(torch.ones(rows), op=hvd.Sum)
    assert got.numel() == rows // n + (1 if r < rows % n else 0)
    outs = hvd.grouped_reducescatter([torch.ones(n, 2), torch.ones(2 * n)], op=hvd.Sum)
    assert outs[0].shape == (1, 2) and torch.equal(outs[1], torch.full((2,), float(n)))
    h = hvd.reducescatter_async(torch.ones(n), op=hvd.Sum)
    assert torch.equal(hvd.synchronize(h), torch.full((1,), float(n)))
    expect_raises(ValueError, lambda: hvd.reducescatter(torch.tensor(1.0)), "scalar")
    expect_raises(ValueError, lambda: hvd.reducescatter(torch.ones(n), op=hvd.Max), "op max")
    done("reducescatter sum/average, uneven rows, grouped, async and its errors")


def objects():
    obj = {"step": 7, "rank": r} if r == 0 else None
    got = hvd.broadcast_object(obj, root_rank=0)
    assert got == {"step": 7, "rank": 0}
    assert hvd.allgather_object(("r", r)) == [("r", k) for k in range(n)]
    hvd.barrier()
    done("broadcast_object, allgather_object, barrier")


class Halver(hvd.Compressor):
    """A compressor of the user's own: sends the tensor halved, doubles it back."""
    calls = 0

    @staticmethod
    def compress(tensor):
        Halver.calls += 1
        return tensor / 2, "halved"

    @staticmethod
    def decompress(tensor, ctx):
        assert ctx == "halved"
        return tensor * 2


def compression():
    for dtype in [torch.float32, torch.float64]:
        c, ctx = hvd.Compression.fp16.compress(torch.ones(3, dtype=dtype))
        assert c.dtype == torch.float16
        assert hvd.Compression.fp16.decompress(c, ctx).dtype == dtype
    for dtype in [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]:
        c, ctx = hvd.Compression.fp16.compress(torch.ones(3, dtype=dtype))
        assert c.dtype == dtype and hvd.Compression.fp16.decompress(c, ctx).dtype == dtype
    c, ctx = hvd.Compression.none.compress(torch.ones(2))
    assert ctx is None and hvd.Compression.none.decompress(c, ctx) is c
    got = hvd.allreduce(torch.full((8,), 1.5), op=hvd.Sum, compression=hvd.Compression.fp16)
    assert got.dtype == torch.float32 and torch.equal(got, torch.full((8,), 1.5 * n))
    got = hvd.allreduce(torch.full((8,), 3.0), op=hvd.Sum, compression=Halver)
    assert Halver.calls == 1 and torch.equal(got, torch.full((8,), 3.0 * n))
    # DistributedOptimizer runs a user's compressor around every gradient
    model = torch.nn.Linear(3, 2)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), compression=Halver)
    x = torch.full((4, 3), float(r + 1))
    model(x).sum().backward()
    opt.synchronize()
    assert Halver.calls == 3  # one allreduce plus the two gradients
    want = sum(torch.full((4, 3), float(k + 1)).sum(0) for k in range(n)) / n
    assert torch.allclose(model.weight.grad, want.expand(2, 3)), model.weight.grad
    with opt.skip_synchronize():
        opt.step()
    done("Compression objects and a user-defined Compressor")


def optimizer_behaviour():
    x = torch.randn(16, 10, generator=torch.Generator().manual_seed(r))
    y = torch.randn(16, 4, generator=torch.Generator().manual_seed(100 + r))

    class TwoHeads(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body = torch.nn.Linear(10, 8)
            self.a = torch.nn.Linear(8, 4)
            self.b = torch.nn.Linear(8, 4)

        def forward(self, v):
            h = F.relu(self.body(v))
            return self.a(h), self.b(h)

    # every optimizer torch has (but L-BFGS, SparseAdam, and Muon, which takes
    # 2-D parameters only: this model has biases), ranks using different heads
    excluded = (torch.optim.LBFGS, torch.optim.SparseAdam, getattr(torch.optim, "Muon", None))
    optimizers = sorted((c for c in torch.optim.Optimizer.__subclasses__()
                         if c.__module__.startswith("torch.optim") and c not in excluded),
                        key=lambda c: c.__name__)
    for cls in optimizers:
        torch.manual_seed(0)
        model = TwoHeads()
        opt = hvd.DistributedOptimizer(cls(model.parameters(), lr=0.01),
                                       named_parameters=model.named_parameters())
        ya, yb = model(x)
        F.mse_loss(ya if r == 0 else yb, y).backward()
        opt.step()
        gathered = hvd.allgather(torch.cat([p.detach().reshape(-1) for p in model.parameters()])[None])
        assert all(torch.equal(gathered[0], gathered[k]) for k in range(n)), cls.__name__
    # names: duplicates and missing ones are refused, none at all is fine
    net1, net2 = torch.nn.Conv2d(1, 1, 1), torch.nn.Conv2d(1, 1, 1)
    opt = torch.optim.SGD(itertools.chain(net1.parameters(), net2.parameters()), lr=0.1)
    expect_raises(ValueError, lambda: hvd.DistributedOptimizer(
        opt, named_parameters=itertools.chain(net1.named_parameters(), net2.named_parameters())),
        "duplicate parameter names")
    model = TwoHeads()
    expect_raises(ValueError, lambda: hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=list(model.named_parameters())[:1]),
        "missing parameter names")
    opt = hvd.DistributedOptimizer(torch.optim.SGD(
        [{"params": model.body.parameters()}, {"params": model.a.parameters()}], lr=0.1))
    names = set(opt._parameter_names.values())
    assert len(names) == len(opt._parameter_names) == 4
    assert all(s == names for s in hvd.allgather_object(names))
    # synchronize(), clipping, then step() in skip_synchronize(); without it, Horovod's warning
    model = torch.nn.Linear(1, 1)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    F.mse_loss(model(torch.ones(1, 1)), torch.full((1, 1), 5.0)).backward()
    opt.synchronize()
    before = model.weight.grad.item()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    assert abs(model.weight.grad.item()) < abs(before)
    with warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        opt.step()
    assert len(ws) == 1 and "optimizer.step() called without optimizer.skip_synchronize()" in str(
        ws[0].message), [str(w.message) for w in ws]
    done("DistributedOptimizer: every torch optimizer, names, synchronize/clip/step and its warning")


def dynamic_requires_grad():
    gen, disc = torch.nn.Conv2d(1, 4, 1), torch.nn.Conv2d(4, 1, 1)
    gen_opt = hvd.DistributedOptimizer(torch.optim.SGD(gen.parameters(), lr=0.1),
                                       named_parameters=gen.named_parameters())
    disc_opt = hvd.DistributedOptimizer(torch.optim.SGD(disc.parameters(), lr=0.1),
                                        named_parameters=disc.named_parameters())
    inp = torch.rand(1, 1, 8, 8)
    for train_gen in [True, False, True]:
        for p in gen.parameters():
            p.requires_grad_(train_gen)
        for p in disc.parameters():
            p.requires_grad_(not train_gen)
        gen_opt.zero_grad()
        disc_opt.zero_grad()
        disc(gen(inp)).sum().backward()
        for p in gen.parameters():
            assert train_gen == (p.grad is not None and bool(p.grad.abs().max() > 0))
        (gen_opt if train_gen else disc_opt).step()
    done("gradients switched on and off between steps")


def sparse():
    sizes = [17, 32, 5]
    ts = []
    for i, d0 in enumerate(sizes):
        t = torch.rand(d0, 6, generator=torch.Generator().manual_seed(10 * i + r))
        t[t < 0.8] = 0
        ts.append(t.to_sparse())
    dense = [hvd.allreduce(t.to_dense()) for t in ts]
    handles = [hvd.sparse_allreduce_async(t, name="sp.%d" % i, op=hvd.Average) for i, t in enumerate(ts)]
    for want, h in zip(dense, handles):
        assert torch.allclose(want, h().to_dense(), atol=1e-6)
    for as_dense in [False, True]:
        torch.manual_seed(1)
        emb = torch.nn.Embedding(10, 3, sparse=True)
        opt = hvd.DistributedOptimizer(torch.optim.SparseAdam(list(emb.parameters()), lr=0.1),
                                       named_parameters=emb.named_parameters(),
                                       sparse_as_dense=as_dense)
        inp = torch.LongTensor([[1, 2, 4, 5], [4, 3, 2, 9]] if r == 0 else [[1, 3, 4], [4, 7, 9]])
        opt.zero_grad()
        emb(inp).sum().backward()
        opt.step()
        w = hvd.allgather(emb.weight.detach()[None])
        assert all(torch.equal(w[0], w[k]) for k in range(n)), "sparse_as_dense=%s" % as_dense
    done("sparse allreduce and sparse embeddings in DistributedOptimizer")


def optimizer_state_before_any_step():
    torch.manual_seed(100 + r)  # different on purpose: the broadcasts make them equal
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    for p in model[0].parameters():
        p.requires_grad_(False)  # frozen: must stay without a gradient
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=0.1 * (r + 1), momentum=0.9, weight_decay=0.1)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters())), "parameters moved"
    for p in model[1].parameters():
        assert p.grad is not None and bool((p.grad == 0).all()), "trainable parameter without .grad"
    for p in model[0].parameters():
        assert p.grad is None, "a frozen parameter got a gradient"
    assert opt.param_groups[0]["lr"] == 0.1, "options come from the root"
    bufs = [opt.state[p]["momentum_buffer"] for p in model[1].parameters()]
    assert len(bufs) == 2 and all(b is not None for b in bufs)
    gathered = hvd.allgather_object(sorted(len(s) for s in opt.state_dict()["state"].values()))
    assert all(g == gathered[0] for g in gathered)
    done("broadcast_optimizer_state on an optimizer that has not stepped")


reinit()
allreduce_every_dtype_and_op()
allreduce_forms()
scaling()
mismatches_fail_everywhere()
duplicate_names()
autograd()
allgather_and_broadcast()
alltoall()
reducescatter()
objects()
compression()
optimizer_behaviour()
dynamic_requires_grad()
sparse()
optimizer_state_before_any_step()
print("horovod api: every check passed on rank %d of %d" % (r, n), flush=True)
