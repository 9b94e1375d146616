"""The task's grpc.health.v1 service, with its watches capped: a Watch stream lasts as
long as its caller keeps it, and the service is open (probes carry no token), so a caller
could otherwise hold any number. A task's peers hold one each (the liveness of their
verbs channels); a watch past :data:`WATCHES_PER_CONNECTION` on one connection, or past
:data:`WATCHES` in all, is refused with RESOURCE_EXHAUSTED.
"""
from __future__ import annotations

import collections

import grpc
from grpc_health.v1 import _async as health_async
from grpc_health.v1 import health_pb2

#: the most health watches one connection may hold at once
WATCHES_PER_CONNECTION = 64
#: the most health watches the task serves at once
WATCHES = 4096


class HealthServicer(health_async.HealthServicer):
    """gRPC's asyncio health service, serving at most :data:`WATCHES_PER_CONNECTION`
    watches per connection and :data:`WATCHES` in all."""

    def __init__(self) -> None:
        super().__init__()
        self._watching: collections.Counter[str] = collections.Counter()  # connection -> watches

    async def Watch(self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext) -> None:
        peer = context.peer()
        if self._watching[peer] >= WATCHES_PER_CONNECTION:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"at most {WATCHES_PER_CONNECTION} health watches on one connection "
                                f"({peer} holds them)")
        if self._watching.total() >= WATCHES:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"at most {WATCHES} health watches at once (all are held)")
        self._watching[peer] += 1
        try:
            await super().Watch(request, context)
        finally:
            self._watching[peer] -= 1
            if not self._watching[peer]:
                del self._watching[peer]
