"""Send completion: a send's handle completes when its receiver has the tensor, fails when
its step is aborted, cleaned up or the server stops; flush waits for every send. For every
protocol variant, with the sender and the receiver in separate processes."""
from __future__ import annotations

import numpy as np
import pytest

import tensorverbs as tv
from tensorverbs.local_cluster import TaskProcess, cluster_spec, pattern, same
from tensorverbs.verbs.config import RdmaConfig
from variants import VARIANTS

#: an inline tensor, one written into a landing, one large enough for the registered paths
SIZES = [16, 64 << 10, 4 << 20]


def send_flush_and_stop(server, to: str, step: int) -> bool:
    """In a child task: send a tensor of each size, flush (until the receiver has them all),
    stop; True if every send's handle says delivered."""
    handles = [server.send(f"w{n}", pattern(n, step), to=to, step_id=step) for n in SIZES]
    server.flush(timeout=60)
    delivered = all(h.done() and h.exception(timeout=0) is None for h in handles)
    server.stop()
    return delivered


@pytest.mark.parametrize("nbytes", SIZES)
def test_a_send_completes_when_its_receiver_has_the_tensor(pair, step, nbytes):
    handle = pair.worker.send("t", pattern(nbytes, step), to=pair.PS, step_id=step)
    assert isinstance(handle, tv.SendHandle)
    assert not handle.done()  # the ps has not asked for it
    with pytest.raises(tv.DeadlineExceededError, match="not received within"):
        handle.wait(timeout=0.05)
    assert pair.ps.recv_pattern("t", pair.WORKER, step, nbytes, step, timeout=60)
    handle.wait(timeout=60)
    assert handle.done() and handle.exception(timeout=0) is None
    assert "delivered" in repr(handle)


def test_flush_waits_for_every_send(pair, step):
    handles = [pair.worker.send(f"t{i}", pattern(n, step + i), to=pair.PS, step_id=step)
               for i, n in enumerate(SIZES)]
    for i, n in enumerate(SIZES):
        pair.ps.post("recv_pattern", f"t{i}", pair.WORKER, step, n, step + i, timeout=60)
    pair.worker.flush(timeout=60)
    assert all(h.done() for h in handles)
    assert [pair.ps.result() for _ in SIZES] == [True] * len(SIZES)


def test_flush_names_the_sends_still_waiting(pair, step):
    pair.worker.send("never-asked", np.arange(4), to=pair.PS, step_id=step)
    with pytest.raises(tv.DeadlineExceededError) as raised:
        pair.worker.flush(timeout=0.1)
    assert "'never-asked'" in str(raised.value) and f"at step {step}" in str(raised.value)
    pair.worker.cleanup_step(step)
    pair.worker.flush(timeout=10)  # a failed send is settled


def test_cleanup_step_fails_the_sends_nobody_took(pair, step):
    handle = pair.worker.send("t", np.arange(4), to=pair.PS, step_id=step)
    pair.worker.cleanup_step(step)
    error = handle.exception(timeout=10)
    assert isinstance(error, tv.AbortedError)
    assert "'t'" in str(error) and "cleaned up before its receiver took it" in str(error)
    with pytest.raises(tv.AbortedError):
        handle.wait(timeout=0)


def test_abort_step_fails_the_sends_nobody_took_with_the_reason(pair, step):
    handle = pair.worker.send("t", np.arange(4), to=pair.PS, step_id=step)
    pair.worker.abort_step(step, "bad batch")
    with pytest.raises(tv.AbortedError, match="bad batch"):
        handle.wait(timeout=10)
    pair.worker.cleanup_step(step)


def test_a_send_taken_back_from_a_receiver_that_gave_up_stays_pending(pair, step):
    pair.ps.post("recv_pattern", "late", pair.WORKER, step, 16, step, timeout=0.2)
    with pytest.raises(tv.DeadlineExceededError):
        pair.ps.result()
    handle = pair.worker.send("late", pattern(16, step), to=pair.PS, step_id=step)
    assert pair.ps.recv_pattern("late", pair.WORKER, step, 16, step, timeout=60)
    handle.wait(timeout=60)


def test_a_sender_that_flushes_then_stops_loses_nothing(variant, step):
    protocol, env = VARIANTS[variant]
    cluster = cluster_spec({"ps": 1, "worker": 1})
    ps = TaskProcess(cluster, "ps", 0, protocol, env)
    try:
        with tv.Server(cluster, "worker", 0, protocol, config=RdmaConfig.from_env(env)) as worker:
            ps.post("run", "test_send_completion:send_flush_and_stop", "/job:worker/task:0", step)
            for n in reversed(SIZES):  # the ps's flush waits for them all
                assert same(worker.recv(f"w{n}", "/job:ps/task:0", step, timeout=60), pattern(n, step))
            assert ps.result() is True
    finally:
        ps.stop()


@pytest.mark.parametrize("protocol", ["grpc", "grpc+verbs"])
def test_local_sends_complete_and_stop_fails_the_rest(protocol):
    me = "/job:worker/replica:0/task:0"
    server = tv.Server(cluster_spec({"worker": 1}), "worker", 0, protocol)
    try:
        taken = server.send("mine", np.arange(3), to=me, step_id=1)
        left = server.send("left", np.arange(3), to=me, step_id=1)
        assert same(server.recv("mine", me, 1, timeout=10), np.arange(3))
        taken.wait(timeout=10)
        assert not left.done()
    finally:
        server.stop()
    with pytest.raises(tv.CancelledError, match="'left'.*server stopped"):
        left.wait(timeout=10)
    server.flush(timeout=0)


def test_a_send_refused_leaves_nothing_for_flush(pair, step):
    """A send refused (its step aborted) raises, and flush does not wait for it, even while
    the caller keeps the error (and with it the call's frame)."""
    pair.worker.abort_step(step, "the step went wrong")
    with pytest.raises(tv.AbortedError) as raised:
        pair.worker.send("refused", np.arange(4), to=pair.PS, step_id=step)
    pair.worker.flush(timeout=10)
    assert "went wrong" in str(raised.value)
