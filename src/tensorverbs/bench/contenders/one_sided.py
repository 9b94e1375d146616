"""tensorverbs' one-sided access: the source holds the payload of each size in memory for
one-sided access (``Server.allocate(..., one_sided=True)``, as the README shows it),
registers it (``Server.register``) and hands its RemoteBuffer to the sink over the
benchmark's pipes;
the sink reads it with ``Server.read(buffer, timeout=...)`` into a new array, as the README
shows it. The source's code takes no part in a transfer (as NIXL's READ beside it). Its
blocks: the source registers the payloads as the rows of one buffer, and the sink reads them
all with one ``Server.read_blocks`` into the pages of a buffer of its own (as NIXL's
prepared transfer of the same blocks)."""
from __future__ import annotations

from typing import Any

import numpy as np

from .base import Payloads, Sink as BaseSink, Source as BaseSource, pages
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

    def offer_blocks(self, nbytes: int, count: int) -> Any:
        """The RemoteBuffer of ``count`` payloads as the rows of one buffer (registered
        again when the size or the count changes)."""
        payload = self.payloads.get(nbytes)
        if self.buffer is None or tuple(self.buffer.shape) != (count, *payload.shape):
            if self.buffer is not None:
                self.server.unregister(self.buffer)
            held = self.server.allocate((count, *payload.shape), payload.dtype, one_sided=True)
            held[...] = payload
            self.buffer = self.server.register(held)
        return self.buffer

    def serve(self, nbytes: int, count: int, step: int) -> None:
        """Nothing: the sink reads without the source."""

    def serve_blocks(self, nbytes: int, count: int, step: int) -> None:
        """Nothing: the sink reads without the source."""

    def close(self) -> None:
        self.server.stop()


class Sink(BaseSink):
    """The reading task."""

    def __init__(self, link: dict, protocol: str, provider: str | None = None) -> None:
        super().__init__()
        self.server = _server(link, 1, protocol)
        self.buffer: Any = None
        self._out: np.ndarray | None = None  # the paged buffer fetch_blocks reads into

    def accept(self, offer: Any) -> None:
        self.buffer = offer

    def fetch_one(self, nbytes: int, step: int) -> Any:
        return self.server.read(self.buffer, timeout=TIMEOUT)

    def fetch_blocks(self, nbytes: int, count: int, step: int) -> Any:
        """One ``read_blocks`` of the source's rows in order into the pages of one buffer
        (made once per size, by ``allocate(..., one_sided=True)``: read into without a
        registration)."""
        rows = nbytes // 4
        if self._out is None or self._out.shape != (count, rows):
            self._out = None
            self._out = self.server.allocate((count, rows), np.float32, one_sided=True)
        self.server.read_blocks(self.buffer, self._out, np.arange(count), index=pages(count), timeout=TIMEOUT)
        return self._out

    def close(self) -> None:
        self.server.stop()
