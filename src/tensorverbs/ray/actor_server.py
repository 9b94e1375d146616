"""The tensorverbs Server of a Ray actor, one per transport name and process, started on
first use."""
from __future__ import annotations

import secrets
import threading

import ray

from ..cluster import parse_task
from ..ports import host_port
from ..server import Server


#: the driver's job name (a process of its own, so one per process)
_DRIVER_JOB = f"driver-{secrets.token_hex(8)}"


def own_task() -> str:
    """The task name of this process's servers: task 0 of job ``actor-<actor id>`` in an
    actor, of job ``driver-<random>`` in the driver (which one-sided transports serve)."""
    actor = ray.get_runtime_context().get_actor_id()
    return f"/job:{f'actor-{actor}' if actor else _DRIVER_JOB}/replica:0/task:0"


#: seconds a recv waits for a source actor's server to answer: that server listened before
#: its address reached anyone (it is in the transfer's metadata), so one that does not
#: answer is gone; a restarted actor's comes back under the address its new metadata tells
SOURCE_GRACE = 10.0


class ActorServer:
    """This actor's Server, started on first use: the task :func:`own_task`, listening on
    a port of its node the server picks, knowing only itself at first; the actors it
    exchanges tensors with join its cluster as transfers name them (``Server.add_task``).

    Args:
        protocol: "grpc" or "grpc+verbs".
        spare_tasks: how many other actors it may exchange tensors with at once ("grpc+verbs").
        token: the job token (None: the server's default, from the environment).
    """

    def __init__(self, protocol: str, spare_tasks: int, token: str | None = None) -> None:
        self.protocol, self.spare_tasks, self._token = protocol, spare_tasks, token
        self._server: Server | None = None
        self._lock = threading.Lock()

    def get(self) -> Server:
        """The server, started now if it is not running yet."""
        with self._lock:
            if self._server is None:
                task = parse_task(own_task())
                address = host_port(ray.util.get_node_ip_address(), 0)  # the server tells its port
                self._server = Server({task.job: [address]}, task.job, task.task, self.protocol,
                                      spare_tasks=self.spare_tasks, startup_grace=SOURCE_GRACE,
                                      token=self._token)
            return self._server

    def learn(self, task: str, address: str) -> Server:
        """The server, having learned ``task`` at ``address`` (where a task Ray restarted
        moved)."""
        server = self.get()
        name = parse_task(task)
        server.add_task(name.job, name.task, address, replace=True)
        return server

    def endpoint(self) -> tuple[str, str]:
        """(task name, ``host:port``) of the server, started now if need be."""
        server = self.get()
        return server.task, server.cluster.address(server.task)


_servers: dict[str, ActorServer] = {}
_servers_lock = threading.Lock()


def actor_server(name: str, protocol: str, spare_tasks: int, token: str | None = None) -> ActorServer:
    """This process's server of the transport called ``name`` (made with these settings
    the first time it is asked for)."""
    with _servers_lock:
        return _servers.setdefault(name, ActorServer(protocol, spare_tasks, token))
