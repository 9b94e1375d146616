"""Progress of one context: sockets in, completions out, driven by the callers of
``CompletionQueue.poll``/``wait`` (manual progress).

One thread at a time drives: it takes the drive lock, waits in ``epoll`` on the
context's sockets and a wake eventfd, and handles what is ready (reads payloads into
place, answers requests, pushes queued bytes, delivers completions). Other waiting
threads sleep on a condition variable that deliveries and the hand-over of the drive
lock notify (only when someone sleeps there: the common single-waiter case takes no
condition at all), so one of them takes over when the driver returns. Work that must
run without the caller's locks held (error transitions, closing sockets) is deferred to
the driver, which runs it between passes; work that should wait for a chance to ride on
other traffic (acknowledgements) runs just before the driver blocks.
"""
from __future__ import annotations

import collections
import heapq
import itertools
import logging
import os
import select
import threading
import time
from typing import Callable, Protocol

log = logging.getLogger(__name__)

_IN = select.EPOLLIN | select.EPOLLRDHUP
_OUT = select.EPOLLOUT
_READABLE = _IN | select.EPOLLHUP | select.EPOLLERR


class Watcher(Protocol):
    """What the engine calls when a watched socket is ready."""

    def on_readable(self) -> None: ...

    def on_writable(self) -> None: ...


class Engine:
    """The drive lock, the epoll set and the deferred work of one context."""

    def __init__(self) -> None:
        self._epoll = select.epoll()
        self._wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._epoll.register(self._wake_fd, select.EPOLLIN)
        self._watchers: dict[int, Watcher] = {}
        self._drive = threading.Lock()
        self._driver: int | None = None
        self._cond = threading.Condition(threading.Lock())
        self._sleepers = 0  # threads waiting on _cond for the driver
        self._deferred: collections.deque[Callable[[], None]] = collections.deque()
        self._idle: collections.deque[Callable[[], None]] = collections.deque()
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._timer_seq = itertools.count()
        self.closed = False

    # -- the socket set ------------------------------------------------------------------
    def add(self, fd: int, watcher: Watcher, writable: bool) -> None:
        self._watchers[fd] = watcher
        self._epoll.register(fd, _IN | (_OUT if writable else 0))

    def want_write(self, fd: int, on: bool) -> None:
        """Watch ``fd`` for writability too (while bytes wait in its send queue)."""
        try:
            self._epoll.modify(fd, _IN | (_OUT if on else 0))
        except (OSError, ValueError):  # removed meanwhile
            pass

    def remove(self, fd: int, then: Callable[[], None]) -> None:
        """Stop watching ``fd``; ``then`` (closing it) runs when no pass can still see it."""
        self._watchers.pop(fd, None)
        try:
            self._epoll.unregister(fd)
        except (OSError, ValueError):
            pass
        self.defer(then)

    # -- deferred work and timers --------------------------------------------------------
    def defer(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` soon, from the driving thread, with no other lock held."""
        self._deferred.append(fn)
        self._wake()

    def when_idle(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` before the driver next blocks (or at the next poll)."""
        self._idle.append(fn)
        self._wake()

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        with self._cond:
            heapq.heappush(self._timers, (time.monotonic() + delay, next(self._timer_seq), fn))
        self._wake()

    def _run_deferred(self, idle: bool = False) -> None:
        """Run the deferred work, and with ``idle`` also the work waiting for idleness."""
        if not (self._deferred or self._timers or (idle and self._idle)):
            return
        self._fire_timers()
        queues = (self._deferred, self._idle) if idle else (self._deferred,)
        for work in queues:
            while work:
                fn = work.popleft()
                try:
                    fn()
                except Exception:  # a bug in one action must not stop the driver
                    log.exception("soft verbs: deferred action failed")

    def _fire_timers(self) -> None:
        if self._timers:
            now = time.monotonic()
            with self._cond:
                while self._timers and self._timers[0][0] <= now:
                    self._deferred.append(heapq.heappop(self._timers)[2])

    # -- driving -------------------------------------------------------------------------
    def notify(self) -> None:
        """Completions were delivered: wake the threads that wait for them."""
        if self._sleepers:
            with self._cond:
                self._cond.notify_all()
        self._wake()

    def _wake(self) -> None:
        if self._driver is not None and self._driver != threading.get_ident():
            try:
                os.eventfd_write(self._wake_fd, 1)
            except OSError:  # closed
                pass

    def progress(self) -> None:
        """One pass without blocking, unless another thread is driving."""
        if self._drive.acquire(blocking=False):
            try:
                self._driver = threading.get_ident()
                self._run_deferred(idle=True)
                self._pass(0)
                self._run_deferred()
            finally:
                self._release()

    def wait_until(self, ready: Callable[[], bool], timeout: float | None) -> None:
        """Drive (or wait for the driver) until ``ready()`` or ``timeout`` seconds pass."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not ready() and not self.closed:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return
            if self._drive.acquire(blocking=False):
                try:
                    self._driver = threading.get_ident()
                    self._drive_until(ready, deadline)
                finally:
                    self._release()
                return
            with self._cond:
                self._sleepers += 1
                try:
                    if not ready() and self._drive.locked():
                        self._cond.wait(remaining)
                finally:
                    self._sleepers -= 1

    def _drive_until(self, ready: Callable[[], bool], deadline: float | None) -> None:
        while True:
            if ready() or self.closed:
                return
            self._run_deferred(idle=True)
            if ready():
                return
            now = time.monotonic()
            timeout = -1.0 if deadline is None else deadline - now
            if deadline is not None and timeout <= 0:
                return
            if self._timers:
                until_timer = max(self._timers[0][0] - now, 0.0)
                timeout = until_timer if timeout < 0 else min(timeout, until_timer)
            self._pass(timeout)

    def _release(self) -> None:
        self._driver = None
        self._drive.release()
        if self._sleepers:
            with self._cond:
                self._cond.notify_all()

    def _pass(self, timeout: float) -> None:
        try:
            events = self._epoll.poll(timeout)
        except (OSError, ValueError):  # closed under us
            return
        for fd, mask in events:
            if fd == self._wake_fd:
                try:
                    os.eventfd_read(fd)
                except OSError:
                    pass
                continue
            watcher = self._watchers.get(fd)
            if watcher is None:
                continue
            if mask & _READABLE:
                watcher.on_readable()
            if mask & _OUT and fd in self._watchers:
                watcher.on_writable()

    def close(self) -> None:
        """Stop: run what is deferred (closing sockets) and free the epoll set."""
        self.closed = True
        with self._cond:
            self._cond.notify_all()
        self._wake()
        with self._drive:
            self._run_deferred()
            self._epoll.close()
            os.close(self._wake_fd)
