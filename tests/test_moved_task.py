"""A task that comes up at another address than the one a server knew it at (a launcher
restarted it elsewhere): ``Server.add_task(..., replace=True)`` tells the server, and its
recvs reach the task there, also those that were waiting for a channel to the old address."""
from __future__ import annotations

import time

import pytest

import tensorverbs as tv
from tensorverbs.local_cluster import TaskProcess, free_port, pattern, same
from tensorverbs.verbs.config import RdmaConfig

from variants import VARIANTS

HOST = "127.0.0.1"
PS, WORKER = "/job:ps/replica:0/task:0", "/job:worker/replica:0/task:0"
VERBS = [v for v, (protocol, _) in VARIANTS.items() if protocol == "grpc+verbs"]


def _wait_for_setups(server: tv.Server, n: int, timeout: float = 60.0) -> None:
    """Until ``n`` channel set-ups of ``server`` are under way (a condition, polled)."""
    deadline = time.monotonic() + timeout
    while server.stats()["channel_setups"] < n:
        assert time.monotonic() < deadline, f"fewer than {n} channel set-ups were under way after {timeout} s"
        time.sleep(0.01)


@pytest.mark.parametrize("first", ["ps", "worker"])
@pytest.mark.parametrize("variant", VERBS)
def test_a_recv_waiting_for_the_old_address_reaches_the_task_at_its_new(variant, first):
    """The ps knows the worker at an address where nothing answers, and a recv of the ps
    sets a channel up there (it waits through the start-up grace period). The worker comes
    up at another address; the ps learns it there. The waiting recv, and the next, get
    their tensors from the worker at its new address. With ``first="worker"`` the worker
    calls the ps before the ps has learned where it is (its channel is set up from its
    side while the ps's set-up still waits at the old address)."""
    protocol, env = VARIANTS[variant]
    ports = [free_port(HOST)]
    for _ in range(2):
        ports.append(free_port(HOST, ports))
    ps_address, old, new = (f"{HOST}:{port}" for port in ports)
    with tv.Server({"ps": [ps_address]}, "ps", 0, protocol, config=RdmaConfig.from_env(env),
                   spare_tasks=1, startup_grace=120) as ps:
        ps.add_task("worker", 0, old)
        waiting = ps.recv_async("a", WORKER, 1, timeout=60)
        _wait_for_setups(ps, 1)  # dialing the old address, where nothing answers
        worker = TaskProcess({"ps": [ps_address], "worker": {0: new}}, "worker", 0, protocol, env)
        try:
            if first == "worker":
                ps.send("b", pattern(4096, 2), to=WORKER, step_id=1)
                assert worker.recv_pattern("b", PS, 1, 4096, 2, timeout=60)
            ps.add_task("worker", 0, new, replace=True)
            worker.send_pattern("a", PS, 1, 4096, 1)
            worker.send_pattern("c", PS, 2, 3 << 20, 3)
            assert same(waiting.result(timeout=90), pattern(4096, 1))
            assert same(ps.recv("c", WORKER, 2, timeout=60), pattern(3 << 20, 3))
            assert ps.stats()["channel_setups"] == 0
        finally:
            worker.stop()
