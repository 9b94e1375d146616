"""Tasks that join a running cluster (Server.add_task): each side learns the other in
either order, then they exchange tensors like tasks of the cluster they started with."""
from __future__ import annotations

import time

import pytest

import tensorverbs as tv
from tensorverbs.local_cluster import TaskProcess, free_port, pattern, same
from tensorverbs.verbs.config import RdmaConfig

from variants import VARIANTS

HOST = "127.0.0.1"
PS, WORKER = "/job:ps/task:0", "/job:worker/task:0"


def _addresses() -> tuple[str, str]:
    first = free_port(HOST)
    return f"{HOST}:{first}", f"{HOST}:{free_port(HOST, [first])}"


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_a_task_joins_a_running_cluster(variant):
    protocol, env = VARIANTS[variant]
    ps_address, worker_address = _addresses()
    # the ps starts alone; the worker, in another process, starts knowing the ps
    with tv.Server({"ps": [ps_address]}, "ps", 0, protocol, config=RdmaConfig.from_env(env),
                   spare_tasks=1) as ps:
        worker = TaskProcess({"ps": [ps_address], "worker": [worker_address]}, "worker", 0,
                             protocol, env)
        try:
            # the worker asks before the ps has learned it: the request waits, it is not refused
            with pytest.raises((tv.DeadlineExceededError, tv.UnavailableError), match="within 2 s|after 2 s"):
                worker.recv("w", PS, 1, 2)  # step 1, timeout 2 s
            ps.add_task("worker", 0, worker_address)
            ps.send("w", pattern(3 << 20, 1), to=WORKER, step_id=1)
            assert worker.recv_pattern("w", PS, 1, 3 << 20, 1, timeout=60)
            worker.send_pattern("g", PS, 1, 4096, 2)
            assert same(ps.recv("g", WORKER, 1, timeout=60), pattern(4096, 2))
            ps.add_task("worker", 0, worker_address)  # known at that address: nothing happens
            with pytest.raises(tv.InvalidArgumentError, match=f"at {worker_address} already"):
                ps.add_task("worker", 0, f"{HOST}:1")
        finally:
            worker.stop()


def test_grpc_verbs_has_room_for_spare_tasks_only():
    ps_address, _ = _addresses()
    with tv.Server({"ps": [ps_address]}, "ps", 0, "grpc+verbs") as ps:
        with pytest.raises(tv.ResourceExhaustedError, match=r"/job:worker/replica:0/task:0 cannot join.*spare_tasks"):
            ps.add_task("worker", 0, f"{HOST}:1")
        with pytest.raises(tv.InvalidArgumentError, match="not in the cluster"):
            ps.send("w", pattern(16, 0), to=WORKER)  # the failed join left the cluster as it was


def test_a_task_that_left_frees_its_id_for_the_next():
    """grpc+verbs with room for one joining task: once the first has died (its channel
    failed), a second one joins in its place."""
    protocol, env = VARIANTS["verbs"]
    ps_address, first_address = _addresses()
    with tv.Server({"ps": [ps_address]}, "ps", 0, protocol, config=RdmaConfig.from_env(env),
                   spare_tasks=1) as ps:
        for index in range(2):
            address = first_address if index == 0 else _addresses()[1]
            worker = TaskProcess({"ps": [ps_address], "worker": {index: address}}, "worker", index,
                                 protocol, env)
            try:
                ps.add_task("worker", index, address)
                worker.send_pattern("g", PS, 1, 4096, index)
                assert same(ps.recv("g", f"/job:worker/task:{index}", 1, timeout=60), pattern(4096, index))
                waiting = ps.recv_async("never", f"/job:worker/task:{index}", 2)
            finally:
                worker.kill()
            with pytest.raises(tv.UnavailableError):
                waiting.result(60)  # the ps saw it die


#: more than the default executor's threads on a machine of up to 8 cores
JOINERS = 12


def test_set_ups_awaiting_their_task_hold_up_no_other_set_up():
    """Set-ups of tasks the ps has not learned yet wait for them without holding up the
    rest: twelve wait at once, and meanwhile a worker the ps knows sets its channel up and
    receives; then the ps learns the twelve and each receives its tensor."""
    protocol, env = VARIANTS["verbs"]
    env = dict(env, TENSORVERBS_POOL_BLOCK="4M")
    ps_address, worker_address = _addresses()
    taken = [int(address.rsplit(":", 1)[1]) for address in (ps_address, worker_address)]
    for _ in range(JOINERS):
        taken.append(free_port(HOST, taken))
    joined = {i: f"{HOST}:{port}" for i, port in enumerate(taken[2:])}
    cluster = {"ps": [ps_address], "worker": [worker_address]}
    with tv.Server(cluster, "ps", 0, protocol, config=RdmaConfig.from_env(env), spare_tasks=JOINERS,
                   startup_grace=120) as ps:
        joiners = [TaskProcess({"ps": [ps_address], "joiner": {i: joined[i]}}, "joiner", i, protocol, env)
                   for i in range(JOINERS)]
        worker = TaskProcess(cluster, "worker", 0, protocol, env)
        try:
            for i, joiner in enumerate(joiners):
                joiner.post("recv_pattern", "j", PS, 1, 4096, i, timeout=120)
            deadline = time.monotonic() + 60
            while ps.stats()["setups_awaiting_join"] < JOINERS:  # a condition, polled
                assert time.monotonic() < deadline, \
                    f"{ps.stats()['setups_awaiting_join']} of {JOINERS} set-ups waited for their task at once"
                time.sleep(0.01)
            ps.send("w", pattern(4096, 99), to=WORKER, step_id=1)
            assert worker.recv_pattern("w", PS, 1, 4096, 99, timeout=30)
            assert ps.stats()["setups_awaiting_join"] == JOINERS  # they waited all along
            for i, address in joined.items():
                ps.add_task("joiner", i, address)
                ps.send("j", pattern(4096, i), to=f"/job:joiner/task:{i}", step_id=1)
            assert [joiner.result() for joiner in joiners] == [True] * JOINERS
        finally:
            for task in [worker, *joiners]:
                task.stop()
