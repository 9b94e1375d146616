"""wait and as_completed over many recv futures: those of :mod:`concurrent.futures`, with
one wait of the native core for the recvs whose answers it keeps until their futures are
looked at (most recv_async of grpc+verbs): the waiting thread releases the GIL once for
as many answers as it waits for, and no thread runs Python for an answer as it comes.
Any other future (of another protocol, a torch result, a device copy) is waited for as
concurrent.futures does."""
from __future__ import annotations

import concurrent.futures
import threading
import time
from concurrent.futures import ALL_COMPLETED, FIRST_COMPLETED, FIRST_EXCEPTION
from typing import Any, Iterable, Iterator, NamedTuple, Sequence

from .. import _core
from ..errors import DeadlineExceededError, InvalidArgumentError
from .completion import wait_in_slices
from .future import _SIGNAL_SLICE, _THREAD_SLICE, RecvFuture

_WHEN = (ALL_COMPLETED, FIRST_COMPLETED, FIRST_EXCEPTION)
#: a wait for many answers settles the futures of this many while the others come
_BATCH = 256


class DoneAndNotDone(NamedTuple):
    done: set[concurrent.futures.Future[Any]]
    not_done: set[concurrent.futures.Future[Any]]


def wait(futures: Iterable[concurrent.futures.Future[Any]], timeout: float | None = None,
         return_when: str = ALL_COMPLETED) -> DoneAndNotDone:
    """:func:`concurrent.futures.wait` for recv futures (any futures): (done, not_done)
    once every future is done (``return_when`` ALL_COMPLETED), any one
    (FIRST_COMPLETED), any one raised (FIRST_EXCEPTION), or ``timeout`` seconds passed.
    A bad ``return_when`` raises InvalidArgumentError."""
    if return_when not in _WHEN:
        raise InvalidArgumentError(f"return_when must be one of {', '.join(_WHEN)}, not {return_when!r}")
    fs = set(futures)
    deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
    pending = [f for f in fs if not f.done()]  # (done() takes an answer that came)
    native = _native(pending) if pending and not _returns_now(fs, pending, return_when) else None
    came = True
    if native is not None:
        with _Arrivals(native) as arrivals:
            came = arrivals.wait_for(len(pending) if return_when != FIRST_COMPLETED else 1,
                                     return_when == FIRST_EXCEPTION, _left(deadline))
    done = {f for f in fs if f.done()}  # (takes the answers that came, here)
    not_done = fs - done
    if not came or not not_done or _returns_now(fs, list(not_done), return_when):
        return DoneAndNotDone(done, not_done)  # (no waiter added: parked answers stay parked)
    more, not_done = _futures_wait(not_done, _left(deadline), return_when)
    return DoneAndNotDone(done | more, not_done)


def as_completed(futures: Iterable[concurrent.futures.Future[Any]],
                 timeout: float | None = None) -> Iterator[concurrent.futures.Future[Any]]:
    """:func:`concurrent.futures.as_completed` for recv futures (any futures): each future
    as it is done; DeadlineExceededError (a TensorverbsError, not a TimeoutError) if
    ``timeout`` seconds pass (from this call) before every one is."""
    fs = list(dict.fromkeys(futures))
    deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
    pending = []
    for f in fs:
        if f.done():
            yield f
        else:
            pending.append(f)
    native = _native(pending)
    if native is None:
        waiting = set(pending)
        while waiting:
            done, waiting = _futures_wait(waiting, _left(deadline), FIRST_COMPLETED)
            if not done:
                raise _late(len(fs), timeout)
            yield from done
        return
    with _Arrivals(native) as arrivals:
        left = len(pending)
        while left:
            came = arrivals.next(_left(deadline))
            if not came:
                raise _late(len(fs), timeout)
            for f in came:
                if not f.done():  # settled by another thread as it came: a moment
                    concurrent.futures.wait([f], _left(deadline))
                    if not f.done():
                        raise _late(len(fs), timeout)
                left -= 1
                yield f


def _futures_wait(fs: set[concurrent.futures.Future[Any]], timeout: float | None,
                  return_when: str) -> tuple[set[concurrent.futures.Future[Any]], set[concurrent.futures.Future[Any]]]:
    """:func:`concurrent.futures.wait`; on the main thread in slices, so that a signal's
    handler runs while it waits (also for a signal that another thread took, which wakes
    no wait of this one). Each slice adds a waiter to every future: a cost that grows with
    their number, where the native wait has none."""
    if threading.current_thread() is not threading.main_thread():
        return concurrent.futures.wait(fs, timeout, return_when)
    done: set[concurrent.futures.Future[Any]] = set()
    not_done = fs

    def some(seconds: float) -> bool:
        nonlocal not_done
        more, not_done = concurrent.futures.wait(not_done, seconds, return_when)
        done.update(more)
        return not not_done or (return_when == FIRST_COMPLETED and bool(done)) or (
            return_when == FIRST_EXCEPTION and any(_raised(f) for f in more))

    wait_in_slices(some, timeout, _SIGNAL_SLICE)
    return done, not_done


class _Native(NamedTuple):
    futures: list[RecvFuture]
    handles: list[Any]


def _native(futures: Sequence[concurrent.futures.Future[Any]]) -> _Native | None:
    """The futures and their native recvs if every one of ``futures`` is a recv whose
    answer the native core keeps until looked at; None otherwise."""
    handles = []
    for f in futures:
        handle = f.parked_in() if type(f) is RecvFuture else None
        if handle is None:
            return None
        handles.append(handle)
    return _Native(list(futures), handles)  # type: ignore[arg-type]


class _Arrivals:
    """A native wait for the answers of many recvs (a context: the core stops telling it
    when it ends)."""

    def __init__(self, native: _Native) -> None:
        self._futures = native.futures
        self._group = _core.RecvGroup(native.handles)
        self._slice = _SIGNAL_SLICE if threading.current_thread() is threading.main_thread() else _THREAD_SLICE

    def __enter__(self) -> "_Arrivals":
        return self

    def __exit__(self, *exc: object) -> None:
        self._group.close()

    def wait_for(self, count: int, until_error: bool, timeout: float | None) -> bool:
        """Wait until ``count`` answers came (one that is an error, with ``until_error``)
        or ``timeout`` seconds passed; False on timeout. The futures are settled with the
        answers that came while the others come, in batches (each a wait with the GIL
        released)."""
        came = 0

        def some(seconds: float) -> bool:
            nonlocal came
            indices = self._group.wait(min(count - came, _BATCH), seconds)
            came += len(indices)
            for i in indices:
                self._futures[i].done()  # (settles it here, with the answer that came)
            if until_error and any(_raised(self._futures[i]) for i in indices):
                return True
            return came >= count

        return wait_in_slices(some, timeout, self._slice)

    def next(self, timeout: float | None) -> list[RecvFuture]:
        """The futures whose answers came next (waiting up to ``timeout``); none on timeout."""
        came: list[int] = []

        def some(seconds: float) -> bool:
            came.extend(self._group.wait(1, seconds))
            return bool(came)

        wait_in_slices(some, timeout, self._slice)
        return [self._futures[i] for i in came]


def _returns_now(fs: set[concurrent.futures.Future[Any]], pending: list[concurrent.futures.Future[Any]],
                 return_when: str) -> bool:
    """Whether a wait for ``fs`` (``pending`` of them not done) returns without waiting."""
    if return_when == FIRST_COMPLETED:
        return len(pending) < len(fs)
    if return_when == FIRST_EXCEPTION:
        return any(_raised(f) for f in fs.difference(pending))
    return False


def _raised(f: concurrent.futures.Future[Any]) -> bool:
    """Whether ``f`` is done with an exception (not cancelled)."""
    return f.done() and not f.cancelled() and f.exception(0) is not None


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _late(count: int, timeout: float | None) -> DeadlineExceededError:
    return DeadlineExceededError(f"not all of {count} futures were done within {timeout:g} s")
