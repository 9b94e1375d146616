"""tensorverbs itself: a :class:`tensorverbs.Server` on each side, the sink's ``recv``
pulling what the source has ``send``-ed (passively) under one step id per transfer."""
from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import numpy as np

from ...local_cluster import cluster_spec
from ...rendezvous.waits import wait
from ...verbs import RdmaConfig, availability
from .base import Payloads, Sink as BaseSink, Source as BaseSource, pages

JOB = "bench"
SOURCE, SINK = f"/job:{JOB}/replica:0/task:0", f"/job:{JOB}/replica:0/task:1"
TIMEOUT = 120.0


def available(protocol: str, provider: str | None = None) -> tuple[bool, str]:
    """Whether the tensorverbs ``protocol`` (on ``provider``) can run here, and why not."""
    if provider is None:
        return True, protocol
    return availability(provider)


def link(protocol: str, provider: str | None = None) -> dict:
    """The two-task cluster (and its environment) the peers join."""
    return {"cluster": cluster_spec({JOB: 2})}


def _server(link: dict, task: int, protocol: str, **options: Any):
    from ...server import Server

    return Server(link["cluster"], JOB, task, protocol, config=RdmaConfig.from_env(), **options)


class Source(BaseSource):
    """The sending task: sends the payload of each step (all in one call)."""

    #: the Server's options beyond the protocol
    options: dict[str, Any] = {}

    def __init__(self, link: dict, protocol: str, provider: str | None = None) -> None:
        self.server = _server(link, 0, protocol, **self.options)
        self.payloads = Payloads()
        self._blocks: np.ndarray | None = None  # the buffer serve_blocks sends the rows of

    def tensor(self, nbytes: int) -> Any:
        """What is sent for a payload of ``nbytes``."""
        return self.payloads.get(nbytes)

    def serve(self, nbytes: int, count: int, step: int) -> None:
        """The payload under each step, offered in one ``send_many``."""
        tensor = self.tensor(nbytes)
        self.server.send_many([("t", tensor, SINK, step + i) for i in range(count)])

    def serve_blocks(self, nbytes: int, count: int, step: int) -> None:
        """The payload as each row of one buffer, offered in one ``send_blocks``."""
        payload = self.tensor(nbytes)
        if self._blocks is None or self._blocks.shape != (count, *payload.shape):
            self._blocks = np.empty((count, *payload.shape), payload.dtype)
            self._blocks[:] = payload
        self.server.send_blocks("b", self._blocks, SINK, step)

    def close(self) -> None:
        self.server.stop()


class Sink(BaseSink):
    """The receiving task: receives it (onto ``device``; the host if None)."""

    options: dict[str, Any] = {}
    device: str | None = None

    def __init__(self, link: dict, protocol: str, provider: str | None = None) -> None:
        super().__init__()
        self.server = _server(link, 1, protocol, **self.options)
        self._out: np.ndarray | None = None  # the buffer fetch_blocks receives into

    def fetch_one(self, nbytes: int, step: int) -> Any:
        return self.server.recv("t", source=SOURCE, step_id=step, timeout=TIMEOUT, device=self.device)

    def start_one(self, nbytes: int, step: int) -> Future:
        """A ``recv_async``: many kept in flight at once (the in-flight rate)."""
        return self.server.recv_async("t", source=SOURCE, step_id=step, timeout=TIMEOUT,
                                      device=self.device)

    def wait_all(self, futures: list[Future]) -> None:
        """``tensorverbs.wait``: one wait of the native core for them all."""
        wait(futures, timeout=TIMEOUT)

    def fetch_many(self, nbytes: int, count: int, step: int) -> list[Any]:
        """One ``recv_many`` of them all (the batch rate)."""
        return self.server.recv_many([("t", SOURCE, step + i) for i in range(count)], timeout=TIMEOUT,
                                     device=self.device)

    def fetch_blocks(self, nbytes: int, count: int, step: int) -> Any:
        """One ``recv_blocks`` of them all into the rows of one buffer (made once per size,
        by ``allocate``: registered memory, which blocks land in without a copy, as the
        README advises for a paged buffer)."""
        rows = nbytes // 4
        if self._out is None or self._out.shape != (count, rows):
            self._out = None
            self._out = self.server.allocate((count, rows), np.float32)
        self.server.recv_blocks("b", SOURCE, self._out, step, index=pages(count), timeout=TIMEOUT)
        return self._out

    def close(self) -> None:
        self.server.stop()
