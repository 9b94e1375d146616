"""torch-native results: with tensor_type="torch" a recv returns a torch tensor sharing the
received memory, for every dtype torch has; dtype= casts on receipt; allocate and out= take
torch dtypes and tensors; a dtype torch lacks is refused and its tensor kept. On every
protocol variant, between a worker (torch results) and a ps in a child process."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tensorverbs as tv
from tensorverbs.local_cluster import TaskProcess, cluster_spec, pattern, same
from tensorverbs.verbs.config import RdmaConfig

from variants import SURFACE_VARIANTS, VARIANTS, Pair

torch = pytest.importorskip("torch", reason="torch results need torch")

#: torch dtype name -> the numpy (or ml_dtypes) dtype a numpy sender sends it as
DTYPES = {
    "float32": np.float32, "float64": np.float64, "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16, "complex64": np.complex64, "complex128": np.complex128,
    "bool": np.bool_, "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
    "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
    "float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2,
    "float8_e4m3fnuz": ml_dtypes.float8_e4m3fnuz, "float8_e5m2fnuz": ml_dtypes.float8_e5m2fnuz,
}


@pytest.fixture(scope="module", params=SURFACE_VARIANTS)
def tpair(request):
    """A ps (numpy results) in a child process and an in-process worker with torch results."""
    protocol, env = VARIANTS[request.param]
    cluster = cluster_spec({"ps": 1, "worker": 1})
    ps = TaskProcess(cluster, "ps", 0, protocol, env)
    try:
        worker = tv.Server(cluster, "worker", 0, protocol, config=RdmaConfig.from_env(env),
                           tensor_type="torch")
    except BaseException:
        ps.stop()
        raise
    yield Pair(ps, worker, protocol, env, cluster)
    worker.stop()
    ps.stop()


def sample(dtype, shape=(3, 5), seed=1) -> np.ndarray:
    """Deterministic values of ``dtype`` (every byte pattern for floats; 0/1 for bools)."""
    count = int(np.prod(shape))
    if np.dtype(dtype) == np.bool_:
        return (pattern(count, seed) & 1).astype(np.bool_).reshape(shape)
    return pattern(count * np.dtype(dtype).itemsize, seed).view(dtype).reshape(shape)


def tensor_bytes(tensor) -> bytes:
    return tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


@pytest.mark.parametrize("name", list(DTYPES))
def test_every_dtype_arrives_as_a_torch_tensor(tpair, step, name):
    sent = sample(DTYPES[name])
    tpair.ps.send("t", sent, to=tpair.WORKER, step_id=step)
    got = tpair.worker.recv("t", tpair.PS, step, timeout=60)
    assert isinstance(got, torch.Tensor) and got.dtype == getattr(torch, name)
    assert tuple(got.shape) == sent.shape and tensor_bytes(got) == sent.tobytes()


def test_recv_async_and_a_per_call_tensor_type(tpair, step):
    sent = sample(ml_dtypes.bfloat16, (64,))
    tpair.ps.send("a", sent, to=tpair.WORKER, step_id=step)
    tpair.ps.send("n", sent, to=tpair.WORKER, step_id=step)
    got = tpair.worker.recv_async("a", tpair.PS, step, timeout=60).result(60)
    assert got.dtype == torch.bfloat16 and tensor_bytes(got) == sent.tobytes()
    as_numpy = tpair.worker.recv("n", tpair.PS, step, timeout=60, tensor_type="numpy")
    assert isinstance(as_numpy, np.ndarray) and same(as_numpy, sent)


def test_a_numpy_server_returns_torch_when_asked(pair, step):
    sent = sample(ml_dtypes.float8_e4m3fn, (8, 8))
    pair.ps.send("f8", sent, to=pair.WORKER, step_id=step)
    got = pair.worker.recv("f8", pair.PS, step, timeout=60, tensor_type="torch")
    assert got.dtype == torch.float8_e4m3fn and tensor_bytes(got) == sent.tobytes()


def test_the_result_shares_the_received_memory(tpair, step, monkeypatch):
    """No copy between what the transport received and the torch tensor: from a peer (the
    protocol's own result, seen through a spy) and from this task (the sent array itself)."""
    sent = sample(ml_dtypes.bfloat16, (256, 256))
    received = []
    protocol_recv = tpair.worker._rendezvous.recv_async

    def spy(*args, **kwargs):
        fut = protocol_recv(*args, **kwargs)
        received.append(fut)
        return fut

    monkeypatch.setattr(tpair.worker._rendezvous, "recv_async", spy)
    tpair.ps.send("big", sent, to=tpair.WORKER, step_id=step)
    copies = tpair.worker.stats()["proxy_copies"]
    got = tpair.worker.recv("big", tpair.PS, step, timeout=60)
    (fut,) = received
    assert got.data_ptr() == address(fut.result()) and tensor_bytes(got) == sent.tobytes()
    own = sample(np.float32, (128,), seed=2)
    tpair.worker.send("own", own, to=tpair.WORKER, step_id=step)
    mine = tpair.worker.recv("own", tpair.WORKER, step, timeout=10)
    assert mine.data_ptr() == address(own)
    assert tpair.worker.stats()["proxy_copies"] == copies


def test_dtype_casts_on_receipt(tpair, step):
    sent = (np.arange(512, dtype=np.float32).reshape(32, 16) / 7 - 30).astype(ml_dtypes.bfloat16)
    for name in ("t", "n", "a"):
        tpair.ps.send(name, sent, to=tpair.WORKER, step_id=step)
    expected = torch.from_numpy(sent.view(np.int16)).view(torch.bfloat16).to(torch.float8_e4m3fn)
    got = tpair.worker.recv("t", tpair.PS, step, timeout=60, dtype=torch.float8_e4m3fn)
    assert got.dtype == torch.float8_e4m3fn and tensor_bytes(got) == tensor_bytes(expected)
    as_numpy = tpair.worker.recv("n", tpair.PS, step, timeout=60, dtype=ml_dtypes.float8_e4m3fn,
                                 tensor_type="numpy")
    assert same(as_numpy, sent.astype(ml_dtypes.float8_e4m3fn))
    fut = tpair.worker.recv_async("a", tpair.PS, step, timeout=60, dtype=torch.float32)
    assert torch.equal(fut.result(60), torch.from_numpy(sent.astype(np.float32)))


@pytest.mark.parametrize("kind", ["recv", "recv_async"])
@pytest.mark.parametrize("sent, dtype_name", [
    (np.array([b"a", b"bc"], dtype=object), "string"),
    (sample(ml_dtypes.float8_e4m3b11fnuz, (4,)), "float8_e4m3b11fnuz"),
], ids=["string", "float8_e4m3b11fnuz"])
def test_a_dtype_torch_lacks_is_refused_and_kept(tpair, step, kind, sent, dtype_name):
    tpair.ps.send("odd", sent, to=tpair.WORKER, step_id=step)
    with pytest.raises(tv.InvalidArgumentError, match=dtype_name):
        if kind == "recv":
            tpair.worker.recv("odd", tpair.PS, step, timeout=60)
        else:
            tpair.worker.recv_async("odd", tpair.PS, step, timeout=60).result(60)
    kept = tpair.worker.recv("odd", tpair.PS, step, timeout=60, tensor_type="numpy")
    assert same(kept, sent)


def test_allocate_and_out_take_torch(tpair, step):
    block = tpair.worker.allocate((16, 4), torch.bfloat16)
    assert isinstance(block, torch.Tensor) and block.dtype == torch.bfloat16
    block.copy_(torch.arange(64, dtype=torch.float32).reshape(16, 4))
    tpair.worker.send("alloc", block, to=tpair.PS, step_id=step)
    assert isinstance(tpair.worker.allocate(3), torch.Tensor)  # the server's tensor_type
    assert isinstance(tpair.worker.allocate(3, np.float32), torch.Tensor)
    got = tpair.ps.recv("alloc", tpair.WORKER, step, timeout=60)
    assert got.dtype == ml_dtypes.bfloat16 and got.tobytes() == tensor_bytes(block)

    sent = sample(ml_dtypes.float8_e5m2, (128,))
    tpair.ps.send("out", sent, to=tpair.WORKER, step_id=step)
    out = torch.empty(128, dtype=torch.float8_e5m2)
    assert tpair.worker.recv("out", tpair.PS, step, timeout=60, out=out) is out
    assert tensor_bytes(out) == sent.tobytes()
    with pytest.raises(tv.InvalidArgumentError, match="out"):
        tpair.worker.recv("out", tpair.PS, step, timeout=60, out=out, dtype=torch.float16)


def test_a_torch_float8_tensor_is_sent(tpair, step):
    tensor = torch.linspace(-4, 4, 50).to(torch.float8_e4m3fn)
    tpair.worker.send("f8", tensor, to=tpair.PS, step_id=step)
    got = tpair.ps.recv("f8", tpair.WORKER, step, timeout=60)
    assert got.dtype == ml_dtypes.float8_e4m3fn and got.tobytes() == tensor_bytes(tensor)


def test_a_dead_tensor_is_dead_as_torch(tpair, step):
    tpair.ps.send("dead", np.zeros(3, np.float32), to=tpair.WORKER, step_id=step, is_dead=True)
    got = tpair.worker.recv("dead", tpair.PS, step, timeout=60)
    assert isinstance(got, torch.Tensor) and tv.is_dead(got) and got.shape == (3,)
    assert not tv.is_dead(torch.zeros(3))


def test_bad_torch_arguments_are_refused(tpair):
    with pytest.raises(tv.InvalidArgumentError, match="tensor_type"):
        tpair.worker.recv("x", tpair.PS, 1, timeout=1, tensor_type="jax")
    with pytest.raises(tv.InvalidArgumentError, match="numpy has no dtype"):
        tpair.worker.recv("x", tpair.PS, 1, timeout=1, dtype=torch.complex32, tensor_type="numpy")
    with pytest.raises(tv.InvalidArgumentError, match="not one tensorverbs moves"):
        tpair.worker.allocate(4, torch.complex32)
