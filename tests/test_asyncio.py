"""asyncio: ``await server.arecv(...)`` and ``await server.recv_async(...)`` never block the
event loop, and cancelling the awaiting task gives the recv up with its tensor kept for the
next recv of it; on every protocol variant, from a ps in a child process."""
from __future__ import annotations

import asyncio
import concurrent.futures

import numpy as np
import pytest

import tensorverbs as tv
from tensorverbs.local_cluster import pattern, same

from variants import SURFACE_VARIANTS


@pytest.fixture(scope="module", params=SURFACE_VARIANTS)
def variant(request) -> str:
    """This suite is about the Python surface: each protocol and provider once."""
    return request.param

#: ticks the ticker task makes while a recv is pending, before the tensor is sent
TICKS = 200


class Ticker:
    """A task that counts while the event loop runs it; :meth:`ticks` waits for more."""

    def __init__(self) -> None:
        self.count = 0
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            self.count += 1
            await asyncio.sleep(0)  # a yield to the loop, not a wait for time

    async def ticks(self, n: int) -> None:
        """Return once the ticker counted ``n`` more (it runs only if the loop does)."""
        target = self.count + n
        while self.count < target:
            await asyncio.sleep(0)

    def stop(self) -> None:
        self._task.cancel()


async def off_loop(fn, *args, **kwargs):
    """Run a blocking call (a command to the ps) in a thread, the loop running meanwhile."""
    return await asyncio.get_running_loop().run_in_executor(None, lambda: fn(*args, **kwargs))


@pytest.mark.parametrize("tensor_type", ["numpy", "torch"])
def test_arecv_leaves_the_loop_running(pair, step, tensor_type):
    if tensor_type == "torch":
        pytest.importorskip("torch", reason="torch results need torch")
    sent = pattern(1 << 20, 5, np.float32)

    async def main():
        ticker = Ticker()
        recv = asyncio.create_task(pair.worker.arecv("a", pair.PS, step, timeout=120, tensor_type=tensor_type))
        await ticker.ticks(TICKS)  # the recv is pending (nothing sent yet) and the loop runs
        assert not recv.done()
        await off_loop(pair.ps.send, "a", sent, to=pair.WORKER, step_id=step)
        during = ticker.count
        got = await recv
        ticker.stop()
        return got, during

    got, during = asyncio.run(main())
    assert during >= TICKS
    assert same(np.asarray(got) if tensor_type == "numpy" else got.numpy(), sent)


def test_recv_async_futures_are_awaitable(pair, step):
    sent = [pattern(4096, seed, np.int32) for seed in range(4)]

    async def main():
        ticker = Ticker()
        futures = [pair.worker.recv_async(f"f{i}", pair.PS, step, timeout=120) for i in range(4)]
        await ticker.ticks(TICKS)
        for i, array in enumerate(sent):
            await off_loop(pair.ps.send, f"f{i}", array, to=pair.WORKER, step_id=step)
        got = await asyncio.gather(*(asyncio.ensure_future(_awaited(f)) for f in futures))
        ticker.stop()
        return got

    for got, array in zip(asyncio.run(main()), sent):
        assert same(got, array)


async def _awaited(fut):
    return await fut


def test_arecv_raises_the_recvs_error(pair, step):
    async def main():
        return await pair.worker.arecv("never", pair.PS, step, timeout=0.2)

    with pytest.raises(tv.DeadlineExceededError):
        asyncio.run(main())


def test_cancelling_a_pending_arecv_keeps_the_tensor(pair, step):
    """The task is cancelled while its recv waits for the send: the recv is given up, and
    the tensor sent later goes to the next recv of it."""
    sent = pattern(64 << 10, 6)

    async def main():
        recv = asyncio.create_task(pair.worker.arecv("c", pair.PS, step, timeout=120))
        await Ticker().ticks(TICKS)
        assert not recv.done()
        recv.cancel()
        with pytest.raises(asyncio.CancelledError):
            await recv

    asyncio.run(main())
    pair.ps.send("c", sent, to=pair.WORKER, step_id=step)
    assert same(pair.worker.recv("c", pair.PS, step, timeout=60), sent)
    assert pair.worker.pending() == (0, 0)


@pytest.mark.parametrize("tensor_type", ["numpy", "torch", "out"])
def test_cancelling_an_arecv_whose_tensor_just_came_keeps_it(pair, step, monkeypatch, tensor_type):
    """The tensor arrives, and the task is cancelled before the loop could hand it over:
    the recv gives it back (a copy of it, when it landed in ``out``, which its caller may
    reuse), and the next recv of it gets it."""
    if tensor_type == "torch":
        pytest.importorskip("torch", reason="torch results need torch")
    sent = pattern(512 << 10, 7)
    out = np.zeros_like(sent) if tensor_type == "out" else None
    kwargs = dict(out=out) if out is not None else dict(tensor_type=tensor_type)
    started: list[concurrent.futures.Future] = []
    recv_async = pair.worker.recv_async

    def spy(*args, **kwargs):
        started.append(recv_async(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(pair.worker, "recv_async", spy)

    async def main():
        recv = asyncio.create_task(pair.worker.arecv("j", pair.PS, step, timeout=120, **kwargs))
        while not started:
            await asyncio.sleep(0)
        # the loop is held here on purpose until the recv is settled: it cannot hand it over
        pair.ps.send("j", sent, to=pair.WORKER, step_id=step)
        concurrent.futures.wait(started, timeout=60)
        assert started[0].done() and not recv.done()
        recv.cancel()
        with pytest.raises(asyncio.CancelledError):
            await recv

    asyncio.run(main())
    if out is not None:
        out[:] = 0  # the caller reuses out
    assert same(pair.worker.recv("j", pair.PS, step, timeout=60), sent)


def test_awaiting_a_recv_future_cancelled_directly_raises_cancelled_error(pair, step):
    """``fut.cancel()`` then ``await fut``: tensorverbs' CancelledError, as ``fut.result()``
    raises (asyncio's is for a cancelled awaiting task)."""
    async def main():
        fut = pair.worker.recv_async("never", pair.PS, step, timeout=60)
        assert fut.cancel()
        with pytest.raises(tv.CancelledError, match="cancelled"):
            await fut

    asyncio.run(main())


def test_a_cancelled_task_awaiting_a_recv_future_raises_asyncios_cancelled_error(pair, step):
    async def main():
        fut = pair.worker.recv_async("never", pair.PS, step, timeout=60)

        async def awaiting():
            return await fut

        task = asyncio.create_task(awaiting())
        await Ticker().ticks(TICKS)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert fut.cancelled()  # the recv was given up with it

    asyncio.run(main())


@pytest.mark.parametrize("tensor_type", ["numpy", "torch"])
def test_a_task_awaiting_a_recv_future_cancelled_as_its_tensor_is_handed_over_drops_it_not(pair, step,
                                                                                           tensor_type):
    """The tensor came before the task awaited the future; the task is cancelled before the
    loop handed the tensor over (an ``asyncio.wait_for`` timing out just then): the future,
    dropped unread, gives the tensor back to the next recv of it."""
    if tensor_type == "torch":
        pytest.importorskip("torch", reason="torch results need torch")
    sent = pattern(64 << 10, 8)
    fut = pair.worker.recv_async("h", pair.PS, step, timeout=60, tensor_type=tensor_type)
    pair.ps.send("h", sent, to=pair.WORKER, step_id=step)
    concurrent.futures.wait([fut], timeout=60)

    async def main():
        task = asyncio.ensure_future(_awaited(fut))
        await asyncio.sleep(0)  # (a yield: the task awaits, the hand-over is scheduled after this)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    del fut
    assert same(np.asarray(pair.worker.recv("h", pair.PS, step, timeout=5)), sent)
