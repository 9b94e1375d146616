"""A signal (Ctrl-C) interrupts a blocking recv, on every protocol, long before the recv
could end otherwise (its tensor is sent only afterwards), and the tensor it waited for is
not lost: a retry of the recv in the same process gets it. How long the interruption took
is recorded (``interrupt_latency_s`` in the JUnit report), never asserted."""
from __future__ import annotations

import os
import signal
import time

import pytest

from tensorverbs.local_cluster import TaskProcess, cluster_spec

from variants import VARIANTS, Pair

PS, WORKER = Pair.PS, Pair.WORKER
NBYTES = 1 << 20  # large enough to land by RDMA write on grpc+verbs
#: the recv's own timeout, beyond WAIT: a recv the signal does not interrupt is still
#: waiting when the test gives up on it
RECV_TIMEOUT = 600.0
#: how long the test waits for the signal's exception to reach the recv's caller
WAIT = 60.0
#: tries of the settle-interrupt test: the main thread settles its future only if the
#: answer comes once it waits (in an emulated guest it may come just before)
SETTLE_ATTEMPTS = 5


def _start(variant: str):
    """(ps, worker), each a task in a process of its own (the worker is the one signalled)."""
    protocol, env = VARIANTS[variant]
    cluster = cluster_spec({"ps": 1, "worker": 1})
    ps = TaskProcess(cluster, "ps", 0, protocol, env)
    try:
        worker = TaskProcess(cluster, "worker", 0, protocol, env)
    except BaseException:
        ps.stop()
        raise
    return ps, worker


@pytest.fixture(scope="module")
def tasks(variant):
    ps, worker = _start(variant)
    yield ps, worker
    worker.stop()
    ps.stop()


@pytest.fixture
def fresh_tasks(variant):
    """Tasks of their own, whose channels are not set up yet."""
    ps, worker = _start(variant)
    yield ps, worker
    worker.stop()
    ps.stop()


def _interrupt_then_retry(ps: TaskProcess, worker: TaskProcess, step: int, signum: int,
                          raised: str, record_property, elsewhere: bool = False,
                          waiting: tuple = ("interrupted_recv",)) -> None:
    """``waiting``: the function of tests/interrupting.py that waits, and its arguments
    after (name, source, step, timeout, elsewhere)."""
    worker.post("run", f"interrupting:{waiting[0]}", "w", PS, step, RECV_TIMEOUT, elsewhere, *waiting[1:])
    ps.call("wait_waiters", 1)  # the worker's request waits in the ps's table: it is in recv
    sent = time.monotonic()
    os.kill(worker.process.pid, signum)
    try:
        outcome = worker.result(timeout=WAIT)
    except TimeoutError:
        pytest.fail(f"the recv was still waiting {WAIT:g} s after the signal")
    assert outcome is not None, "the recv was not interrupted by the signal's exception"
    name, caught = outcome
    assert name == raised
    record_property("interrupt_latency_s", round(caught - sent, 4))
    ps.call("send_pattern", "w", WORKER, step, NBYTES, step)
    assert worker.call("recv_pattern", "w", PS, step, NBYTES, step, "uint8", 30), "wrong bytes"


def test_ctrl_c_interrupts_the_first_recv(tasks, step, record_property):
    """The first recv from the ps (on grpc+verbs, it sets the channel up)."""
    ps, worker = tasks
    _interrupt_then_retry(ps, worker, step, signal.SIGINT, "KeyboardInterrupt", record_property)


def test_ctrl_c_interrupts_a_recv_on_a_channel_in_use(tasks, step, record_property):
    ps, worker = tasks
    ps.call("send_pattern", "warm", WORKER, step, 64, 1)
    assert worker.call("recv_pattern", "warm", PS, step, 64, 1, "uint8", 30)
    _interrupt_then_retry(ps, worker, step, signal.SIGINT, "KeyboardInterrupt", record_property)


def test_any_signal_handler_exception_interrupts_a_recv(tasks, step, record_property):
    ps, worker = tasks
    ps.call("send_pattern", "warm", WORKER, step, 64, 1)
    assert worker.call("recv_pattern", "warm", PS, step, 64, 1, "uint8", 30)
    _interrupt_then_retry(ps, worker, step, signal.SIGUSR1, "Signalled", record_property)


def test_a_signal_another_thread_takes_interrupts_the_first_recv(fresh_tasks, step, record_property):
    """The first recv from the ps while the main thread blocks the signal: another thread
    runs its C handler, and the main thread's wait is not woken by it (as when the signal
    comes just before the wait goes to sleep); the recv must notice it anyway."""
    ps, worker = fresh_tasks
    _interrupt_then_retry(ps, worker, step, signal.SIGINT, "KeyboardInterrupt", record_property,
                          elsewhere=True)


def test_a_signal_another_thread_takes_interrupts_a_recv_on_a_channel_in_use(tasks, step, record_property):
    ps, worker = tasks
    ps.call("send_pattern", "warm", WORKER, step, 64, 1)
    assert worker.call("recv_pattern", "warm", PS, step, 64, 1, "uint8", 30)
    _interrupt_then_retry(ps, worker, step, signal.SIGUSR1, "Signalled", record_property,
                          elsewhere=True)


@pytest.mark.parametrize("completed", [False, True], ids=["wait", "as_completed"])
def test_a_signal_another_thread_takes_interrupts_a_wait_for_futures(tasks, step, record_property,
                                                                       completed):
    """``tensorverbs.wait`` and ``as_completed`` for a future the native core does not keep
    an answer for (a recv into ``out``; any future on grpc) wait as concurrent.futures does:
    a signal that another thread takes must still interrupt them."""
    ps, worker = tasks
    ps.call("send_pattern", "warm", WORKER, step, 64, 1)
    assert worker.call("recv_pattern", "warm", PS, step, 64, 1, "uint8", 30)
    _interrupt_then_retry(ps, worker, step, signal.SIGINT, "KeyboardInterrupt", record_property,
                          elsewhere=True, waiting=("interrupted_wait", NBYTES, completed))


@pytest.mark.parametrize("batch, nbytes", [
    ("recv_many", NBYTES),
    ("recv_blocks", 64),  # a block that comes in a message
    ("recv_blocks", NBYTES),  # one written in its row where the protocol can (kept as a copy)
])
def test_ctrl_c_interrupts_a_batch_which_keeps_every_tensor(tasks, step, record_property, batch, nbytes):
    """A batch (recv_many of two names, recv_blocks of two rows) whose first tensor had been
    sent: interrupted while it waits for the second, it keeps both for the next recvs."""
    ps, worker = tasks
    first, second = ("b0", "b1") if batch == "recv_many" else ("k/0", "k/1")
    ps.call("send_pattern", first, WORKER, step, nbytes, step)
    if batch == "recv_many":
        worker.post("run", "interrupting:interrupted_recv_many", [first, second], PS, step, RECV_TIMEOUT)
    else:
        worker.post("run", "interrupting:interrupted_recv_blocks", "k", PS, step, 2, nbytes, RECV_TIMEOUT)
    ps.call("wait_waiters", 1)  # the second's request waits in the ps's table: the batch waits
    sent = time.monotonic()
    os.kill(worker.process.pid, signal.SIGINT)
    try:
        outcome = worker.result(timeout=WAIT)
    except TimeoutError:
        pytest.fail(f"the batch was still waiting {WAIT:g} s after the signal")
    assert outcome is not None and outcome[0] == "KeyboardInterrupt"
    record_property("interrupt_latency_s", round(outcome[1] - sent, 4))
    ps.call("send_pattern", second, WORKER, step, nbytes, step + 1)
    assert worker.call("recv_pattern", first, PS, step, nbytes, step, "uint8", 30), f"{first} lost or wrong"
    assert worker.call("recv_pattern", second, PS, step, nbytes, step + 1, "uint8", 30), f"{second} lost or wrong"


@pytest.mark.parametrize("at", ["set_result", "settle_host"])
def test_ctrl_c_while_a_waiting_thread_settles_its_future_loses_nothing(tasks, step, variant, at):
    """The main thread waiting for a future's result settles it itself when the answer
    comes (grpc+verbs): a signal's exception raised in that Python code, as the tensor is
    delivered (Delivery.settle_host) or before the future is settled (set_result), reaches the caller;
    the future still gives the tensor and the caller's done-callback still runs. (The
    future has no done-callback of its own before the caller's: a cancel reaches the
    transfer through RecvFuture.on_cancel.) An answer that comes before the main thread
    waits is settled by the settler thread instead: that try loses nothing, and the test
    tries again."""
    if VARIANTS[variant][0] != "grpc+verbs":
        pytest.skip("on grpc the event loop settles the future")
    ps, worker = tasks
    ps.call("send_pattern", "warm", WORKER, step, 64, 1)
    assert worker.call("recv_pattern", "warm", PS, step, 64, 1, "uint8", 30)
    for attempt in range(SETTLE_ATTEMPTS):
        name = f"s{attempt}"
        ps.post("run", "interrupting:send_when_told", name, WORKER, step, NBYTES, WAIT)
        worker.post("run", "interrupting:interrupted_settle", name, PS, step, at, WAIT)
        raised, got, called, fired = worker.result(timeout=WAIT * 3)
        ps.result(timeout=WAIT)
        assert got, "the future lost its tensor"
        assert called, "the caller's done-callback never ran"
        if fired:  # the main thread settled the future, and was interrupted doing it
            assert raised == "KeyboardInterrupt", "the interrupt did not reach the caller"
            return
        assert raised is None, f"result() raised {raised}"
    pytest.fail(f"the main thread never settled its future: each of {SETTLE_ATTEMPTS} answers came "
                "before it waited, and the settler thread settled it")
