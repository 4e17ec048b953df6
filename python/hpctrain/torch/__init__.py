"""hpctrain.torch: Horovod's PyTorch API over hpctrain's engine.

    import hpctrain.torch as hvd          # instead of: import horovod.torch as hvd
    hvd.init()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())

Importing it also registers the "hpctrain" torch.distributed backend, so
``dist.init_process_group("hpctrain")`` works under hpctrain launch, mpirun
or srun (backend.py). Start the script with ``hpctrain launch -np N -- python3
train.py`` (or mpirun, or srun).

Errors are HpctError (a RuntimeError) with the engine's message and a
``code`` ("timeout", "peer-failure", "mismatch", ...); a bad argument is
HpctValueError, also a ValueError. Every wait is bounded: a dead peer raises
on every other rank, and a tensor some ranks never submit fails with code
"timeout" on the ranks that did (HPCT_STALL_ABORT_S, HPCT_TIMEOUT_S unless set).
What is and is not Horovod-compatible: docs/python.md.
"""
import atexit as _atexit

import torch as _torch

from . import _build

if _torch.__version__ != _build.TORCH_VERSION:
    raise ImportError(
        "hpctrain.torch was built for torch %s but this python3 imports torch %s (%s); "
        "rebuild hpctrain against this torch (make build, or "
        "pip install --no-build-isolation ./python in this environment) "
        "or use the python3 it was built for"
        % (_build.TORCH_VERSION, _torch.__version__, getattr(_torch, "__file__", "?")))

import torch.distributed as _dist  # noqa: E402,F401  (registers c10d's types before _C)

from .mpi_ops import (  # noqa: E402,F401
    init, shutdown, is_initialized, rank, size, local_rank, local_size,
    mpi_built, mpi_enabled, mpi_threads_supported, gloo_built, gloo_enabled, nccl_built,
    ddl_built, ccl_built, cuda_built, rocm_built, start_timeline, stop_timeline, set_phase,
    allreduce, allreduce_, allreduce_async, allreduce_async_,
    grouped_allreduce, grouped_allreduce_, grouped_allreduce_async, grouped_allreduce_async_,
    sparse_allreduce_async, allgather, allgather_async, grouped_allgather,
    grouped_allgather_async, broadcast, broadcast_, broadcast_async, broadcast_async_,
    alltoall, alltoall_async, reducescatter, reducescatter_async, grouped_reducescatter,
    grouped_reducescatter_async, join, barrier, poll, synchronize,
    ProcessSet, global_process_set, add_process_set, remove_process_set,
    Average, Sum, Min, Max, Product, Adasum, ReduceOp,
    HpctError, HpctValueError, HorovodInternalError, _runtime, _rt)
from .compression import Compression, Compressor  # noqa: E402,F401
from .functions import (  # noqa: E402,F401
    broadcast_parameters, broadcast_optimizer_state, broadcast_object, allgather_object)
from .optimizer import DistributedOptimizer  # noqa: E402,F401
from . import backend as _backend  # noqa: E402  (registers "hpctrain" with torch.distributed)
from . import elastic  # noqa: E402,F401  (hvd.elastic.run, hvd.elastic.TorchState)

__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "mpi_built", "mpi_enabled", "mpi_threads_supported", "gloo_built", "gloo_enabled",
    "nccl_built", "ddl_built", "ccl_built", "cuda_built", "rocm_built",
    "start_timeline", "stop_timeline",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
    "grouped_allreduce_async_", "sparse_allreduce_async",
    "allgather", "allgather_async", "grouped_allgather", "grouped_allgather_async",
    "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "alltoall", "alltoall_async", "reducescatter", "reducescatter_async",
    "grouped_reducescatter", "grouped_reducescatter_async", "join", "barrier",
    "poll", "synchronize", "ProcessSet", "global_process_set", "add_process_set",
    "remove_process_set", "Average", "Sum", "Min", "Max", "Product", "Adasum",
    "Compression", "Compressor", "DistributedOptimizer", "broadcast_parameters",
    "broadcast_optimizer_state", "broadcast_object", "allgather_object",
    "HpctError", "HpctValueError", "HorovodInternalError",
]

_atexit.register(shutdown)
_backend.register()
