# Rank program: hvd.DistributedOptimizer(shard=1|2) (ZeRO stages 1 and 2).
# After STEPS steps of Adam (and SGD with momentum) the parameters are bit for
# bit those of the unsharded DistributedOptimizer on the same start and data,
# identical on every rank; each rank's optimizer state is its 1/N part (the
# parts add up to the unsharded state); a rank's state_dict loads back on
# that rank and is refused on another; shard=3 and shard with a lossy
# compression are refused with a message naming the fix.
# argv: HPCT_OVERLAP mode (on | off), steps.
import os
import sys

os.environ["HPCT_OVERLAP"] = sys.argv[1]
STEPS = int(sys.argv[2])

import torch  # noqa: E402

import hpctrain.torch as hvd  # noqa: E402
from hpctrain.torch import zero  # noqa: E402
from rank_checks import flat, identical_everywhere  # noqa: E402

torch.set_num_threads(1)
hvd.init()
r, n = hvd.rank(), hvd.size()


def model_of():
    torch.manual_seed(7)
    return torch.nn.Sequential(torch.nn.Linear(40, 96), torch.nn.ReLU(), torch.nn.Linear(96, 96),
                               torch.nn.ReLU(), torch.nn.Linear(96, 10))


OPTS = {"adam": lambda ps: torch.optim.Adam(ps, lr=1e-3, weight_decay=1e-4),
        "sgd": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9)}


def train(opt_name, shard, passes=1, steps=STEPS, schedule=True):
    model = model_of()
    opt = hvd.DistributedOptimizer(OPTS[opt_name](model.parameters()),
                                   named_parameters=model.named_parameters(),
                                   backward_passes_per_step=passes, shard=shard)
    # A schedule acting on the wrapper must reach the parts' optimizer.
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=max(1, steps // 2),
                                            gamma=0.5 if schedule else 1.0)
    loss_fn = torch.nn.CrossEntropyLoss()
    for step in range(steps):
        opt.zero_grad()
        for part in range(passes):
            g = torch.Generator().manual_seed(1000 * step + 10 * r + part)
            x, y = torch.randn(16, 40, generator=g), torch.randint(0, 10, (16,), generator=g)
            loss_fn(model(x), y).backward()
        opt.step()
        sched.step()
    return model, opt


def check_equal(opt_name, shard, passes=1):
    what = "%s shard=%d passes=%d HPCT_OVERLAP=%s" % (opt_name, shard, passes, sys.argv[1])
    ref, ref_opt = train(opt_name, 0, passes)
    got, opt = train(opt_name, shard, passes)
    identical_everywhere(got, what)
    if not torch.equal(flat(got), flat(ref)):
        diff = (flat(got) - flat(ref)).abs().max().item()
        raise AssertionError("%s: differs from the unsharded optimizer by %g after %d steps"
                             % (what, diff, STEPS))
    full, mine = zero.state_bytes(ref_opt), zero.state_bytes(opt)
    moments = torch.tensor([float(_moment_bytes(opt))])
    total = hvd.allreduce(moments, op=hvd.Sum).item()
    assert total == _moment_bytes(ref_opt), "%s: the parts add up to %d state bytes, not %d" % (
        what, total, _moment_bytes(ref_opt))
    # 1/N, plus at most one ALIGN run of float32 per parameter tensor and Adam's step counters.
    slack = len(list(got.parameters())) * (zero.ALIGN * 4 * 2 + 4)
    assert mine <= full / n + slack, "%s: %d state bytes on rank %d, 1/%d of %d is %d" % (
        what, mine, r, n, full, full // n)
    print("[%d] %s: bit-identical after %d steps; state %d of %d bytes" % (r, what, STEPS, mine, full),
          flush=True)
    return got, opt


def _moment_bytes(opt):
    inner = getattr(opt, "_hvd_inner", opt)
    return sum(v.numel() * v.element_size() for st in inner.state.values()
               for k, v in st.items() if torch.is_tensor(v) and k != "step")


def check_resume():
    # A rank's own state_dict resumes bit for bit; another rank's is refused.
    whole, _ = train("adam", 2, steps=6, schedule=False)
    model, opt = train("adam", 2, steps=3, schedule=False)
    saved = opt.state_dict()
    model2 = model_of()
    model2.load_state_dict(model.state_dict())
    opt2 = hvd.DistributedOptimizer(OPTS["adam"](model2.parameters()),
                                    named_parameters=model2.named_parameters(), shard=2)
    opt2.load_state_dict(saved)
    loss_fn = torch.nn.CrossEntropyLoss()
    for step in range(3, 6):
        opt2.zero_grad()
        g = torch.Generator().manual_seed(1000 * step + 10 * r)
        x, y = torch.randn(16, 40, generator=g), torch.randint(0, 10, (16,), generator=g)
        loss_fn(model2(x), y).backward()
        opt2.step()
    assert torch.equal(flat(model2), flat(whole)), "a resumed shard=2 run differs from an uninterrupted one"
    others = hvd.allgather_object(saved)
    if n > 1:
        try:
            opt2.load_state_dict(others[(r + 1) % n])
        except ValueError as e:
            assert "rank %d's part of %d ranks" % ((r + 1) % n, n) in str(e), str(e)
        else:
            raise AssertionError("another rank's state_dict was loaded")


def check_refusals():
    model = model_of()
    for kwargs, words in [({"shard": 3}, "hpctrain train --shard 3"),
                          ({"shard": 2, "compression": hvd.Compression.int8}, "drop compression="),
                          ({"shard": 5}, "use 0 (no sharding), 1")]:
        try:
            hvd.DistributedOptimizer(OPTS["adam"](model.parameters()),
                                     named_parameters=model.named_parameters(), **kwargs)
        except ValueError as e:
            assert words in str(e), "%s: %s" % (kwargs, e)
        else:
            raise AssertionError("%s was accepted" % kwargs)


check_refusals()
for name in ("adam", "sgd"):
    for stage in (1, 2):
        check_equal(name, stage)
check_equal("adam", 2, passes=2)
check_resume()
print("[%d] shard checks ok" % r, flush=True)
