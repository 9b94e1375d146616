"""Completion queues over pyverbs, with a completion channel to block on.

``wait`` arms the CQ (``ibv_req_notify_cq``), polls once more to close the race with a
completion that arrived before the arming, then sleeps in ``select`` on the channel's
file descriptor and a wake-up pipe. pyverbs does not expose the channel's descriptor:
it is found as the one "[infinibandevent]" descriptor that creating the channel added
to ``/proc/self/fd``, and made non-blocking so a racing reader never blocks in
``ibv_get_cq_event``. Where that fails (no /proc), waiting falls back to polling with
sleeps growing from 0.2 ms to 10 ms, and says so in the log once.
"""
from __future__ import annotations

import fcntl
import logging
import os
import select
import threading
import time
from typing import TYPE_CHECKING

from ...errors import InvalidArgumentError
from ..api import CompletionQueue
from ..model import WorkCompletion
from . import _pyverbs
from .discovery import FD_LOCK

if TYPE_CHECKING:
    from .device import IbverbsContext

log = logging.getLogger(__name__)
_warned_no_fd = False


def _event_fds() -> set[int]:
    out = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            if "infinibandevent" in os.readlink(f"/proc/self/fd/{name}"):
                out.add(int(name))
        except OSError:  # closed meanwhile (the listing's own descriptor)
            pass
    return out


def _open_channel(ctx):
    """A pyverbs CompChannel and its (non-blocking) file descriptor, or None if unknown."""
    pv = _pyverbs.load()
    with FD_LOCK:
        try:
            before = _event_fds()
        except OSError:
            before = None
        with _pyverbs.translated("creating a completion channel"):
            channel = pv.cq.CompChannel(ctx)
        fd = None
        if before is not None:
            added = _event_fds() - before
            fd = added.pop() if len(added) == 1 else None
    if fd is not None:
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
    return channel, fd


class IbverbsCQ(CompletionQueue):
    """``ibv_cq`` with a completion channel; ``wait`` blocks without spinning."""

    def __init__(self, context: "IbverbsContext", depth: int) -> None:
        super().__init__()
        pv = _pyverbs.load()
        if not 1 <= depth <= context.max_cqe:
            raise InvalidArgumentError(
                f"completion queue depth {depth} is outside [1, {context.max_cqe}] "
                f"(max_cqe of {context.device.name})")
        self.context = context
        self.depth = depth
        self._channel, self._fd = _open_channel(context._ctx)
        try:
            with _pyverbs.translated(f"creating a completion queue of {depth} entries"):
                self._cq = pv.cq.CQ(context._ctx, depth, None, self._channel, 0)
        except BaseException:
            self._channel.close()
            raise
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._lock = threading.Lock()
        self._waiting = threading.Condition()
        self._waiters = 0
        if self._fd is None:
            global _warned_no_fd
            if not _warned_no_fd:
                _warned_no_fd = True
                log.warning("cannot find the completion channel's file descriptor (no "
                            "/proc/self/fd?): CompletionQueue.wait polls with short sleeps")

    # -- polling -------------------------------------------------------------------------
    # Every pyverbs call on the CQ holds _lock, and _close destroys the CQ under it: a
    # call after (or during) close must never reach a freed ibv_cq.
    def _poll(self, max_entries: int) -> list[WorkCompletion]:
        with self._lock:
            if self.closed:
                return []
            with _pyverbs.translated("polling a completion queue"):
                count, raw = self._cq.poll(max_entries)
        out = []
        for wc in raw[:count]:
            qp = self._qps.get(wc.qp_num)
            out.append(qp._completion(wc, self) if qp is not None else _orphan(wc))
        for wc in out:  # an error completion means the queue pair is in the error state
            if not wc.ok:
                qp = self._qps.get(wc.qp_num)
                if qp is not None:
                    qp._hardware_error(wc)
        return out

    def _arm(self) -> None:
        with self._lock:
            if not self.closed and self._fd is not None:
                with _pyverbs.translated("arming a completion queue"):
                    self._cq.req_notify()

    def _wait(self, timeout: float | None, max_entries: int) -> list[WorkCompletion]:
        with self._waiting:  # counted while it may touch the descriptors; _close waits for it
            if self.closed:
                return []
            self._waiters += 1
        try:
            return self._wait_counted(timeout, max_entries)
        finally:
            with self._waiting:
                self._waiters -= 1
                self._waiting.notify_all()

    def _wait_counted(self, timeout: float | None, max_entries: int) -> list[WorkCompletion]:
        deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
        nap = 0.0002
        while not self.closed:
            self._arm()
            wcs = self._poll(max_entries)
            if wcs:
                return wcs
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return []
            if self._fd is None:
                remaining = nap if remaining is None else min(nap, remaining)
                nap = min(nap * 2, 0.01)
            watch = [self._wake_r] + ([self._fd] if self._fd is not None else [])
            ready, _, _ = select.select(watch, [], [], remaining)
            if self._wake_r in ready:
                self._drain_wake()
                return self._drain_synthetic(max_entries) + self._poll(max_entries)
            if self._fd is not None and self._fd in ready:
                self._consume_event()
        return []

    def _consume_event(self) -> None:
        pv = _pyverbs.load()
        with self._lock:
            if self.closed:
                return
            try:
                self._channel.get_cq_event(self._cq)
            except pv.pyverbs_error.PyverbsError:
                return  # another thread took it (EAGAIN on the non-blocking descriptor)
            self._cq.ack_events(1)

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    def wake(self) -> None:
        if self._wake_w < 0:
            return
        try:
            os.write(self._wake_w, b"!")
        except (BlockingIOError, OSError):  # already pending, or closed
            pass

    def _close(self) -> None:
        for qp in list(self._qps.values()):  # pyverbs would destroy them underneath us
            qp.close()
        deadline = time.monotonic() + 5.0
        with self._waiting:  # the descriptors stay open until no thread waits on them
            while self._waiters and time.monotonic() < deadline:
                self.wake()  # each waiter drains the pipe: wake until all have left
                self._waiting.wait(timeout=0.05)
        with self._lock, _pyverbs.translated("destroying a completion queue"):
            self._cq.close()
            self._channel.close()
        if self._waiters == 0:
            for fd in (self._wake_r, self._wake_w):
                os.close(fd)
            self._wake_r = self._wake_w = -1


def _orphan(wc) -> WorkCompletion:
    """A completion of a queue pair closed meanwhile."""
    from .qp import translate_orphan
    return translate_orphan(wc)
