"""A relayed tensor that comes in parts: each part is fetched from the relay's parent into
its place in one :class:`Landing` (the recv's ``out``, or an array of the library's) and
passed on as it lands (:class:`PartFetch`: the fetches of one recv, a few at a time in
order). The landing outlives a recv that ended before every part came, so the next recv
of the tensor fetches only the parts still missing."""
from __future__ import annotations

import collections
import concurrent.futures
import functools
import logging
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ..devices import HOST
from ..errors import InternalError, UnavailableError, as_error
from ..tensor import numpy_dtype
from .relay_plan import RelayDescriptor, part_ranges

if TYPE_CHECKING:
    from ..out import Out
    from .recv_call import RecvCall

log = logging.getLogger(__name__)

#: the parts a receiver fetches at a time
WINDOW = 2


@dataclass(eq=False)
class Landing:
    """Where the parts of a relayed tensor land: ``array`` (``own``: the library's, else a
    recv's ``out``), the parts' byte ranges in it, and the parts landed."""

    array: np.ndarray
    ranges: list[tuple[int, int]]
    own: bool
    landed: set[int] = field(default_factory=set)

    @classmethod
    def of(cls, descriptor: RelayDescriptor, out: "Out | None",
           allocate: Callable[[tuple[int, ...], np.dtype], np.ndarray]) -> "Landing":
        """The landing of ``descriptor``'s tensor for a recv into ``out`` (which fits it),
        else of ``allocate``'s (the protocol's: registered memory, so that neither a part's
        landing nor its passing on registers it)."""
        ranges = part_ranges(descriptor.nbytes, descriptor.parts)
        if out is not None:
            return cls(out.landing, ranges, False)
        return cls(allocate(descriptor.shape, numpy_dtype(descriptor.dtype)), ranges, True)

    def part(self, part: int) -> np.ndarray:
        """The bytes of part ``part``: a view of the landing."""
        start, end = self.ranges[part]
        return self.array.reshape(-1).view(np.uint8)[start:end]

    def complete(self) -> bool:
        """Whether every part landed."""
        return len(self.landed) == len(self.ranges)

    def missing(self) -> list[int]:
        """The parts not landed yet, in order."""
        return [part for part in range(len(self.ranges)) if part not in self.landed]

    def detach(self) -> None:
        """Keep what landed in an array of the library's: the recv whose ``out`` this is
        ended, and its caller may use ``out`` again."""
        if not self.own:
            self.array = self.array.copy() if self.landed else np.empty_like(self.array)
            self.own = True

    def result(self, call: "RecvCall") -> Any:
        """What ``call`` returns of the whole tensor: its ``out`` (filled), the landing, or
        a copy on its device."""
        return result_of(self.array, call)


def result_of(array: np.ndarray, call: "RecvCall") -> Any:
    """What ``call`` returns of ``array``, its whole tensor in host memory of its own: its
    ``out`` (filled), the array, or a copy on its device."""
    if call.out is not None:
        return call.out.fill(array, False)
    return array if call.device is HOST else call.device.from_host(array)


class PartFetch:
    """The fetches of the parts a recv's :class:`Landing` is missing, in order, ``window``
    at a time (so that the first parts land first and are passed on while the later ones
    come, rather than all of them sharing the link until the end): ``fetch(part)`` starts
    one; ``landed(part)`` is told of each part that landed and ``ended(self)`` once the last
    fetch ended. The first part that fails stops the fetches not started."""

    def __init__(self, landing: Landing, fetch: Callable[[int], concurrent.futures.Future],
                 landed: Callable[[int], None], ended: Callable[["PartFetch"], None], window: int = WINDOW) -> None:
        self.landing = landing
        self._fetch, self._landed, self._ended, self._window = fetch, landed, ended, window
        self._queue = collections.deque(landing.missing())
        self._futures: dict[int, concurrent.futures.Future] = {}
        self._errors: list[BaseException] = []
        self._running = 0
        self._cancelled = False
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the first ``window`` fetches (``ended`` at once if no part is missing)."""
        with self._lock:
            first = [self._queue.popleft() for _ in range(min(self._window, len(self._queue)))]
            self._running = len(first)
        if not first:
            self._ended(self)
        for part in first:
            self._start(part)

    def _start(self, part: int) -> None:
        try:
            fut = self._fetch(part)
        except Exception as exc:  # (TensorverbsError: the step ended, the peer is gone; or no memory)
            self._done(part, None, as_error(exc, f"fetching part {part} of a relayed tensor"))
            return
        with self._lock:
            self._futures[part] = fut
            cancelled = self._cancelled
        if cancelled and not fut.cancel() and _took(fut):  # (came as the cancel ran)
            self._count([part], fut.result())
        fut.add_done_callback(functools.partial(self._done, part))

    def _done(self, part: int, fut: concurrent.futures.Future | None, error: BaseException | None = None) -> None:
        if fut is not None:
            if fut.cancelled():  # (cancel: whoever cancelled settles the recv)
                return
            error = None if _took(fut) else fut.exception()
        with self._lock:
            if self._cancelled:  # a fetch that ended as it was cancelled: nothing more
                return
            if error is None:
                self.landing.landed.add(part)
        if error is None:
            self._pass_on(part)
        with self._lock:
            self._running -= 1
            if error is not None:
                self._errors.append(error)
                self._queue.clear()
            following = self._queue.popleft() if self._queue else None
            self._running += following is not None
            last = self._running == 0
        if following is not None:
            self._start(following)
        elif last:
            self._ended(self)

    def error(self) -> BaseException | None:
        """Why a part did not land, once every fetch ended (a parent gone first); None if
        each did."""
        gone = [error for error in self._errors if isinstance(error, UnavailableError)]
        if gone or self._errors:
            return (gone or self._errors)[0]
        missing = self.landing.missing()
        return InternalError(f"parts {missing} of a relayed tensor did not land") if missing else None

    def cancel(self) -> None:
        """Stop before returning: cancel the fetches running, start no more, and keep what
        landed in an array of the library's (a recv's ``out`` is its caller's again). A part
        whose fetch ended before its cancel counts as landed and is passed on (from there),
        though its done-callback did not run yet; ``ended`` is told if that was the last."""
        with self._lock:
            self._cancelled = True
            self._queue.clear()
            futures = list(self._futures.items())
        self._count([part for part, fut in futures if not fut.cancel() and _took(fut)])

    def _count(self, came: list[int], data: np.ndarray | None = None) -> None:
        """Count the parts ``came`` (whose fetches ended as they were cancelled) landed, in
        the landing of the library's (copied from ``data`` if the one part came there, into
        the cancelled recv's ``out``); pass them on, and tell ``ended`` if they were the last."""
        with self._lock:
            came = [part for part in came if part not in self.landing.landed]
            self.landing.landed.update(came)
            self.landing.detach()
            if data is not None and came and not np.shares_memory(self.landing.part(came[0]), data):
                self.landing.part(came[0])[...] = data
            complete = bool(came) and self.landing.complete()
        for part in came:
            self._pass_on(part)
        if complete:  # (no done-callback of a fetch tells it now)
            self._ended(self)

    def _pass_on(self, part: int) -> None:
        try:
            self._landed(part)
        except Exception:  # (passing it on failed: its children fetch from the sender)
            log.exception("passing part %d of a relayed tensor on failed", part)


def _took(fut: concurrent.futures.Future) -> bool:
    """Whether ``fut``, a part's fetch that ended, got its part, which is then taken: read,
    so that the future, dropped, does not give the part back to the next recv of it."""
    if fut.exception() is not None:
        return False
    fut.result()
    return True
