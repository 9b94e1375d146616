"""tensorverbs passing device tensors by handle between two tasks of one host (device IPC:
README, "GPUs on one host"): CUDA tensors through CUDA IPC where torch sees a GPU, else
the ``cpu:proxy`` stand-in, which runs the same protocol with a shared-memory file per
tensor. The sink receives each tensor onto the same device; the source's copy is freed
when the sink releases it."""
from __future__ import annotations

import functools
from typing import Any

from ...devices import STAND_IN, Device, get_device
from . import protocols
from .base import Sink as BaseSink, same_bytes

link = protocols.link


@functools.lru_cache(maxsize=None)
def device() -> Device:
    """The device whose tensors go by handle here: cuda:0 where torch sees a GPU, else the
    stand-in."""
    try:
        import torch
    except ImportError:
        return STAND_IN
    return get_device("cuda:0") if torch.cuda.is_available() else STAND_IN


def available(protocol: str, provider: str | None = None) -> tuple[bool, str]:
    """Whether it can run here (as the protocol can), and on which device."""
    ok, about = protocols.available(protocol, provider)
    return ok, (f"{about}; {device().name} tensors passed by handle" if ok else about)


class Source(protocols.Source):
    """Sends the payload as a tensor on :func:`device` (copied there once per size)."""

    options = {"device_ipc": True}
    _on_device: tuple[int, Any] = (-1, None)

    def tensor(self, nbytes: int) -> Any:
        if self._on_device[0] != nbytes:
            self._on_device = (-1, None)  # one size on the device at a time
            self._on_device = (nbytes, device().from_host(self.payloads.get(nbytes)))
        return self._on_device[1]


class Sink(protocols.Sink):
    """Receives each tensor onto :func:`device`; a transfer verified went by handle."""

    options = {"device_ipc": True}
    fetch_blocks = BaseSink.fetch_blocks  # blocks land in host memory: not by handle

    def __init__(self, link: dict, protocol: str, provider: str | None = None) -> None:
        super().__init__(link, protocol, provider)
        # tell the host now that it sees the device (as a first recv onto it would), so
        # that the source's first sends go by handle too
        self.server._rt.shared.note(device())

    @property
    def device(self) -> str:  # type: ignore[override]
        return device().name

    def same(self, got: Any, nbytes: int) -> bool:
        by_handle = self.server.stats()["ipc_received"] > 0
        return by_handle and same_bytes(device().to_host(got), self.expected.get(nbytes))
