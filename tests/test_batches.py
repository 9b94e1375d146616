"""Batches: recv_many / arecv_many / recv_many_async and send_many move many tensors in
one call, results in entry order, a failed entry told apart from the others, bad entries
refused naming them. For every protocol variant, the sender in another process."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest

import tensorverbs as tv
from tensorverbs.local_cluster import pattern, same

from variants import SURFACE_VARIANTS


@pytest.fixture(scope="module", params=SURFACE_VARIANTS)
def variant(request) -> str:
    """This suite is about the Python surface: each protocol and provider once."""
    return request.param

#: an inline tensor, one written into a landing, one large enough for the registered paths
SIZES = [16, 64 << 10, 4 << 20]


def _send_all(pair, step: int, names: list[str]) -> None:
    for i, name in enumerate(names):
        pair.ps.send_pattern(name, pair.WORKER, step, SIZES[i % len(SIZES)], step + i)


def _expected(step: int, i: int) -> np.ndarray:
    return pattern(SIZES[i % len(SIZES)], step + i)


def test_recv_many_returns_every_tensor_in_entry_order(pair, step):
    names = [f"t{i}" for i in range(12)]
    _send_all(pair, step, names)
    entries = [tv.RecvEntry(name, pair.PS, step) for name in reversed(names)]  # any order
    got = pair.worker.recv_many(entries, timeout=60)
    assert len(got) == len(names)
    for result, entry in zip(got, entries):
        assert same(result, _expected(step, names.index(entry.name)))


def test_entries_may_be_tuples_and_receive_into_out(pair, step):
    _send_all(pair, step, ["a", "b"])
    out = np.empty(SIZES[1], np.uint8)
    a, b = pair.worker.recv_many([("a", pair.PS, step), ("b", pair.PS, step, out)], timeout=60)
    assert same(a, _expected(step, 0)) and b is out and same(out, _expected(step, 1))


def test_a_failed_entry_is_told_apart_and_the_others_are_kept(pair, step):
    _send_all(pair, step, ["x0", "never", "x2"][::2])  # x0 and x2 (as entries 0 and 1 of the sends)
    entries = [("x0", pair.PS, step), ("missing", pair.PS, step), ("x2", pair.PS, step)]
    first, missing, last = pair.worker.recv_many(entries, timeout=1, return_exceptions=True)
    assert same(first, _expected(step, 0)) and same(last, _expected(step, 1))
    assert isinstance(missing, tv.DeadlineExceededError)


def test_without_return_exceptions_the_error_names_each_failed_entry(pair, step):
    _send_all(pair, step, ["y0"])
    entries = [("gone1", pair.PS, step), ("y0", pair.PS, step), ("gone2", pair.PS, step)]
    with pytest.raises(tv.DeadlineExceededError) as raised:
        pair.worker.recv_many(entries, timeout=1)
    message = str(raised.value)
    assert "entry 0 ('gone1' from /job:ps/replica:0/task:0" in message and "2 of 3 entries failed: 0, 2" in message
    results = raised.value.results
    assert same(results[1], _expected(step, 0))  # what arrived is not lost
    assert all(isinstance(results[i], tv.DeadlineExceededError) for i in (0, 2))


def test_arecv_many_keeps_the_loop_running(pair, step):
    names = ["c0", "c1", "c2"]

    async def main():
        batch = asyncio.ensure_future(pair.worker.arecv_many([(n, pair.PS, step) for n in names], timeout=60))
        await asyncio.sleep(0)  # the batch waits; the loop runs on
        assert not batch.done()
        await asyncio.get_running_loop().run_in_executor(None, _send_all, pair, step, names)
        return await batch

    got = asyncio.run(main())
    assert all(same(result, _expected(step, i)) for i, result in enumerate(got))


def test_recv_many_async_returns_one_future_per_entry(pair, step):
    futures = pair.worker.recv_many_async([("f0", pair.PS, step), ("f1", pair.PS, step)], timeout=60)
    assert len(futures) == 2 and not any(f.done() for f in futures)
    _send_all(pair, step, ["f0", "f1"])
    assert [same(f.result(), _expected(step, i)) for i, f in enumerate(futures)] == [True, True]


def test_send_many_hands_back_one_handle_per_entry(pair, step):
    values = [pattern(n, step + i) for i, n in enumerate(SIZES)]
    handles = pair.worker.send_many([tv.SendEntry(f"s{i}", v, pair.PS, step) for i, v in enumerate(values)])
    assert len(handles) == len(SIZES) and all(isinstance(h, tv.SendHandle) for h in handles)
    for i, n in enumerate(SIZES):
        assert pair.ps.recv_pattern(f"s{i}", pair.WORKER, step, n, step + i, timeout=60)
    pair.worker.flush(timeout=60)
    assert all(h.exception(timeout=0) is None for h in handles)


def test_send_many_sends_every_kind_of_entry_in_one_call(pair, step):
    strings = np.array([b"ab", b"", b"cde"], dtype=object)
    parts = [pattern(16, step), pattern(4 << 10, step + 1)]
    handles = pair.worker.send_many([
        ("h0", pattern(SIZES[1], step), pair.PS, step),
        ("strings", strings, pair.PS, step),
        ("group", tv.TensorList(parts), pair.PS, step),
        ("h1", pattern(SIZES[0], step + 1), pair.PS, step + 1),
    ])
    assert len(handles) == 4
    assert pair.ps.recv_pattern("h0", pair.WORKER, step, SIZES[1], step, timeout=60)
    assert list(pair.ps.recv("strings", pair.WORKER, step, 60)) == list(strings)
    assert all(same(got, want) for got, want in zip(pair.ps.recv("group", pair.WORKER, step, 60), parts))
    assert pair.ps.recv_pattern("h1", pair.WORKER, step + 1, SIZES[0], step + 1, timeout=60)
    pair.worker.flush(timeout=60)
    assert all(h.exception(timeout=0) is None for h in handles)


#: added to a test's step: a step of its own to abort
ABORTED = 1 << 40


@pytest.mark.parametrize("bad, error, match", [
    # refused before it is offered (a task not in the cluster) ...
    (lambda pair, step: ("bad", np.ones(2), "/job:nobody/task:0", step), tv.InvalidArgumentError,
     r"entry 2 \('bad' to /job:nobody/task:0\)"),
    # ... or by the table (its step was aborted)
    (lambda pair, step: ("bad", np.ones(2), pair.PS, ABORTED + step), tv.AbortedError,
     r"entry 2 \('bad' to /job:ps/replica:0/task:0\)"),
])
def test_send_many_offers_the_entries_before_a_bad_one_and_none_after(pair, step, bad, error, match):
    pair.worker.abort_step(ABORTED + step)
    good = [(f"g{i}", pattern(16, step + i), pair.PS, step) for i in range(2)]
    after = [("after", pattern(16, step), pair.PS, step)]
    with pytest.raises(error, match=match):
        pair.worker.send_many([*good, bad(pair, step), *after])
    assert all(pair.ps.recv_pattern(f"g{i}", pair.WORKER, step, 16, step + i, timeout=60) for i in range(2))
    pair.worker.flush(timeout=60)  # no handle is left waiting, the entries never offered included
    assert pair.worker.pending()[0] == 0  # and "after" is not in the table


@pytest.mark.parametrize("entries, match", [
    ("ab", "a batch is a sequence of RecvEntrys"),
    ([("a", "/job:ps/task:0"), ("b",)], r"entry 1 of the batch is not a RecvEntry"),
    ([("a", "/job:ps/task:0"), ("b", "/job:nobody/task:0")], r"entry 1 \('b' from /job:nobody/task:0"),
])
def test_a_bad_entry_is_refused_naming_it(pair, step, entries, match):
    entries = [(*entry[:2], step) if len(entry) == 2 else entry for entry in entries] \
        if isinstance(entries, list) else entries
    with pytest.raises(tv.InvalidArgumentError, match=match):
        pair.worker.recv_many(entries, timeout=60)
    # the recv started before the bad entry was given up: it took nothing
    _send_all(pair, step, ["a"])
    assert same(pair.worker.recv("a", pair.PS, step, timeout=60), _expected(step, 0))


def test_a_bad_send_entry_is_refused_naming_it(pair, step):
    with pytest.raises(tv.InvalidArgumentError, match=r"entry 0 \('z' to /job:nobody/task:0\)"):
        pair.worker.send_many([("z", np.ones(2), "/job:nobody/task:0", step)])


def test_a_batch_returns_torch_tensors_when_asked(pair, step):
    torch = pytest.importorskip("torch", reason="torch results need torch")
    _send_all(pair, step, ["p0", "p1"])
    got = pair.worker.recv_many([("p0", pair.PS, step), ("p1", pair.PS, step)], timeout=60, tensor_type="torch")
    assert all(isinstance(t, torch.Tensor) for t in got)
    assert all(same(t.numpy(), _expected(step, i)) for i, t in enumerate(got))
