"""A recv's ``out`` and the cancel of its future: once a cancel succeeded, ``out`` is never
written. The tensor is delivered into ``out`` in one thread (a real Delivery of a real
server's runtime, 128 MiB copied into a real Out) while the test's thread cancels the
future as soon as the copy has begun: the cancel must fail (the future is its settling
thread's while ``out`` is filled) and the future hold ``out`` filled, not succeed while
the copy goes on."""
from __future__ import annotations

import threading

import numpy as np

import tensorverbs as tv
from tensorverbs.cluster import parse_task
from tensorverbs.local_cluster import cluster_spec
from tensorverbs.out import Out
from tensorverbs.rendezvous.delivery import Delivery
from tensorverbs.rendezvous.key import RendezvousKey
from tensorverbs.rendezvous.local import Value
from tensorverbs.rendezvous.recv_call import RecvCall

NBYTES = 128 << 20


def test_a_recv_whose_out_is_being_filled_is_not_cancelled_under_it():
    server = tv.Server(cluster_spec({"worker": 1}), "worker", 0, "grpc")
    try:
        task = parse_task("/job:worker/task:0")
        out = np.zeros(NBYTES, np.uint8)
        call = RecvCall(RendezvousKey(task, 0, task, "w"), 1, out=Out(out))
        delivering = threading.Thread(target=Delivery(server._rt).settle,
                                      args=(call, Value(np.ones(NBYTES, np.uint8))))
        delivering.start()
        while not out[0]:  # the copy into out has begun
            pass
        cancelled = call.future.cancel()
        delivering.join()
        assert not cancelled
        assert call.future.result(timeout=0) is out and out.all()
    finally:
        server.stop()
