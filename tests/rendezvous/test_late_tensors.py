"""A tensor that arrives for a recv whose caller gave up is kept for the next recv of it,
and counted as received once."""
from __future__ import annotations

import numpy as np
import pytest

import tensorverbs as tv
from tensorverbs.local_cluster import cluster_spec
from tensorverbs.rendezvous.local import Value
from tensorverbs.rendezvous.remote import RecvCall


@pytest.fixture
def servers():
    cluster = cluster_spec({"ps": 1, "worker": 1})
    with tv.Server(cluster, "ps", 0) as ps, tv.Server(cluster, "worker", 0) as worker:
        yield ps, worker


def test_a_late_tensor_is_counted_once(servers):
    ps, worker = servers
    key = worker._recv_key("w", ps.task)
    given_up = RecvCall(key, step_id=7)
    given_up.future.cancel()  # its caller gave up as the tensor was on its way
    array = np.arange(8, dtype=np.float32)
    before = worker.stats()
    worker._rendezvous.complete(given_up, Value(array), nbytes=array.nbytes)  # it arrives
    got = worker.recv("w", ps.task, step_id=7, timeout=10)  # the next recv of it takes it
    assert np.array_equal(got, array)
    after = worker.stats()
    assert after["tensors_received"] - before["tensors_received"] == 1
    assert after["bytes_received"] - before["bytes_received"] == array.nbytes
