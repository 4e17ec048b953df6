# CUDA tensors through hpctrain.torch (issue 38), one process: the backend's
# registration is checked everywhere; what needs a GPU skips with "no GPU".
# Run: PYTHONPATH=build/python <torch's python3> -m pytest python/tests/test_cuda.py
import os

import pytest
import torch
import torch.distributed as dist

import hpctrain.torch as hvd
from hpctrain.torch import backend


def test_backend_registers_for_cpu_and_cuda():
    backend.register()
    caps = dist.Backend.backend_capability[backend.NAME]
    assert "cpu" in caps and "cuda" in caps, caps


@pytest.fixture(scope="module")
def one_rank():
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    from hpctrain.torch import _C
    if not _C.CUDA_TENSORS:
        pytest.fail("torch has CUDA but hpctrain.torch was built without hpct_torch_cuda")
    os.environ.setdefault("HPCT_SIZE", "1")
    hvd.init()
    yield
    hvd.shutdown()


def test_allreduce_and_broadcast_on_the_device(one_rank):
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        # produced on a side stream: the readiness event orders the engine after it
        t = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
        out = hvd.allreduce(t, op=hvd.Sum, name="cuda.sum")
        assert out.device.type == "cuda"
        assert torch.equal(out, t * hvd.size())
        b = hvd.broadcast(t, root_rank=0, name="cuda.b")
        assert torch.equal(b, t)
        g = hvd.allgather(t[:10].reshape(10, 1), name="cuda.g")
        assert g.device.type == "cuda" and g.shape[0] == 10 * hvd.size()


def test_fp16_compression_on_the_device(one_rank):
    t = torch.full((4097,), 1.5, device="cuda")
    out = hvd.allreduce(t, op=hvd.Average, name="cuda.fp16", compression=hvd.Compression.fp16)
    assert torch.allclose(out, t)


@pytest.mark.parametrize("mode", ["powersgd", "int8"])
def test_lossy_state_stays_on_the_device(one_rank, mode):
    model = torch.nn.Linear(256, 256).cuda()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(),
                                   compression=getattr(hvd.Compression, mode))
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(8, 256, device="cuda")).sum().backward()
        opt.step()
    assert all(p.device.type == "cuda" for p in model.parameters())
