"""What tensorverbs' two Ray tensor transports share: their settings (class attributes
:func:`~tensorverbs.ray.register_transport` sets), the process's server for them, and the
answers Ray asks every transport for."""
from __future__ import annotations

import ray
from ray.experimental import TensorTransportManager

from .actor_server import actor_server


def _make_rdt_manager() -> None:
    """Make this Ray worker's RDT manager now, if it is an actor's worker. Ray (2.60) makes
    it on first use without a lock, and a fresh actor's first transfer uses it from two
    threads at once (the transfer's recv, the task that takes the object): two managers
    came of it now and then, the recv storing the tensors (or its error) in one, the task
    waiting in the other until Ray's 60 s passed. Ray imports this module in an actor when
    it registers the transport there, before the actor's first transfer."""
    try:
        worker = ray._private.worker.global_worker
        if worker.connected and worker.mode == ray.WORKER_MODE:
            worker.rdt_manager  # noqa: B018 (made by the property)
    except AttributeError:  # a Ray without them: nothing to make early
        pass


_make_rdt_manager()


class TransportBase(TensorTransportManager):
    """A tensorverbs Ray transport: ``name``, ``protocol``, ``spare_tasks``, ``timeout`` and
    ``token`` (None: the actor's TENSORVERBS_TOKEN or TENSORVERBS_TOKEN_FILE)."""

    name = "TENSORVERBS"
    protocol = "grpc+verbs"
    spare_tasks = 64
    timeout = 60.0
    token: str | None = None

    def __init__(self) -> None:
        self.server = actor_server(self.name, self.protocol, self.spare_tasks, self.token)

    def tensor_transport_backend(self) -> str:
        return self.name

    @staticmethod
    def can_abort_transport() -> bool:
        return True

    def actor_has_tensor_transport(self, actor: "ray.actor.ActorHandle") -> bool:
        return True  # every process can start a server; asking would block the caller
