"""The same-host limit: one process copying the payload into a buffer of its own."""
from __future__ import annotations

import numpy as np

from .base import Payloads, Sink as BaseSink, pages

Source = None


def available() -> tuple[bool, str]:
    """A memcpy is always available."""
    return True, "numpy.copyto"


def link() -> dict:
    """Nothing to connect: one process."""
    return {}


class Sink(BaseSink):
    """A copy of the payload in one process: the limit a same-host transport approaches."""

    def __init__(self, link: dict) -> None:
        super().__init__()
        self.sources = Payloads()
        self.dst = np.empty(0, np.float32)
        self.rows = np.empty((0, 0), np.float32)  # the payload as rows (fetch_blocks)
        self.pages = np.empty((0, 0), np.float32)  # the paged buffer they are copied into

    def prepare(self, nbytes: int) -> None:
        if self.dst.nbytes != nbytes:
            self.dst = np.empty_like(self.sources.get(nbytes))

    def fetch_one(self, nbytes: int, step: int) -> np.ndarray:
        np.copyto(self.dst, self.sources.get(nbytes))
        return self.dst

    def fetch_blocks(self, nbytes: int, count: int, step: int) -> np.ndarray:
        """The blocks' limit: ``count`` rows of the payload copied into the pages of one
        buffer (the same permutation as the transports'), by one gathering copy."""
        payload = self.sources.get(nbytes)
        if self.rows.shape != (count, payload.size):
            self.rows = np.empty((count, payload.size), payload.dtype)
            self.rows[:] = payload
            self.pages = np.empty_like(self.rows)
        self.pages[pages(count)] = self.rows
        return self.pages
