"""A recv's future always settles, and what runs when it does never stalls other recvs:
a done-callback that raises or blocks, or a device copy, runs on the recv's own peer's
lane, never on the event loop or on a thread shared by every peer."""
from __future__ import annotations

import gc
import threading
import time
import weakref

import numpy as np
import pytest

from tensorverbs.local_cluster import TaskProcess, cluster_spec
import tensorverbs as tv
from tensorverbs.verbs.config import RdmaConfig

from variants import VARIANTS

WAIT = 30.0
PS0, PS1, WORKER = "/job:ps/replica:0/task:0", "/job:ps/replica:0/task:1", "/job:worker/replica:0/task:0"


@pytest.fixture(scope="module")
def cluster(variant):
    """(ps 0, ps 1, the worker): two senders in processes of their own, the worker here."""
    protocol, env = VARIANTS[variant]
    spec = cluster_spec({"ps": 2, "worker": 1})
    senders = [TaskProcess(spec, "ps", i, protocol, env) for i in range(2)]
    worker = tv.Server(spec, "worker", 0, protocol, config=RdmaConfig.from_env(env))
    yield senders[0], senders[1], worker
    worker.stop()
    for ps in senders:
        ps.stop()


def _send(ps: TaskProcess, name: str, step: int, value: np.ndarray) -> None:
    ps.call("send", name, value, WORKER, step)


def test_a_callback_raising_stops_nothing(cluster, step):
    """A done-callback that raises SystemExit: the recv's other callbacks still run and
    later recvs still settle."""
    ps0, _, worker = cluster
    first = worker.recv_async("a", PS0, step, timeout=WAIT)
    later_callback_ran = threading.Event()

    def exits(fut):
        raise SystemExit("a user callback exits")

    first.add_done_callback(exits)
    first.add_done_callback(lambda fut: later_callback_ran.set())
    _send(ps0, "a", step, np.arange(4.0))
    assert first.result(WAIT).tolist() == [0.0, 1.0, 2.0, 3.0]
    assert later_callback_ran.wait(WAIT), "the callback added after the raising one never ran"
    second = worker.recv_async("b", PS0, step, timeout=WAIT)
    _send(ps0, "b", step, np.arange(3))
    assert second.result(WAIT).tolist() == [0, 1, 2]


def test_a_blocked_callback_stalls_no_other_peer(cluster, step):
    """A done-callback of a recv from ps 0 that blocks does not keep a recv from ps 1
    from settling."""
    ps0, ps1, worker = cluster
    entered, release = threading.Event(), threading.Event()

    def blocks(fut):
        entered.set()
        release.wait(2 * WAIT)

    slow = worker.recv_async("slow", PS0, step, timeout=WAIT)
    slow.add_done_callback(blocks)
    try:
        _send(ps0, "slow", step, np.ones(8, np.float32))
        assert entered.wait(WAIT), "the callback never ran"
        other = worker.recv_async("other", PS1, step, timeout=WAIT)
        _send(ps1, "other", step, np.full(5, 7, np.int32))
        assert other.result(WAIT).tolist() == [7] * 5
    finally:
        release.set()
    assert slow.result(WAIT).tolist() == [1.0] * 8


@pytest.mark.parametrize("source", [PS0, WORKER])
def test_a_result_is_freed_with_its_future(cluster, step, source):
    """Nothing a settled future holds, how it would give its tensor back included, refers
    back to it: dropping the result and its future frees the result at once, without the
    garbage collector; from a peer and from this task alike."""
    ps0, _, worker = cluster
    sent = np.arange(1000, dtype=np.float32)
    if source == WORKER:
        worker.send("freed", sent.copy(), to=WORKER, step_id=step)  # this task's own: the result may be it
    else:
        _send(ps0, "freed", step, sent)
    gc.disable()
    try:
        fut = worker.recv_async("freed", source, step, timeout=WAIT)
        result = fut.result()
        assert np.array_equal(result, sent)
        freed = weakref.ref(result)
        del fut, result
        deadline = time.monotonic() + 10  # the settling thread may hold it a moment longer
        while freed() is not None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert freed() is None, "something the future holds keeps the result alive"
    finally:
        gc.enable()


def test_a_future_waited_for_by_many_threads_settles_once_for_all(cluster, step):
    """Threads waiting for one future's result at once (the first waiter settles it itself,
    woken by the answer; the others wait on the future), some of them giving up first:
    every waiter left gets the same tensor, every one that gave up a DeadlineExceededError,
    and the tensor is not received twice."""
    ps0, _, worker = cluster
    fut = worker.recv_async("many", PS0, step, timeout=WAIT)
    outcomes: dict[str, object] = {}
    started = threading.Barrier(7)

    def wait(name: str, timeout: float) -> None:
        started.wait(WAIT)
        try:
            outcomes[name] = fut.result(timeout)
        except tv.TensorverbsError as exc:
            outcomes[name] = exc

    threads = [threading.Thread(target=wait, args=(f"short{i}", 0.05)) for i in range(2)]
    threads += [threading.Thread(target=wait, args=(f"long{i}", WAIT)) for i in range(4)]
    for thread in threads:
        thread.start()
    started.wait(WAIT)
    for thread in threads[:2]:  # the short waits end before the tensor is sent
        thread.join(WAIT)
    value = np.arange(1000, dtype=np.float32)
    _send(ps0, "many", step, value)
    mine = fut.result(WAIT)  # the main thread waits too
    assert np.array_equal(mine, value)
    for thread in threads:
        thread.join(WAIT)
    assert all(isinstance(outcomes[f"short{i}"], tv.DeadlineExceededError) for i in range(2)), outcomes
    results = [outcomes[f"long{i}"] for i in range(4)]
    assert all(result is mine for result in results), outcomes
    with pytest.raises(tv.DeadlineExceededError):  # it was not kept for another recv
        worker.recv("many", PS0, step, timeout=0.5)


def test_cancelling_a_future_withdraws_its_request_from_the_sender(cluster, step):
    """A recv cancelled while its request waits at the sender is withdrawn there (not left
    to wait for a tensor nobody takes); the tensor sent later goes to the next recv."""
    ps, _, worker = cluster
    _send(ps, "warm", step, np.ones(2))  # the channel is up: the recv goes straight to the core
    worker.recv("warm", PS0, step, timeout=WAIT)
    fut = worker.recv_async("withdrawn", PS0, step, timeout=4 * WAIT)  # outlives the wait below
    ps.call("wait_waiters", 1)  # the request waits in the sender's table
    assert fut.cancel()
    deadline = time.monotonic() + WAIT
    while ps.call("pending")[1]:  # a condition, polled
        assert time.monotonic() < deadline, f"the request still waits at the sender after {WAIT:g} s"
        time.sleep(0.005)
    value = np.arange(5, dtype=np.int32)
    _send(ps, "withdrawn", step, value)
    assert np.array_equal(worker.recv("withdrawn", PS0, step, timeout=WAIT), value)
