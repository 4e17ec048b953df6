"""hpctrain.torch.elastic: Horovod's elastic API (horovod.torch.elastic) over
hpctrain's elastic jobs (docs/elastic.md).

    import hpctrain.torch as hvd
    hvd.init()                                   # joins the job's first world
    model, opt = Net(), torch.optim.SGD(...)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model, opt, epoch=0, batch=0)
    state.register_reset_callbacks([lambda: set_lr(base_lr * hvd.size())])

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            for state.batch in range(state.batch, batches):
                ... opt.step()
                if state.batch % 10 == 0:
                    state.commit()               # hosts join and leave here
            state.batch = 0
    train(state)

Start it with ``hpctrain launch --min-np A --max-np B [--host-discovery-script S]
-- python3 train.py``. The machinery is the C++ one (hpct::elastic): the
job store's rendezvous, a new communicator and engine per membership
generation, failures caught as HpctError with code peer-failure or timeout.
This file holds only what Python adds: the state as bytes (torch.save of the
state_dicts and the other attributes) and the reset callbacks.

Differences from Horovod: ``state.sync()`` sends rank 0's whole state (the
member that has been in the job longest), in one broadcast; only
peer-failure and timeout errors roll back (another HpctError is a bug in the
script and ends it); a worker the launcher removes at a commit leaves
``run`` by SystemExit(0); there is no ElasticSampler (keep the position in
the state, as below).
"""
import functools
import io
import weakref

import torch

from . import _C
from . import mpi_ops as _mpi_ops

HostsUpdatedInterrupt = _C.HostsUpdatedInterrupt

__all__ = ["run", "State", "ObjectState", "TorchState", "HostsUpdatedInterrupt"]


class State:
    """Horovod's elastic state: commit(), restore(), sync(), save(),
    check_host_updates(), register_reset_callbacks(). Subclasses give
    _to_bytes() and _from_bytes(); the C++ state keeps the committed copy."""

    def __init__(self):
        me = weakref.ref(self)
        object.__setattr__(self, "_reset_callbacks", [])
        object.__setattr__(self, "_c", _C.ElasticState(lambda: me()._to_bytes(),
                                                       lambda b: me()._from_bytes(b)))
        self._c.set_on_reset(lambda: me().on_reset())

    def register_reset_callbacks(self, callbacks):
        """Functions called (no arguments) in every new world after a host left
        or joined, before the state is synced from rank 0 (so what they set
        there reaches new workers): rescale the learning rate with hvd.size()
        here."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def reset(self):
        """Called after a membership change, before the callbacks."""

    def commit(self):
        """save(), then check_host_updates(): every rank must call it at the same step."""
        self._c.commit()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank when hosts joined or left
        the job (one allreduce of one number): run() then goes on in the new
        world from this point, nothing rolled back."""
        self._c.check_host_updates()

    def save(self):
        """The in-memory copy restore() goes back to (no communication)."""
        self._c.save()

    def restore(self):
        """Back to the last save() or commit()."""
        self._c.restore()

    def sync(self):
        """Rank 0's state on every rank (one broadcast); then saved."""
        self._c.sync()

    @property
    def step(self):
        """Optimizer steps of the job (counted by hvd.DistributedOptimizer.step()
        inside run; committed and rolled back with the state)."""
        return self._c.step

    @property
    def committed_step(self):
        return self._c.committed_step

    @property
    def worker_id(self):
        """This worker's id in the job (HPCT_ELASTIC_ID), stable across worlds; -1 outside run."""
        return self._c.worker_id

    def last_change(self):
        """The last membership change: generation, reason, old_size, new_size,
        rollback_steps, seconds (from the change to training again)."""
        return self._c.last_change()

    def _to_bytes(self):
        raise NotImplementedError()

    def _from_bytes(self, data):
        raise NotImplementedError()


class ObjectState(State):
    """Picklable attributes (each keyword argument becomes one), committed,
    restored and synced."""

    def __init__(self, **kwargs):
        super().__init__()
        for name in kwargs:
            if name.startswith("_") or hasattr(type(self), name):
                raise ValueError("%s: %r is a name of the state object itself; give the value "
                                 "another name" % (type(self).__name__, name))
        object.__setattr__(self, "_names", list(kwargs))
        for name, value in kwargs.items():
            setattr(self, name, value)

    def _values(self):
        out = {}
        for name in self._names:
            value = getattr(self, name)
            if isinstance(value, (torch.nn.Module, torch.optim.Optimizer)):
                out[name] = ("state_dict", value.state_dict())
            else:
                out[name] = ("object", value)
        return out

    def _to_bytes(self):
        buf = io.BytesIO()
        torch.save(self._values(), buf)
        return buf.getvalue()

    def _from_bytes(self, data):
        values = torch.load(io.BytesIO(data))
        for name in self._names:
            kind, value = values[name]
            if kind == "state_dict":
                getattr(self, name).load_state_dict(value)
            else:
                setattr(self, name, value)


class TorchState(ObjectState):
    """Horovod's TorchState: a model and an optimizer (their state_dicts) and
    any other attributes given as keyword arguments (further models and
    optimizers among them are handled as state_dicts too)."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        if model is not None:
            kwargs["model"] = model
        if optimizer is not None:
            kwargs["optimizer"] = optimizer
        super().__init__(**kwargs)
        if model is None:
            object.__setattr__(self, "model", None)
        if optimizer is None:
            object.__setattr__(self, "optimizer", None)


def _optimizers(state):
    return [getattr(state, n) for n in getattr(state, "_names", [])
            if hasattr(getattr(state, n), "_hvd_reset")]


def run(func):
    """Decorator: ``func(state, ...)`` runs under the elastic protocol. On a
    peer's failure every survivor rolls back to the last commit, the world
    is formed again without the lost worker, the state is synced from rank 0
    and func is called again; hosts that join or leave by discovery take
    effect at a commit (HostsUpdatedInterrupt), with nothing rolled back.
    Returns func's value; a worker the launcher removed exits (SystemExit 0)."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        runtime = _mpi_ops._runtime()
        result = {}

        def train():  # in every world, after the sync
            _mpi_ops._new_world()
            for opt in _optimizers(state):
                opt._hvd_reset()
            result["value"] = func(state, *args, **kwargs)

        _mpi_ops._state.elastic = state._c
        try:
            stayed = _C.elastic_run(state._c, runtime, train)
        finally:
            _mpi_ops._state.elastic = None
        if not stayed:
            raise SystemExit(0)
        return result.get("value")

    return wrapper
