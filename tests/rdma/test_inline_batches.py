"""TENSOR_INLINES: small answers that wait for a message slot (the receiver has not taken
the messages before them) travel together, as many as fit a slot, in order. Here the ps
asks for 300 tensors the worker has not sent yet, and is stopped before the worker sends
them: the first 16 answers take the 16 slots, the others wait and gather, 7 of 1 KiB to a
message; each tensor is counted as an inline tensor on both sides, every byte arrives
where it belongs, and every send completes. A tensor too large to share a slot waits
alone."""
from __future__ import annotations

import math
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tensorverbs import _core
from tensorverbs.local_cluster import pattern, same

from stopped import stop
from variants import VARIANTS, pair_of

VERBS = [v for v, (protocol, _) in VARIANTS.items() if protocol == "grpc+verbs"]
COUNT = 300
SLOTS = 16  # TENSORVERBS_MESSAGE_SLOTS' default
COUNTED = ("tensor_requests", "inline_tensors", "inline_batches", "messages_sent")
#: the bytes a uint8 tensor of rank 1 takes in a TENSOR_INLINES message beside its own
ENTRY_BYTES = 18 + 8


@pytest.fixture(scope="module", params=VERBS)
def vpair(request):
    yield from pair_of(request.param)


def _counts(stats: dict) -> dict:
    return {name: stats[name] for name in COUNTED}


def _asked(worker, before: dict, timeout: float = 60.0) -> None:
    """Wait until the worker has taken COUNT more requests than ``before`` counted."""
    deadline = time.monotonic() + timeout
    while worker.stats()["tensor_requests"] - before["tensor_requests"] < COUNT:
        assert time.monotonic() < deadline, f"fewer than {COUNT} requests came in {timeout} s"
        time.sleep(0.005)


def _answered_while_stopped(vpair, at: int, nbytes: int) -> tuple[dict, dict]:
    """The ps asks for COUNT tensors of ``nbytes``; the worker sends them while the ps is
    stopped. What the worker and the ps counted meanwhile."""
    vpair.worker.send("warm", pattern(16, at), vpair.PS, at)  # the channel is set up
    assert same(vpair.ps.recv("warm", vpair.WORKER, at, timeout=60), pattern(16, at))
    worker_before, ps_before = _counts(vpair.worker.stats()), _counts(vpair.ps.stats())
    with ThreadPoolExecutor(1) as pool:
        got = pool.submit(vpair.ps.recv_many, [(f"s{i}", vpair.WORKER, at) for i in range(COUNT)],
                          timeout=120)
        _asked(vpair.worker, worker_before)
        stop(vpair.ps.process.pid)
        try:
            vpair.worker.send_many([(f"s{i}", pattern(nbytes, at + i), vpair.PS, at) for i in range(COUNT)])
        finally:
            os.kill(vpair.ps.process.pid, signal.SIGCONT)
        results = got.result(timeout=120)
    assert all(same(a, pattern(nbytes, at + i)) for i, a in enumerate(results))
    vpair.worker.flush(timeout=60)  # each send completes as the message it travelled in is taken
    worker = {k: v - worker_before[k] for k, v in _counts(vpair.worker.stats()).items()}
    ps = {k: v - ps_before[k] for k, v in _counts(vpair.ps.stats()).items()}
    return worker, ps


def test_small_answers_that_wait_travel_together(vpair, step):
    nbytes = 1024
    per_message = _core.MAX_TAIL_BYTES // (nbytes + ENTRY_BYTES)
    batches = math.ceil((COUNT - SLOTS) / per_message)
    assert (per_message, batches) == (7, 41)
    worker, ps = _answered_while_stopped(vpair, step, nbytes)
    assert worker == {"tensor_requests": COUNT, "inline_tensors": COUNT, "inline_batches": batches,
                      "messages_sent": SLOTS + batches}
    assert ps == {"tensor_requests": COUNT, "inline_tensors": COUNT, "inline_batches": batches,
                  "messages_sent": 1}


def test_an_answer_too_large_to_share_a_slot_waits_alone(vpair, step):
    nbytes = 4096
    assert 2 * (nbytes + ENTRY_BYTES) > _core.MAX_TAIL_BYTES
    worker, ps = _answered_while_stopped(vpair, step, nbytes)
    assert worker == {"tensor_requests": COUNT, "inline_tensors": COUNT, "inline_batches": 0,
                      "messages_sent": COUNT}
    assert ps == {"tensor_requests": COUNT, "inline_tensors": COUNT, "inline_batches": 0, "messages_sent": 1}
