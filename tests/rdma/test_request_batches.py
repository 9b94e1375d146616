"""TENSOR_REQUESTS: the requests that wait for a message slot (the peer has not taken the
messages before them) travel together, in order, those with a landing on their own; each
is answered as if it had come alone. The peer is stopped while the recvs start, so that
the slots stay taken and the requests wait."""
from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tensorverbs.local_cluster import pattern, same

from stopped import stop
from variants import VARIANTS, pair_of

VERBS = [v for v, (protocol, _) in VARIANTS.items() if protocol == "grpc+verbs"]
COUNT = 300
#: every tenth tensor too large to come inline: asked for again with a landing once its
#: meta-data is cached
SIZES = [64 << 10 if i % 10 == 0 else 16 for i in range(COUNT)]
COUNTED = ("tensor_requests", "request_batches")


@pytest.fixture(scope="module", params=VERBS)
def vpair(request):
    yield from pair_of(request.param)


def _counts(stats: dict) -> dict:
    return {name: stats[name] for name in COUNTED}


def _requested(worker, before: dict, count: int, timeout: float = 60.0) -> None:
    """Wait until ``count`` more requests were sent (or queued) than ``before`` counted."""
    deadline = time.monotonic() + timeout
    while worker.stats()["tensor_requests"] - before["tensor_requests"] < count:
        assert time.monotonic() < deadline, f"fewer than {count} requests sent in {timeout} s"
        time.sleep(0.005)


def test_requests_that_wait_for_a_slot_travel_together(vpair, step):
    vpair.ps.send_pattern("warm", vpair.WORKER, step, 16, step)  # the channel is set up
    assert same(vpair.worker.recv("warm", vpair.PS, step, timeout=60), pattern(16, step))
    for r in (1, 2):  # the second time with landings for the large ones
        at = step + r
        for i, nbytes in enumerate(SIZES):
            vpair.ps.send_pattern(f"b{i}", vpair.WORKER, at, nbytes, at + i)
        worker_before, ps_before = _counts(vpair.worker.stats()), _counts(vpair.ps.stats())
        stop(vpair.ps.process.pid)
        try:
            with ThreadPoolExecutor(1) as pool:
                got = pool.submit(vpair.worker.recv_many, [(f"b{i}", vpair.PS, at) for i in range(COUNT)],
                                  timeout=120)
                _requested(vpair.worker, worker_before, COUNT)
                os.kill(vpair.ps.process.pid, signal.SIGCONT)
                results = got.result(timeout=120)
        finally:
            os.kill(vpair.ps.process.pid, signal.SIGCONT)
        assert all(same(a, pattern(n, at + i)) for i, (a, n) in enumerate(zip(results, SIZES)))
        sent = {k: v - worker_before[k] for k, v in _counts(vpair.worker.stats()).items()}
        taken = {k: v - ps_before[k] for k, v in _counts(vpair.ps.stats()).items()}
        # every request counted once on each side, whether it travelled alone or not
        assert sent["tensor_requests"] == COUNT and sent == taken
        assert 0 < sent["request_batches"] < COUNT


def test_a_recv_many_asks_its_peer_in_one_round(vpair, step):
    """recv_many holds its requests until it has started them all: its 300 small ones go
    to the peer as one TENSOR_REQUESTS message, however quickly the peer takes messages."""
    vpair.ps.send_pattern("warm", vpair.WORKER, step, 16, step)
    assert same(vpair.worker.recv("warm", vpair.PS, step, timeout=60), pattern(16, step))
    at = step + 1
    for i in range(COUNT):
        vpair.ps.send_pattern(f"s{i}", vpair.WORKER, at, 16, at + i)
    worker_before, ps_before = vpair.worker.stats(), _counts(vpair.ps.stats())
    results = vpair.worker.recv_many([(f"s{i}", vpair.PS, at) for i in range(COUNT)], timeout=60)
    assert all(same(a, pattern(16, at + i)) for i, a in enumerate(results))
    worker = vpair.worker.stats()
    sent = {k: worker[k] - worker_before[k] for k in COUNTED + ("messages_sent",)}
    taken = {k: v - ps_before[k] for k, v in _counts(vpair.ps.stats()).items()}
    assert sent == {"tensor_requests": COUNT, "request_batches": 1, "messages_sent": 1}
    assert taken == {"tensor_requests": COUNT, "request_batches": 1}
