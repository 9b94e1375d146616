"""The completion queue: a deque of completions that the context's engine fills."""
from __future__ import annotations

import collections
from typing import Iterable

from ..api import CompletionQueue
from ..model import WorkCompletion
from .engine import Engine


class SoftCQ(CompletionQueue):
    """Completions in arrival order. ``poll`` makes one non-blocking progress pass;
    ``wait`` drives the context's sockets until a completion arrives (see the package
    docstring for the progress model)."""

    def __init__(self, engine: Engine, depth: int) -> None:
        super().__init__()
        self.depth = depth
        self.engine = engine
        self._entries: collections.deque[WorkCompletion] = collections.deque()
        self._woken = False

    def deliver(self, wcs: Iterable[WorkCompletion]) -> None:
        """Add completions (from any thread) and wake whoever waits for them."""
        self._entries.extend(wcs)
        self.engine.notify()

    def _ready(self) -> bool:
        return bool(self._entries or self._synthetic or self._woken or self.closed)

    def _take(self, max_entries: int) -> list[WorkCompletion]:
        self._woken = False
        out: list[WorkCompletion] = []
        entries = self._entries
        try:
            while len(out) < max_entries:
                out.append(entries.popleft())
        except IndexError:  # drained (by this or a concurrent taker)
            pass
        return out

    def _poll(self, max_entries: int) -> list[WorkCompletion]:
        if not self._entries:
            self.engine.progress()
        return self._take(max_entries)

    def _wait(self, timeout: float | None, max_entries: int) -> list[WorkCompletion]:
        self.engine.wait_until(self._ready, timeout)
        wcs = self._take(max_entries)
        return wcs + self._drain_synthetic(max_entries - len(wcs))

    def wake(self) -> None:
        self._woken = True
        self.engine.notify()

    def _close(self) -> None:
        self.wake()
