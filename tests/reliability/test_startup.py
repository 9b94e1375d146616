"""Start-up as launchers do it: every task at once, both ends of a channel set up at
once, receivers waiting for senders that do not exist yet."""
from __future__ import annotations

from together import Cluster
from exchanges import PS, worker

#: fresh clusters per test: each start is a new race of set-ups (8 keep the suite in its
#: CI budget; every CI run draws new ones)
CLUSTERS = 8
WORKER = worker(0)


def test_both_ends_set_up_at_once(variant):
    """Step 0 of every training job: each task receives from the other right after start."""
    for _ in range(CLUSTERS):
        with Cluster({"ps": 1, "worker": 1}, variant) as cluster:
            assert cluster.run({
                PS: ("exchanges:swap", WORKER, 0, 4096, 1, 2),
                WORKER: ("exchanges:swap", PS, 0, 4096, 2, 1),
            }) == {PS: True, WORKER: True}
            assert cluster.run({  # and the channel carries a large tensor afterwards
                PS: ("exchanges:swap", WORKER, 1, 3 << 20, 3, 4),
                WORKER: ("exchanges:swap", PS, 1, 3 << 20, 4, 3),
            }) == {PS: True, WORKER: True}


def test_ps_and_workers_started_together(variant):
    """1 ps + 2 workers started at once, 3 steps of an AlexNet-shaped exchange."""
    for _ in range(CLUSTERS):
        with Cluster({"ps": 1, "worker": 2}, variant) as cluster:
            assert cluster.run({
                PS: ("exchanges:ps_steps", 2, 0, 3),
                worker(0): ("exchanges:worker_steps", 0, 0, 3),
                worker(1): ("exchanges:worker_steps", 1, 0, 3),
            }) == {PS: 3, worker(0): 3, worker(1): 3}


def test_workers_start_before_the_ps_exists(variant):
    """The workers are up and waiting for weights before the ps's process is started."""
    with Cluster({"ps": 1, "worker": 2}, variant, skip=(PS,)) as cluster:
        for w in range(2):
            cluster[worker(w)].post("run", "exchanges:worker_steps", w, 0, 3)
        for w in range(2):
            cluster[worker(w)].ready()  # up, and about to wait for the weights
        cluster.start("ps", 0)
        assert cluster.run({PS: ("exchanges:ps_steps", 2, 0, 3)}) == {PS: 3}
        assert [cluster[worker(w)].result() for w in range(2)] == [3, 3]


def test_sender_started_while_100_recvs_wait(variant):
    with Cluster({"ps": 1, "worker": 1}, variant, skip=(PS,)) as cluster:
        assert cluster.run({WORKER: ("exchanges:begin_recvs", "early", PS, 7, 100)}) == {WORKER: 100}
        cluster.start("ps", 0)
        assert cluster.run({PS: ("exchanges:send_many", WORKER, 7, 100, 8192)}) == {PS: 100}
        assert cluster.run({WORKER: ("exchanges:finish_recvs", "early", 8192)}) == {WORKER: 100}
