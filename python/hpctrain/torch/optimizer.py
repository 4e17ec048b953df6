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
"""
import contextlib
import warnings

import torch


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1,
                 op=None, gradient_predivide_factor=1.0, sparse_as_dense=False):
        from . import Average, _rt
        super(self.__class__, self).__init__(params)
        self._hvd_rt = _rt()
        self._hvd_op = Average if op is None else op
        self._hvd_compression = "" if compression is None else compression.name
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
        self._hvd_params = [p for p in all_params if p.requires_grad]
        self._hvd_overlap = self._hvd_rt.overlap_default()
        self._hvd_ops = {}       # id(p) -> Operation submitted this step
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
        elif not g.is_contiguous():
            p.grad = g = g.contiguous()
        if self._hvd_predivide != 1.0:
            g.div_(self._hvd_predivide)
        self._hvd_ops[key] = self._hvd_rt.allreduce(g, self._hvd_names[key], self._hvd_op.name,
                                                    self._hvd_compression)
        self._hvd_order.append(p)

    def synchronize(self):
        """Waits until every gradient is reduced over ranks (submitting those not yet submitted)."""
        from . import _C
        for p in self._hvd_params:
            if id(p) not in self._hvd_ops:
                self._hvd_submit(p)
        ops = [self._hvd_ops[id(p)] for p in self._hvd_order]
        predivided = self._hvd_predivide
        try:
            _C.wait_all(ops)  # releases the GIL
        finally:
            self._hvd_ops.clear()
            self._hvd_order = []
            for p in self._hvd_params:
                self._hvd_delay[id(p)] = self.backward_passes_per_step
        if predivided != 1.0:
            with torch.no_grad():
                for p in self._hvd_params:
                    p.grad.mul_(predivided)
        self._hvd_synchronized = True

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
                warnings.warn("optimizer.step() called after optimizer.synchronize(); wrap step() in "
                              "optimizer.skip_synchronize() to avoid a second synchronization")
            self.synchronize()
        self._hvd_synchronized = False
        return super(self.__class__, self).step(closure)

    def zero_grad(self, *args, **kwargs):
        if self._hvd_ops:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but before "
                                 "optimizer.step() or optimizer.synchronize()")
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=None,
                         backward_passes_per_step=1, op=None, gradient_predivide_factor=1.0,
                         sparse_as_dense=False, **unsupported):
    """Wraps optimizer: gradients are averaged (op) over ranks before its step().

    Horovod's signature; compression is hvd.Compression.none/fp16/bf16 (done by
    the engine on the wire). Returns an instance of a subclass of the
    optimizer's own class over the same param_groups.
    """
    from . import Compression
    if unsupported:
        raise ValueError("DistributedOptimizer: %s not supported by hpctrain.torch"
                         % ", ".join(sorted(unsupported)))
    if compression is None:
        compression = Compression.none
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step,
               op, gradient_predivide_factor, sparse_as_dense)
