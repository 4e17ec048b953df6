"""hvd.DistributedOptimizer: Horovod's wrapper, over hpctrain's engine.

Each parameter's grad accumulator (the autograd node that adds a new
gradient into .grad) gets a hook: torch 1.13 has no post-accumulate-grad
hook, so, as Horovod does, ``p.expand_as(p).grad_fn.next_functions[0][0]``
reaches the accumulator. On the last backward pass of a step
(backward_passes_per_step) the hook submits .grad, in place, to the engine,
so allreduces overlap with the rest of backward; step() submits what did not
fire (unused parameters contribute zeros), waits for everything (GIL
released) and runs the wrapped optimizer's step.

Overlap follows HPCT_OVERLAP like the C++ DistributedOptimizer: with auto,
gradients wait for step() when this host's ranks already fill every core
(there is no idle core for an allreduce to overlap on).

With a lossy compression (Compression.powersgd, Compression.int8;
docs/compression.md) the hooks submit nothing: synchronize() hands every
gradient of the step at once to the C++ compressor (_C.LossyCompressor),
which runs its rounds on the engine with the GIL released. Its state (step
counter, this rank's residuals, powersgd's Q) is part of state_dict().
"""
import contextlib
import warnings

import torch

# The state_dict() key of a lossy compression's state.
_COMPRESSION_KEY = "hpctrain_compression"


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1,
                 op=None, gradient_predivide_factor=1.0, sparse_as_dense=False):
        from .mpi_ops import Average, Sum, _op_of, _rt
        from .compression import engine_name, lossy_of
        super(self.__class__, self).__init__(params)
        self._hvd_rt = _rt()
        self._hvd_op = Average if op is None else _op_of(None, op)
        lossy = lossy_of(compression)
        self._hvd_lossy = None
        if lossy is not None:
            if self._hvd_op is not Average and self._hvd_op is not Sum:
                raise ValueError("compression=%r works with op=hvd.Average or hvd.Sum, not %r: drop op= "
                                 "or use compression=hvd.Compression.none" % (lossy, self._hvd_op))
            from . import _C
            self._hvd_lossy = _C.LossyCompressor(
                self._hvd_rt, lossy.mode, -1 if lossy.start_step is None else lossy.start_step,
                0.0 if lossy.min_rate is None else lossy.min_rate)
            compression = None
        # A built-in compressor is the engine's wire cast; any other runs in Python.
        self._hvd_wire = engine_name(compression)
        self._hvd_compressor = compression if self._hvd_wire is None else None
        self._hvd_ctx = {}       # id(p) -> (sent tensor, compressor context)
        self._hvd_sparse_as_dense = sparse_as_dense
        if backward_passes_per_step < 1:
            raise ValueError("backward_passes_per_step must be at least 1")
        if gradient_predivide_factor != 1.0 and self._hvd_op is not Average:
            raise ValueError("gradient_predivide_factor needs op=Average")
        self._hvd_predivide = gradient_predivide_factor
        self.backward_passes_per_step = backward_passes_per_step

        all_params = [p for group in self.param_groups for p in group["params"]]
        if named_parameters is not None:
            named_parameters = list(named_parameters)
        else:
            named_parameters = [("allreduce.noname.%d" % i, p) for i, p in enumerate(all_params)]
        if any(not isinstance(p, tuple) for p in named_parameters):
            raise ValueError("named_parameters should be a sequence of (name, parameter) tuples, "
                             "usually model.named_parameters()")
        names = [n for n, _ in named_parameters]
        if len(set(names)) != len(names):
            raise ValueError("parameter names in named_parameters must be unique")
        known = {id(p) for _, p in named_parameters}
        missing = [i for i, p in enumerate(all_params) if id(p) not in known]
        if missing:
            raise ValueError("named_parameters was given but misses %d of the optimizer's "
                             "parameters (indices %s)" % (len(missing), missing[:5]))
        self._hvd_names = {id(p): "grad." + n for n, p in named_parameters}
        self._hvd_plain_names = {id(p): n for n, p in named_parameters}
        # Horovod's attribute: parameter -> name (scripts and tests read it).
        self._parameter_names = {p: n for n, p in named_parameters}
        self._hvd_params = [p for p in all_params if p.requires_grad]
        # A lossy step needs every gradient at once: nothing is submitted during backward.
        self._hvd_overlap = self._hvd_lossy is None and self._hvd_rt.overlap_default()
        self._hvd_ops = {}       # id(p) -> Operation submitted this step (or a sparse result callable)
        self._hvd_dense = {}     # id(p) -> the tensor sent when it is not p.grad itself
        self._hvd_order = []     # params in submission order
        self._hvd_delay = {id(p): backward_passes_per_step for p in self._hvd_params}
        self._hvd_accs = []
        self._hvd_synchronized = False
        self._hvd_should_sync = True
        self._hvd_register_hooks()

    def _hvd_register_hooks(self):
        for p in self._hvd_params:
            acc = p.expand_as(p).grad_fn.next_functions[0][0]
            acc.register_hook(self._hvd_make_hook(p))
            self._hvd_accs.append(acc)  # keeps the accumulator (and its hook) alive

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
        return hook

    def _hvd_submit(self, p):
        key = id(p)
        if key in self._hvd_ops:
            return
        g = p.grad
        if g is None:
            p.grad = g = torch.zeros_like(p, memory_format=torch.contiguous_format)
        if g.is_sparse and not self._hvd_sparse_as_dense:
            from .mpi_ops import sparse_allreduce_async
            self._hvd_ops[key] = sparse_allreduce_async(g, self._hvd_names[key], self._hvd_op)
            self._hvd_order.append(p)
            return
        if g.is_sparse:
            g = g.to_dense()
        elif not g.is_contiguous():
            p.grad = g = g.contiguous()
        if self._hvd_predivide != 1.0:
            g.div_(self._hvd_predivide)
        wire = self._hvd_wire
        if self._hvd_compressor is not None:
            sent, self._hvd_ctx[key] = self._hvd_compressor.compress(g)
            g = sent.contiguous()
            wire = "none"
        if g is not p.grad or self._hvd_compressor is not None:
            self._hvd_dense[key] = g
        self._hvd_ops[key] = self._hvd_rt.allreduce(g, self._hvd_names[key], self._hvd_op.name, wire)
        self._hvd_order.append(p)

    def _hvd_finish(self, p):
        """Puts the reduced gradient of p into p.grad when it was sent as another tensor."""
        key = id(p)
        op = self._hvd_ops[key]
        if callable(op):  # a sparse gradient's allgathers
            reduced = op()
            p.grad.zero_().add_(reduced)
            return
        sent = self._hvd_dense.pop(key, None)
        if sent is None:
            return
        ctx = self._hvd_ctx.pop(key, None)
        if self._hvd_compressor is not None:
            sent = self._hvd_compressor.decompress(sent, ctx)
        if p.grad.is_sparse:
            p.grad.zero_().add_(sent.to_sparse())
        else:
            p.grad.copy_(sent)

    def synchronize(self):
        """Waits until every gradient is reduced over ranks (submitting those not yet submitted)."""
        from . import _C
        if self._hvd_lossy is not None:
            self._hvd_lossy_synchronize()
            self._hvd_synchronized = True
            return
        for p in self._hvd_params:
            if id(p) not in self._hvd_ops:
                self._hvd_submit(p)
        ops = [self._hvd_ops[id(p)] for p in self._hvd_order if not callable(self._hvd_ops[id(p)])]
        predivided = self._hvd_predivide
        try:
            _C.wait_all(ops)  # releases the GIL
            for p in self._hvd_order:
                self._hvd_finish(p)
        finally:
            self._hvd_ops.clear()
            self._hvd_dense.clear()
            self._hvd_ctx.clear()
            self._hvd_order = []
            for p in self._hvd_params:
                self._hvd_delay[id(p)] = self.backward_passes_per_step
        if predivided != 1.0:
            with torch.no_grad():
                for p in self._hvd_params:
                    p.grad.mul_(predivided)
        self._hvd_synchronized = True

    def _hvd_lossy_synchronize(self):
        """Every gradient through the lossy compressor in one call (GIL released)."""
        grads, sparse = [], []
        try:
            for p in self._hvd_params:
                g = p.grad
                if g is None:
                    p.grad = g = torch.zeros_like(p, memory_format=torch.contiguous_format)
                if g.is_sparse:
                    if not self._hvd_sparse_as_dense:
                        raise ValueError(
                            "the gradient of %s is sparse; compression=%s needs dense gradients: pass "
                            "sparse_as_dense=True to DistributedOptimizer or drop compression="
                            % (self._hvd_plain_names[id(p)], self._hvd_lossy.name))
                    g = g.to_dense()
                    sparse.append((p, g))
                elif not g.is_contiguous():
                    p.grad = g = g.contiguous()
                if self._hvd_predivide != 1.0:
                    g.div_(self._hvd_predivide)
                grads.append((self._hvd_plain_names[id(p)], g))
            from .mpi_ops import Average
            self._hvd_lossy.reduce(grads, self._hvd_op is Average)
        finally:
            for p in self._hvd_params:
                self._hvd_delay[id(p)] = self.backward_passes_per_step
        with torch.no_grad():
            for p, g in sparse:
                p.grad.zero_().add_(g.to_sparse())
            if self._hvd_predivide != 1.0:
                for p in self._hvd_params:
                    p.grad.mul_(self._hvd_predivide)

    def _hvd_state_dict(self, residuals):
        """state_dict(), with this rank's compression state when it has a lossy one."""
        sd = super(self.__class__, self).state_dict()
        if self._hvd_lossy is not None:
            from .mpi_ops import rank, size
            sd[_COMPRESSION_KEY] = {
                "mode": self._hvd_lossy.name, "step": self._hvd_lossy.step, "rank": rank(),
                "size": size(), "residuals": residuals, "state": self._hvd_lossy.state(residuals)}
        return sd

    def state_dict(self):
        """The wrapped optimizer's state_dict; with a lossy compression also its
        state under "hpctrain_compression" (mode, step, this rank's residuals)."""
        return self._hvd_state_dict(True)

    def load_state_dict(self, state_dict):
        """Loads a state_dict. Its compression state is taken whole when this rank
        saved it (a bit-exact resume); one saved by another rank (rank 0's
        checkpoint loaded everywhere, broadcast_optimizer_state) gives its step
        and shared buffers, and this rank's residuals start from zero, unless
        this rank is already at that step."""
        saved = state_dict.get(_COMPRESSION_KEY) if isinstance(state_dict, dict) else None
        if saved is not None:
            if self._hvd_lossy is None:
                raise ValueError("the state_dict holds the compression state of %s and this "
                                 "DistributedOptimizer has no lossy compression: pass the compression= "
                                 "that saved it" % saved["mode"])
            if saved["mode"] != self._hvd_lossy.name:
                raise ValueError("the state_dict's compression state is %s and this DistributedOptimizer "
                                 "compresses with %s: pass the compression= that saved it"
                                 % (saved["mode"], self._hvd_lossy.name))
            state_dict = {k: v for k, v in state_dict.items() if k != _COMPRESSION_KEY}
        super(self.__class__, self).load_state_dict(state_dict)
        if saved is None:
            return
        from .mpi_ops import rank, size
        own = saved["residuals"] and saved["rank"] == rank() and saved["size"] == size()
        if own:
            self._hvd_lossy.load_state(saved["state"], True)
        elif saved["step"] != self._hvd_lossy.step:
            self._hvd_lossy.load_state(saved["state"], False)

    @contextlib.contextmanager
    def skip_synchronize(self):
        """step() inside this block does not synchronize (call synchronize() yourself first)."""
        self._hvd_should_sync = False
        try:
            yield
        finally:
            self._hvd_should_sync = True

    def step(self, closure=None):
        if self._hvd_should_sync:
            if self._hvd_synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() context "
                              "after optimizer.synchronize(): the gradients are reduced a second time. "
                              "Call step() inside `with optimizer.skip_synchronize():`.")
            self.synchronize()
        self._hvd_synchronized = False
        result = self._hvd_local_step(closure)
        from .mpi_ops import _state
        if _state.elastic is not None:  # inside hpctrain.torch.elastic.run: the job's step count
            _state.elastic.step += 1
        return result

    def _hvd_reset(self):
        """Forgets what was submitted in a world that failed (hpctrain.torch.elastic)."""
        self._hvd_ops.clear()
        self._hvd_dense.clear()
        self._hvd_ctx.clear()
        self._hvd_order = []
        self._hvd_synchronized = False
        for p in self._hvd_params:
            self._hvd_delay[id(p)] = self.backward_passes_per_step
        self._hvd_overlap = self._hvd_lossy is None and self._hvd_rt.overlap_default()

    def _hvd_local_step(self, closure=None):
        """The wrapped optimizer's own step, with no communication."""
        return super(self.__class__, self).step(closure)

    def zero_grad(self, *args, **kwargs):
        if self._hvd_ops:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but before "
                                 "optimizer.step() or optimizer.synchronize()")
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=None,
                         backward_passes_per_step=1, op=None, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False, process_set=None, shard=0):
    """Wraps optimizer: gradients are averaged (op) over ranks before its step().

    Horovod's signature. compression: hvd.Compression.none/fp16/bf16 are cast
    for the wire by the engine; hvd.Compression.powersgd(rank=4, start_step,
    min_rate) and hvd.Compression.int8 compress all gradients of a step in
    C++ with error feedback (op Average or Sum); any other Compressor runs
    in Python around the allreduce. num_groups and groups are accepted: the engine fuses ready
    gradients by itself. Returns an instance of a subclass of the optimizer's
    own class over the same param_groups.

    shard=1 keeps the optimizer state of this rank's part of the parameters
    only and all-gathers the updated parameters after each step; shard=2
    also keeps only this rank's part of each reduced gradient (ZeRO stages
    1 and 2; zero.py). The parameters come out bit for bit as with shard=0.
    state_dict() is then this rank's part. shard=3 is refused (C++ only).
    """
    from .compression import Compression
    from .mpi_ops import _global_only
    _global_only(process_set, "DistributedOptimizer")
    if compression is None:
        compression = Compression.none
    methods = dict(_DistributedOptimizer.__dict__)
    if shard:
        from . import zero
        zero.check_shard(shard, compression)
        methods["_hvd_init_unsharded"] = methods["__init__"]
        methods["_hvd_reset_unsharded"] = methods["_hvd_reset"]
        methods.update((k, v) for k, v in zero.ShardedMixin.__dict__.items()
                       if k not in ("__dict__", "__weakref__", "__module__", "__doc__"))
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), methods)
    args = (optimizer.param_groups, named_parameters, compression, backward_passes_per_step,
            op, gradient_predivide_factor, sparse_as_dense)
    return cls(*args, shard=shard) if shard else cls(*args)
