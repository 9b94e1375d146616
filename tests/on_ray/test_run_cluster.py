"""run_cluster: a tensorverbs cluster whose tasks are Ray actors; one parameter-server
step across them, and a task whose fn fails named in the error."""
from __future__ import annotations

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="the Ray integration needs ray (pip install 'tensorverbs[ray]')")

import tensorverbs as tv  # noqa: E402
from tensorverbs.ray import run_cluster  # noqa: E402

PS = "/job:ps/task:0"
WORKERS = 2


def _weights() -> np.ndarray:
    return np.arange(1 << 18, dtype=np.float32).reshape(512, 512)


def parameter_server_step(server: tv.Server) -> bool:
    """The ps sends the weights to every worker; worker i sends back (i + 1) * weights;
    the ps checks that the gradients add up. Each task: whether what it got was right."""
    workers = [f"/job:worker/task:{i}" for i in range(WORKERS)]
    if server.task.startswith("/job:ps/"):
        weights = _weights()
        for worker in workers:
            server.send("w", weights, to=worker, step_id=1)
        grads = [server.recv("g", worker, step_id=1, timeout=120) for worker in workers]
        return bool(np.array_equal(sum(grads), weights * sum(range(1, WORKERS + 1))))
    weights = server.recv("w", PS, step_id=1, timeout=120)
    index = int(server.task.rsplit(":", 1)[1])
    server.send("g", weights * (index + 1), to=PS, step_id=1)
    return bool(np.array_equal(weights, _weights()))


def worker_1_fails(server: tv.Server) -> None:
    if server.task == "/job:worker/replica:0/task:1":
        raise ValueError("worker 1 broke")
    if server.task.startswith("/job:ps/"):
        server.recv("g", "/job:worker/task:1", step_id=1)  # no timeout: run_cluster ends it


@pytest.mark.parametrize("protocol", ["grpc", "grpc+verbs"])
def test_a_parameter_server_step(ray_cluster, protocol):
    results = run_cluster(parameter_server_step, {"ps": 1, "worker": WORKERS}, protocol,
                          timeout=300)
    assert results == {"/job:ps/replica:0/task:0": True, "/job:worker/replica:0/task:0": True,
                       "/job:worker/replica:0/task:1": True}


def test_a_failing_fn_names_its_task(ray_cluster):
    with pytest.raises(tv.UnknownError, match=r"/job:worker/replica:0/task:1 failed to run: ValueError: worker 1 broke"):
        run_cluster(worker_1_fails, {"ps": 1, "worker": WORKERS}, timeout=300)


def test_tasks_that_cannot_be_placed_are_named(ray_cluster):
    with pytest.raises(tv.DeadlineExceededError, match=r"/job:ps/replica:0/task:0.*did not start within 5 s"):
        run_cluster(parameter_server_step, {"ps": 1}, start_timeout=5,
                    actor_options={"resources": {"no such resource": 1}})
