"""One-sided accesses given up: an owner that is stopped (SIGSTOP) under an access, so
that the access waits until a timeout, Ctrl-C, a cancelled asyncio task or the reader's
stop ends it, and nothing lands in the reader's memory afterwards; and an owner that died.
The owner runs in a process of its own (tests/remote_buffers.py)."""
from __future__ import annotations

import asyncio
import os
import pathlib
import signal
import time

import numpy as np
import pytest

import tensorverbs as tv
from one_sided_pairs import ONE_SIDED_VARIANTS, WAIT, register
from variants import pair_of
from tensorverbs.local_cluster import TaskProcess, cluster_spec, pattern, same
from variants import VARIANTS, start_pair


@pytest.fixture(scope="module", params=ONE_SIDED_VARIANTS)
def pair(request):
    yield from pair_of(request.param)


def test_an_access_to_a_frozen_owner_times_out_and_the_next_one_works(pair, step):
    """The owner's process is stopped (SIGSTOP) under an access: DeadlineExceededError at
    the timeout, nothing lands in ``out`` later, and once it runs again a new access works."""
    buffer = register(pair, 4096, step)
    if buffer.provider != "soft":
        pytest.skip("a device serves reads while its process is stopped")
    assert same(pair.worker.read(buffer, timeout=WAIT), pattern(4096, step))
    out = np.zeros(4096, np.uint8)
    os.kill(pair.ps.process.pid, signal.SIGSTOP)
    try:
        _wait_stopped(pair.ps.process.pid)  # a thread spinning elsewhere stops a moment later
        with pytest.raises(tv.DeadlineExceededError, match="timed out"):
            pair.worker.read(buffer, out, timeout=0.5)
    finally:
        os.kill(pair.ps.process.pid, signal.SIGCONT)
    assert pair.ps.task() == pair.PS  # it runs again
    assert not out.any()
    assert same(pair.worker.read(buffer, out, timeout=WAIT), pattern(4096, step))
    pair.ps.unregister(buffer)


@pytest.mark.parametrize("nbytes", [4096, 1 << 20])  # through the queue pair's buffer; into out itself
@pytest.mark.parametrize("variant", ["verbs", "verbs-tcp"])
def test_ctrl_c_interrupts_an_access_to_a_frozen_owner_and_nothing_lands_later(variant, nbytes):
    """Ctrl-C (SIGINT) while a read waits for an owner whose process is stopped raises
    KeyboardInterrupt in the reader (a process of its own); once the owner runs again
    nothing lands in the read's ``out``, and the next read works."""
    protocol, env = VARIANTS[variant]
    cluster = cluster_spec({"ps": 1, "worker": 1})
    owner = TaskProcess(cluster, "ps", 0, protocol, env)
    reader = None
    try:
        reader = TaskProcess(cluster, "worker", 0, protocol, env)
        buffer = owner.run("remote_buffers:register_pattern", nbytes, 1)
        assert reader.run("remote_buffers:read_matches", buffer, nbytes, 1)
        os.kill(owner.process.pid, signal.SIGSTOP)
        try:
            _wait_stopped(owner.process.pid)
            outcome = reader.run("interrupting:interrupted_read", buffer, nbytes, 10 * WAIT)
        finally:
            os.kill(owner.process.pid, signal.SIGCONT)
        assert outcome is not None and outcome[0] == "KeyboardInterrupt", outcome
        assert owner.task() == "/job:ps/replica:0/task:0"  # it runs again
        assert reader.stats()["remote_accesses_in_flight"] == 0
        # the next access polls the queue pair the interrupted one used
        assert reader.run("remote_buffers:read_matches", buffer, nbytes, 1)
        assert reader.run("interrupting:read_into_untouched")
    finally:
        if reader is not None:
            reader.stop()
        owner.stop()


def test_asyncio_reads_and_writes_in_one_event_loop(pair, step):
    """aread, aread_many and awrite run together in one event loop: each gets or leaves
    its bytes, the errors are read's."""
    small, large = register(pair, 4096, step), register(pair, 3 << 20, step + 1)

    async def accesses():
        return await asyncio.gather(
            pair.worker.aread(small, timeout=WAIT),
            pair.worker.aread_many([large, (small, None, 100, 200)], timeout=WAIT),
            pair.worker.awrite(large, pattern(1000, step + 2), offset=5000, timeout=WAIT))

    whole, (many_large, part), _ = asyncio.run(accesses())
    assert same(whole, pattern(4096, step))
    assert same(part, pattern(4096, step)[100:300])
    expected = pattern(3 << 20, step + 1)
    assert same(many_large[:5000], expected[:5000]) and same(many_large[6000:], expected[6000:])
    assert pair.ps.run("remote_buffers:holds", large, 5000, 1000, step + 2)
    with pytest.raises(tv.InvalidArgumentError, match="out of"):
        asyncio.run(pair.worker.aread(small, offset=4000, nbytes=200, timeout=WAIT))
    pair.ps.unregister(small)
    pair.ps.unregister(large)


@pytest.mark.parametrize("nbytes", [4096, 1 << 20])
def test_a_cancelled_aread_of_a_frozen_owner_lands_nothing(pair, step, nbytes):
    """An aread waits for an owner whose process is stopped while its event loop goes on;
    cancelling its task raises CancelledError once the access has given up: nothing lands
    in ``out`` afterwards, the next access on the same queue pair included."""
    buffer = register(pair, nbytes, step)
    if buffer.provider != "soft":
        pytest.skip("a device serves reads while its process is stopped")
    assert same(pair.worker.read(buffer, timeout=WAIT), pattern(nbytes, step))
    out = np.zeros(nbytes, np.uint8)

    async def cancelled() -> None:
        task = asyncio.ensure_future(pair.worker.aread(buffer, out, timeout=10 * WAIT))
        deadline = time.monotonic() + WAIT
        while pair.worker.stats()["remote_accesses_in_flight"] == 0:  # the loop runs meanwhile
            assert time.monotonic() < deadline and not task.done(), "the aread did not start"
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert pair.worker.stats()["remote_accesses_in_flight"] == 0

    os.kill(pair.ps.process.pid, signal.SIGSTOP)
    try:
        _wait_stopped(pair.ps.process.pid)
        asyncio.run(cancelled())
    finally:
        os.kill(pair.ps.process.pid, signal.SIGCONT)
    assert same(pair.worker.read(buffer, timeout=WAIT), pattern(nbytes, step))
    assert not out.any()
    pair.ps.unregister(buffer)


def test_stopping_the_server_gives_up_its_areads():
    """A server stopped while an aread waits for a stopped owner: the aread raises
    CancelledError (a TensorverbsError) and the stop does not wait for the owner."""
    protocol, env = VARIANTS["verbs"]
    p = start_pair(protocol, env)
    try:
        buffer = p.ps.run("remote_buffers:register_pattern", 4096, 1)
        assert same(p.worker.read(buffer, timeout=WAIT), pattern(4096, 1))

        async def stopped() -> None:
            task = asyncio.ensure_future(p.worker.aread(buffer, timeout=10 * WAIT))
            while p.worker.stats()["remote_accesses_in_flight"] == 0:  # a condition, polled
                assert not task.done(), task
                await asyncio.sleep(0.001)
            p.worker.stop()
            with pytest.raises(tv.CancelledError, match="cancelled"):
                await task

        os.kill(p.ps.process.pid, signal.SIGSTOP)
        try:
            _wait_stopped(p.ps.process.pid)
            asyncio.run(asyncio.wait_for(stopped(), WAIT))
        finally:
            os.kill(p.ps.process.pid, signal.SIGCONT)
    finally:
        p.worker.stop()
        p.ps.stop()


def _wait_stopped(pid: int) -> None:
    """Until every thread of ``pid`` is stopped (its state in /proc is T)."""
    tasks = pathlib.Path(f"/proc/{pid}/task")
    deadline = time.monotonic() + WAIT
    while not all(_state(t) in "Tt" for t in tasks.iterdir()):
        assert time.monotonic() < deadline, f"process {pid} did not stop"
        time.sleep(0.001)


def _state(task: pathlib.Path) -> str:
    try:
        return (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:  # the thread ended
        return "T"


@pytest.mark.parametrize("variant", ["verbs", "verbs-tcp"])
def test_an_access_to_an_owner_that_died_fails_naming_it(variant):
    protocol, env = VARIANTS[variant]
    p = start_pair(protocol, env)
    try:
        buffer = p.ps.run("remote_buffers:register_pattern", 4096, 1)
        assert same(p.worker.read(buffer, timeout=WAIT), pattern(4096, 1))
        p.ps.kill()
        for _ in range(2):  # on the queue pair it had, then setting up another
            with pytest.raises(tv.UnavailableError) as failed:
                p.worker.read(buffer, timeout=WAIT)
            assert p.PS in str(failed.value)
    finally:
        p.worker.stop()
        p.ps.stop()


def test_a_descriptor_of_an_owner_that_restarted_is_stale(variant):
    """The owner dies and a new one comes up at its address, registering a buffer of its
    own: a descriptor of the old one fails as stale (never reaching the new one's memory),
    and the new one's descriptor reads what it holds."""
    protocol, env = VARIANTS[variant]
    p = start_pair(protocol, env)
    try:
        old = register(p, 4096, 1)
        assert same(p.worker.read(old, timeout=WAIT), pattern(4096, 1))
        p.ps.kill()
        p.ps = TaskProcess(p.cluster, "ps", 0, protocol, env)
        new = register(p, 4096, 2)
        assert same(p.worker.read(new, timeout=WAIT), pattern(4096, 2))
        with pytest.raises(tv.UnavailableError, match="stale"):
            p.worker.read(old, timeout=WAIT)
        assert same(p.worker.read(new, timeout=WAIT), pattern(4096, 2))
    finally:
        p.worker.stop()
        p.ps.stop()
