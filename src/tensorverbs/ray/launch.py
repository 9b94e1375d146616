"""run_cluster: a tensorverbs cluster whose tasks are Ray actors spread over the nodes of
a Ray cluster."""
from __future__ import annotations

import time
from typing import Any, Callable, Mapping

import ray
from ray.exceptions import RayActorError, RayError, RayTaskError

from ..cluster import TaskName
from ..errors import (
    DeadlineExceededError, InvalidArgumentError, TensorverbsError, UnavailableError, UnknownError,
    from_code,
)
from ..server import Server
from .node import listen_address


@ray.remote
class _Task:
    """One task of the cluster: an address on its node, then its server running ``fn``."""

    def __init__(self) -> None:
        self.address = listen_address()
        self.server: Server | None = None

    def where(self) -> str:
        return self.address

    def start(self, cluster: dict, job: str, index: int, protocol: str, kwargs: dict) -> None:
        self.server = Server(cluster, job, index, protocol, bind_address=self.address, **kwargs)

    def run(self, fn: Callable[[Server], Any]) -> Any:
        assert self.server is not None, "start() first"
        return fn(self.server)


def run_cluster(fn: Callable[[Server], Any], jobs: Mapping[str, int], protocol: str = "grpc", *,
                timeout: float | None = None, start_timeout: float = 300.0,
                actor_options: Mapping[str, Any] | None = None, **server_kwargs: Any) -> dict[str, Any]:
    """Run ``fn(server)`` in every task of a cluster of ``jobs`` (``{job: task count}``)
    and return ``{task name: what fn returned}``.

    Each task is a Ray actor, spread over the Ray cluster's nodes (SPREAD scheduling); it
    picks a free port on its node, and the cluster spec is made of where the tasks landed.
    Every server stays up until every task's ``fn`` has returned (sends are passive), then
    the actors end. Needs ``ray.init()`` first.

    Args:
        protocol: "grpc" or "grpc+verbs".
        timeout: seconds every ``fn`` may take (default: no limit).
        start_timeout: seconds the actors may take to be placed and start their servers.
        actor_options: Ray actor options (``num_cpus``, ``resources``, ...) over the SPREAD default.
        server_kwargs: more arguments of :class:`tensorverbs.Server`.

    Raises:
        TensorverbsError naming the task whose ``fn`` failed (its class when ``fn`` raised
        a tensorverbs error, UnknownError otherwise, with the remote traceback as its cause);
        UnavailableError for a task whose actor died; DeadlineExceededError naming the tasks
        still running when a timeout expires. The other tasks are then ended too.
    """
    if not jobs or any(not isinstance(n, int) or n < 1 for n in jobs.values()):
        raise InvalidArgumentError(f"jobs {dict(jobs)} must give each job a task count >= 1")
    tasks = [TaskName(job, i) for job, n in jobs.items() for i in range(n)]
    options = {"scheduling_strategy": "SPREAD", **(actor_options or {})}
    task_class: Any = _Task  # an actor class (ray.remote's typing does not say so)
    actors = {task: task_class.options(**options).remote() for task in tasks}
    try:
        where = _gather({t: a.where.remote() for t, a in actors.items()}, "start", start_timeout)
        cluster = {job: [where[str(TaskName(job, i))] for i in range(n)] for job, n in jobs.items()}
        _gather({t: a.start.remote(cluster, t.job, t.task, protocol, server_kwargs)
                 for t, a in actors.items()}, "start its server", start_timeout)
        return _gather({t: a.run.remote(fn) for t, a in actors.items()}, "run", timeout)
    finally:
        for actor in actors.values():
            ray.kill(actor)


def _gather(calls: dict[TaskName, ray.ObjectRef], what: str, timeout: float | None) -> dict[str, Any]:
    """``{task name: result}`` of every task's call, raising the first failure as the error
    of its task."""
    pending = {ref: task for task, ref in calls.items()}
    deadline = None if timeout is None else time.monotonic() + timeout
    results: dict[str, Any] = {}
    while pending:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        done, _ = ray.wait(list(pending), num_returns=1, timeout=left)
        if not done:
            late = ", ".join(str(t) for t in sorted(pending.values()))
            raise DeadlineExceededError(f"{late}: did not {what} within {timeout:g} s")
        task = pending.pop(done[0])
        try:
            results[str(task)] = ray.get(done[0])
        except RayError as exc:
            raise _task_error(task, what, exc) from exc
    return results


def _task_error(task: TaskName, what: str, exc: RayError) -> TensorverbsError:
    """The error to raise for ``task``, whose call ``what`` failed with ``exc``."""
    cause = exc.cause if isinstance(exc, RayTaskError) else None
    if isinstance(cause, TensorverbsError):
        return from_code(cause.code, f"{task} failed to {what}: {cause.message}")
    if cause is not None:
        return UnknownError(f"{task} failed to {what}: {type(cause).__name__}: {cause}")
    if isinstance(exc, RayActorError):
        return UnavailableError(f"the actor of {task} died before it could {what}: {exc}")
    return UnknownError(f"{task} could not {what}: {exc}")
