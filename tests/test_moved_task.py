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


def _ps(protocol: str, env: dict[str, str], address: str) -> tv.Server:
    """The ps at ``address``, with room for a worker that joins (and a start-up grace period
    longer than the recvs' timeouts)."""
    return tv.Server({"ps": [address]}, "ps", 0, protocol, config=RdmaConfig.from_env(env),
                     spare_tasks=1, startup_grace=120)


def _worker_that_called(ps: tv.Server, ps_address: str, address: str, protocol: str,
                        env: dict[str, str]) -> TaskProcess:
    """The worker, at ``address``, once it received a tensor from the ps: it set the channel
    up (it called the ps first)."""
    worker = TaskProcess({"ps": [ps_address], "worker": {0: address}}, "worker", 0, protocol, env)
    try:
        ps.send("b", pattern(4096, 2), to=WORKER, step_id=2)
        assert worker.recv_pattern("b", PS, 2, 4096, 2, timeout=60)
    except BaseException:
        worker.stop()
        raise
    return worker


def _addresses(n: int) -> list[str]:
    """``n`` free addresses on this host."""
    ports = [free_port(HOST)]
    for _ in range(n - 1):
        ports.append(free_port(HOST, ports))
    return [f"{HOST}:{port}" for port in ports]


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
    ps_address, old, new = _addresses(3)
    with _ps(protocol, env, ps_address) as ps:
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


@pytest.mark.parametrize("variant", VERBS)
def test_a_task_that_restarted_elsewhere_and_called_first_keeps_its_channel(variant):
    """The worker restarts at another address and sets up its channel to the ps (it receives
    from the ps) before the ps learns where it is now. Learning that fails the channel to
    the worker's old incarnation only: the one the new worker set up stays connected (it
    failed too before, and a set-up in flight when the ps learned the move failed the new
    worker's recv: UNAVAILABLE "... moved"), and its health is watched at the new address:
    when the worker ends, a recv waiting for it fails at once (UNAVAILABLE), not when it
    times out."""
    protocol, env = VARIANTS[variant]
    ps_address, old, new = _addresses(3)
    with _ps(protocol, env, ps_address) as ps:
        ps.add_task("worker", 0, old)
        worker = TaskProcess({"ps": [ps_address], "worker": {0: old}}, "worker", 0, protocol, env)
        try:
            worker.send_pattern("a", PS, 1, 4096, 1)
            assert same(ps.recv("a", WORKER, 1, timeout=60), pattern(4096, 1))
        finally:
            worker.stop()
        worker = _worker_that_called(ps, ps_address, new, protocol, env)
        try:
            connected = ps.stats()["channels_connected"]
            ps.add_task("worker", 0, new, replace=True)
            worker.send_pattern("c", PS, 3, 4096, 3)
            assert same(ps.recv("c", WORKER, 3, timeout=60), pattern(4096, 3))
            ps.send("d", pattern(4096, 4), to=WORKER, step_id=4)
            assert worker.recv_pattern("d", PS, 4, 4096, 4, timeout=60)
            assert ps.stats()["channels_connected"] == connected  # the worker's channel stayed
            waiting = ps.recv_async("e", WORKER, 5, timeout=60)
        finally:
            worker.stop()
        with pytest.raises(tv.UnavailableError):  # (DeadlineExceededError without the watch)
            waiting.result(timeout=90)


@pytest.mark.parametrize("variant", VERBS)
def test_a_task_that_ended_as_the_move_was_learned_fails_the_recvs_waiting_for_it(variant):
    """The worker comes up at another address than the one the ps knows and calls the ps
    first (the ps never had a channel to it at the old address). It ends as the ps learns
    its new address: the move spares its channel (it said where it serves when it set the
    channel up: the move failed it before, and its recvs with "moved"), and the health
    watch that the move starts there finds nobody (its gRPC server is gone; its verbs
    channel is still up, as a process's is while it ends). A recv waiting for the worker
    fails UNAVAILABLE at once, naming the refused connection: the watch asked the worker
    for its status for as long as a start-up may last, and the recv timed out first (seen
    under load in CI)."""
    protocol, env = VARIANTS[variant]
    ps_address, old, new = _addresses(3)
    with _ps(protocol, env, ps_address) as ps:
        ps.add_task("worker", 0, old)
        worker = _worker_that_called(ps, ps_address, new, protocol, env)
        try:
            waiting = ps.recv_async("e", WORKER, 5, timeout=60)
            worker.run("serving:stop_serving")
            ps.add_task("worker", 0, new, replace=True)
            with pytest.raises(tv.UnavailableError, match="refused the connection"):
                waiting.result(timeout=90)
        finally:
            worker.stop()
