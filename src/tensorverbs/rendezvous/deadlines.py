"""Deadlines: one thread that runs callbacks when their time comes.

A recv with a timeout registers its deadline here and cancels it when it completes. The
thread sleeps until the earliest deadline and is woken only when a new deadline is
earlier than every pending one, so in steady state (timeouts of equal length, registered
in order) registering a deadline wakes no thread at all. A callback that raises is
logged and the thread goes on; cancelled deadlines are dropped from the heap once they
outnumber the live ones, so completed recvs leave nothing behind.
"""
from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from typing import Any, Callable

log = logging.getLogger(__name__)

#: cancelled entries are swept when there are more of them than this and than live ones
_SWEEP_AT = 64


class Deadline:
    """A registered deadline; :meth:`cancel` withdraws it (a no-op once it fired)."""

    __slots__ = ("when", "seq", "fn", "args", "_owner")

    def __init__(self, when: float, seq: int, fn: Callable[..., Any] | None, args: tuple,
                 owner: "Deadlines") -> None:
        self.when, self.seq, self.fn, self.args, self._owner = when, seq, fn, args, owner

    def __lt__(self, other: "Deadline") -> bool:
        return (self.when, self.seq) < (other.when, other.seq)

    def cancel(self) -> None:
        self._owner._cancel(self)


class Deadlines:
    """Run ``fn(*args)`` at a deadline; ``fn`` must do nothing if what it guards is done."""

    def __init__(self, name: str = "tensorverbs-deadlines") -> None:
        self._heap: list[Deadline] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._live = 0
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def add(self, delay: float, fn: Callable[..., Any], *args: Any) -> Deadline:
        """Run ``fn(*args)`` in ``delay`` seconds, unless the returned deadline is cancelled."""
        deadline = Deadline(time.monotonic() + max(0.0, delay), next(self._seq), fn, args, self)
        with self._cond:
            earliest = not self._heap or deadline < self._heap[0]
            heapq.heappush(self._heap, deadline)
            self._live += 1
            if earliest:
                self._cond.notify()
        return deadline

    def _cancel(self, deadline: Deadline) -> None:
        with self._cond:
            if deadline.fn is None:
                return  # fired or cancelled already
            deadline.fn, deadline.args = None, ()
            self._live -= 1
            dead = len(self._heap) - self._live
            if dead > _SWEEP_AT and dead > self._live:
                self._heap = [d for d in self._heap if d.fn is not None]
                heapq.heapify(self._heap)

    def pending(self) -> int:
        """Deadlines registered and neither fired nor cancelled."""
        with self._cond:
            return self._live

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (not self._heap or self._heap[0].when > time.monotonic()):
                    self._cond.wait(self._heap[0].when - time.monotonic() if self._heap else None)
                if self._stopped:
                    return
                deadline = heapq.heappop(self._heap)
                fn, args = deadline.fn, deadline.args
                if fn is None:
                    continue  # cancelled
                deadline.fn, deadline.args = None, ()
                self._live -= 1
            try:
                fn(*args)
            except Exception:  # a broken callback must not stop every later deadline
                log.exception("deadline callback %r failed", fn)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._heap.clear()
            self._live = 0
            self._cond.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)
