"""Many recvs in flight, many threads on one Server."""
from __future__ import annotations

from together import Cluster
from exchanges import PS, worker

WORKER = worker(0)


def test_5000_recvs_in_flight(variant):
    with Cluster({"ps": 1, "worker": 1}, variant) as cluster:
        assert cluster.run({WORKER: ("exchanges:begin_recvs", "many", PS, 3, 5000)}) == {WORKER: 5000}
        assert cluster.run({PS: ("exchanges:send_many", WORKER, 3, 5000, 4096)}) == {PS: 5000}
        assert cluster.run({WORKER: ("exchanges:finish_recvs", "many", 4096)}) == {WORKER: 5000}


def test_8000_recvs_of_256KiB_in_flight_from_one_peer(variant):
    """More transfers in flight on one channel than its queues hold (1024 requests) wait
    their turn: none fails the channel or stalls."""
    count, nbytes = 8000, 256 << 10
    with Cluster({"ps": 1, "worker": 1}, variant) as cluster:
        assert cluster.run({WORKER: ("exchanges:begin_recvs", "large", PS, 4, count, 300.0)}) == {WORKER: count}
        assert cluster.run({PS: ("exchanges:send_cycling", WORKER, 4, count, nbytes)}) == {PS: count}
        assert cluster.run({WORKER: ("exchanges:finish_cycling", "large", nbytes)}) == {WORKER: count}


def test_8_threads_receive_while_one_sends(variant):
    with Cluster({"ps": 1, "worker": 1}, variant) as cluster:
        assert cluster.run({
            PS: ("exchanges:threaded", WORKER, 1, 100_000, 8, 100, 8192),
            WORKER: ("exchanges:threaded", PS, 100_000, 1, 8, 100, 8192),
        }) == {PS: 800, WORKER: 800}
