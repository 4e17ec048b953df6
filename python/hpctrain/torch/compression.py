"""Gradient compression with Horovod's interface.

A compressor is a class (or an instance) with ``compress(tensor) -> (tensor,
ctx)`` and ``decompress(tensor, ctx) -> tensor``. Scripts call them directly,
and user-defined compressors subclass ``Compressor``.

The built-in ones (``Compression.none``, ``.fp16``, ``.bf16``) are also known
to the engine: when one of them is passed to an allreduce or to
DistributedOptimizer, the engine casts float32 tensors for the wire itself
(engine/compression.h, fused and vectorised) instead of Python casting each
tensor before and after. Any other compressor runs in Python around the
allreduce, as in Horovod.

The lossy modes (``Compression.powersgd``, ``Compression.int8``;
docs/compression.md) are for DistributedOptimizer only: they compress all
of a step's gradients together in C++ (libtorch), with error feedback, and
cannot compress one tensor of an allreduce.
"""
import torch


class Compressor(object):
    """Base class: the identity. Subclasses override compress and decompress."""

    @staticmethod
    def compress(tensor):
        """Returns the tensor to send and the context decompress needs."""
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        """Returns the tensor as the caller expects it from the sent one."""
        return tensor


class NoneCompressor(Compressor):
    """No compression (the default)."""


def _cast_floating(dtype):
    class _Cast(Compressor):
        @staticmethod
        def compress(tensor):
            if tensor.dtype.is_floating_point:
                return tensor.type(dtype), tensor.dtype
            return tensor, tensor.dtype

        @staticmethod
        def decompress(tensor, ctx):
            if ctx is not None and ctx.is_floating_point and tensor.dtype != ctx:
                return tensor.type(ctx)
            return tensor
    return _Cast


class FP16Compressor(_cast_floating(torch.float16)):
    """Floating-point tensors travel as IEEE half; other dtypes as they are."""


class BF16Compressor(_cast_floating(torch.bfloat16)):
    """Floating-point tensors travel as bfloat16; other dtypes as they are."""


def _lossy_only_in_optimizer(compression, what):
    return ("%s: compression=%r is for hvd.DistributedOptimizer(compression=...), which compresses all "
            "of a step's gradients together; for one tensor use Compression.none, .fp16 or .bf16"
            % (what, compression))


class LossyCompressor(Compressor):
    """A lossy mode run by DistributedOptimizer in C++ (gradient_compressor.h).

    start_step: steps of plain allreduce first (None: HPCT_COMPRESSION_START_STEP,
    default 50); min_rate: a tensor whose bytes would shrink by less goes
    plain (None: HPCT_COMPRESSION_MIN_RATE, default 2). An instance is also
    callable with new options: ``Compression.int8(start_step=10)``."""

    _NAME = "LossyCompressor"

    def __init__(self, start_step=None, min_rate=None):
        what = self._NAME
        if start_step is not None and (isinstance(start_step, bool) or not isinstance(start_step, int)
                                       or start_step < 0):
            raise ValueError("%s(start_step=%r): start_step must be a whole number >= 0 (the steps of "
                             "plain allreduce before compressing)" % (what, start_step))
        if min_rate is not None and (isinstance(min_rate, bool) or not isinstance(min_rate, (int, float))
                                     or not min_rate > 0):
            raise ValueError("%s(min_rate=%r): min_rate must be a number > 0 (e.g. 2.0: tensors whose "
                             "bytes shrink by less go uncompressed)" % (what, min_rate))
        self.start_step = start_step
        self.min_rate = None if min_rate is None else float(min_rate)

    @property
    def mode(self):
        """The C++ mode name: "powersgd:4", "int8"."""
        raise NotImplementedError

    def compress(self, tensor):
        raise ValueError(_lossy_only_in_optimizer(self, "compress"))

    def decompress(self, tensor, ctx):
        raise ValueError(_lossy_only_in_optimizer(self, "decompress"))

    def _options(self):
        out = []
        if self.start_step is not None:
            out.append("start_step=%d" % self.start_step)
        if self.min_rate is not None:
            out.append("min_rate=%g" % self.min_rate)
        return out


class PowerSGDCompressor(LossyCompressor):
    """Rank-r approximation of each gradient matrix (Vogels et al., 2019)
    with error feedback and warm start; 1-D and small tensors go plain."""
    _NAME = "Compression.powersgd"

    def __init__(self, rank=4, start_step=None, min_rate=None):
        if isinstance(rank, bool) or not isinstance(rank, int) or not 1 <= rank <= 1024:
            raise ValueError("Compression.powersgd(rank=%r): rank must be a whole number from 1 to 1024 "
                             "(e.g. rank=4)" % (rank,))
        super().__init__(start_step, min_rate)
        self.rank = rank

    def __call__(self, rank=4, start_step=None, min_rate=None):
        return PowerSGDCompressor(rank, start_step, min_rate)

    @property
    def mode(self):
        return "powersgd:%d" % self.rank

    def __repr__(self):
        return "Compression.powersgd(%s)" % ", ".join(["rank=%d" % self.rank] + self._options())


class Int8Compressor(LossyCompressor):
    """Per-chunk scaled 8-bit quantisation with error feedback."""
    _NAME = "Compression.int8"

    def __call__(self, start_step=None, min_rate=None):
        return Int8Compressor(start_step, min_rate)

    @property
    def mode(self):
        return "int8"

    def __repr__(self):
        return "Compression.int8(%s)" % ", ".join(self._options())


class Compression(object):
    """The compressors hpctrain provides (Horovod's ``hvd.Compression``).

    powersgd and int8 are lossy and for DistributedOptimizer only; each is
    an instance with the default options and may be called for others:
    ``Compression.powersgd`` is ``Compression.powersgd(rank=4)``, and
    ``Compression.int8`` is ``Compression.int8()``."""
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
    powersgd = PowerSGDCompressor()
    int8 = Int8Compressor()


def lossy_of(compression):
    """The LossyCompressor instance compression stands for, or None for
    another compressor. Raises ValueError for one that overrides
    compress/decompress: a lossy mode runs in C++ and cannot wrap them."""
    if isinstance(compression, type):
        if not issubclass(compression, LossyCompressor):
            return None
        compression = compression()
    if not isinstance(compression, LossyCompressor):
        return None
    if not isinstance(compression, (PowerSGDCompressor, Int8Compressor)):
        raise ValueError("compression=%s: the lossy modes are Compression.powersgd(...) and "
                         "Compression.int8(...)" % type(compression).__name__)
    cls = type(compression)
    if cls.compress is not LossyCompressor.compress or cls.decompress is not LossyCompressor.decompress:
        raise ValueError(
            "compression=%s: a user-defined compress()/decompress() cannot be combined with the lossy "
            "mode %s, which runs in C++ over all of a step's gradients; pass Compression.%s(...) as it "
            "is, or a Compressor subclass that does not derive from it"
            % (cls.__name__, compression.mode, "int8" if isinstance(compression, Int8Compressor)
               else "powersgd"))
    return compression


def lossy_misuse(compression, what):
    """The error line for a lossy mode passed to a single collective, or None."""
    if isinstance(compression, LossyCompressor) or (
            isinstance(compression, type) and issubclass(compression, LossyCompressor)):
        return _lossy_only_in_optimizer(compression, what)
    return None


_ENGINE_NAMES = {NoneCompressor: "none", FP16Compressor: "fp16", BF16Compressor: "bf16"}


def engine_name(compression):
    """The engine's wire compression for a built-in compressor ("" for None:
    the engine's default, HPCT_COMPRESSION), or None for a user-defined one
    that must run in Python."""
    if compression is None:
        return ""
    cls = compression if isinstance(compression, type) else type(compression)
    return _ENGINE_NAMES.get(cls)
