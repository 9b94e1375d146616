"""Message credits: a task that handles a peer's control message tells the peer it may
reuse its slot. The count rides on the next message going back (an answer carries the
credit of the request it answers); an ACK of its own goes only when nothing does."""
from __future__ import annotations

import pytest

from tensorverbs.local_cluster import pattern, same

from variants import VARIANTS, pair_of

VERBS = [v for v, (protocol, _) in VARIANTS.items() if protocol == "grpc+verbs"]
COUNT = 50


@pytest.fixture(scope="module", params=VERBS)
def vpair(request):
    yield from pair_of(request.param)


def test_an_answered_request_needs_no_ack_of_its_own(vpair, step):
    """4 KiB tensors sent before they are asked for: each request is answered (inline) as
    it is handled, and the answer carries its credit; the sender sends no ACK for them."""
    vpair.ps.send_pattern("warm", vpair.WORKER, step, 4096, step)  # the channel is set up
    assert same(vpair.worker.recv("warm", vpair.PS, step, timeout=60), pattern(4096, step))
    for i in range(COUNT):
        vpair.ps.send_pattern(f"t{i}", vpair.WORKER, step, 4096, step + i)
    ps_before, worker_before = vpair.ps.stats(), vpair.worker.stats()
    for i in range(COUNT):
        assert same(vpair.worker.recv(f"t{i}", vpair.PS, step, timeout=60), pattern(4096, step + i))
    ps_after, worker_after = vpair.ps.stats(), vpair.worker.stats()
    assert worker_after["tensor_requests"] - worker_before["tensor_requests"] == COUNT
    assert ps_after["inline_tensors"] - ps_before["inline_tensors"] == COUNT
    assert ps_after["acks_sent"] - ps_before["acks_sent"] == 0, \
        "the sender acknowledged requests it answered"
