"""The recvs a newcomer gets wrong: a peer that ran and left, a future dropped unread, a
future's wait that times out or was cancelled, a name or step that does not match what the
sender holds. Each fails at once with an error that says what went wrong, or keeps the
tensor; never a hang, never a tensor lost."""
from __future__ import annotations

import concurrent.futures
import gc
import logging
import re

import numpy as np
import pytest

import tensorverbs as tv
from tensorverbs.local_cluster import cluster_spec
from tensorverbs.verbs.config import RdmaConfig

from variants import VARIANTS

WAIT = 30.0


def _delivered(pair, name: str, step: int, value: np.ndarray) -> None:
    """The ps sends ``value``; returns once the worker has it."""
    pair.ps.call("run", "delivered:send", name, value, pair.WORKER, step, WAIT)


# -- a peer that ran and left ----------------------------------------------------------------

def test_a_peer_that_ran_and_stopped_fails_every_new_recv_naming_it(fresh_pair, step):
    """Its incarnation was seen, and its address refuses connections now: each new recv
    fails with UnavailableError naming it, whatever its timeout, not after the start-up
    grace period (60 s) or the recv's own timeout as for a peer that has not started."""
    p = fresh_pair
    p.ps.send("before", np.arange(3), to=p.WORKER, step_id=step)
    assert p.worker.recv("before", source=p.PS, step_id=step, timeout=WAIT).tolist() == [0, 1, 2]
    p.ps.stop()
    for name, timeout in (("first", None), ("second", None), ("third", 120.0)):
        with pytest.raises(tv.UnavailableError, match=re.escape(p.PS)) as raised:
            p.worker.recv(name, source=p.PS, step_id=step, timeout=timeout)
        assert "start-up grace" not in raised.value.message and "within" not in raised.value.message, name


def test_stop_with_sends_nobody_took_logs_a_warning_naming_them(caplog, step):
    cluster = cluster_spec({"ps": 1, "worker": 1})
    with caplog.at_level(logging.WARNING, logger="tensorverbs"):
        with tv.Server(cluster, "ps", 0) as ps:
            for i in range(5):
                ps.send(f"w{i}", np.ones(2), to="/job:worker/task:0", step_id=step)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("5 sent tensor(s)" in w and "'w0' to /job:worker/replica:0/task:0 at step" in w
               and "/job:ps/replica:0/task:0" in w and "flush" in w for w in warnings), warnings


def test_stop_after_a_flush_logs_no_warning(caplog, step):
    cluster = cluster_spec({"ps": 1})
    with caplog.at_level(logging.WARNING, logger="tensorverbs"):
        with tv.Server(cluster, "ps", 0) as ps:
            ps.send("w", np.ones(2), to=ps.task, step_id=step)
            ps.recv("w", ps.task, step, timeout=WAIT)
            ps.flush(WAIT)
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


# -- a future dropped unread -------------------------------------------------------------------

def test_a_future_dropped_unread_keeps_its_tensor_for_the_next_recv(pair, step):
    """The tensor came and nobody looked (a parked answer, on grpc+verbs): the future
    dropped, the next recv of the key and step gets the tensor, as after cancel()."""
    value = np.arange(10, dtype=np.float32)
    fut = pair.worker.recv_async("dropped", pair.PS, step, timeout=WAIT)
    _delivered(pair, "dropped", step, value)
    del fut
    gc.collect()
    assert np.array_equal(pair.worker.recv("dropped", pair.PS, step, timeout=WAIT), value)


def test_a_future_dropped_before_its_tensor_came_keeps_it_for_the_next_recv(pair, step):
    value = np.arange(7, dtype=np.int64)
    fut = pair.worker.recv_async("early", pair.PS, step, timeout=WAIT)
    del fut
    gc.collect()
    pair.ps.send("early", value, to=pair.WORKER, step_id=step)
    assert np.array_equal(pair.worker.recv("early", pair.PS, step, timeout=WAIT), value)


def test_a_future_dropped_unread_with_a_cast_keeps_its_tensor(pair, step):
    value = np.arange(5, dtype=np.float32)
    fut = pair.worker.recv_async("cast", pair.PS, step, timeout=WAIT, dtype=np.float64)
    _delivered(pair, "cast", step, value)
    fut.exception(WAIT)  # (settled, and not read)
    del fut
    gc.collect()
    assert np.array_equal(pair.worker.recv("cast", pair.PS, step, timeout=WAIT), value)


def test_a_future_read_then_dropped_keeps_nothing(pair, step):
    value = np.arange(4, dtype=np.float32)
    fut = pair.worker.recv_async("read", pair.PS, step, timeout=WAIT)
    _delivered(pair, "read", step, value)
    assert np.array_equal(fut.result(WAIT), value)
    del fut
    gc.collect()
    with pytest.raises(tv.DeadlineExceededError):
        pair.worker.recv("read", pair.PS, step, timeout=0.5)


# -- what a future's wait raises -------------------------------------------------------------

def test_a_future_whose_wait_times_out_raises_a_timeout_error(pair, step):
    """As concurrent.futures does (Python 3.10's concurrent.futures.TimeoutError is not the
    built-in one; both are caught); the recv goes on."""
    fut = pair.worker.recv_async("slow", pair.PS, step, timeout=WAIT)
    for wait in (fut.result, fut.exception):
        with pytest.raises(concurrent.futures.TimeoutError) as raised:
            wait(0.05)
        assert isinstance(raised.value, (TimeoutError, tv.DeadlineExceededError))
    value = np.arange(3, dtype=np.float32)
    _delivered(pair, "slow", step, value)
    assert np.array_equal(fut.result(WAIT), value)


def test_a_cancelled_future_raises_a_concurrent_futures_cancelled_error(pair, step):
    fut = pair.worker.recv_async("gone", pair.PS, step, timeout=WAIT)
    assert fut.cancel()
    with pytest.raises(concurrent.futures.CancelledError):
        fut.result()
    with pytest.raises(tv.CancelledError):
        fut.result()


def test_a_deadline_that_ended_a_recv_from_a_peer_not_started_is_deadline_exceeded():
    """The same instant as a recv from a peer that is up: DeadlineExceededError, its message
    saying the peer has not answered."""
    cluster = cluster_spec({"ps": 1, "worker": 1})
    for protocol, env in (VARIANTS["grpc"], VARIANTS["verbs"]):
        with tv.Server(cluster, "worker", 0, protocol, startup_grace=120,
                       config=RdmaConfig.from_env(env)) as worker:
            with pytest.raises(tv.DeadlineExceededError, match="/job:ps/replica:0/task:0"):
                worker.recv("w", "/job:ps/task:0", timeout=0.5)
            fut = worker.recv_async("w", "/job:ps/task:0", timeout=0.5)
            with pytest.raises(tv.DeadlineExceededError, match="/job:ps/replica:0/task:0"):
                fut.result()


# -- what the sender holds ---------------------------------------------------------------------

def test_a_timeout_says_at_which_steps_the_sender_holds_the_name(pair, step):
    """The step id left off one side: the sender holds 'w1' at another step."""
    other = step + 50_000
    pair.ps.send("w1", np.ones(3), to=pair.WORKER, step_id=other)
    try:
        with pytest.raises(tv.DeadlineExceededError, match=rf"holds 'w1' for this task at step {other}\b"):
            pair.worker.recv("w1", pair.PS, step, timeout=1.0)
        fut = pair.worker.recv_async("w1", pair.PS, step, timeout=1.0)
        with pytest.raises(tv.DeadlineExceededError, match=rf"at step {other}\b"):
            fut.result(WAIT)
    finally:
        pair.ps.cleanup_step(other)


def test_a_timeout_names_similar_names_the_sender_holds_at_that_step(pair, step):
    """A typo in the name: the sender holds 'weights' at that step."""
    pair.ps.send("weights", np.ones(3), to=pair.WORKER, step_id=step)
    try:
        with pytest.raises(tv.DeadlineExceededError, match=rf"'weights'"):
            pair.worker.recv("weight", pair.PS, step, timeout=1.0)
    finally:
        pair.ps.cleanup_step(step)


def test_a_timeout_of_a_name_the_sender_does_not_hold_says_so(pair, step):
    with pytest.raises(tv.DeadlineExceededError, match="holds no tensor named 'nothing'"):
        pair.worker.recv("nothing", pair.PS, step, timeout=0.5)
