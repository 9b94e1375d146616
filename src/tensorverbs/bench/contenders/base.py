"""What every contender shares: the tensors, the two roles and the timing of a fetch.

A transfer is receiver-initiated: the sink asks, the source answers with the tensor.
Both sides make the tensor of a size from the same seed, so nothing large crosses the
benchmark's pipes, and the sink checks the bytes it got against its own copy.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np


def payload(nbytes: int) -> np.ndarray:
    """The float32 tensor of ``nbytes`` (a multiple of 4), the same in every process."""
    return np.random.default_rng(nbytes).standard_normal(nbytes // 4, dtype=np.float32)


def same_bytes(got: Any, want: np.ndarray) -> bool:
    """Whether ``got`` holds exactly the bytes of ``want``."""
    got = np.ascontiguousarray(got).reshape(-1).view(np.uint8)
    return got.size == want.nbytes and bool(np.array_equal(got, want.view(np.uint8)))


class Payloads:
    """The payload of the size used last (one size at a time keeps memory bounded)."""

    def __init__(self) -> None:
        self._nbytes = -1
        self._array: np.ndarray | None = None

    def get(self, nbytes: int) -> np.ndarray:
        if nbytes != self._nbytes:
            self._array = None
            self._array, self._nbytes = payload(nbytes), nbytes
        return self._array


class Source:
    """The answering side. ``passive`` sources only offer the tensors (``serve`` returns
    at once and the sink may start after it); the others answer in a loop that runs while
    the sink fetches."""

    passive = True

    def serve(self, nbytes: int, count: int, step: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Release what the source holds."""


class Sink:
    """The asking side: fetches ``count`` tensors and times each one."""

    def __init__(self) -> None:
        self.expected = Payloads()

    def fetch(self, nbytes: int, count: int, step: int, verify: bool) -> dict:
        """Seconds of each transfer, and (with ``verify``) whether the first one's bytes
        are the payload's."""
        self.prepare(nbytes)
        return self.timed(lambda i: self.fetch_one(nbytes, step + i), nbytes, count, verify)

    def prepare(self, nbytes: int) -> None:
        """Get ready for transfers of ``nbytes`` (untimed)."""

    def fetch_one(self, nbytes: int, step: int) -> Any:
        raise NotImplementedError

    def timed(self, once: Callable[[int], Any], nbytes: int, count: int, verify: bool) -> dict:
        seconds, ok = [], None
        for i in range(count):
            start = time.perf_counter()
            out = once(i)
            seconds.append(time.perf_counter() - start)
            if verify and ok is None:
                ok = same_bytes(out, self.expected.get(nbytes))
            del out  # a pooled buffer returns to its pool before the next transfer
        return {"seconds": seconds, "ok": ok}

    def close(self) -> None:
        """Release what the sink holds."""
