"""The tensorverbs Server of a Ray actor, started on first use."""
from __future__ import annotations

import threading

import ray

from ..cluster import parse_task
from ..server import Server
from .node import listen_address


def task_of(actor_id: str) -> str:
    """The task name of the server of the actor whose id (hex) is ``actor_id``."""
    return f"/job:actor-{actor_id}/replica:0/task:0"


class ActorServer:
    """This actor's Server, started on first use: the task :func:`task_of` the actor,
    listening on a free port of its node, knowing only itself at first; the actors it
    exchanges tensors with join its cluster as transfers name them (``Server.add_task``).

    Args:
        protocol: "grpc" or "grpc+verbs".
        spare_tasks: how many other actors it may exchange tensors with ("grpc+verbs").
    """

    def __init__(self, protocol: str, spare_tasks: int) -> None:
        self.protocol, self.spare_tasks = protocol, spare_tasks
        self._server: Server | None = None
        self._lock = threading.Lock()

    def get(self) -> Server:
        """The server, started now if it is not running yet."""
        with self._lock:
            if self._server is None:
                task = parse_task(task_of(ray.get_runtime_context().get_actor_id()))
                self._server = Server({task.job: [listen_address()]}, task.job, task.task,
                                      self.protocol, spare_tasks=self.spare_tasks)
            return self._server

    def endpoint(self) -> tuple[str, str]:
        """(task name, ``host:port``) of the server, started now if need be."""
        server = self.get()
        return server.task, server.cluster.address(server.task)
