"""A long run: memory stays flat (`make soak`; `make test` leaves it out)."""
from __future__ import annotations

import pytest

from together import Cluster
from exchanges import PS, worker

WORKER = worker(0)
STEPS = 10_000
SAMPLES = 20
#: samples taken during the warm-up (the first fifth of the run)
WARM_UP = 4
#: RSS growth allowed beyond the warm-up's peak: the allocator's slack, not a leak (a
#: leak of one small tensor a step would be 40 MiB)
RSS_SLACK = 16 << 20
#: pool bytes in use once the sample settled (exchanges.settled_pool): at most what one
#: step keeps in flight
POOL_SLACK = (256 << 10) + 4096

pytestmark = pytest.mark.soak


def test_10000_steps_memory_flat(variant):
    """The peak after the first half of the run is no higher than the peak of the half
    after the warm-up, for RSS and for the registered pool. grpc's steps are slower: it
    takes half as many (a leaked 4 KiB tensor a step is still 20 MiB, beyond RSS_SLACK)."""
    steps = STEPS // 2 if variant == "grpc" else STEPS
    with Cluster({"ps": 1, "worker": 1}, variant) as cluster:
        marks = cluster.run({
            PS: ("exchanges:soak", WORKER, True, steps, SAMPLES),
            WORKER: ("exchanges:soak", PS, False, steps, SAMPLES),
        }, timeout=600)
        half = WARM_UP + (SAMPLES - WARM_UP) // 2
        for task, samples in marks.items():
            rss = [r for _, r, _ in samples]
            pool = [p for _, _, p in samples]
            assert max(rss[half:]) <= max(rss[WARM_UP:half]) + RSS_SLACK, f"{task}: RSS grew {rss}"
            assert max(pool[half:]) <= max(pool[WARM_UP:half]) + POOL_SLACK, f"{task}: the pool grew {pool}"
            assert cluster[task].call("pending") == (0, 0), f"{task}: tensors or recvs left over"
