"""Condition: the lean condition of a recv's future (:class:`.future.RecvFuture`)."""
from __future__ import annotations

import _thread
import collections
from typing import Any


class Condition(_thread.RLock):  # type: ignore[misc]  # (a base type in CPython)
    """The condition of a future: a re-entrant lock (the C one, ``with`` entering and
    leaving it without running Python code) that threads wait on until notified.

    Not a :class:`threading.Condition`: its ``__enter__``/``__exit__`` are Python
    functions, and a signal handled as ``__exit__`` began (Ctrl-C in a wait for the
    future) left the lock held, so that the thread settling the future blocked on it for
    good. A future in flight is also one object for the garbage collector to track (the
    waiters' queue made by the first wait), where thousands of recvs may be in flight."""

    __slots__ = ("_waiters",)

    def __init__(self) -> None:
        self._waiters: collections.deque[Any] | None = None

    def wait(self, timeout: float | None = None) -> bool:
        """Release the lock (held by this thread), wait until notified or ``timeout``
        seconds passed, take it back; whether it was notified. Interrupted anywhere, the
        lock is this thread's again."""
        waiter = _thread.allocate_lock()
        waiter.acquire()
        if self._waiters is None:
            self._waiters = collections.deque()
        waiters = self._waiters
        waiters.append(waiter)
        notified, state = False, None
        try:
            state = self._release_save()  # type: ignore[attr-defined]
            if timeout is None:
                notified = waiter.acquire()
            elif timeout > 0:
                notified = waiter.acquire(True, timeout)
            else:
                notified = waiter.acquire(False)
            return notified
        finally:
            if state is not None:
                self._acquire_restore(state)  # type: ignore[attr-defined]
            elif not self._is_owned():  # type: ignore[attr-defined]
                self.acquire()  # (interrupted as it released it)
            if not notified:
                try:
                    waiters.remove(waiter)
                except ValueError:
                    pass

    def notify_all(self) -> None:
        """Wake every thread waiting (call with the lock held)."""
        waiters, self._waiters = self._waiters, None
        for waiter in waiters or ():
            try:
                waiter.release()
            except RuntimeError:  # (one that timed out meanwhile)
                pass
