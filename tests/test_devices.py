"""Tensors on devices the transport cannot reach go through a host proxy."""
from __future__ import annotations

import numpy as np
import pytest

import tensorverbs as tv
from tensorverbs.devices import STAND_IN, StandInArray, get_device
from tensorverbs.local_cluster import same


def test_stand_in_device_round_trip(pair, step):
    array = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    before = pair.worker.stats()
    pair.worker.send("dev", STAND_IN.from_host(array), to=pair.PS, step_id=step)
    pair.ps.send("dev", array, to=pair.WORKER, step_id=step)
    out = pair.worker.recv("dev", source=pair.PS, step_id=step, timeout=30, device="cpu:proxy")
    assert isinstance(out, StandInArray) and same(out.view(np.ndarray), array)
    assert same(pair.ps.recv("dev", pair.WORKER, step, timeout=30), array)
    # one copy from the stand-in on send, one into it on receive
    assert pair.worker.stats()["proxy_copies"] - before["proxy_copies"] == 2


def test_cuda_round_trip(pair, step):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA GPU here")
    tensor = torch.arange(1000, dtype=torch.float32, device="cuda:0")
    pair.worker.send("gpu", tensor, to=pair.PS, step_id=step)
    back = pair.ps.recv("gpu", pair.WORKER, step, timeout=30)
    assert np.array_equal(back, tensor.cpu().numpy())
    pair.ps.send("gpu2", back, to=pair.WORKER, step_id=step)
    out = pair.worker.recv("gpu2", source=pair.PS, step_id=step, timeout=30, device="cuda:0")
    assert out.device.type == "cuda" and torch.equal(out, tensor)


def test_cpu_torch_tensor_is_sent_without_copy(pair, step):
    torch = pytest.importorskip("torch")
    tensor = torch.arange(12, dtype=torch.int64).reshape(3, 4)
    before = pair.worker.stats()["proxy_copies"]
    pair.worker.send("t", tensor, to=pair.PS, step_id=step)
    assert same(pair.ps.recv("t", pair.WORKER, step, timeout=30), tensor.numpy())
    assert pair.worker.stats()["proxy_copies"] == before


def test_unknown_devices():
    for name in ["tpu:0", "cuda:x", "cuda:99"]:
        with pytest.raises(tv.InvalidArgumentError):
            get_device(name)
