# Rank program: every collective of hpctrain.torch against numpy. Each rank's
# input is a function of (rank, seed), so every rank computes what all ranks
# must hold. Exits non-zero (AssertionError) on the first difference.
import sys

import numpy as np
import torch

import hpctrain.torch as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
assert n == int(sys.argv[1]), "size %d, launched with -np %s" % (n, sys.argv[1])
assert 0 <= hvd.local_rank() < hvd.local_size() == n


def data(rank, shape, dtype=np.float32, seed=0):
    rng = np.random.default_rng(1000 * seed + rank)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-1000, 1000, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def check(got, want, what, exact=False):
    got = got.numpy() if isinstance(got, torch.Tensor) else got
    if exact:
        assert np.array_equal(got, want), "%s: rank %d got %s, want %s" % (what, r, got, want)
    else:
        assert np.allclose(got, want, rtol=1e-5, atol=1e-5), "%s: rank %d max diff %g" % (
            what, r, np.abs(got - want).max())


for seed, shape in enumerate([(1,), (7,), (33, 65), (2, 3, 4), (1 << 18,)]):
    mine = data(r, shape, seed=seed)
    every = [data(k, shape, seed=seed) for k in range(n)]
    total = np.sum(np.stack(every).astype(np.float64), axis=0)
    # out of place: the input is untouched
    t = torch.from_numpy(mine.copy())
    out = hvd.allreduce(t, op=hvd.Sum, name="sum.%d" % seed)
    check(out, total, "allreduce sum %s" % (shape,))
    check(t, mine, "allreduce input untouched", exact=True)
    check(hvd.allreduce(t, name="avg.%d" % seed), total / n, "allreduce average %s" % (shape,))
    check(hvd.allreduce(t, average=False), total, "allreduce average=False")
    check(hvd.allreduce(t, op=hvd.Max), np.max(np.stack(every), axis=0), "allreduce max", exact=True)
    check(hvd.allreduce(t, op=hvd.Min), np.min(np.stack(every), axis=0), "allreduce min", exact=True)
    # in place
    t2 = torch.from_numpy(mine.copy())
    ret = hvd.allreduce_(t2, op=hvd.Sum)
    check(t2, total, "allreduce_ in place %s" % (shape,))
    assert ret.data_ptr() == t2.data_ptr(), "allreduce_ must return its input"
    # async, several in flight, completed out of order
    ts = [torch.from_numpy(data(r, shape, seed=seed + 10 * k)) for k in range(3)]
    hs = [hvd.allreduce_async_(x, op=hvd.Sum, name="async.%d.%d" % (seed, k)) for k, x in enumerate(ts)]
    for k in reversed(range(3)):
        res = hvd.synchronize(hs[k])
        want = sum(data(q, shape, seed=seed + 10 * k).astype(np.float64) for q in range(n))
        check(res, want, "allreduce_async_ %d" % k)
    h = hvd.allreduce_async(torch.from_numpy(mine.copy()), op=hvd.Sum)
    while not hvd.poll(h):
        pass
    check(hvd.synchronize(h), total, "allreduce_async after poll")

# integers, exact
ints = [data(k, (5, 3), np.int32, seed=7) for k in range(n)]
check(hvd.allreduce(torch.from_numpy(ints[r]), op=hvd.Sum), np.sum(np.stack(ints), axis=0), "int32 sum", exact=True)
i64 = [data(k, (9,), np.int64, seed=8) for k in range(n)]
check(hvd.allreduce(torch.from_numpy(i64[r]), op=hvd.Sum), np.sum(np.stack(i64), axis=0), "int64 sum", exact=True)

# allgather: ranks hold different first dimensions
rows = [data(k, (k + 1, 4), seed=9) for k in range(n)]
check(hvd.allgather(torch.from_numpy(rows[r])), np.concatenate(rows), "allgather", exact=True)
h = hvd.allgather_async(torch.from_numpy(rows[r]), name="gather.async")
check(hvd.synchronize(h), np.concatenate(rows), "allgather_async", exact=True)
check(hvd.allgather(torch.tensor(float(r))), np.arange(n, dtype=np.float32), "allgather of scalars", exact=True)

# broadcast from every root, in place and not
for root in range(n):
    src = [data(k, (6, 5), seed=20 + root) for k in range(n)]
    t = torch.from_numpy(src[r].copy())
    check(hvd.broadcast(t, root), src[root], "broadcast root %d" % root, exact=True)
    check(t, src[r], "broadcast input untouched", exact=True)
    hvd.broadcast_(t, root)
    check(t, src[root], "broadcast_ root %d" % root, exact=True)
    nc = torch.from_numpy(src[r].copy()).t()  # not contiguous
    hvd.broadcast_(nc, root)
    check(nc, src[root].T, "broadcast_ of a transposed view", exact=True)

# objects
obj = hvd.broadcast_object({"rank": r, "t": torch.ones(2) * r}, root_rank=n - 1)
assert obj["rank"] == n - 1 and obj["t"].tolist() == [n - 1.0] * 2, obj
assert hvd.allgather_object(("r", r)) == [("r", k) for k in range(n)]

# errors carry the engine's message
try:
    hvd.broadcast(torch.zeros(2), n)
    raise AssertionError("broadcast from a rank outside the job did not raise")
except hvd.HpctError as e:
    assert e.code == "invalid-argument" and "root rank %d" % n in str(e), str(e)
print("collectives ok rank %d of %d" % (r, n))
