"""Horovod's collective operations (horovod.torch.mpi_ops) over hpctrain's engine.

Every operation is submitted to the engine under a name (ranks may submit in
any order; the engine negotiates) and returns a handle; ``synchronize``
waits with the GIL released. The engine carries allreduce, allgather and
broadcast natively. The others are built from them here:

- grouped_*: one engine operation per tensor, submitted together (the engine
  fuses them as it fuses gradients);
- reducescatter: an allreduce, then this rank's rows (the engine has no
  reduce-scatter of named tensors yet: it moves size/(size-1) times the
  bytes of a ring reduce-scatter);
- alltoall: an allgather of the split sizes and one of the rows, then the
  rows sent to this rank (every rank receives every row: fine for the small
  routing tensors alltoall usually carries, not for bulk data);
- barrier: an allreduce of one element;
- sparse_allreduce_async: allgathers of the indices and the values.

The differentiable forms (allreduce, grouped_allreduce, allgather,
grouped_allgather, broadcast, alltoall, reducescatter,
grouped_reducescatter) are autograd functions with Horovod's gradients.

Errors are HpctError (a RuntimeError) with ``.code``; a bad argument is
HpctValueError, which is also a ValueError. No wait is unbounded: a tensor
some ranks never submit fails with code "timeout" after HPCT_STALL_ABORT_S
(HPCT_TIMEOUT_S unless set), naming the tensor and the ranks that did not.
"""
import os as _os
import sys as _sys
import threading as _threading

import torch as _torch

from . import _C
from ._C import HpctError, HpctValueError
from .compression import Compression, engine_name as _engine_compression, lossy_misuse as _lossy_misuse

# Horovod's name for the error an elastic script catches.
HorovodInternalError = HpctError


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
Adasum = ReduceOp("adasum")


class ProcessSet:
    """Horovod's process sets; hpctrain.torch has only the global one (all ranks)."""

    def __init__(self, ranks=None):
        self.ranks = ranks
        self.process_set_id = 0

    def size(self):
        return size()

    def rank(self):
        return rank()

    def included(self):
        return True

    def __repr__(self):
        return "ProcessSet(global)"


global_process_set = ProcessSet()


def add_process_set(process_set, mpi_comm=None):
    raise NotImplementedError(
        "hpctrain.torch has no process sets: every operation runs over all ranks "
        "(start a separate job for a subset of ranks)")


def remove_process_set(process_set):
    raise NotImplementedError("hpctrain.torch has no process sets to remove")


def _global_only(process_set, what):
    if process_set is not None and process_set is not global_process_set and \
            not (isinstance(process_set, ProcessSet) and process_set.ranks is None):
        raise NotImplementedError("%s: hpctrain.torch has only the global process set" % what)


class _State:
    """This process's membership (one per process, like Horovod's)."""

    def __init__(self):
        self.lock = _threading.Lock()
        self.runtime = None
        self.handles = {}       # int -> (operations, post)
        self.next_handle = 0
        self.counters = {}      # op -> count, for automatic names
        self.elastic = None     # the C++ elastic state inside hpctrain.torch.elastic.run


_state = _State()


def init(comm=None, process_sets=None):
    """Joins the job (hpctrain launch, mpirun, srun, or one rank alone). Idempotent."""
    if comm is not None:
        raise ValueError("hpctrain.torch.init: comm= is not supported; every rank of the job takes part")
    if process_sets:
        raise NotImplementedError("hpctrain.torch has no process sets: init(process_sets=...)")
    with _state.lock:
        if _state.runtime is None:
            _state.runtime = _C.Runtime()
            _state.counters.clear()


def _new_world():
    """A new elastic world began: automatic names count from 0 again on every
    member (a joining worker's counters start there), and handles of the old
    world are gone."""
    with _state.lock:
        _state.counters.clear()
        _state.handles.clear()


def shutdown():
    """Leaves the job: pending operations fail on every rank. init() may be called again."""
    with _state.lock:
        rt, _state.runtime = _state.runtime, None
        _state.handles.clear()
    if rt is not None:
        rt.shutdown()


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


def mpi_built():
    return True  # hpctrain is built with OpenMPI and Gloo


def gloo_built():
    return True


def mpi_enabled():
    """Whether this job's collectives go through MPI (HPCT_BACKEND, or auto under mpirun/srun)."""
    backend = _os.environ.get("HPCT_BACKEND", "auto")
    if backend != "auto":
        return backend == "mpi"
    return any(v in _os.environ for v in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"))


def gloo_enabled():
    return not mpi_enabled()


def mpi_threads_supported():
    return True


def nccl_built():
    return 0


def ddl_built():
    return False


def ccl_built():
    return False


def cuda_built():
    return False


def rocm_built():
    return False


def start_timeline(file_path, mark_cycles=False):
    raise NotImplementedError(
        "hpctrain.torch: the timeline is set when the job starts (HPCT_TIMELINE=FILE, a Chrome "
        "trace written by rank 0); it cannot be started or stopped at run time")


def stop_timeline():
    raise NotImplementedError("hpctrain.torch: the timeline is set with HPCT_TIMELINE when the job starts")


def join(device=-1):
    raise NotImplementedError(
        "hpctrain.torch has no join(): give every rank the same number of batches "
        "(hpct DistributedSampler pads the last one), or stop all ranks at the same step")


# ---- the flight record (docs/why.md) ----

_PACKAGE_DIR = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
_site_lines = {}  # (code, line) -> "file:line in function": formatted once per call site


def _call_site(frames=4):
    """The caller's last Python frames outside hpctrain, one "file:line in
    function" a line, outermost first: the engine keeps it in the rank's
    flight record with the operation (hpctrain why prints it)."""
    f = _sys._getframe(1)
    out = []
    while f is not None and len(out) < frames:
        code = f.f_code
        if not code.co_filename.startswith(_PACKAGE_DIR):
            key = (code, f.f_lineno)
            line = _site_lines.get(key)
            if line is None:
                line = "%s:%d in %s" % (code.co_filename, f.f_lineno, code.co_name)
                if len(_site_lines) < 4096:
                    _site_lines[key] = line
            out.append(line)
        f = f.f_back
    out.reverse()
    return "\n".join(out)


def set_phase(phase, step=-1):
    """Tells the flight record what the training loop does now: "data",
    "forward", "backward", "optimizer", "checkpoint", "eval" or "none"
    (step: the training step, -1 to leave it). A rank that never reaches a
    collective is then reported with its phase (hpctrain why)."""
    _rt().set_phase(str(phase), int(step))


# ---- names and handles ----

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
    if op is Adasum:
        raise NotImplementedError("hpctrain.torch has no Adasum; use hvd.Average or hvd.Sum")
    if not isinstance(op, ReduceOp):
        raise ValueError("op must be hvd.Average, hvd.Sum, hvd.Min, hvd.Max or hvd.Product, not %r" % (op,))
    return op


def _check_cpu(tensor, what):
    if not isinstance(tensor, _torch.Tensor):
        raise TypeError("%s expects a torch.Tensor, got %s" % (what, type(tensor).__name__))
    if tensor.device.type not in ("cpu", "cuda"):
        raise ValueError("%s: tensor on %s; hpctrain moves CPU and CUDA tensors" % (what, tensor.device))


def _register(ops, post):
    """A handle for engine operations ops; synchronize returns post(outputs)."""
    with _state.lock:
        h = _state.next_handle
        _state.next_handle += 1
        _state.handles[h] = (ops, post)
    return h


def poll(handle):
    """True once the operation of handle is done. Never blocks."""
    with _state.lock:
        entry = _state.handles.get(handle)
    if entry is None:
        raise ValueError("unknown handle %r (already synchronized?)" % (handle,))
    return all(op.poll() for op in entry[0])


def synchronize(handle):
    """Waits for the operation of handle and returns its output."""
    with _state.lock:
        entry = _state.handles.pop(handle, None)
    if entry is None:
        raise ValueError("unknown handle %r (already synchronized?)" % (handle,))
    ops, post = entry
    outs = _C.wait_all(ops)  # releases the GIL; raises the first error after all are done
    return post(outs)


def _scale_(tensor, factor):
    """tensor *= factor in Horovod's arithmetic: float32 for 16-bit floats,
    float64 (then truncation) for integers, the tensor's own dtype otherwise."""
    if factor == 1.0:
        return
    with _torch.no_grad():
        if tensor.dtype in (_torch.float16, _torch.bfloat16):
            tensor.copy_((tensor.float() * factor).to(tensor.dtype))
        elif tensor.dtype.is_floating_point:
            tensor.mul_(factor)
        else:
            tensor.copy_((tensor.double() * factor).to(tensor.dtype))


def _contiguous_work(tensor, what):
    """The tensor itself when contiguous, else a contiguous copy; and a post that
    copies the result back into tensor."""
    _check_cpu(tensor, what)
    if tensor.is_contiguous():
        return tensor, (lambda out: out)

    def back(out):
        tensor.copy_(out)
        return tensor
    return tensor.contiguous(), back


# ---- allreduce ----

def _submit_allreduce_(tensor, name, op, prescale_factor, postscale_factor, wire):
    """In place on tensor; returns (operation, post)."""
    work, back = _contiguous_work(tensor, "allreduce of " + name)
    _scale_(work, prescale_factor)
    o = _rt().allreduce(work, name, op.name, wire, _call_site())

    def post(out):
        out = back(out)
        _scale_(out, postscale_factor)
        return out
    return o, post


def _single(o, post):
    return _register([o], lambda outs: post(outs[0]))


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set, compression=None):
    """In place: tensor becomes the reduction over ranks. Returns a handle."""
    _global_only(process_set, "allreduce")
    op = _op_of(average, op)
    name = _auto_name("allreduce", name)
    return _single(*_submit_allreduce_(tensor, name, op, prescale_factor, postscale_factor,
                                       _wire_of(compression)))


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set, compression=None):
    """Out of place: returns a handle whose synchronize() gives a new tensor."""
    _check_cpu(tensor, "allreduce")
    return allreduce_async_(tensor.detach().clone(memory_format=_torch.contiguous_format), average,
                            name, op, prescale_factor, postscale_factor, process_set, compression)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


def _wire_of(compression):
    """The engine's wire compression for the async forms' compression= (an
    hpctrain extension: Horovod's async forms have none)."""
    if compression is None:
        return "none"
    _refuse_lossy(compression, "hvd.allreduce_async")
    wire = _engine_compression(compression)
    if wire is None:
        raise HpctValueError("allreduce_async: compression= takes hvd.Compression.none, .fp16 or .bf16; "
                             "a custom compressor runs around hvd.allreduce or DistributedOptimizer")
    return wire


def _refuse_lossy(compression, what):
    msg = _lossy_misuse(compression, what)
    if msg is not None:
        raise HpctValueError(msg)


def _compressed(tensors, compression, what):
    """(wire name for the engine, tensors to send, contexts) for a compressor."""
    _refuse_lossy(compression, what)
    wire = _engine_compression(compression)
    if wire is not None:
        return wire, list(tensors), None
    sent, ctxs = [], []
    for t in tensors:
        c, ctx = compression.compress(t)
        sent.append(c)
        ctxs.append(ctx)
    return "none", sent, ctxs


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """The reduction over ranks in a new tensor (differentiable). tensor is not modified."""
    _global_only(process_set, "allreduce")
    op = _op_of(average, op)
    _check_cpu(tensor, "allreduce")
    wire, (sent,), ctxs = _compressed([tensor], compression, "hvd.allreduce")
    out = _AllreduceFn.apply(sent, name, op, prescale_factor, postscale_factor, wire)
    return out if ctxs is None else compression.decompress(out, ctxs[0])


class _AllreduceFn(_torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, wire):
        ctx.op, ctx.prescale, ctx.postscale = op, prescale_factor, postscale_factor
        work = tensor.detach().clone(memory_format=_torch.contiguous_format)
        name = _auto_name("allreduce", name)
        return _wait_one(*_submit_allreduce_(work, name, op, prescale_factor, postscale_factor, wire))

    @staticmethod
    def backward(ctx, grad_output):
        # The gradient of an allreduce is the same allreduce of the gradient.
        return allreduce(grad_output, op=ctx.op, prescale_factor=ctx.prescale,
                         postscale_factor=ctx.postscale), None, None, None, None, None


def _wait_one(o, post):
    return post(_C.wait_all([o])[0])


def _grouped_names(name, op, n):
    base = _auto_name(op, name)
    return ["%s.%d" % (base, i) for i in range(n)]


def _submit_grouped_allreduce_(tensors, average, name, op, prescale_factor, postscale_factor,
                               wire):
    op = _op_of(average, op)
    ops, posts = [], []
    try:
        for t, n in zip(tensors, _grouped_names(name, "grouped_allreduce", len(tensors))):
            o, p = _submit_allreduce_(t, n, op, prescale_factor, postscale_factor, wire)
            ops.append(o)
            posts.append(p)
    except Exception:
        if ops:  # never leave submitted operations writing into tensors nobody waits for
            try:
                _C.wait_all(ops)
            except HpctError:
                pass
        raise
    return ops, (lambda outs: [p(o) for p, o in zip(posts, outs)])


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """In place on every tensor of the list. Returns one handle for all."""
    _global_only(process_set, "grouped_allreduce")
    return _register(*_submit_grouped_allreduce_(list(tensors), average, name, op,
                                                 prescale_factor, postscale_factor, "none"))


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    for t in tensors:
        _check_cpu(t, "grouped_allreduce")
    copies = [t.detach().clone(memory_format=_torch.contiguous_format) for t in tensors]
    return grouped_allreduce_async_(copies, average, name, op, prescale_factor, postscale_factor,
                                    process_set)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


class _GroupedAllreduceFn(_torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, wire, *tensors):
        ctx.op, ctx.prescale, ctx.postscale = op, prescale_factor, postscale_factor
        copies = [t.detach().clone(memory_format=_torch.contiguous_format) for t in tensors]
        ops, post = _submit_grouped_allreduce_(copies, None, name, op, prescale_factor,
                                               postscale_factor, wire)
        return tuple(post(_C.wait_all(ops)))

    @staticmethod
    def backward(ctx, *grads):
        reduced = grouped_allreduce(list(grads), op=ctx.op, prescale_factor=ctx.prescale,
                                    postscale_factor=ctx.postscale)
        return (None, None, None, None, None) + tuple(reduced)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Each tensor's reduction over ranks, in new tensors (differentiable)."""
    _global_only(process_set, "grouped_allreduce")
    op = _op_of(average, op)
    tensors = list(tensors)
    for t in tensors:
        _check_cpu(t, "grouped_allreduce")
    if not tensors:
        return []
    wire, sent, ctxs = _compressed(tensors, compression, "hvd.grouped_allreduce")
    outs = _GroupedAllreduceFn.apply(name, op, prescale_factor, postscale_factor, wire, *sent)
    if ctxs is None:
        return list(outs)
    return [compression.decompress(o, c) for o, c in zip(outs, ctxs)]


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """A sparse COO tensor's reduction over ranks, through allgathers of its
    indices and values. Returns a callable that waits and gives the result."""
    _global_only(process_set, "sparse_allreduce_async")
    op = _op_of(None, op)
    if op not in (Sum, Average):
        raise ValueError("sparse_allreduce_async: op must be hvd.Sum or hvd.Average")
    t = tensor.coalesce() if not tensor.is_coalesced() else tensor
    # Indices are [ndim, nnz]: gather them as rows [nnz, ndim].
    hi = allgather_async(t._indices().t().contiguous(), name="%s.indices" % name)
    hv = allgather_async(t._values().contiguous(), name="%s.values" % name)

    def result():
        values = synchronize(hv)
        indices = synchronize(hi)
        if op is Average:
            values = values / size()
        return _torch.sparse_coo_tensor(indices.t(), values, t.size(), dtype=t.dtype)
    return result


# ---- allgather ----

def _submit_allgather(tensor, name):
    _check_cpu(tensor, "allgather of " + name)
    t = tensor.detach()
    if t.dim() == 0:
        t = t.reshape(1)
    return _rt().allgather(t.contiguous(), name, _call_site())


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Every rank's tensor concatenated along dimension 0 (first dimensions may differ)."""
    _global_only(process_set, "allgather")
    name = _auto_name("allgather", name)
    return _single(_submit_allgather(tensor, name), lambda out: out)


def _gathered_slice(grad, dims):
    """This rank's rows of the average over ranks of grad (Horovod's allgather gradient)."""
    reduced = allreduce(grad, op=Average)
    offset = sum(dims[:rank()])
    return reduced.narrow(0, offset, dims[rank()])


def _first_dims(tensors, name):
    """Every rank's first dimension of each tensor: a [size, len(tensors)] int64 tensor."""
    mine = _torch.tensor([[t.shape[0] if t.dim() else 1 for t in tensors]], dtype=_torch.int64)
    return allgather(mine, name=name)


class _AllgatherFn(_torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name):
        ctx.dim = tensor.shape[0] if tensor.dim() else 1
        return _wait_one(_submit_allgather(tensor, _auto_name("allgather", name)), lambda o: o)

    @staticmethod
    def backward(ctx, grad_output):
        dims = _first_dims([grad_output.new_empty(ctx.dim)], None)[:, 0].tolist()
        return _gathered_slice(grad_output, dims), None


def allgather(tensor, name=None, process_set=global_process_set):
    """Every rank's tensor concatenated along dimension 0, differentiable."""
    _global_only(process_set, "allgather")
    return _AllgatherFn.apply(tensor, name)


def _submit_grouped_allgather(tensors, name):
    ops = [_submit_allgather(t, n)
           for t, n in zip(tensors, _grouped_names(name, "grouped_allgather", len(tensors)))]
    return ops, list


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    _global_only(process_set, "grouped_allgather")
    return _register(*_submit_grouped_allgather(list(tensors), name))


class _GroupedAllgatherFn(_torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, *tensors):
        ctx.dims = [t.shape[0] if t.dim() else 1 for t in tensors]
        ops, post = _submit_grouped_allgather(tensors, name)
        return tuple(post(_C.wait_all(ops)))

    @staticmethod
    def backward(ctx, *grads):
        dims = _first_dims([g.new_empty(d) for g, d in zip(grads, ctx.dims)], None)
        reduced = grouped_allreduce(list(grads), op=Average)
        me = rank()
        out = []
        for i, r in enumerate(reduced):
            col = dims[:, i].tolist()
            out.append(r.narrow(0, sum(col[:me]), col[me]))
        return (None,) + tuple(out)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    _global_only(process_set, "grouped_allgather")
    tensors = list(tensors)
    if not tensors:
        return []
    return list(_GroupedAllgatherFn.apply(name, *tensors))


# ---- broadcast ----

def _check_root(root_rank, what):
    if not isinstance(root_rank, int) or root_rank < 0 or root_rank >= size():
        raise HpctValueError("%s: root_rank %r is not a rank of this job (0..%d)"
                             % (what, root_rank, size() - 1))


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """In place: root_rank's tensor on every rank. Returns a handle."""
    _global_only(process_set, "broadcast")
    name = _auto_name("broadcast", name)
    work, back = _contiguous_work(tensor, "broadcast of " + name)
    return _single(_rt().broadcast(work, name, root_rank, _call_site()), back)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    _check_cpu(tensor, "broadcast")
    return broadcast_async_(tensor.detach().clone(memory_format=_torch.contiguous_format),
                            root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


class _BroadcastFn(_torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name):
        ctx.root = root_rank
        return synchronize(broadcast_async(tensor, root_rank, name))

    @staticmethod
    def backward(ctx, grad_output):
        # Horovod's: the average of the gradients, kept on the root only.
        reduced = allreduce(grad_output, op=Average)
        if rank() != ctx.root:
            reduced = reduced * 0
        return reduced, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """root_rank's tensor in a new tensor on every rank, differentiable."""
    _global_only(process_set, "broadcast")
    return _BroadcastFn.apply(tensor, root_rank, name)


# ---- alltoall ----

def _alltoall_splits(tensor, splits):
    n = size()
    rows = tensor.shape[0] if tensor.dim() else 0
    if tensor.dim() == 0:
        raise HpctValueError("alltoall: a scalar cannot be split; give a tensor of at least one dimension")
    if splits is None:
        if rows % n:
            raise HpctValueError("alltoall: the first dimension (%d) is not a multiple of the %d ranks; "
                                 "pass splits=" % (rows, n))
        return [rows // n] * n
    if isinstance(splits, _torch.Tensor):
        if splits.dtype != _torch.int32:
            raise HpctValueError("alltoall: splits must be a torch.int32 tensor, not %s" % splits.dtype)
        splits = splits.tolist()
    splits = [int(s) for s in splits]
    if len(splits) != n or any(s < 0 for s in splits):
        raise HpctValueError("alltoall: splits needs %d non-negative entries, one per rank; got %s"
                             % (n, splits))
    if sum(splits) > rows:
        raise HpctValueError("alltoall: splits add up to %d rows but the tensor has %d"
                             % (sum(splits), rows))
    return splits


def _submit_alltoall(tensor, splits, name):
    sp = _alltoall_splits(tensor, splits)
    name = _auto_name("alltoall", name)
    t = tensor.detach().narrow(0, 0, sum(sp)).contiguous()
    ops = [_submit_allgather(_torch.tensor([sp], dtype=_torch.int64), name + ".splits"),
           _submit_allgather(t, name + ".rows")]
    me = rank()

    def post(outs):
        all_splits, rows = outs[0].tolist(), outs[1]
        pieces, received, offset = [], [], 0
        for src in all_splits:
            start = offset + sum(src[:me])
            pieces.append(rows.narrow(0, start, src[me]))
            received.append(src[me])
            offset += sum(src)
        return _torch.cat(pieces, 0), _torch.tensor(received, dtype=_torch.int32)
    return ops, post


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Rows splits[i] of tensor go to rank i. synchronize() gives (output, received_splits)."""
    _global_only(process_set, "alltoall")
    _check_cpu(tensor, "alltoall")
    return _register(*_submit_alltoall(tensor, splits, name))


class _AlltoallFn(_torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name):
        ops, post = _submit_alltoall(tensor, splits, name)
        output, received = post(_C.wait_all(ops))
        ctx.received = received
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad_output, _grad_received):
        # The rows go back where they came from.
        grad, _ = alltoall(grad_output.contiguous(), splits=ctx.received)
        return grad, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Differentiable alltoall: the output, and with splits also the received splits."""
    _global_only(process_set, "alltoall")
    _check_cpu(tensor, "alltoall")
    output, received = _AlltoallFn.apply(tensor, splits, name)
    return output if splits is None else (output, received)


# ---- reducescatter ----

def _scatter_rows(rows, n):
    """Horovod's split of rows over n ranks: the first rows % n ranks get one more."""
    base, extra = divmod(rows, n)
    return [base + (1 if r < extra else 0) for r in range(n)]


def _check_reducescatter_op(op):
    if op is not Sum and op is not Average:
        raise HpctValueError("reducescatter: op must be hvd.Sum or hvd.Average")


def _submit_reducescatter(tensor, name, op, prescale_factor, postscale_factor):
    _check_reducescatter_op(op)
    _check_cpu(tensor, "reducescatter")
    if tensor.dim() == 0:
        raise HpctValueError("reducescatter: a scalar cannot be scattered; give a tensor of at "
                             "least one dimension")
    name = _auto_name("reducescatter", name)
    work = tensor.detach().clone(memory_format=_torch.contiguous_format)
    o, post = _submit_allreduce_(work, name, op, prescale_factor, postscale_factor, "none")
    rows = _scatter_rows(tensor.shape[0], size())
    start = sum(rows[:rank()])
    return o, (lambda out: post(out).narrow(0, start, rows[rank()]).clone())


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    _global_only(process_set, "reducescatter")
    return _single(*_submit_reducescatter(tensor, name, op, prescale_factor, postscale_factor))


class _ReducescatterFn(_torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor):
        ctx.op, ctx.prescale, ctx.postscale = op, prescale_factor, postscale_factor
        return _wait_one(*_submit_reducescatter(tensor, name, op, prescale_factor, postscale_factor))

    @staticmethod
    def backward(ctx, grad_output):
        return _reducescatter_grad(grad_output, ctx), None, None, None, None


def _reducescatter_grad(grad, ctx):
    # Each rank's rows came from every rank's tensor: gather them back. The
    # scaling is Horovod's (a Sum's gradient is multiplied by the number of
    # ranks, an Average's is not divided), which its tests assert.
    scale = ctx.prescale * ctx.postscale
    if ctx.op is Sum:
        scale *= size()
    return allgather(grad * scale if scale != 1.0 else grad)


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """The reduction over ranks, split along dimension 0; this rank's part (differentiable)."""
    _global_only(process_set, "reducescatter")
    wire, (sent,), ctxs = _compressed([tensor], compression, "hvd.reducescatter")
    out = _ReducescatterFn.apply(sent, name, op, prescale_factor, postscale_factor)
    return out if ctxs is None else compression.decompress(out, ctxs[0])


def _submit_grouped_reducescatter(tensors, name, op, prescale_factor, postscale_factor):
    subs = [_submit_reducescatter(t, n, op, prescale_factor, postscale_factor)
            for t, n in zip(tensors, _grouped_names(name, "grouped_reducescatter", len(tensors)))]
    posts = [p for _, p in subs]
    return [o for o, _ in subs], (lambda outs: [p(o) for p, o in zip(posts, outs)])


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    _global_only(process_set, "grouped_reducescatter")
    tensors = list(tensors)
    for t in tensors:
        _check_reducescatter_op(op)
        if t.dim() == 0:
            raise HpctValueError("grouped_reducescatter: a scalar cannot be scattered")
    return _register(*_submit_grouped_reducescatter(tensors, name, op, prescale_factor,
                                                    postscale_factor))


class _GroupedReducescatterFn(_torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, *tensors):
        ctx.op, ctx.prescale, ctx.postscale = op, prescale_factor, postscale_factor
        ops, post = _submit_grouped_reducescatter(tensors, name, op, prescale_factor, postscale_factor)
        return tuple(post(_C.wait_all(ops)))

    @staticmethod
    def backward(ctx, *grads):
        return (None, None, None, None) + tuple(_reducescatter_grad(g, ctx) for g in grads)


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    _global_only(process_set, "grouped_reducescatter")
    tensors = list(tensors)
    _check_reducescatter_op(op)
    for t in tensors:
        if t.dim() == 0:
            raise HpctValueError("grouped_reducescatter: a scalar cannot be scattered")
    if not tensors:
        return []
    wire, sent, ctxs = _compressed(tensors, compression, "hvd.grouped_reducescatter")
    outs = _GroupedReducescatterFn.apply(name, op, prescale_factor, postscale_factor, *sent)
    if ctxs is None:
        return list(outs)
    return [compression.decompress(o, c) for o, c in zip(outs, ctxs)]


def barrier(process_set=global_process_set):
    """Returns once every rank has called barrier() (bounded like every operation)."""
    _global_only(process_set, "barrier")
    allreduce_(_torch.zeros(1, dtype=_torch.int32), name=_auto_name("barrier", None), op=Sum)
