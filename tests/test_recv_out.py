"""recv(..., out=tensor): the tensor arrives in the caller's array or tensor, in place, on
every protocol variant; a tensor that does not fit is refused and kept for the next recv."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tensorverbs as tv
from tensorverbs.devices import STAND_IN, StandInArray
from tensorverbs.local_cluster import pattern, same

KIB, MIB = 1 << 10, 1 << 20
SIZES = [KIB, 64 * MIB]


def address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


@pytest.mark.parametrize("nbytes", SIZES, ids=["1KiB", "64MiB"])
def test_numpy_out_is_filled_in_place(pair, step, nbytes):
    out = np.zeros(nbytes // 4, np.float32)
    where = address(out)
    pair.ps.send_pattern("np", pair.WORKER, step, nbytes, 1, "float32")
    got = pair.worker.recv("np", source=pair.PS, step_id=step, timeout=60, out=out)
    assert got is out and address(out) == where
    assert same(out, pattern(nbytes, 1, "float32"))


@pytest.mark.parametrize("nbytes", SIZES, ids=["1KiB", "64MiB"])
def test_torch_out_is_filled_in_place(pair, step, nbytes):
    torch = pytest.importorskip("torch")
    out = torch.zeros(nbytes // 4)
    where = out.data_ptr()
    pair.ps.send_pattern("torch", pair.WORKER, step, nbytes, 2, "float32")
    fut = pair.worker.recv_async("torch", source=pair.PS, step_id=step, timeout=60, out=out)
    assert fut.result(60) is out and out.data_ptr() == where
    assert same(out.numpy(), pattern(nbytes, 2, "float32"))


def test_large_tensor_lands_where_the_provider_writes_fastest(pair, step):
    """grpc+verbs registers out for a large tensor and the write lands in it, except on one
    host, where the soft provider writes the pool's shared memory faster (then copied)."""
    if pair.protocol != "grpc+verbs":
        pytest.skip("grpc streams into out; only grpc+verbs registers it")
    out = np.zeros(4 * MIB, np.uint8)
    pair.ps.send_pattern("reg", pair.WORKER, step, out.nbytes, 3)
    before = pair.worker.stats()
    pair.worker.recv("reg", source=pair.PS, step_id=step, timeout=60, out=out)
    after = pair.worker.stats()
    # only the soft provider on one host reaches no memory beyond its pool's
    soft_one_host = (pair.env.get("TENSORVERBS_PROVIDER") == "soft"
                     and pair.env.get("TENSORVERBS_SAME_HOST") != "no")
    registered = not soft_one_host
    assert after["landing_registrations"] - before["landing_registrations"] == int(registered)
    assert after["pool_in_use_bytes"] == before["pool_in_use_bytes"]
    assert same(out, pattern(out.nbytes, 3))


def test_model_parameters_and_bfloat16(pair, step):
    torch = pytest.importorskip("torch")
    weight = torch.nn.Parameter(torch.zeros(3, 5))
    half = torch.zeros(7, dtype=torch.bfloat16)
    sent_weight = np.arange(15, dtype=np.float32).reshape(3, 5)
    sent_half = np.arange(7, dtype=np.float32).astype(ml_dtypes.bfloat16)
    pair.ps.send("weight", sent_weight, to=pair.WORKER, step_id=step)
    pair.ps.send("half", sent_half, to=pair.WORKER, step_id=step)
    assert pair.worker.recv("weight", pair.PS, step, timeout=30, out=weight) is weight
    assert pair.worker.recv("half", pair.PS, step, timeout=30, out=half) is half
    assert weight.requires_grad and torch.equal(weight.detach(), torch.from_numpy(sent_weight))
    assert torch.equal(half.float(), torch.arange(7, dtype=torch.float32))


def test_local_recv_into_out(pair, step):
    array = np.arange(12, dtype=np.int64).reshape(3, 4)
    out = np.zeros_like(array)
    pair.worker.send("self", array, to=pair.WORKER, step_id=step)
    assert pair.worker.recv("self", pair.WORKER, step, timeout=5, out=out) is out
    assert same(out, array) and address(out) != address(array)


def test_dead_tensor_into_out(pair, step):
    out = np.zeros(6, np.int32)
    pair.ps.send("dead", np.arange(6, dtype=np.int32), to=pair.WORKER, step_id=step, is_dead=True)
    got = pair.worker.recv("dead", pair.PS, step, timeout=30, out=out)
    assert tv.is_dead(got) and address(got) == address(out)
    assert same(out, np.arange(6, dtype=np.int32))


@pytest.mark.parametrize("sent, expected", [
    (np.arange(5, dtype=np.float32), "float32 (5,)"),              # shape
    (np.arange(4, dtype=np.int32), "int32 (4,)"),                  # dtype, same bytes
    (np.arange(1 << 20, dtype=np.float64), "float64 (1048576,)"),  # a large one
    (np.array([b"a", b"b", b"c", b"d"], dtype=object), "string (4,)"),
], ids=["shape", "dtype", "large", "string"])
def test_mismatch_is_refused_and_the_tensor_kept(pair, step, sent, expected):
    out = np.zeros(4, np.float32)
    pair.ps.send("m", sent, to=pair.WORKER, step_id=step)
    with pytest.raises(tv.InvalidArgumentError) as info:
        pair.worker.recv("m", pair.PS, step, timeout=30, out=out)
    assert "out expects float32 (4,)" in str(info.value) and f"sent {expected}" in str(info.value)
    assert not out.any()  # untouched
    fut = pair.worker.recv_async("m", pair.PS, step, timeout=30, out=np.zeros(3, np.float32))
    with pytest.raises(tv.InvalidArgumentError, match="out expects float32 \\(3,\\)"):
        fut.result(30)
    assert same(pair.worker.recv("m", pair.PS, step, timeout=30), sent)


def test_changed_meta_data_does_not_touch_out(pair, step):
    """The first recv caches the tensor's meta-data (grpc+verbs then asks with out as the
    landing); when the sender's tensor changes shape, out keeps what it had."""
    first = np.arange(1 << 18, dtype=np.float32)
    out = np.zeros_like(first)
    pair.ps.send("cached", first, to=pair.WORKER, step_id=step)
    pair.worker.recv("cached", pair.PS, step, timeout=30, out=out)
    second = np.arange((1 << 18) + 1, dtype=np.float32)
    pair.ps.send("cached", second, to=pair.WORKER, step_id=step + 1)
    with pytest.raises(tv.InvalidArgumentError):
        pair.worker.recv("cached", pair.PS, step + 1, timeout=30, out=out)
    assert same(out, first)
    assert same(pair.worker.recv("cached", pair.PS, step + 1, timeout=30), second)


def test_own_tensor_refused_goes_back_to_the_table(pair, step):
    pair.worker.send("own", np.arange(3, dtype=np.int8), to=pair.WORKER, step_id=step)
    for recv in (pair.worker.recv, lambda *a, **k: pair.worker.recv_async(*a, **k).result(5)):
        with pytest.raises(tv.InvalidArgumentError):
            recv("own", pair.WORKER, step, timeout=5, out=np.zeros(3, np.int16))
    assert same(pair.worker.recv("own", pair.WORKER, step, timeout=5), np.arange(3, dtype=np.int8))


def bad_outs():
    base = np.zeros((4, 4), np.float32)
    read_only = np.zeros(4, np.float32)
    read_only.flags.writeable = False
    return [(base[:, ::2], "C-contiguous"), (base.T, "C-contiguous"), (read_only, "writable"),
            (np.array([b"x"], dtype=object), "numeric"), ([0.0, 1.0], "numpy array or a tensor")]


@pytest.mark.parametrize("out, why", bad_outs(), ids=["strided", "transposed", "read-only", "strings", "list"])
def test_unusable_out_is_refused_before_the_recv(pair, step, out, why):
    pair.ps.send("kept", np.ones(8, np.float32), to=pair.WORKER, step_id=step)
    with pytest.raises(tv.InvalidArgumentError, match=why):
        pair.worker.recv("kept", pair.PS, step, timeout=30, out=out)
    with pytest.raises(tv.InvalidArgumentError, match=why):
        pair.worker.recv_async("kept", pair.PS, step, timeout=30, out=out)
    assert same(pair.worker.recv("kept", pair.PS, step, timeout=30), np.ones(8, np.float32))


def test_non_contiguous_torch_out_is_refused(pair):
    torch = pytest.importorskip("torch")
    with pytest.raises(tv.InvalidArgumentError, match="C-contiguous"):
        pair.worker.recv("x", pair.PS, 0, timeout=1, out=torch.zeros(4, 4).t())


def test_stand_in_device_out_goes_through_the_proxy(pair, step):
    array = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    out = STAND_IN.from_host(np.zeros_like(array))
    before = pair.worker.stats()["proxy_copies"]
    pair.ps.send("dev", array, to=pair.WORKER, step_id=step)
    got = pair.worker.recv("dev", pair.PS, step, timeout=30, out=out)
    assert got is out and isinstance(out, StandInArray) and same(out.view(np.ndarray), array)
    assert pair.worker.stats()["proxy_copies"] - before == 1
    with pytest.raises(tv.InvalidArgumentError, match="out is on cpu:proxy, the recv asks for cpu"):
        pair.worker.recv("dev", pair.PS, step, timeout=1, device="cpu", out=out)


def test_cuda_out(pair, step):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA GPU here")
    out = torch.zeros(1 << 20, device="cuda:0")
    array = pattern(4 << 20, 4, "float32")
    pair.ps.send_pattern("gpu", pair.WORKER, step, 4 << 20, 4, "float32")
    assert pair.worker.recv("gpu", pair.PS, step, timeout=60, out=out) is out
    assert np.array_equal(out.cpu().numpy().view(np.uint32), array.view(np.uint32))
