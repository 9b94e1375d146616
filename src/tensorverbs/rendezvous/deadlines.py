"""Deadlines: one thread that runs callbacks when their time comes.

A recv with a timeout registers its deadline here. The thread sleeps until the earliest
deadline and is woken only when a new deadline is earlier than every pending one, so in
steady state (timeouts of equal length, registered in order) registering a deadline
wakes no thread at all.
"""
from __future__ import annotations

import heapq
import itertools
import threading
import time
from typing import Any, Callable


class Deadlines:
    """Run ``fn(*args)`` at a deadline; ``fn`` must do nothing if what it guards is done."""

    def __init__(self, name: str = "tensorverbs-deadlines") -> None:
        self._heap: list[tuple[float, int, Callable[..., Any], tuple]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def add(self, delay: float, fn: Callable[..., Any], *args: Any) -> None:
        when = time.monotonic() + max(0.0, delay)
        with self._cond:
            earliest = not self._heap or when < self._heap[0][0]
            heapq.heappush(self._heap, (when, next(self._seq), fn, args))
            if earliest:
                self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (not self._heap or self._heap[0][0] > time.monotonic()):
                    self._cond.wait(self._heap[0][0] - time.monotonic() if self._heap else None)
                if self._stopped:
                    return
                _, _, fn, args = heapq.heappop(self._heap)
            fn(*args)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._cond.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)
