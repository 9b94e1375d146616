"""tensorverbs' one-sided access: the source holds the payload of each size in memory for
one-sided access (``Server.allocate(..., one_sided=True)``, as the README shows it),
registers it (``Server.register``) and hands its RemoteBuffer to the sink over the
benchmark's pipes;
the sink reads it with ``Server.read(buffer, timeout=...)`` into a new array, as the README
shows it. The source's code takes no part in a transfer (as NIXL's READ beside it)."""
from __future__ import annotations

from typing import Any

from .base import Payloads, Sink as BaseSink, Source as BaseSource
from .protocols import TIMEOUT, _server, available, link

__all__ = ["Sink", "Source", "available", "link"]


class Source(BaseSource):
    """The owning task: registers the payload of each size."""

    def __init__(self, link: dict, protocol: str, provider: str | None = None) -> None:
        self.server = _server(link, 0, protocol)
        self.payloads = Payloads()
        self.buffer: Any = None

    def offer(self, nbytes: int) -> Any:
        """The payload's RemoteBuffer (registered again when the size changes)."""
        if self.buffer is None or self.buffer.nbytes != nbytes:
            if self.buffer is not None:
                self.server.unregister(self.buffer)
            payload = self.payloads.get(nbytes)
            held = self.server.allocate(payload.shape, payload.dtype, one_sided=True)
            held[...] = payload
            self.buffer = self.server.register(held)
        return self.buffer

    def serve(self, nbytes: int, count: int, step: int) -> None:
        """Nothing: the sink reads without the source."""

    def close(self) -> None:
        self.server.stop()


class Sink(BaseSink):
    """The reading task."""

    def __init__(self, link: dict, protocol: str, provider: str | None = None) -> None:
        super().__init__()
        self.server = _server(link, 1, protocol)
        self.buffer: Any = None

    def accept(self, offer: Any) -> None:
        self.buffer = offer

    def fetch_one(self, nbytes: int, step: int) -> Any:
        return self.server.read(self.buffer, timeout=TIMEOUT)

    def close(self) -> None:
        self.server.stop()
