# Rank program, 2 ranks: rank 1 catches an error before the call that rank 0
# makes (allreduce "x") and goes on to a collective of its own. With only
# HPCT_TIMEOUT_S=10 set, each rank's lonely call ends within the bound with
# HpctError code "timeout" naming its tensor and the rank that never sent it;
# then both ranks' next collective works.
import os
import time

os.environ["HPCT_TIMEOUT_S"] = "10"
os.environ.pop("HPCT_STALL_ABORT_S", None)

import torch  # noqa: E402

import hpctrain.torch as hvd  # noqa: E402

hvd.init()
r = hvd.rank()
assert hvd.size() == 2
hvd.barrier()

t0 = time.monotonic()
try:
    if r == 0:
        hvd.allreduce(torch.ones(4), name="x")
    else:
        try:
            raise KeyError("the batch rank 1 could not load")
        except KeyError:
            pass  # ... and goes on without calling allreduce "x"
        hvd.allreduce(torch.ones(4), name="other")
    raise AssertionError("rank %d: the lonely allreduce completed" % r)
except hvd.HpctError as e:
    waited = time.monotonic() - t0
    mine, missing = ("x", 1) if r == 0 else ("other", 0)
    print("rank %d: %s after %.1f s: %s" % (r, e.code, waited, e), flush=True)
    assert e.code == "timeout", e.code
    assert "'%s'" % mine in str(e) and "not by ranks [%d]" % missing in str(e), str(e)
    assert 9.5 <= waited <= 15, "bound 10 s, waited %.1f s" % waited

out = hvd.allreduce(torch.full((3,), float(r + 1)), op=hvd.Sum, name="next")
assert torch.equal(out, torch.full((3,), 3.0)), out
out = hvd.allreduce(torch.full((2,), float(r + 1)), op=hvd.Sum, name="x")  # the name is free again
assert torch.equal(out, torch.full((2,), 3.0)), out
print("stall: rank %d ended within the bound and its next collectives worked" % r, flush=True)
