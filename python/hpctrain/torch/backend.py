"""The "hpctrain" torch.distributed backend.

After ``import hpctrain.torch``, ``dist.init_process_group("hpctrain")``
works with no other argument:

- under ``hpctrain launch``, which exports torchrun's variables (RANK,
  WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), plain
  env:// rendezvous finds them;
- under mpirun or srun, which do not, the wrapper around init_process_group
  fills the missing ones from hpctrain's own rendezvous before torch reads
  them: rank and size from the launcher, and rank 0's address and a free port
  of its, broadcast over hpctrain's engine.

Under torchrun, which starts no hpctrain launcher, the ranks meet through
the store init_process_group made (torchrun's MASTER_ADDR:MASTER_PORT): the
engine's Gloo connections and shared memory are set up through it
(python/src/c10d_store.h), with the rank, size and LOCAL_* torchrun gives.

Otherwise torch.distributed's store only serves its own bookkeeping (the barrier
at the end of init_process_group); the collectives go through the engine
(python/src/process_group.h): DDP's buckets are allreduced by the same
negotiation, fusion and shared memory as hpctrain's C++ training.
"""
import functools
import os
import socket

import torch.distributed as dist

NAME = "hpctrain"


_groups_made = 0  # every rank creates groups in the same order (torch requires it)


def _under_torchrun():
    """Started by torchrun (or another torch.distributed launcher that sets
    RANK and WORLD_SIZE), not by hpctrain launch, mpirun or srun."""
    env = os.environ
    if "HPCT_RANK" in env or "OMPI_COMM_WORLD_RANK" in env or "PMI_RANK" in env or "SLURM_PROCID" in env:
        return False
    return "TORCHELASTIC_RUN_ID" in env or ("RANK" in env and "WORLD_SIZE" in env)


def _create(store, rank, size, timeout):
    global _groups_made
    from . import _C, _runtime
    from .mpi_ops import _state
    if _under_torchrun():
        with _state.lock:
            if _state.runtime is None:
                _state.runtime = _C.Runtime.from_torch_store(store, rank, size)
                _state.counters.clear()
    index, _groups_made = _groups_made, _groups_made + 1
    return _C.create_process_group(_runtime(), rank, size, index)


def _free_port(host):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _master_host(rt):
    if rt.local_size() == rt.size():
        return "127.0.0.1"  # every rank on this host
    return os.environ.get("HPCT_HOSTNAME") or socket.getfqdn()


def fill_env():
    """Sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and
    MASTER_PORT from hpctrain's rendezvous where they are not set already."""
    from . import _runtime, broadcast_object
    rt = _runtime()
    env = os.environ
    env.setdefault("RANK", str(rt.rank()))
    env.setdefault("WORLD_SIZE", str(rt.size()))
    env.setdefault("LOCAL_RANK", str(rt.local_rank()))
    env.setdefault("LOCAL_WORLD_SIZE", str(rt.local_size()))
    if "MASTER_ADDR" not in env or "MASTER_PORT" not in env:
        addr = None
        if rt.rank() == 0:
            host = env.get("MASTER_ADDR") or _master_host(rt)
            addr = (host, env.get("MASTER_PORT") or str(_free_port("" if host != "127.0.0.1" else host)))
        host, port = broadcast_object(addr, 0, "hpctrain.master_addr")
        env.setdefault("MASTER_ADDR", host)
        env.setdefault("MASTER_PORT", port)


_original_init = None


def _init_process_group(backend=None, init_method=None, *args, **kwargs):
    if (backend is not None and str(backend).lower() == NAME and init_method is None
            and kwargs.get("store") is None and not _under_torchrun()):
        fill_env()
    return _original_init(backend, init_method, *args, **kwargs)


def register():
    global _original_init
    if not hasattr(dist.Backend, NAME.upper()):
        # The engine moves CPU and CUDA tensors (a c10d::Backend,
        # process_group.h; CUDA ones on the engine's device path).
        dist.Backend.register_backend(NAME, _create, devices=["cpu", "cuda"])
    if _original_init is None:
        _original_init = dist.init_process_group
        wrapped = functools.wraps(_original_init)(_init_process_group)
        dist.init_process_group = wrapped
        dist.distributed_c10d.init_process_group = wrapped
