"""A sender that stalls while its tensors stream, long enough for its receiver's keepalive
to break the connection, delivers each tensor exactly once (the grpc protocol, where
every recv is a RecvTensor call: a tensor that arrived whole, whose confirmation the
stalled sender never read, is not served a second time)."""
from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

import tensorverbs as tv
from stopped import stop
from tensorverbs.local_cluster import TaskProcess, cluster_spec, pattern
from together import Cluster

PS, WORKER = "/job:ps/replica:0/task:0", "/job:worker/replica:0/task:0"
#: many calls streaming at once, so that some have arrived whole, unconfirmed, at the stop
COUNT, NBYTES = 400, 256 << 10
#: recvs of tensors never sent: their calls wait at the sender, so that some call is open
#: when the connection breaks, however fast the others were
NEVER = 4


def _wait_for(condition, what: str, timeout: float = 120.0) -> None:
    """Return once ``condition()`` holds (a condition, polled)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout} s"
        time.sleep(0.01)


def _failed_unavailable(future) -> bool:
    return future.done() and isinstance(future.exception(), tv.UnavailableError)


@pytest.mark.parametrize("past", ["keepalive", "reconnect window"])
def test_a_stalled_sender_delivers_each_tensor_once(past):
    """The sender stalls until its receiver's connection broke (past the keepalive), or
    until the receiver gave up on it (past the reconnect window: every recv ended, those
    on their way with their tensor, the others with UnavailableError). Every
    tensor reaches the receiver once: a recv that failed gets its tensor when asked again;
    the sender's flush sees every send delivered; none comes a second time."""
    spec = cluster_spec({"ps": 1, "worker": 1})
    ps = TaskProcess(spec, "ps", 0, "grpc")
    server = tv.Server(spec, "worker", 0, "grpc")
    try:
        ps.run("exchanges:send_many", WORKER, 5, COUNT, NBYTES)
        futures = [server.recv_async(f"t{i}", PS, 5, timeout=300) for i in range(COUNT)]
        never = [server.recv_async(f"never{i}", PS, 5, timeout=300) for i in range(NEVER)]
        _wait_for(lambda: any(f.done() for f in futures), "a first tensor's arrival")
        stop(ps.process.pid)
        try:
            if past == "keepalive":
                _wait_for(lambda: server.stats()["recv_calls_broken"] > 0, "a broken connection")
            else:
                _wait_for(lambda: all(f.done() for f in futures + never), "every recv ending")
                assert all(_failed_unavailable(f) for f in never)
        finally:
            os.kill(ps.process.pid, signal.SIGCONT)
        for i, future in enumerate(futures):
            try:
                got = future.result()
            except tv.UnavailableError:
                got = server.recv(f"t{i}", PS, 5, timeout=300)
            assert np.array_equal(got, pattern(NBYTES, i)), f"t{i} has the wrong bytes"
        # every tensor was taken once: none is held or back in the sender's table
        ps.flush(120)
        assert ps.stats()["tensors_sent"] == COUNT
        again = server.recv_many([(f"t{i}", PS, 5) for i in range(COUNT)], timeout=1, return_exceptions=True)
        assert all(isinstance(result, tv.DeadlineExceededError) for result in again)
        # and the receiver, its words settled, makes no more calls to settle them
        _wait_for(lambda: server._rendezvous.receipts.idle(), "the receiver's words settling")
    finally:
        server.stop()
        ps.stop()


def test_a_receiver_restarted_during_the_stall_gets_every_tensor_it_did_not_confirm():
    """The receiver is killed while its sender is stalled (its connection broken, tensors
    on their way to it held there); the restarted receiver, another incarnation, gets
    every tensor the first did not confirm: the sender's flush sees each delivered."""
    with Cluster({"ps": 1, "worker": 1}, "grpc") as cluster:
        ps, worker = cluster[PS], cluster[WORKER]
        worker.call("run", "exchanges:begin_recvs", "first", PS, 5, COUNT + NEVER, None)
        ps.call("run", "exchanges:send_many", WORKER, 5, COUNT, NBYTES)
        _wait_for(lambda: worker.stats().get("tensors_received", 0) > 0, "a first tensor's arrival")
        stop(ps.process.pid)
        try:
            _wait_for(lambda: worker.stats().get("recv_calls_broken", 0) > 0, "a broken connection")
            worker.kill()
        finally:
            os.kill(ps.process.pid, signal.SIGCONT)
        cluster.start("worker", 0)
        cluster.run({WORKER: ("exchanges:begin_recvs", "again", PS, 5, COUNT, None)})
        ps.call("flush", 120)
        assert ps.stats()["tensors_unconfirmed"] == 0
