"""Peers that die, start late or never come up: errors, never hangs."""
from __future__ import annotations

import re

import numpy as np
import pytest

import tensorverbs as tv
from tensorverbs.verbs.config import RdmaConfig

from variants import VARIANTS
from tensorverbs.local_cluster import TaskProcess, cluster_spec


def test_peer_killed_while_recv_waits(fresh_pair):
    p = fresh_pair
    p.ps.send("warm", np.ones(4), to=p.WORKER, step_id=1)
    p.worker.recv("warm", source=p.PS, step_id=1, timeout=30)  # the channel is up
    futures = [p.worker.recv_async(f"never{i}", source=p.PS, step_id=2) for i in range(3)]
    p.ps.call("wait_waiters", 3)
    p.ps.kill()
    for fut in futures:
        with pytest.raises(tv.UnavailableError, match="/job:ps"):
            fut.result(timeout=10)


def test_peer_that_starts_late(step):
    protocol, env = VARIANTS["grpc"]
    cluster = cluster_spec({"ps": 1, "worker": 1})
    with tv.Server(cluster, "worker", 0, protocol, config=RdmaConfig.from_env(env)) as worker:
        fut = worker.recv_async("w", source="/job:ps/task:0", step_id=step, timeout=60)
        ps = TaskProcess(cluster, "ps", 0, protocol, env)
        try:
            ps.send("w", np.arange(5), to="/job:worker/task:0", step_id=step)
            assert fut.result(60).tolist() == [0, 1, 2, 3, 4]
        finally:
            ps.stop()


@pytest.mark.parametrize("timeout, error", [(None, tv.UnavailableError), (0.5, tv.DeadlineExceededError)])
def test_peer_that_never_comes_up(timeout, error):
    """The start-up grace period ends the recv (UnavailableError), or its timeout first (a
    deadline that ended the call: DeadlineExceededError)."""
    cluster = cluster_spec({"ps": 1, "worker": 1})
    with tv.Server(cluster, "worker", 0, startup_grace=1.0) as worker:
        with pytest.raises(error, match=r"/job:ps/replica:0/task:0"):
            worker.recv("w", source="/job:ps/task:0", timeout=timeout)


def test_port_in_use_is_an_error():
    cluster = cluster_spec({"ps": 1})
    with tv.Server(cluster, "ps", 0):
        with pytest.raises(tv.UnavailableError, match="cannot listen"):
            tv.Server(cluster, "ps", 0)


def test_unknown_protocol_and_task():
    cluster = cluster_spec({"ps": 1})
    with pytest.raises(tv.InvalidArgumentError, match="protocol"):
        tv.Server(cluster, "ps", 0, protocol="grpc+carrier-pigeon")
    with pytest.raises(tv.InvalidArgumentError, match="/job:ps/replica:0/task:3"):
        tv.Server(cluster, "ps", 3)


def test_stopped_server_refuses_work():
    cluster = cluster_spec({"ps": 1})
    server = tv.Server(cluster, "ps", 0)
    server.stop()
    server.stop()
    with pytest.raises(tv.FailedPreconditionError):
        server.send("x", np.zeros(1), to="/job:ps/task:0")


def test_a_restarted_peer_is_reached_again(fresh_pair, step):
    """The ps dies and a new ps (a new incarnation) comes up at the same address: the
    worker's next recv reaches the new one (a fresh handshake, and a fresh verbs channel)."""
    p = fresh_pair
    p.ps.send("before", np.arange(3), to=p.WORKER, step_id=step)
    assert p.worker.recv("before", source=p.PS, step_id=step, timeout=30).tolist() == [0, 1, 2]
    p.ps.kill()
    with pytest.raises(tv.UnavailableError):
        p.worker.recv("gone", source=p.PS, step_id=step, timeout=10)
    p.ps = TaskProcess(p.cluster, "ps", 0, p.protocol, p.env)
    p.ps.send("after", np.arange(4), to=p.WORKER, step_id=step)
    assert p.worker.recv("after", source=p.PS, step_id=step, timeout=60).tolist() == [0, 1, 2, 3]
    p.worker.send("back", np.arange(5), to=p.PS, step_id=step)
    assert p.ps.recv("back", p.WORKER, step, timeout=60).tolist() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("ps_protocol, worker_protocol", [("grpc", "grpc+verbs"), ("grpc+verbs", "grpc")])
def test_a_protocol_mismatch_is_refused_at_first_contact_naming_both(ps_protocol, worker_protocol, step):
    """Never a silent fallback, never a hang: whichever side receives first, its recv fails
    at once (not at its timeout) with FailedPreconditionError naming both protocols."""
    cluster = cluster_spec({"ps": 1, "worker": 1})
    env = VARIANTS["verbs"][1]
    ps = TaskProcess(cluster, "ps", 0, ps_protocol, env)
    try:
        with tv.Server(cluster, "worker", 0, worker_protocol, config=RdmaConfig.from_env(env)) as worker:
            ps.send("x", np.ones(2), to="/job:worker/task:0", step_id=step)
            mismatch = rf"/job:ps/replica:0/task:0.* runs {re.escape(ps_protocol)}, .* {re.escape(worker_protocol)}\b"
            with pytest.raises(tv.FailedPreconditionError, match=mismatch):
                worker.recv("x", source="/job:ps/task:0", step_id=step, timeout=30)
            worker.send("y", np.ones(2), to="/job:ps/task:0", step_id=step)
            with pytest.raises(tv.FailedPreconditionError, match=re.escape(ps_protocol)):
                ps.recv("y", "/job:worker/replica:0/task:0", step, timeout=30)
    finally:
        ps.stop()
