"""TENSOR_INLINES: the small tensors a peer answers together travel together, as many as
fit a message slot. A recv_many asks in one TENSOR_REQUESTS message; the peer holds the
answers it makes for it until it has made them all, so that 300 tensors of 1 KiB come in
43 messages of 7 (and one of 6), each tensor counted as an inline tensor on both sides,
every byte where it belongs; a tensor too large to share a slot still comes alone."""
from __future__ import annotations

import math

import pytest

from tensorverbs import _core
from tensorverbs.local_cluster import pattern, same

from variants import VARIANTS, pair_of

VERBS = [v for v, (protocol, _) in VARIANTS.items() if protocol == "grpc+verbs"]
COUNT = 300
COUNTED = ("inline_tensors", "inline_batches", "messages_sent")
#: the bytes a uint8 tensor of rank 1 takes in a TENSOR_INLINES message beside its own
ENTRY_BYTES = 18 + 8


@pytest.fixture(scope="module", params=VERBS)
def vpair(request):
    yield from pair_of(request.param)


def _counts(stats: dict) -> dict:
    return {name: stats[name] for name in COUNTED}


def _recv_many(vpair, at: int, nbytes: int) -> tuple[dict, dict]:
    """A recv_many of COUNT tensors of ``nbytes`` sent before it; what the ps and the
    worker counted meanwhile."""
    for i in range(COUNT):
        vpair.ps.send_pattern(f"s{i}", vpair.WORKER, at, nbytes, at + i)
    ps_before, worker_before = _counts(vpair.ps.stats()), _counts(vpair.worker.stats())
    results = vpair.worker.recv_many([(f"s{i}", vpair.PS, at) for i in range(COUNT)], timeout=60)
    assert all(same(a, pattern(nbytes, at + i)) for i, a in enumerate(results))
    vpair.ps.flush(timeout=60)  # each send completes as the message it travelled in is taken
    ps = {k: v - ps_before[k] for k, v in _counts(vpair.ps.stats()).items()}
    worker = {k: v - worker_before[k] for k, v in _counts(vpair.worker.stats()).items()}
    return ps, worker


def test_small_answers_to_a_recv_many_travel_together(vpair, step):
    vpair.ps.send_pattern("warm", vpair.WORKER, step, 16, step)  # the channel is set up
    assert same(vpair.worker.recv("warm", vpair.PS, step, timeout=60), pattern(16, step))
    nbytes = 1024
    per_message = _core.MAX_TAIL_BYTES // (nbytes + ENTRY_BYTES)
    ps, worker = _recv_many(vpair, step + 1, nbytes)
    messages = math.ceil(COUNT / per_message)
    assert (per_message, messages) == (7, 43)
    assert ps == {"inline_tensors": COUNT, "inline_batches": messages, "messages_sent": messages}
    assert worker["inline_tensors"] == COUNT and worker["inline_batches"] == messages


def test_an_answer_too_large_to_share_a_slot_comes_alone(vpair, step):
    vpair.ps.send_pattern("warm", vpair.WORKER, step, 16, step)
    assert same(vpair.worker.recv("warm", vpair.PS, step, timeout=60), pattern(16, step))
    nbytes = 4096  # two do not fit one slot
    assert 2 * (nbytes + ENTRY_BYTES) > _core.MAX_TAIL_BYTES
    ps, worker = _recv_many(vpair, step + 1, nbytes)
    assert ps == {"inline_tensors": COUNT, "inline_batches": 0, "messages_sent": COUNT}
    assert worker == {"inline_tensors": COUNT, "inline_batches": 0, "messages_sent": 1}
