"""Tensors between two tasks in separate processes, for every protocol variant."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tensorverbs as tv
from tensorverbs.local_cluster import same

DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
          np.uint64, np.float16, ml_dtypes.bfloat16, np.float32, np.float64, np.complex64,
          np.complex128]
#: ranks 9 and 32 (the most a message carries): more dims than a shape holds in place
SHAPES = [(), (0,), (7,), (2, 3, 4), (3, 0, 2), (1, 1, 1, 1, 5), (2, 1, 1, 1, 1, 1, 1, 3, 2),
          (1,) * 31 + (3,)]


def sample(dtype, shape, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    return rng.integers(0, 256, size=count * dtype.itemsize, dtype=np.uint8).view(dtype).reshape(shape)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_every_dtype_and_rank_ps_to_worker(pair, step, dtype):
    for i, shape in enumerate(SHAPES):
        array = sample(dtype, shape, seed=step * 31 + i)
        pair.ps.send(f"t{i}", array, to=pair.WORKER, step_id=step)
        out = pair.worker.recv(f"t{i}", source=pair.PS, step_id=step, timeout=30)
        assert same(out, array), (shape, out, array)


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.complex128, np.bool_],
                         ids=lambda d: np.dtype(d).name)
def test_worker_to_ps(pair, step, dtype):
    for i, shape in enumerate(SHAPES):
        array = sample(dtype, shape, seed=step + i)
        pair.worker.send(f"u{i}", array, to=pair.PS, step_id=step)
        out = pair.ps.recv(f"u{i}", source=pair.WORKER, step_id=step, timeout=30)
        assert same(out, array)


def test_strings(pair, step):
    cases = [
        np.array([b"alpha", b"", "\u00e9t\u00e9", b"\x00\xff"], dtype=object),
        np.array([[b"a", b"bb"], [b"ccc", b"dddd"]], dtype=object),
        np.array(b"scalar", dtype=object),
        np.empty((2, 0), dtype=object),
        np.array(["numpy", "unicode"]),
    ]
    for i, array in enumerate(cases):
        pair.ps.send(f"s{i}", array, to=pair.WORKER, step_id=step)
        out = pair.worker.recv(f"s{i}", source=pair.PS, step_id=step, timeout=30)
        expected = [v.encode() if isinstance(v, str) else v for v in array.reshape(-1).tolist()]
        assert out.dtype == object and out.shape == array.shape
        assert out.reshape(-1).tolist() == expected


def test_dead_tensor_arrives_dead(pair, step):
    array = np.arange(6, dtype=np.int32)
    pair.ps.send("dead", array, to=pair.WORKER, step_id=step, is_dead=True)
    pair.ps.send("alive", array, to=pair.WORKER, step_id=step)
    dead = pair.worker.recv("dead", source=pair.PS, step_id=step, timeout=30)
    alive = pair.worker.recv("alive", source=pair.PS, step_id=step, timeout=30)
    assert tv.is_dead(dead) and isinstance(dead, tv.DeadTensor)
    assert not tv.is_dead(alive)
    assert same(dead.view(np.ndarray), array) and same(alive, array)


def test_recv_before_send(pair, step):
    fut = pair.worker.recv_async("late", source=pair.PS, step_id=step, timeout=30)
    assert not fut.done()
    array = sample(np.float32, (128, 3), step)
    pair.ps.send("late", array, to=pair.WORKER, step_id=step)
    assert same(fut.result(30), array)


def test_send_before_recv(pair, step):
    array = sample(np.int64, (1000,), step)
    pair.ps.send("early", array, to=pair.WORKER, step_id=step)
    assert same(pair.worker.recv("early", source=pair.PS, step_id=step, timeout=30), array)


def test_hundred_concurrent_recvs(pair, step):
    futures = [pair.worker.recv_async(f"c{i}", source=pair.PS, step_id=step, timeout=60)
               for i in range(100)]
    arrays = [sample(np.float32, (i + 1, 17), step + i) for i in range(100)]
    for i in reversed(range(100)):
        pair.ps.send(f"c{i}", arrays[i], to=pair.WORKER, step_id=step)
    for fut, array in zip(futures, arrays):
        assert same(fut.result(60), array)


def test_same_name_two_steps_kept_apart(pair, step):
    a, b = sample(np.float64, (50,), 1), sample(np.float64, (50,), 2)
    pair.ps.send("w", a, to=pair.WORKER, step_id=step)
    pair.ps.send("w", b, to=pair.WORKER, step_id=step + 1)
    assert same(pair.worker.recv("w", source=pair.PS, step_id=step + 1, timeout=30), b)
    assert same(pair.worker.recv("w", source=pair.PS, step_id=step, timeout=30), a)


def test_non_contiguous_input(pair, step):
    base = sample(np.int16, (16, 16), step)
    view = base[::2, 1::3].T
    pair.ps.send("nc", view, to=pair.WORKER, step_id=step)
    assert same(pair.worker.recv("nc", source=pair.PS, step_id=step, timeout=30),
                np.ascontiguousarray(view))


def test_local_recv(pair, step):
    array = sample(np.uint32, (9, 9), step)
    pair.worker.send("self", array, to=pair.WORKER, step_id=step)
    before = pair.worker.stats()
    assert same(pair.worker.recv("self", source=pair.WORKER, step_id=step, timeout=5), array)
    after = pair.worker.stats()
    assert after["local_recvs"] == before["local_recvs"] + 1
    assert after["tensors_received"] == before["tensors_received"]


def test_abort_step_on_receiver(pair, step):
    fut = pair.worker.recv_async("never", source=pair.PS, step_id=step, timeout=60)
    local = pair.worker.recv_async("never_local", source=pair.WORKER, step_id=step, timeout=60)
    pair.worker.abort_step(step, "test says stop")
    for f in (fut, local):
        with pytest.raises(tv.AbortedError, match="test says stop"):
            f.result(10)
    with pytest.raises(tv.AbortedError):
        pair.worker.recv("later", source=pair.PS, step_id=step, timeout=10)
    with pytest.raises(tv.AbortedError):
        pair.worker.send("later", np.zeros(1), to=pair.PS, step_id=step)
    pair.worker.cleanup_step(step)
    array = sample(np.float32, (4,), step)
    pair.ps.send("after", array, to=pair.WORKER, step_id=step)
    assert same(pair.worker.recv("after", source=pair.PS, step_id=step, timeout=30), array)


def test_abort_step_on_sender_reaches_receiver(pair, step):
    fut = pair.worker.recv_async("pending", source=pair.PS, step_id=step, timeout=60)
    pair.ps.call("wait_waiters", 1, timeout=60)
    pair.ps.abort_step(step, "ps gave up")
    with pytest.raises(tv.AbortedError, match="ps gave up"):
        fut.result(30)


def test_recv_timeout(pair, step):
    with pytest.raises(tv.DeadlineExceededError, match="'missing'"):
        pair.worker.recv("missing", source=pair.PS, step_id=step, timeout=0.5)
    # the abandoned request does not swallow a later send of the same name
    array = sample(np.int8, (33,), step)
    pair.ps.send("missing", array, to=pair.WORKER, step_id=step)
    assert same(pair.worker.recv("missing", source=pair.PS, step_id=step, timeout=30), array)


@pytest.mark.parametrize("name", ["/job:nope/task:0", "/job:ps/task:7", "ps:0", "/job:ps/replica:1/task:0", ""])
def test_malformed_or_unknown_task_names(pair, name):
    with pytest.raises(tv.InvalidArgumentError) as info:
        pair.worker.recv("x", source=name, timeout=1)
    assert repr(name)[1:-1] in str(info.value) or name in str(info.value)
    with pytest.raises(tv.InvalidArgumentError):
        pair.worker.send("x", np.zeros(1), to=name)


def test_bad_tensor_names(pair):
    for name in ["a;b", "", "x" * 513, "\ud800", "\u00e9" * 257]:
        with pytest.raises(tv.InvalidArgumentError):
            pair.worker.send(name, np.zeros(1), to=pair.PS)


def test_counters(pair, step):
    before_w, before_p = pair.worker.stats(), pair.ps.stats()
    array = sample(np.float32, (256,), step)
    pair.ps.send("counted", array, to=pair.WORKER, step_id=step)
    pair.worker.recv("counted", source=pair.PS, step_id=step, timeout=30)
    after_w, after_p = pair.worker.stats(), pair.ps.stats()
    assert after_w["tensors_received"] - before_w["tensors_received"] == 1
    assert after_w["bytes_received"] - before_w["bytes_received"] == array.nbytes
    assert after_p["tensors_sent"] - before_p["tensors_sent"] == 1
    assert after_p["sends"] - before_p["sends"] == 1
