"""Horovod's helpers for a common start: parameters, optimizer state and
picklable objects from one rank to all (horovod.torch.functions)."""
import io
import pickle

import torch

from .mpi_ops import (_auto_name, allgather, broadcast_, broadcast_async_, rank,
                      synchronize)


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
    with torch.no_grad():
        for name, p in items:
            if p is None or not isinstance(p, torch.Tensor):
                continue
            handles.append(broadcast_async_(p.data if p.requires_grad else p, root_rank,
                                            "bcast.param." + name))
    for h in handles:
        synchronize(h)


def broadcast_object(obj, root_rank=0, name=None, process_set=None):
    """root_rank's picklable object on every rank (tensors inside travel too)."""
    name = _auto_name("broadcast_object", name)
    if rank() == root_rank:
        buf = io.BytesIO()
        torch.save(obj, buf)
        data = bytearray(buf.getvalue())
        payload = torch.frombuffer(data, dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
        length = torch.tensor([payload.numel()], dtype=torch.int64)
    else:
        length = torch.zeros(1, dtype=torch.int64)
    broadcast_(length, root_rank, name + ".length")
    if rank() != root_rank:
        payload = torch.empty(int(length.item()), dtype=torch.uint8)
    broadcast_(payload, root_rank, name + ".bytes")
    if rank() == root_rank:
        return obj
    return torch.load(io.BytesIO(payload.numpy().tobytes()))


def allgather_object(obj, name=None):
    """Every rank's picklable object, in rank order."""
    name = _auto_name("allgather_object", name)
    data = bytearray(pickle.dumps(obj))
    payload = torch.frombuffer(data, dtype=torch.uint8)
    sizes = allgather(torch.tensor([payload.numel()], dtype=torch.int64), name + ".sizes")
    allbytes = allgather(payload, name + ".bytes").numpy().tobytes()
    out, off = [], 0
    for n in sizes.tolist():
        out.append(pickle.load(io.BytesIO(allbytes[off:off + n])))
        off += n
    return out


def _initialize_state(optimizer):
    """Gives an optimizer that has not stepped its state, as Horovod does: a
    step with zero gradients for the trainable parameters that have no state.
    Unlike Horovod's, the parameters come out of it unchanged (weight decay
    would otherwise move them), and frozen parameters stay without .grad."""
    params = [p for group in optimizer.param_groups for p in group["params"]
              if p.requires_grad and p not in optimizer.state]
    if not params:
        return
    saved = [p.detach().clone() for p in params]
    sparse = isinstance(optimizer, torch.optim.SparseAdam)
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p).to_sparse() if sparse else torch.zeros_like(p)
    # A DistributedOptimizer's step() would allreduce: step the wrapped class only.
    step = getattr(optimizer, "_hvd_local_step", optimizer.step)
    step()
    with torch.no_grad():
        for p, s in zip(params, saved):
            p.copy_(s)


def _shared_state_dict(optimizer):
    """optimizer.state_dict() without what is this rank's own: a lossy
    compression's residuals (a DistributedOptimizer's, optimizer.py)."""
    own = getattr(optimizer, "_hvd_state_dict", None)
    return own(False) if own is not None else optimizer.state_dict()


def broadcast_optimizer_state(optimizer, root_rank, model=None):
    """Copies root_rank's optimizer state (momentum buffers, steps, param group
    options) to every rank, creating it first where the optimizer has not stepped.
    A lossy compression's step and shared buffers come from root_rank too when
    a rank is at another step; each rank's residuals stay its own."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    if len(optimizer.state) == 0:
        _initialize_state(optimizer)
    state = broadcast_object(_shared_state_dict(optimizer), root_rank, "bcast.optimizer_state")
    if rank() != root_rank:
        optimizer.load_state_dict(state)
