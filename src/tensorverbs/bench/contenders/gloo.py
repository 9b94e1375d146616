"""torch.distributed with the gloo backend: the sink sends a one-element request and
``recv``-s the tensor into a buffer of its own; the source answers each request with
``send``."""
from __future__ import annotations

from typing import Any

from .base import Payloads, Sink as BaseSink, Source as BaseSource
from . import torch_common

START_TOGETHER = True  # init_process_group waits for both sides
link = torch_common.link
SOURCE, SINK = 0, 1


def available() -> tuple[bool, str]:
    """Whether torch.distributed with gloo can run here, and why not."""
    ok, reason = torch_common.available("gloo")
    if ok:
        import torch.distributed as dist

        if not dist.is_gloo_available():
            return False, reason + " without gloo"
    return ok, (reason + ", gloo send/recv") if ok else reason


def _init(rank: int, link: dict) -> None:
    import torch.distributed as dist

    torch_common.quiet()

    dist.init_process_group("gloo", init_method=link["init_method"], rank=rank, world_size=2)


def _shutdown() -> None:
    import torch.distributed as dist

    dist.destroy_process_group()


class Source(BaseSource):
    """The sending peer: gloo send."""

    passive = False

    def __init__(self, link: dict) -> None:
        import torch

        _init(SOURCE, link)
        self.payloads = Payloads()
        self.request = torch.zeros(1, dtype=torch.int64)

    def serve(self, nbytes: int, count: int, step: int) -> None:
        import torch
        import torch.distributed as dist

        tensor = torch.from_numpy(self.payloads.get(nbytes))
        for _ in range(count):
            dist.recv(self.request, src=SINK)
            dist.send(tensor, dst=SINK)

    def close(self) -> None:
        _shutdown()


class Sink(BaseSink):
    """The receiving peer: gloo recv into a preallocated tensor."""

    def __init__(self, link: dict) -> None:
        import torch

        super().__init__()
        _init(SINK, link)
        self.request = torch.zeros(1, dtype=torch.int64)
        self.buffer = torch.empty(0)

    def prepare(self, nbytes: int) -> None:
        import torch

        if self.buffer.numel() * 4 != nbytes:
            self.buffer = torch.ones(nbytes // 4, dtype=torch.float32)

    def fetch_one(self, nbytes: int, step: int) -> Any:
        import torch.distributed as dist

        self.request[0] = nbytes
        dist.send(self.request, dst=SOURCE)
        dist.recv(self.buffer, src=SOURCE)
        return self.buffer.numpy()

    def close(self) -> None:
        _shutdown()
