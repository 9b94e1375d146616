"""What tensorverbs' two Ray tensor transports share: their settings (class attributes
:func:`~tensorverbs.ray.register_transport` sets), the process's server for them, and the
answers Ray asks every transport for."""
from __future__ import annotations

import ray
from ray.experimental import TensorTransportManager

from .actor_server import actor_server


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
