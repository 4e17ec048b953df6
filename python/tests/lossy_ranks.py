# Rank program: hvd.DistributedOptimizer with the lossy compressions
# (Compression.powersgd, Compression.int8; docs/compression.md), on the cnn
# of bench/ddp_peer.py with Fashion-MNIST test images, SGD with momentum.
# Checks, for both modes:
# - compressed from step 2 on: parameters bit-identical on every rank, and
#   not those of uncompressed training (the compression ran);
# - synchronize() then step() under skip_synchronize() equals step();
# - a start step past the run: bit for bit the parameters of uncompressed
#   training (also with backward_passes_per_step=2);
# - state_dict() round trip: 3 steps, save, a new model and optimizer,
#   load, 3 more equals 6 steps straight; the same resume without this
#   rank's residuals does not (so the residuals are what makes it exact);
# - rank 0's checkpoint loaded on every rank plus broadcast_optimizer_state:
#   ranks stay bit-identical;
# - the reduction releases the GIL;
# - bad input gets one clear line.
import copy
import gzip
import io
import threading
import time

import numpy as np
import torch
import torch.nn as nn

import hpctrain.torch as hvd
from rank_checks import flat, identical_everywhere

torch.set_num_threads(1)
T0 = time.monotonic()
hvd.init()
r, n = hvd.rank(), hvd.size()
DATA = "/usr/share/datasets/fashion-mnist"
BATCH = 8


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(raw[3])]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * raw[3]).reshape(dims)


IMAGES = ((torch.from_numpy(read_idx(DATA + "/t10k-images-idx3-ubyte.gz")[:2000].copy()).float() / 255.0
           - 0.2860) / 0.3530).unsqueeze(1)
LABELS = torch.from_numpy(read_idx(DATA + "/t10k-labels-idx1-ubyte.gz")[:2000].copy()).long()


def batch(step, part=0):
    start = ((step * 2 + part) * n + r) * BATCH % (IMAGES.shape[0] - BATCH)
    return IMAGES[start:start + BATCH], LABELS[start:start + BATCH]


def cnn():
    torch.manual_seed(7)  # the same start on every rank
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def make(compression, passes=1, op=None):
    model = cnn()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    kw = {} if op is None else {"op": op}
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                   compression=compression, backward_passes_per_step=passes, **kw)
    return model, opt


def train(model, opt, steps, first=0, passes=1):
    loss_fn = nn.CrossEntropyLoss()
    for step in range(first, first + steps):
        opt.zero_grad()
        for part in range(passes):
            x, y = batch(step, part)
            loss_fn(model(x), y).backward()
        opt.step()


def roundtrip(obj):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf)


MODES = {"powersgd": lambda **kw: hvd.Compression.powersgd(rank=2, **kw),
         "int8": lambda **kw: hvd.Compression.int8(**kw)}

plain, plain_opt = make(hvd.Compression.none)
train(plain, plain_opt, 5)
plain2, plain2_opt = make(hvd.Compression.none, passes=2)
train(plain2, plain2_opt, 3, passes=2)
identical_everywhere(plain, "uncompressed")

for mode, comp in MODES.items():
    # Compressed from step 2: identical ranks, not the uncompressed result.
    model, opt = make(comp(start_step=2))
    train(model, opt, 5)
    identical_everywhere(model, mode)
    if torch.equal(flat(model), flat(plain)):
        raise AssertionError("%s from step 2 gave the uncompressed parameters: nothing was compressed" % mode)
    diff = (flat(model) - flat(plain)).abs().max().item()
    if not diff < 0.5:
        raise AssertionError("%s: parameters %g away from uncompressed training after 5 steps" % (mode, diff))
    print("%s from step 2: ranks identical, max %.3g from uncompressed" % (mode, diff), flush=True)

    # op=Sum: identical ranks too.
    model, opt = make(comp(start_step=2), op=hvd.Sum)
    train(model, opt, 3)
    identical_everywhere(model, mode + " op=Sum")

    # A start step past the run: uncompressed training, bit for bit.
    model, opt = make(comp(start_step=100))
    train(model, opt, 5)
    if not torch.equal(flat(model), flat(plain)):
        raise AssertionError("%s before its start step differs from uncompressed training (max %g)"
                             % (mode, (flat(model) - flat(plain)).abs().max().item()))
    model, opt = make(comp(start_step=100), passes=2)
    train(model, opt, 3, passes=2)
    if not torch.equal(flat(model), flat(plain2)):
        raise AssertionError("%s before its start step, backward_passes_per_step=2, differs from "
                             "uncompressed training" % mode)
    print("%s before its start step: uncompressed bit for bit" % mode, flush=True)

    # Resume: 3 + 3 steps through state_dict() equals 6 straight.
    straight, s_opt = make(comp(start_step=2))
    train(straight, s_opt, 6)
    half, h_opt = make(comp(start_step=2))
    train(half, h_opt, 3)
    saved = roundtrip({"model": half.state_dict(), "optimizer": h_opt.state_dict()})
    if saved["optimizer"]["hpctrain_compression"]["step"] != 3:
        raise AssertionError("%s: the state_dict's compression step is %r, not 3"
                             % (mode, saved["optimizer"]["hpctrain_compression"]["step"]))
    # synchronize() and step() under skip_synchronize(): the same 3 steps.
    skip, k_opt = make(comp(start_step=2))
    loss_fn = nn.CrossEntropyLoss()
    for step in range(3):
        k_opt.zero_grad()
        x, y = batch(step)
        loss_fn(skip(x), y).backward()
        k_opt.synchronize()
        with k_opt.skip_synchronize():
            k_opt.step()
    if not torch.equal(flat(skip), flat(half)):
        raise AssertionError("%s: synchronize() + skip_synchronize() differs from step()" % mode)
    resumed, r_opt = make(comp(start_step=2))
    resumed.load_state_dict(saved["model"])
    r_opt.load_state_dict(saved["optimizer"])
    train(resumed, r_opt, 3, first=3)
    if not torch.equal(flat(resumed), flat(straight)):
        raise AssertionError("%s: 3 steps, state_dict, 3 steps differs from 6 straight (max %g)"
                             % (mode, (flat(resumed) - flat(straight)).abs().max().item()))
    # The same resume as if another rank had saved it: the step and shared
    # buffers, no residuals. Ranks still agree; the parameters are not exact.
    other = copy.deepcopy(saved["optimizer"])
    other["hpctrain_compression"]["rank"] = (r + 1) % n if n > 1 else 1
    lost, l_opt = make(comp(start_step=2))
    lost.load_state_dict(saved["model"])
    l_opt.load_state_dict(other)
    train(lost, l_opt, 3, first=3)
    identical_everywhere(lost, mode + " resumed without residuals")
    if torch.equal(flat(lost), flat(straight)):
        raise AssertionError("%s: the resume without residuals was exact too: the residuals were not "
                             "what the state_dict carried" % mode)
    print("%s: state_dict resume bit-exact (without residuals: max %.3g off)"
          % (mode, (flat(lost) - flat(straight)).abs().max().item()), flush=True)

    # Rank 0's checkpoint on every rank, then broadcast_optimizer_state (the
    # usual Horovod resume): ranks agree and go on compressing.
    ckpt = hvd.broadcast_object(saved if r == 0 else None, root_rank=0, name="ckpt." + mode)
    m0, o0 = make(comp(start_step=2))
    m0.load_state_dict(ckpt["model"])
    if r == 0:
        o0.load_state_dict(ckpt["optimizer"])
    hvd.broadcast_optimizer_state(o0, root_rank=0)
    if o0._hvd_lossy.step != 3:
        raise AssertionError("%s: after broadcast_optimizer_state rank %d is at compression step %d, not 3"
                             % (mode, r, o0._hvd_lossy.step))
    train(m0, o0, 2, first=3)
    identical_everywhere(m0, mode + " after rank 0's checkpoint")


# The reduction runs with the GIL released: while the other ranks wait for
# rank 0 (1 s late), a Python thread of theirs keeps counting.
def gil_released():
    model, opt = make(hvd.Compression.powersgd(rank=2, start_step=0))
    x, y = batch(0)
    nn.CrossEntropyLoss()(model(x), y).backward()
    grads = [(name, p.grad) for name, p in model.named_parameters()]
    count, stop = [0], threading.Event()

    def spin():
        while not stop.is_set():
            count[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    # The thread's rate while this one sleeps (the GIL free) ...
    before = count[0]
    time.sleep(0.2)
    per_second = (count[0] - before) / 0.2
    if r == 0:
        time.sleep(1.0)
    # ... and its count while this one waits in reduce for rank 0 (~1 s). Held,
    # the GIL would let it run at most a switch interval (5 ms) or two.
    before = count[0]
    opt._hvd_lossy.reduce(grads, True)
    during = count[0] - before
    stop.set()
    t.join()
    if r != 0 and during < 0.2 * per_second:
        raise AssertionError("a Python thread counted %d times during a 1 s reduce, %d in 0.2 s of sleep: "
                             "the reduce held the GIL" % (during, per_second * 0.2))
    print("a Python thread counted %d times during the reduce (%d per second of sleep)"
          % (during, per_second), flush=True)


gil_released()


# Bad input: one line each, naming the problem and the fix.
def one_line(exc_type, what, words, fn):
    try:
        fn()
    except exc_type as e:
        msg = str(e)
        if "\n" in msg or not all(w in msg for w in words):
            raise AssertionError("%s: the error %r should be one line naming %s" % (what, msg, words))
        print("%s: %s" % (what, msg), flush=True)
        return
    raise AssertionError("%s: no %s" % (what, exc_type.__name__))


one_line(ValueError, "powersgd rank 0", ["rank=0", "1 to 1024"], lambda: hvd.Compression.powersgd(rank=0))
one_line(ValueError, "negative start step", ["start_step=-1", ">= 0"],
         lambda: hvd.Compression.int8(start_step=-1))


class MyPowerSGD(type(hvd.Compression.powersgd)):
    @staticmethod
    def compress(tensor):
        return tensor, None


one_line(ValueError, "user-defined compressor with lossy", ["MyPowerSGD", "user-defined", "powersgd:4"],
         lambda: make(MyPowerSGD()))
one_line(ValueError, "op=Max with lossy", ["hvd.Average or hvd.Sum"],
         lambda: make(hvd.Compression.int8, op=hvd.Max))
one_line(NotImplementedError, "op=Adasum with lossy", ["Adasum"],
         lambda: make(hvd.Compression.powersgd, op=hvd.Adasum))
one_line(hvd.HpctValueError, "allreduce with powersgd", ["hvd.allreduce", "DistributedOptimizer"],
         lambda: hvd.allreduce(torch.ones(4, 4), name="bad", compression=hvd.Compression.powersgd))
one_line(hvd.HpctValueError, "grouped_allreduce with int8", ["hvd.grouped_allreduce", "DistributedOptimizer"],
         lambda: hvd.grouped_allreduce([torch.ones(4)], name="bad", compression=hvd.Compression.int8))
one_line(ValueError, "compress() of a lossy mode", ["DistributedOptimizer"],
         lambda: hvd.Compression.int8.compress(torch.ones(3)))


def sparse_step():
    emb = nn.Embedding(10, 4, sparse=True)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(emb.parameters(), lr=0.1),
                                   named_parameters=emb.named_parameters(), compression=hvd.Compression.int8)
    emb(torch.tensor([1, 2])).sum().backward()
    opt.step()


one_line(ValueError, "sparse gradient with lossy", ["weight", "sparse_as_dense=True"], sparse_step)


def wrong_mode():
    model, opt = make(hvd.Compression.powersgd(start_step=0))
    train(model, opt, 1)
    sd = opt.state_dict()
    other_model, other = make(hvd.Compression.int8)
    other.load_state_dict(sd)


one_line(ValueError, "powersgd state into int8", ["powersgd:4", "int8", "compression="], wrong_mode)
# After every refusal the ranks are still in step.
hvd.barrier()
print("lossy ok after %.1f s" % (time.monotonic() - T0), flush=True)
