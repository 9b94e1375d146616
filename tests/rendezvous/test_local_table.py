"""The local table keeps state only for steps that hold something."""
from __future__ import annotations

import numpy as np
import pytest

import tensorverbs as tv
from tensorverbs.local_cluster import cluster_spec


@pytest.fixture
def server():
    with tv.Server(cluster_spec({"ps": 1}), "ps", 0) as server:
        yield server


def test_steps_never_cleaned_up_leave_nothing_behind(server):
    for step in range(10_000):
        server.send("x", np.zeros(1), to=server.task, step_id=step)
        server.recv("x", source=server.task, step_id=step, timeout=10)
        fut = server.recv_async("y", source=server.task, step_id=step, timeout=10)
        server.send("y", np.zeros(1), to=server.task, step_id=step)
        fut.result(10)  # (a future dropped unread would give its tensor back to the table)
    assert server.stats()["table_steps"] == 0
    assert server.pending() == (0, 0)


def test_a_step_holding_a_tensor_or_an_abort_is_counted_until_cleaned_up(server):
    server.send("x", np.zeros(1), to=server.task, step_id=1)
    server.abort_step(2)
    assert server.stats()["table_steps"] == 2
    server.recv("x", source=server.task, step_id=1, timeout=10)
    assert server.stats()["table_steps"] == 1
    with pytest.raises(tv.AbortedError):
        server.recv("x", source=server.task, step_id=2, timeout=10)
    server.cleanup_step(2)
    assert server.stats()["table_steps"] == 0
