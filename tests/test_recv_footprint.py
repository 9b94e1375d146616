"""What a recv in flight costs the receiving process in objects that Python's garbage
collector tracks. Thousands of recvs in flight make each one count: at 18 per recv the
collections took a third of the starting thread's CPU with 2,000 4 KiB recvs in flight.
A count, not a timing: it holds on any machine."""
from __future__ import annotations

import gc

import pytest

from variants import VARIANTS, pair_of

#: the objects a recv_async in flight holds: its future, the future's condition (with its
#: lock and waiters), the future's lists of waiters and callbacks, the recv's call, and the
#: call's weak reference to the future (which holds the call while its answer may be parked)
MOST_PER_RECV = 7.5
RECVS = 500


@pytest.fixture(scope="module", params=[v for v, (protocol, _) in VARIANTS.items() if protocol == "grpc+verbs"])
def pair(request):
    yield from pair_of(request.param)


def test_a_recv_in_flight_holds_few_objects_for_the_garbage_collector(pair):
    worker = pair.worker
    pair.ps.send_pattern("warm", pair.WORKER, 1, 4096, 1)
    worker.recv("warm", pair.PS, 1, timeout=60)  # the channel is up: the recvs go to the core
    gc.collect()
    gc.disable()
    try:
        before = len(gc.get_objects())
        futures = [worker.recv_async("never", pair.PS, 2 + i, timeout=60) for i in range(RECVS)]
        per_recv = (len(gc.get_objects()) - before - 1) / RECVS  # (the list of futures: 1)
    finally:
        gc.enable()
    for future in futures:
        future.cancel()
    assert per_recv <= MOST_PER_RECV, f"a recv_async in flight holds {per_recv:.2f} tracked objects"
