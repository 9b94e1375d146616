"""A recv's future whose tensor came before anyone looked at it: the receiver's core keeps
the answer until the future is looked at, so nothing wakes a thread or runs Python as it
comes. Whatever way the caller then looks (result, concurrent.futures.wait, as_completed,
a callback, asyncio, cancel, or dropping the future unread) must see the tensor, lose
nothing and hold nothing. The sender's send returns once the receiver has the tensor."""
from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import threading
import time
import weakref

import numpy as np
import pytest

import tensorverbs as tv

from variants import VARIANTS, start_pair

WAIT = 30.0


def _delivered(pair, name: str, step: int, value: np.ndarray) -> None:
    """The ps sends ``value``; returns once the worker has it."""
    pair.ps.call("run", "delivered:send", name, value, pair.WORKER, step, WAIT)


def _values(n: int) -> list[np.ndarray]:
    return [np.arange(i, i + 100, dtype=np.float32) for i in range(n)]


def test_futures_whose_tensors_came_unseen_are_done_for_concurrent_futures_wait(pair, step):
    values = _values(4)
    futs = [pair.worker.recv_async(f"w{i}", pair.PS, step, timeout=WAIT) for i in range(4)]
    for i, value in enumerate(values):
        _delivered(pair, f"w{i}", step, value)
    done, not_done = concurrent.futures.wait(futs, timeout=WAIT)
    assert not not_done and len(done) == 4
    for fut, value in zip(futs, values):
        assert np.array_equal(fut.result(0), value)


def test_as_completed_yields_futures_whose_tensors_came_unseen_and_later(pair, step):
    """Two tensors came before the call, two come while it waits for them."""
    values = _values(4)
    futs = [pair.worker.recv_async(f"c{i}", pair.PS, step, timeout=WAIT) for i in range(4)]
    for i in range(2):
        _delivered(pair, f"c{i}", step, values[i])
    later = threading.Thread(target=lambda: [_delivered(pair, f"c{i}", step, values[i]) for i in (2, 3)])
    got = []
    completed = concurrent.futures.as_completed(futs, timeout=WAIT)
    got.append(next(completed).result(0))  # one that came before the call
    later.start()
    got.extend(fut.result(0) for fut in completed)
    later.join(WAIT)
    assert sorted(float(array[0]) for array in got) == [0.0, 1.0, 2.0, 3.0]


def test_a_callback_runs_when_the_tensor_comes_though_nobody_looks(pair, step):
    """A callback added before the tensor comes runs as it comes; one added after it came
    unseen runs too, with the tensor."""
    before, after = threading.Event(), threading.Event()
    first = pair.worker.recv_async("cb0", pair.PS, step, timeout=WAIT)
    first.add_done_callback(lambda fut: before.set())
    second = pair.worker.recv_async("cb1", pair.PS, step, timeout=WAIT)
    values = _values(2)
    _delivered(pair, "cb0", step, values[0])
    assert before.wait(WAIT), "the callback did not run when the tensor came"
    _delivered(pair, "cb1", step, values[1])
    seen = []
    second.add_done_callback(lambda fut: (seen.append(fut.result(0)), after.set()))
    assert after.wait(WAIT), "a callback added after the tensor came did not run"
    assert np.array_equal(seen[0], values[1])
    assert np.array_equal(first.result(0), values[0])


def test_awaiting_a_future_whose_tensor_came_unseen_gets_it(pair, step):
    fut = pair.worker.recv_async("aw", pair.PS, step, timeout=WAIT)
    value = _values(1)[0]
    _delivered(pair, "aw", step, value)

    async def awaited():
        return await asyncio.wait_for(asyncio.wrap_future(fut), WAIT)

    assert np.array_equal(asyncio.run(awaited()), value)


def test_a_cancel_after_the_tensor_came_unseen_loses_nothing(pair, step):
    """The future either keeps the tensor (it came: too late to cancel) or, cancelled, gives
    it to the next recv of its key and step."""
    value = _values(1)[0]
    fut = pair.worker.recv_async("cancelled", pair.PS, step, timeout=WAIT)
    _delivered(pair, "cancelled", step, value)
    if fut.cancel():
        got = pair.worker.recv("cancelled", pair.PS, step, timeout=WAIT)
    else:
        got = fut.result(0)
        with pytest.raises(tv.DeadlineExceededError):  # and it was not also kept
            pair.worker.recv("cancelled", pair.PS, step, timeout=0.5)
    assert np.array_equal(got, value)


def test_a_future_dropped_unread_is_freed_with_its_tensor_without_the_garbage_collector(pair, step):
    fut = pair.worker.recv_async("dropped", pair.PS, step, timeout=WAIT)
    _delivered(pair, "dropped", step, _values(1)[0])
    gc.disable()
    try:
        freed = weakref.ref(fut)
        del fut
        deadline = time.monotonic() + 10  # a thread settling it may hold it a moment longer
        while freed() is not None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert freed() is None, "something keeps an unread future alive"
    finally:
        gc.enable()


def test_a_recv_that_failed_unseen_raises_when_looked_at(pair, step):
    """A recv whose step was aborted before anyone looked: its future raises AbortedError
    for every way of looking."""
    futs = [pair.worker.recv_async(f"ab{i}", pair.PS, step, timeout=WAIT) for i in range(2)]
    pair.worker.abort_step(step, "stopped by the test")
    done, not_done = concurrent.futures.wait(futs, timeout=WAIT)
    assert not not_done
    for fut in futs:
        assert isinstance(fut.exception(0), tv.AbortedError)
        with pytest.raises(tv.AbortedError):
            fut.result(0)


# -- tensorverbs.wait and as_completed: one native wait for many recvs ---------------------

def test_wait_returns_when_every_tensor_came_before_or_during_it(pair, step):
    values = _values(6)
    futs = [pair.worker.recv_async(f"tw{i}", pair.PS, step, timeout=WAIT) for i in range(6)]
    for i in range(3):
        _delivered(pair, f"tw{i}", step, values[i])
    later = threading.Thread(target=lambda: [_delivered(pair, f"tw{i}", step, values[i]) for i in range(3, 6)])
    later.start()
    done, not_done = tv.wait(futs, timeout=WAIT)
    later.join(WAIT)
    assert not not_done and done == set(futs)
    for fut, value in zip(futs, values):
        assert np.array_equal(fut.result(0), value)


def test_wait_for_the_first_returns_with_the_one_that_came(pair, step):
    futs = [pair.worker.recv_async(f"tf{i}", pair.PS, step, timeout=WAIT) for i in range(3)]
    value = _values(1)[0]
    sender = threading.Thread(target=_delivered, args=(pair, "tf1", step, value))
    sender.start()
    done, not_done = tv.wait(futs, timeout=WAIT, return_when=tv.FIRST_COMPLETED)
    sender.join(WAIT)
    assert done == {futs[1]} and not_done == {futs[0], futs[2]}
    assert np.array_equal(futs[1].result(0), value)
    for fut in not_done:
        assert fut.cancel()


def test_wait_for_the_first_exception_returns_with_the_recv_that_failed(pair, step):
    other_step = step + 100_000
    waiting = pair.worker.recv_async("te0", pair.PS, step, timeout=WAIT)
    failing = pair.worker.recv_async("te1", pair.PS, other_step, timeout=WAIT)
    delivered = pair.worker.recv_async("te2", pair.PS, step, timeout=WAIT)
    value = _values(1)[0]
    _delivered(pair, "te2", step, value)
    pair.worker.abort_step(other_step, "the test's failure")
    done, not_done = tv.wait([waiting, failing, delivered], timeout=WAIT, return_when=tv.FIRST_EXCEPTION)
    assert failing in done and waiting in not_done  # (delivered: done unless its settling lags)
    assert isinstance(failing.exception(0), tv.AbortedError)
    assert np.array_equal(delivered.result(WAIT), value)
    assert waiting.cancel()


def test_wait_that_times_out_tells_the_futures_not_done_and_leaves_them_usable(pair, step):
    futs = [pair.worker.recv_async(f"tt{i}", pair.PS, step, timeout=WAIT) for i in range(2)]
    done, not_done = tv.wait(futs, timeout=0.1)
    assert not done and not_done == set(futs)
    values = _values(2)
    for i, value in enumerate(values):
        _delivered(pair, f"tt{i}", step, value)
    assert [fut.result(WAIT).tolist() for fut in futs] == [value.tolist() for value in values]


def test_as_completed_yields_each_future_once_then_raises_on_timeout(pair, step):
    futs = [pair.worker.recv_async(f"ta{i}", pair.PS, step, timeout=WAIT) for i in range(3)]
    values = _values(3)
    _delivered(pair, "ta0", step, values[0])
    sender = threading.Thread(target=_delivered, args=(pair, "ta2", step, values[2]))
    sender.start()
    got = []
    with pytest.raises(tv.DeadlineExceededError):
        for fut in tv.as_completed(futs, timeout=3.0):
            got.append(fut)
            if len(got) == 2:
                sender.join(WAIT)
    assert set(got) == {futs[0], futs[2]} and len(got) == 2
    assert np.array_equal(futs[2].result(0), values[2])
    assert futs[1].cancel()


def test_wait_and_as_completed_take_other_futures_too(pair, step):
    """A recv's future beside a future of a thread pool: both waited for."""
    fut = pair.worker.recv_async("tx", pair.PS, step, timeout=WAIT)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        other = pool.submit(_delivered, pair, "tx", step, _values(1)[0])
        done, not_done = tv.wait([fut, other], timeout=WAIT)
        assert not not_done and done == {fut, other}
        again = pair.worker.recv_async("ty", pair.PS, step, timeout=WAIT)
        other = pool.submit(_delivered, pair, "ty", step, _values(1)[0])
        assert set(tv.as_completed([again, other], timeout=WAIT)) == {again, other}


def test_wait_refuses_an_unknown_return_when(pair):
    with pytest.raises(tv.InvalidArgumentError, match="return_when"):
        tv.wait([], return_when="SOMETIMES")


@pytest.mark.parametrize("wait", ["concurrent.futures", "tensorverbs"])
def test_futures_of_a_stopped_server_are_done_for_a_wait(variant, wait):
    """The server stops with recvs in flight whose futures nobody looked at: a wait for them
    ends at once, each raising a TensorverbsError."""
    protocol, env = VARIANTS[variant]
    pair = start_pair(protocol, env)
    try:
        pair.ps.send_pattern("warm", pair.WORKER, 1, 64, 1)
        pair.worker.recv("warm", pair.PS, 1, timeout=WAIT)  # (the channel is up)
        futs = [pair.worker.recv_async(f"s{i}", pair.PS, 2, timeout=WAIT) for i in range(3)]
    finally:
        pair.worker.stop()
        pair.ps.stop()
    waited = concurrent.futures.wait if wait == "concurrent.futures" else tv.wait
    done, not_done = waited(futs, timeout=WAIT)
    assert not not_done
    for fut in futs:
        with pytest.raises(tv.TensorverbsError):
            fut.result(0)


def test_a_cancelled_future_is_done_for_every_wait(pair, step):
    """A recv cancelled before or while a wait waits for it counts as done for
    tensorverbs.wait and concurrent.futures.wait (its waiters are told, as an executor's
    future's are)."""
    futs = [pair.worker.recv_async(f"cw{i}", pair.PS, step, timeout=WAIT) for i in range(3)]
    assert futs[0].cancel()
    _delivered(pair, "cw1", step, _values(1)[0])
    for waited in (tv.wait, concurrent.futures.wait):
        done, not_done = waited(futs[:2], timeout=WAIT)
        assert done == set(futs[:2]) and not not_done
    outcome: list = []
    waiting = threading.Thread(target=lambda: outcome.append(concurrent.futures.wait([futs[2]], timeout=WAIT)))
    waiting.start()
    assert futs[2].cancel()
    waiting.join(WAIT)
    assert outcome and outcome[0].done == {futs[2]}
