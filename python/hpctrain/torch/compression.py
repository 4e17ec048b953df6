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


class Compression(object):
    """The compressors hpctrain provides (Horovod's ``hvd.Compression``)."""
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor


_ENGINE_NAMES = {NoneCompressor: "none", FP16Compressor: "fp16", BF16Compressor: "bf16"}


def engine_name(compression):
    """The engine's wire compression for a built-in compressor ("" for None:
    the engine's default, HPCT_COMPRESSION), or None for a user-defined one
    that must run in Python."""
    if compression is None:
        return ""
    cls = compression if isinstance(compression, type) else type(compression)
    return _ENGINE_NAMES.get(cls)
