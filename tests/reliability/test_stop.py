"""stop() in the middle of traffic: every pending call ends, nothing is left behind."""
from __future__ import annotations

import concurrent.futures
import gc
import os
import threading
import time

import numpy as np
import pytest

import tensorverbs as tv
from tensorverbs.local_cluster import cluster_spec, pattern
from tensorverbs.verbs.config import RdmaConfig
from together import Cluster
from variants import VARIANTS
from exchanges import PS, worker

WORKER = worker(0)
COUNT, NBYTES = 400, 64 << 10
#: how long what the stopped servers leave may take to close
SETTLE_SECONDS = 30.0


def _in_thread(fn, *args) -> tuple[threading.Thread, concurrent.futures.Future]:
    """Run ``fn`` in a daemon thread (a stuck call must not keep the test process alive)."""
    fut: concurrent.futures.Future = concurrent.futures.Future()

    def run() -> None:
        try:
            fut.set_result(fn(*args))
        except BaseException as exc:
            fut.set_exception(exc)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, fut


def _joined(started: tuple[threading.Thread, concurrent.futures.Future]):
    """The result of a thread started by _in_thread, once it has ended."""
    thread, fut = started
    result = fut.result(10)
    thread.join(10)
    return result


def _traffic(variant: str) -> None:
    """The worker (in this process) receives in 4 threads and sends in one while the ps
    sends to it; it is stopped in the middle."""
    protocol, env = VARIANTS[variant]
    with Cluster({"ps": 1, "worker": 1}, variant, skip=(WORKER,)) as cluster:
        server = tv.Server(cluster.spec, "worker", 0, protocol, config=RdmaConfig.from_env(env))
        try:
            cluster[PS].post("run", "exchanges:send_many", WORKER, 5, COUNT, NBYTES)
            first = threading.Event()

            def receive(t: int) -> int:
                got = 0
                for i in range(t, COUNT, 4):
                    try:
                        out = server.recv(f"t{i}", source=PS, step_id=5)
                    except (tv.CancelledError, tv.FailedPreconditionError):
                        return got
                    assert np.array_equal(out, pattern(NBYTES, i))
                    got += 1
                    first.set()
                return got

            def send() -> int:
                for i in range(100_000):
                    try:
                        server.send(f"s{i}", pattern(4096, i), to=PS, step_id=6)
                    except tv.FailedPreconditionError:
                        return i
                return i

            receivers = [_in_thread(receive, t) for t in range(4)]
            sender = _in_thread(send)
            pending = [server.recv_async(f"never{i}", source=PS, step_id=7) for i in range(50)]
            assert first.wait(60), "no tensor arrived"
        finally:
            server.stop()
        for fut in pending:
            with pytest.raises(tv.CancelledError, match="stopped"):
                fut.result(10)
        assert _joined(sender) > 0
        assert sum(_joined(started) for started in receivers) > 0


def _descriptors() -> str:
    """What this process's descriptors are."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    return "\n".join(sorted(out))


def test_stop_in_the_middle_of_traffic(variant):
    # gRPC's process-wide poller (a thread and a few descriptors) lives while any gRPC
    # object does: an idle server keeps it up for the whole count
    with tv.Server(cluster_spec({"anchor": 1}), "anchor", 0):
        _traffic(variant)
        gc.collect()
        threads, fds = threading.active_count(), len(os.listdir("/proc/self/fd"))
        for _ in range(3):
            _traffic(variant)
        # what a stopped server leaves to a thread ending after stop() returned (a loaded
        # machine runs it late) closes soon; what leaks stays
        deadline = time.monotonic() + SETTLE_SECONDS
        while (threading.active_count() > threads or len(os.listdir("/proc/self/fd")) > fds) \
                and time.monotonic() < deadline:
            gc.collect()
            time.sleep(0.05)  # (a condition, polled)
        assert threading.active_count() <= threads, sorted(t.name for t in threading.enumerate())
        assert len(os.listdir("/proc/self/fd")) <= fds, _descriptors()


def test_a_receiver_stopped_the_moment_its_recvs_returned_leaves_nothing_held(variant):
    """The worker stops as soon as its recvs returned, their confirmations maybe still on
    their way (grpc): the ps sees every tensor delivered, none held for a word that never
    comes."""
    protocol, env = VARIANTS[variant]
    for _ in range(3):
        with Cluster({"ps": 1, "worker": 1}, variant, skip=(WORKER,)) as cluster:
            server = tv.Server(cluster.spec, "worker", 0, protocol, config=RdmaConfig.from_env(env))
            try:
                cluster[PS].call("run", "exchanges:send_many", WORKER, 3, 200, 4096)
                got = server.recv_many([(f"t{i}", PS, 3) for i in range(200)], timeout=60)
                assert all(np.array_equal(out, pattern(4096, i)) for i, out in enumerate(got))
            finally:
                server.stop()
            cluster[PS].call("flush", 60)
            assert cluster[PS].call("stats").get("tensors_unconfirmed", 0) == 0
