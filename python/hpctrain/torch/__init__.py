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
``code`` ("timeout", "peer-failure", "mismatch", ...). Every wait is bounded
by HPCT_TIMEOUT_S: a dead peer raises on every other rank.
"""
import atexit as _atexit
import threading as _threading

import torch as _torch

from . import _build

if _torch.__version__ != _build.TORCH_VERSION:
    raise ImportError(
        "hpctrain.torch was built for torch %s but this python3 imports torch %s (%s); "
        "rebuild hpctrain against this torch (make build) or use the python3 it was built for"
        % (_build.TORCH_VERSION, _torch.__version__, getattr(_torch, "__file__", "?")))

import torch.distributed as _dist  # noqa: E402  (registers c10d's types before _C)

from . import _C  # noqa: E402
from ._C import HpctError  # noqa: E402,F401

__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "allgather", "allgather_async", "broadcast", "broadcast_", "broadcast_async",
    "broadcast_async_", "poll", "synchronize", "Average", "Sum", "Min", "Max", "Product",
    "Compression", "DistributedOptimizer", "broadcast_parameters",
    "broadcast_optimizer_state", "broadcast_object", "allgather_object", "HpctError",
]


class ReduceOp:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return "hpctrain.torch." + self.name.capitalize()


Average = ReduceOp("avg")
Sum = ReduceOp("sum")
Min = ReduceOp("min")
Max = ReduceOp("max")
Product = ReduceOp("product")


class Compression:
    """Wire compression of float32 allreduces, done by the engine (engine/compression.h)."""

    class _Kind:
        def __init__(self, name):
            self.name = name

        def __repr__(self):
            return "Compression." + self.name

    none = _Kind("none")
    fp16 = _Kind("fp16")
    bf16 = _Kind("bf16")


class _State:
    """This process's membership (one per process, like Horovod's)."""

    def __init__(self):
        self.lock = _threading.Lock()
        self.runtime = None
        self.handles = {}       # int -> (Operation, post) for the _async forms
        self.next_handle = 0
        self.counters = {}      # op -> count, for automatic names


_state = _State()


def init():
    """Joins the job (hpctrain launch, mpirun, srun, or one rank alone). Idempotent."""
    with _state.lock:
        if _state.runtime is None:
            _state.runtime = _C.Runtime()
    return None


def shutdown():
    """Leaves the job: pending operations fail on every rank. init() may be called again."""
    with _state.lock:
        rt, _state.runtime = _state.runtime, None
        _state.handles.clear()
    if rt is not None:
        rt.shutdown()


_atexit.register(shutdown)


def is_initialized():
    return _state.runtime is not None


def _rt():
    rt = _state.runtime
    if rt is None:
        raise ValueError("hpctrain.torch has not been initialized; call hvd.init() first")
    return rt


def _runtime():
    """The Runtime, joining the job first when needed (the torch.distributed backend)."""
    init()
    return _state.runtime


def rank():
    return _rt().rank()


def size():
    return _rt().size()


def local_rank():
    return _rt().local_rank()


def local_size():
    return _rt().local_size()


def _auto_name(op, name):
    if name is not None:
        return str(name)
    with _state.lock:
        n = _state.counters.get(op, 0)
        _state.counters[op] = n + 1
    return "%s.noname.%d" % (op, n)


def _op_of(average, op):
    if op is not None and average is not None:
        raise ValueError("pass either op or average, not both")
    if op is None:
        op = Sum if average is False else Average
    if not isinstance(op, ReduceOp):
        raise ValueError("op must be hvd.Average, hvd.Sum, hvd.Min, hvd.Max or hvd.Product, not %r" % (op,))
    return op


def _check_cpu(tensor, what):
    if not isinstance(tensor, _torch.Tensor):
        raise TypeError("%s expects a torch.Tensor, got %s" % (what, type(tensor).__name__))
    if tensor.device.type != "cpu":
        raise ValueError("%s: tensor on %s; this build moves CPU tensors only" % (what, tensor.device))


def _register(op, post):
    with _state.lock:
        h = _state.next_handle
        _state.next_handle += 1
        _state.handles[h] = (op, post)
    return h


def poll(handle):
    """True once the operation of handle is done. Never blocks."""
    with _state.lock:
        entry = _state.handles.get(handle)
    if entry is None:
        raise ValueError("unknown handle %r (already synchronized?)" % (handle,))
    return entry[0].poll()


def synchronize(handle):
    """Waits for the operation of handle and returns its output tensor."""
    with _state.lock:
        entry = _state.handles.pop(handle, None)
    if entry is None:
        raise ValueError("unknown handle %r (already synchronized?)" % (handle,))
    op, post = entry
    out = op.wait()  # releases the GIL
    return post(out) if post is not None else out


def _in_place(tensor, what, submit):
    """Runs submit(t) on tensor itself when contiguous, else on a contiguous copy copied back."""
    _check_cpu(tensor, what)
    if tensor.is_contiguous():
        return _register(submit(tensor), None)
    work = tensor.contiguous()

    def post(out):
        tensor.copy_(out)
        return tensor
    return _register(submit(work), post)


def allreduce_async_(tensor, average=None, name=None, op=None, compression=Compression.none,
                     prescale_factor=1.0, postscale_factor=1.0):
    """In place: tensor becomes the reduction over ranks. Returns a handle."""
    op = _op_of(average, op)
    name = _auto_name("allreduce", name)
    comp = "" if compression is None else compression.name
    if prescale_factor != 1.0:
        with _torch.no_grad():
            tensor.mul_(prescale_factor)

    def submit(t):
        return _rt().allreduce(t, name, op.name, comp)
    h = _in_place(tensor, "allreduce of " + name, submit)
    if postscale_factor != 1.0:
        o, post = _state.handles[h]

        def scaled(out, post=post):
            out = post(out) if post is not None else out
            with _torch.no_grad():
                out.mul_(postscale_factor)
            return out
        _state.handles[h] = (o, scaled)
    return h


def allreduce_async(tensor, average=None, name=None, op=None, compression=Compression.none,
                    prescale_factor=1.0, postscale_factor=1.0):
    """Out of place: returns a handle whose synchronize() gives a new tensor."""
    _check_cpu(tensor, "allreduce")
    return allreduce_async_(tensor.detach().clone(memory_format=_torch.contiguous_format), average,
                            name, op, compression, prescale_factor, postscale_factor)


def allreduce_(tensor, average=None, name=None, op=None, compression=Compression.none,
               prescale_factor=1.0, postscale_factor=1.0):
    return synchronize(allreduce_async_(tensor, average, name, op, compression,
                                        prescale_factor, postscale_factor))


def allreduce(tensor, average=None, name=None, op=None, compression=Compression.none,
              prescale_factor=1.0, postscale_factor=1.0):
    return synchronize(allreduce_async(tensor, average, name, op, compression,
                                       prescale_factor, postscale_factor))


def allgather_async(tensor, name=None):
    """Every rank's tensor concatenated along dimension 0 (first dimensions may differ)."""
    _check_cpu(tensor, "allgather")
    name = _auto_name("allgather", name)
    t = tensor.detach()
    scalar = t.dim() == 0
    if scalar:
        t = t.reshape(1)
    t = t.contiguous()
    return _register(_rt().allgather(t, name), None)


def allgather(tensor, name=None):
    return synchronize(allgather_async(tensor, name))


def broadcast_async_(tensor, root_rank, name=None):
    """In place: root_rank's tensor on every rank. Returns a handle."""
    name = _auto_name("broadcast", name)
    return _in_place(tensor, "broadcast of " + name, lambda t: _rt().broadcast(t, name, root_rank))


def broadcast_async(tensor, root_rank, name=None):
    _check_cpu(tensor, "broadcast")
    return broadcast_async_(tensor.detach().clone(memory_format=_torch.contiguous_format),
                            root_rank, name)


def broadcast_(tensor, root_rank, name=None):
    return synchronize(broadcast_async_(tensor, root_rank, name))


def broadcast(tensor, root_rank, name=None):
    return synchronize(broadcast_async(tensor, root_rank, name))


def broadcast_parameters(params, root_rank):
    """Copies root_rank's parameters and buffers to every rank, in place.

    params: a state_dict(), named_parameters() or a list of (name, tensor)."""
    if isinstance(params, dict):
        items = sorted(params.items())
    elif isinstance(params, list) or hasattr(params, "__iter__"):
        items = list(params)
    else:
        raise ValueError("invalid params of type %s" % type(params).__name__)
    handles = []
    with _torch.no_grad():
        for name, p in items:
            if p is None or not isinstance(p, _torch.Tensor):
                continue
            handles.append(broadcast_async_(p.data if p.requires_grad else p, root_rank,
                                            "bcast.param." + name))
    for h in handles:
        synchronize(h)


def broadcast_object(obj, root_rank=0, name=None):
    """root_rank's picklable object on every rank (tensors inside travel too)."""
    import io
    name = _auto_name("broadcast_object", name)
    if rank() == root_rank:
        buf = io.BytesIO()
        _torch.save(obj, buf)
        data = bytearray(buf.getvalue())
        payload = _torch.frombuffer(data, dtype=_torch.uint8) if data else _torch.empty(0, dtype=_torch.uint8)
        length = _torch.tensor([payload.numel()], dtype=_torch.int64)
    else:
        length = _torch.zeros(1, dtype=_torch.int64)
    broadcast_(length, root_rank, name + ".length")
    if rank() != root_rank:
        payload = _torch.empty(int(length.item()), dtype=_torch.uint8)
    broadcast_(payload, root_rank, name + ".bytes")
    if rank() == root_rank:
        return obj
    return _torch.load(io.BytesIO(payload.numpy().tobytes()))


def allgather_object(obj, name=None):
    """Every rank's picklable object, in rank order."""
    import io
    import pickle
    name = _auto_name("allgather_object", name)
    data = bytearray(pickle.dumps(obj))
    payload = _torch.frombuffer(data, dtype=_torch.uint8)
    sizes = allgather(_torch.tensor([payload.numel()], dtype=_torch.int64), name + ".sizes")
    allbytes = allgather(payload, name + ".bytes").numpy().tobytes()
    out, off = [], 0
    for n in sizes.tolist():
        out.append(pickle.load(io.BytesIO(allbytes[off:off + n])))
        off += n
    return out


def broadcast_optimizer_state(optimizer, root_rank):
    """Copies root_rank's optimizer state (momentum buffers, steps, param group options)."""
    if isinstance(optimizer, _torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    state = broadcast_object(optimizer.state_dict(), root_rank, "bcast.optimizer_state")
    if rank() != root_rank:
        optimizer.load_state_dict(state)


from .optimizer import DistributedOptimizer  # noqa: E402
from . import backend as _backend  # noqa: E402  (registers "hpctrain" with torch.distributed)

_backend.register()
