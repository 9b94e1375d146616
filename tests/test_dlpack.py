"""DLPack in and out: send takes anything speaking DLPack; received arrays export it, and
the memory they share stays alive (in the pool, for grpc+verbs) until the last consumer
drops it."""
from __future__ import annotations

import numpy as np
import pytest

import tensorverbs as tv
from tensorverbs.local_cluster import pattern, same


class OnlyDLPack:
    """A tensor that speaks DLPack and nothing else (no buffer protocol, no __array__)."""

    def __init__(self, array: np.ndarray) -> None:
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


class Elsewhere(OnlyDLPack):
    """A tensor on a DLPack device tensorverbs does not move (kDLVulkan)."""

    def __dlpack_device__(self):
        return (7, 0)


def test_send_takes_an_object_that_only_speaks_dlpack(pair, step):
    array = np.arange(60, dtype=np.int16).reshape(3, 4, 5)
    with pytest.raises(TypeError):
        memoryview(OnlyDLPack(array))  # nothing but DLPack to go by
    pair.worker.send("only", OnlyDLPack(array), to=pair.PS, step_id=step)
    assert same(pair.ps.recv("only", pair.WORKER, step, timeout=30), array)


def test_send_takes_torch_tensors_as_they_are(pair, step):
    torch = pytest.importorskip("torch")
    weight = torch.nn.Parameter(torch.arange(6, dtype=torch.float32).reshape(2, 3))
    half = torch.arange(5, dtype=torch.bfloat16)
    pair.worker.send("param", weight, to=pair.PS, step_id=step)
    pair.worker.send("half", half, to=pair.PS, step_id=step)
    assert same(pair.ps.recv("param", pair.WORKER, step, timeout=30), weight.detach().numpy())
    got = pair.ps.recv("half", pair.WORKER, step, timeout=30)
    assert torch.equal(torch.from_numpy(got.view(np.int16)).view(torch.bfloat16), half)


def test_a_tensor_of_an_unknown_device_is_refused(pair, step):
    with pytest.raises(tv.InvalidArgumentError, match="DLPack device type 7"):
        pair.worker.send("vk", Elsewhere(np.zeros(3)), to=pair.PS, step_id=step)


def test_torch_shares_the_received_memory(pair, step):
    torch = pytest.importorskip("torch")
    nbytes = 1 << 20
    pair.ps.send_pattern("shared", pair.WORKER, step, nbytes, 5, "float32")
    received = pair.worker.recv("shared", pair.PS, step, timeout=30)
    view = torch.from_dlpack(received)
    assert view.data_ptr() == received.__array_interface__["data"][0]
    assert same(view.numpy(), pattern(nbytes, 5, "float32"))
    consumer = np.from_dlpack(OnlyDLPack(received))
    assert consumer.__array_interface__["data"][0] == view.data_ptr()


def test_pool_memory_returns_after_the_last_consumer(pair, step):
    torch = pytest.importorskip("torch")
    if pair.protocol != "grpc+verbs":
        pytest.skip("only grpc+verbs receives into a pool")
    nbytes = 1 << 20
    baseline = pair.worker.stats()["pool_in_use_bytes"]
    pair.ps.send_pattern("pooled", pair.WORKER, step, nbytes, 6)
    received = pair.worker.recv("pooled", pair.PS, step, timeout=30)
    view = torch.from_dlpack(received)
    in_use = pair.worker.stats()["pool_in_use_bytes"]
    assert in_use >= baseline + nbytes
    del received
    assert pair.worker.stats()["pool_in_use_bytes"] == in_use  # torch still holds it
    assert same(view.numpy(), pattern(nbytes, 6))
    del view
    assert pair.worker.stats()["pool_in_use_bytes"] == baseline


def test_cuda_tensor_from_another_library_is_sent(pair, step):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA GPU here")
    tensor = torch.arange(1000, dtype=torch.float32, device="cuda:0")
    before = pair.worker.stats()["proxy_copies"]
    pair.worker.send("gpu", OnlyDLPack(tensor), to=pair.PS, step_id=step)
    assert pair.worker.stats()["proxy_copies"] == before + 1
    assert np.array_equal(pair.ps.recv("gpu", pair.WORKER, step, timeout=30), tensor.cpu().numpy())
