# Rank program: a plain torch.distributed script that knows nothing of
# hpctrain (gloo, env:// rendezvous) runs under `hpctrain launch` because
# the launcher exports torchrun's variables.
import os

import torch
import torch.distributed as dist

for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
    assert v in os.environ, "%s is not set by the launcher" % v
assert os.environ["RANK"] == os.environ["HPCT_RANK"], (os.environ["RANK"], os.environ["HPCT_RANK"])
assert os.environ["LOCAL_RANK"] == os.environ["HPCT_LOCAL_RANK"]
dist.init_process_group("gloo")
r, n = dist.get_rank(), dist.get_world_size()
assert n == int(os.environ["HPCT_SIZE"])
t = torch.tensor([float(r)])
dist.all_reduce(t)
assert t.item() == n * (n - 1) / 2, t
print("torchrun env ok rank %d of %d (MASTER_ADDR %s)" % (r, n, os.environ["MASTER_ADDR"]))
