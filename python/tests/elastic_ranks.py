# Rank program of the Python elastic test (run_test.py elastic), in the style
# of Horovod's elastic examples: hvd.init(), a TorchState with the model, the
# optimizer and plain attributes, a reset callback, @hvd.elastic.run.
#
#   elastic_ranks.py TARGET FAIL_WORKER FAIL_STEP FINAL_SIZE
#
# Trains a small MLP on Fashion-MNIST, committing every 5 steps, until the
# job's step count reaches TARGET in a world of FINAL_SIZE workers (at most
# 3000 steps). Worker FAIL_WORKER SIGKILLs itself at step FAIL_STEP (or its
# first step after) in its first world. Every world checks, right after the sync, that the
# parameters, the step and the attributes are identical on every rank, and
# prints one line the test reads.
import os
import signal
import sys
import time

import numpy as np
import torch

import hpctrain.torch as hvd

TARGET, FAIL_WORKER, FAIL_STEP, FINAL_SIZE = (int(a) for a in sys.argv[1:5])
HARD_CAP = 3000
COMMIT_EVERY = 5
BATCH = 32

torch.set_num_threads(1)
torch.manual_seed(0)
hvd.init()  # joins the job's first world


def fashion_mnist(n):
    import gzip
    d = "/usr/share/datasets/fashion-mnist"
    with gzip.open(os.path.join(d, "train-images-idx3-ubyte.gz")) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16)[:n * 784]
    with gzip.open(os.path.join(d, "train-labels-idx1-ubyte.gz")) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)[:n]
    return torch.from_numpy(x.reshape(n, 784).astype(np.float32) / 255.0), torch.from_numpy(y.astype(np.int64))


images, labels = fashion_mnist(4096)
model = torch.nn.Sequential(torch.nn.Linear(784, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
base_lr = 0.05
opt = torch.optim.SGD(model.parameters(), lr=base_lr * hvd.size(), momentum=0.9)
opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
state = hvd.elastic.TorchState(model, opt, batches_done=0, history=[])
resets = []


def on_reset():
    resets.append(hvd.size())
    for group in opt.param_groups:
        group["lr"] = base_lr * hvd.size()


state.register_reset_callbacks([on_reset])
worlds = 0
worker_id = -1  # this worker's id in the job (state.worker_id inside run)


def flat_params():
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


@hvd.elastic.run
def train(state):
    global worlds, worker_id
    worlds += 1
    worker_id = state.worker_id
    r, n = hvd.rank(), hvd.size()
    # Synced: every rank holds rank 0's parameters, step and attributes.
    mine = torch.cat([flat_params(), torch.tensor([float(state.step), float(state.batches_done),
                                                   float(len(state.history))])])
    every = hvd.allgather(mine.unsqueeze(0), name="check.sync")
    same = bool((every == every[0]).all())
    lr = opt.param_groups[0]["lr"]
    print("worker %d world %d: rank %d of %d at step %d, synced state identical on every rank: %s, lr %.3f"
          % (state.worker_id, worlds, r, n, state.step, "yes" if same else "NO", lr), flush=True)
    if not same or abs(lr - base_lr * n) > 1e-9:
        os._exit(3)
    while not (state.step >= TARGET and n == FINAL_SIZE):
        if state.step >= HARD_CAP:
            print("worker %d: %d steps and the world is still of size %d, not %d"
                  % (state.worker_id, state.step, n, FINAL_SIZE), flush=True)
            os._exit(4)
        if state.worker_id == FAIL_WORKER and worlds == 1 and state.step >= FAIL_STEP:
            print("worker %d kills itself at step %d" % (state.worker_id, state.step), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        # The global batch of this step: each rank its slice of it.
        start = (state.step * BATCH * n + r * BATCH) % (images.shape[0] - BATCH)
        x, y = images[start:start + BATCH], labels[start:start + BATCH]
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()  # counts state.step
        state.batches_done += 1
        if state.step % COMMIT_EVERY == 0:
            state.history.append(state.step)
            state.commit()  # a joining host enters here (HostsUpdatedInterrupt)
        time.sleep(0.01)
    return state.step


steps = train(state)
final = hvd.allgather(flat_params().unsqueeze(0), name="check.final")
print("worker %d done: step %d, batches_done %d, commits in history %d, resets %s, size %d, "
      "parameters identical on every rank: %s"
      % (worker_id, steps, state.batches_done, len(state.history), resets, hvd.size(),
         "yes" if bool((final == final[0]).all()) else "NO"), flush=True)
