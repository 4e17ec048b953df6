"""DistributedOptimizer(..., shard=1|2): the optimizer state split over the ranks (ZeRO).

The parameters are laid end to end in one flat index space; each starts at a
multiple of ALIGN elements (the gap is virtual: nothing is allocated). That
space is cut into size() equal runs, each also a multiple of ALIGN long, and
rank r owns run r. A parameter's part on a rank is a view into its own
storage (``p.detach().view(-1)[lo:hi]``), so the wrapped optimizer, rebuilt
over those views with the same hyperparameters, updates this rank's part in
place and keeps state for it alone: Adam's two moments take 2P/N bytes per
rank instead of 2P.

Why ALIGN: torch's CPU element-wise kernels run a vectorized loop and a
scalar tail, which may round differently (a fused multiply-add in one and
not the other). A part that starts ALIGN elements past its parameter's start
sends every element down the same path as the whole parameter would, so the
update is bit for bit the unsharded one (with one intra-op thread; torch
splits a kernel over threads at places of its own choosing).

Stage 1: the gradients are averaged as without sharding (the engine's
allreduce, overlapped with backward); each rank steps its part, then every
parameter is all-gathered from its owners' parts.

Stage 2: in addition, each rank keeps only its part of each gradient: as
soon as a parameter's reduction is done its full gradient is dropped
(p.grad = None) and the part is kept for the step; parameters whose
reduction finished while backward ran are trimmed from the next gradient
hook on. The engine carries no named reduce-scatter yet, so the reduction is
an allreduce of which each rank keeps its part (the same values, more bytes
on the wire); the memory held between backward and the step is the parts.

Stage 3 (parameters sharded between layers) is not done in Python: train
with `hpctrain train --shard 3` (C++).
"""
import torch

# Parts start at multiples of this many elements of their parameter
# (256 bytes of float32: a whole number of AVX-512 vector pairs).
ALIGN = 64

_SHARD_KEY = "hpctrain_shard"


def _round_up(x, a):
    return (x + a - 1) // a * a


def partition(numels, size, align=ALIGN):
    """[(lo, hi)] per rank per parameter: rank r's elements of each parameter.

    Returns a list over ranks of lists over parameters of (lo, hi) in the
    parameter's flat index; every lo is a multiple of align or equal to hi."""
    starts, total = [], 0
    for n in numels:
        starts.append(total)
        total += _round_up(n, align)
    run = _round_up(-(-total // size), align) if total else 0
    parts = []
    for r in range(size):
        begin, end = r * run, min((r + 1) * run, total)
        parts.append([(min(max(begin - s, 0), n), min(max(end - s, 0), n))
                      for s, n in zip(starts, numels)])
    return parts


def check_shard(shard, compression):
    """Refuses what shard= cannot do, before anything is built."""
    from .compression import lossy_of
    from .mpi_ops import _state
    if shard == 3:
        raise ValueError(
            "DistributedOptimizer(shard=3) is not available in Python: sharding the parameters "
            "needs them gathered around each layer's forward and backward. Train with "
            "`hpctrain train --shard 3` (C++), or use shard=1 or shard=2 here")
    if shard not in (1, 2):
        raise ValueError("shard=%r: use 0 (no sharding), 1 (optimizer state) or 2 (also the "
                         "gradients)" % (shard,))
    lossy = lossy_of(compression)
    if lossy is not None:
        raise ValueError("compression=%s does not work with shard=%d (its error feedback keeps "
                         "whole gradients): drop compression= or shard=" % (lossy.mode, shard))
    if _state.elastic is not None:
        raise ValueError("shard=%d does not work inside hpctrain.torch.elastic.run (the parts "
                         "would change with the world size): drop shard=" % shard)


class ShardedMixin(object):
    """Methods that replace _DistributedOptimizer's when shard is 1 or 2."""

    def __init__(self, *args, shard):
        self._hvd_init_unsharded(*args)
        for p in self._hvd_params:
            if not p.is_contiguous() or p.is_sparse:
                raise ValueError("shard=%d needs dense contiguous parameters; the parameter %s "
                                 "is not" % (shard, self._hvd_plain_names[id(p)]))
        self._hvd_shard_setup(shard)

    def _hvd_shard_setup(self, shard):
        from .mpi_ops import rank, size
        self._hvd_shard = shard
        self._hvd_rank, self._hvd_size = rank(), size()
        parts = partition([p.numel() for p in self._hvd_params], self._hvd_size)
        self._hvd_parts = {id(p): parts[self._hvd_rank][i] for i, p in enumerate(self._hvd_params)}
        self._hvd_views = {}
        groups = []
        for group in self.param_groups:
            mine = []
            for p in group["params"]:
                lo, hi = self._hvd_parts.get(id(p), (0, 0))
                if hi > lo:
                    view = p.detach().view(-1).narrow(0, lo, hi - lo)
                    self._hvd_views[id(p)] = view
                    mine.append(view)
            groups.append(dict({k: v for k, v in group.items() if k != "params"}, params=mine))
        # The wrapped optimizer's own class over this rank's parts (its
        # hyperparameters are copied from self.param_groups at every step, so
        # an lr scheduler acting on this optimizer reaches it).
        base = self.__class__.__bases__[0]
        self._hvd_inner = base([g for g in groups if g["params"]] or
                               [dict(groups[0], params=[torch.zeros(0)])])
        self._hvd_inner_groups = [(outer, inner) for outer, inner in zip(
            [g for g, m in zip(self.param_groups, groups) if m["params"]], self._hvd_inner.param_groups)]
        self._hvd_kept = {}  # stage 2: id(p) -> this rank's part of its reduced gradient

    def _hvd_make_hook(self, p):
        key = id(p)

        def hook(*ignore):
            if key in self._hvd_ops:
                if self._hvd_delay[key] <= 0:
                    raise AssertionError(
                        "gradients were computed more than backward_passes_per_step times "
                        "before step() or synchronize(); raise backward_passes_per_step")
            self._hvd_delay[key] -= 1
            if self._hvd_delay[key] == 0 and self._hvd_overlap:
                self._hvd_submit(p)
                if self._hvd_shard == 2:
                    self._hvd_trim_done()
        return hook

    def _hvd_trim(self, p):
        """Stage 2: keeps this rank's part of p's reduced gradient and drops the rest."""
        view = self._hvd_views.get(id(p))
        lo, hi = self._hvd_parts[id(p)]
        if view is not None:
            self._hvd_kept[id(p)] = p.grad.view(-1).narrow(0, lo, hi - lo).clone()
        p.grad = None

    def _hvd_trim_done(self):
        """Stage 2, during backward: trims every gradient whose reduction has finished."""
        for p in self._hvd_order:
            key = id(p)
            op = self._hvd_ops[key]
            if callable(op) or key in self._hvd_kept or key in self._hvd_dense:
                continue  # a sparse gradient's allgathers, already trimmed, or sent as a copy
            if op.poll():
                op.wait()  # done: raises the operation's error, if any
                self._hvd_trim(p)
                self._hvd_kept.setdefault(key, None)

    def synchronize(self):
        """Waits until every gradient is reduced; stage 2 then keeps only this rank's parts."""
        from . import _C
        for p in self._hvd_params:
            if p.grad is not None and p.grad.is_sparse:
                raise ValueError("the gradient of %s is sparse; shard=%d needs dense gradients "
                                 "(nn.Embedding(sparse=False))" % (self._hvd_plain_names[id(p)],
                                                                    self._hvd_shard))
            if id(p) not in self._hvd_ops:
                self._hvd_submit(p)
        pending = [p for p in self._hvd_order if id(p) not in self._hvd_kept]
        try:
            _C.wait_all([self._hvd_ops[id(p)] for p in pending])  # releases the GIL
            for p in pending:
                self._hvd_finish(p)
                if self._hvd_shard == 2:
                    self._hvd_trim(p)
        finally:
            self._hvd_ops.clear()
            self._hvd_dense.clear()
            self._hvd_order = []
            for p in self._hvd_params:
                self._hvd_delay[id(p)] = self.backward_passes_per_step
        if self._hvd_predivide != 1.0:
            with torch.no_grad():
                for p in self._hvd_params:
                    g = p.grad if self._hvd_shard == 1 else self._hvd_kept.get(id(p))
                    if g is not None:
                        g.mul_(self._hvd_predivide)
        self._hvd_synchronized = True

    def _hvd_local_step(self, closure=None):
        """Steps this rank's parts with the wrapped optimizer, then all-gathers every parameter."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for p in self._hvd_params:
            view = self._hvd_views.get(id(p))
            if view is None:
                continue
            if self._hvd_shard == 2:
                view.grad = self._hvd_kept.get(id(p))
            elif p.grad is not None:
                lo, hi = self._hvd_parts[id(p)]
                view.grad = p.grad.view(-1).narrow(0, lo, hi - lo)
        for outer, inner in self._hvd_inner_groups:
            for k, v in outer.items():
                if k != "params":
                    inner[k] = v
        try:
            self._hvd_inner.step()
        finally:
            for view in self._hvd_views.values():
                view.grad = None
            self._hvd_kept.clear()
        self._hvd_gather_params()
        return loss

    def _hvd_gather_params(self):
        """Every parameter from its owners' parts, written into its own storage
        (one allgather each, fused by the engine; only this rank's parts are
        copied first, as the sent tensors must not overlap the output)."""
        from . import _C
        ops = []
        with torch.no_grad():
            for p in self._hvd_params:
                lo, hi = self._hvd_parts[id(p)]
                mine = p.detach().view(-1).narrow(0, lo, hi - lo).clone()
                ops.append(self._hvd_rt.allgather_into(
                    mine, "zero.param." + self._hvd_plain_names[id(p)], p.detach().view(-1)))
        _C.wait_all(ops)  # releases the GIL

    def _hvd_reset(self):
        self._hvd_kept.clear()
        self._hvd_reset_unsharded()

    def state_dict(self):
        """This rank's part of the optimizer state (the wrapped optimizer's
        state_dict over its parts) and which part it is under "hpctrain_shard"."""
        sd = self._hvd_inner.state_dict()
        sd[_SHARD_KEY] = {"stage": self._hvd_shard, "rank": self._hvd_rank, "size": self._hvd_size,
                          "parts": [list(self._hvd_parts[id(p)]) for p in self._hvd_params]}
        return sd

    def load_state_dict(self, state_dict):
        """Loads what state_dict() saved on this rank, in a job of the same size."""
        saved = state_dict.get(_SHARD_KEY) if isinstance(state_dict, dict) else None
        if saved is None:
            raise ValueError("this state_dict holds no shard (no %r key): a sharded "
                             "DistributedOptimizer loads what its state_dict() saved" % _SHARD_KEY)
        mine = [list(self._hvd_parts[id(p)]) for p in self._hvd_params]
        if saved["size"] != self._hvd_size or saved["rank"] != self._hvd_rank or saved["parts"] != mine:
            raise ValueError("this state_dict is rank %d's part of %d ranks; this is rank %d of %d: "
                             "load each rank's own file in a job of the same size"
                             % (saved["rank"], saved["size"], self._hvd_rank, self._hvd_size))
        self._hvd_inner.load_state_dict({k: v for k, v in state_dict.items() if k != _SHARD_KEY})

    def zero_grad(self, *args, **kwargs):
        if self._hvd_ops:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but before "
                                 "optimizer.step() or optimizer.synchronize()")
        self._hvd_kept.clear()
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def state_bytes(optimizer):
    """Bytes of the tensors in an optimizer's state on this rank (a sharded
    DistributedOptimizer: its part only)."""
    opt = getattr(optimizer, "_hvd_inner", optimizer)
    total = 0
    for st in opt.state.values():
        for v in st.values():
            if torch.is_tensor(v):
                total += v.numel() * v.element_size()
    return total
