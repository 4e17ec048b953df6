# Rank program: the last rank SIGKILLs itself in the middle of training; every
# other rank must raise HpctError from optimizer.step() (or an allreduce)
# within the bound given in argv[1] seconds, and says so on stdout.
import os
import signal
import sys
import time

import torch

import hpctrain.torch as hvd

bound = float(sys.argv[1])
# The launcher stops the job when a rank dies (SIGTERM, then SIGKILL after
# --grace): the survivors ignore SIGTERM so that they show how they fail.
signal.signal(signal.SIGTERM, signal.SIG_IGN)
torch.set_num_threads(1)
hvd.init()
r, n = hvd.rank(), hvd.size()
model = torch.nn.Linear(100, 10)
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                               named_parameters=model.named_parameters())
for step in range(1000):
    if step == 3 and r == n - 1:
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    opt.zero_grad()
    model(torch.randn(16, 100)).sum().backward()
    t0 = time.monotonic()
    try:
        opt.step()
    except hvd.HpctError as e:
        waited = time.monotonic() - t0
        print("rank %d raised %s after %.2f s at step %d: %s" % (r, e.code, waited, step, e), flush=True)
        if waited > bound:
            print("rank %d: took longer than %.0f s" % (r, bound), flush=True)
            os._exit(3)
        os._exit(0)
    time.sleep(0.01)
print("rank %d never saw the dead rank" % r, flush=True)
os._exit(4)
