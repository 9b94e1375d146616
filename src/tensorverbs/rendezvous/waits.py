"""wait and as_completed over many recv futures: those of :mod:`concurrent.futures`, with
one wait of the native core for the recvs whose answers it keeps until their futures are
looked at (most recv_async of grpc+verbs): the waiting thread releases the GIL once for
as many answers as it waits for, and no thread runs Python for an answer as it comes.
Any other future (of another protocol, a torch result, a device copy) is waited for as
concurrent.futures does."""
from __future__ import annotations

import concurrent.futures
import contextlib
import threading
import time
from concurrent.futures import ALL_COMPLETED, FIRST_COMPLETED, FIRST_EXCEPTION, _base
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Sequence

from .. import _core
from .. import arguments as check
from ..errors import DeadlineExceededError, InvalidArgumentError
from .completion import wait_in_slices
from .future import _SIGNAL_SLICE, _THREAD_SLICE, RecvFuture

_WHEN = (ALL_COMPLETED, FIRST_COMPLETED, FIRST_EXCEPTION)
_FINISHED = (_base.CANCELLED_AND_NOTIFIED, _base.FINISHED)
#: concurrent.futures' own: a waiter installed on every future (``return_when`` one of
#: _WHEN, or "_AS_COMPLETED"), told of each as it finishes (typeshed leaves it out)
_install_waiter: Callable[[Iterable[Any], str], Any] = getattr(_base, "_create_and_install_waiters")
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
    A bad ``return_when`` or ``timeout`` (negative, over 1e9 s) raises InvalidArgumentError."""
    if return_when not in _WHEN:
        raise InvalidArgumentError(f"return_when must be one of {', '.join(_WHEN)}, not {return_when!r}")
    timeout = check.optional_seconds(timeout, "timeout")
    fs = set(futures)
    deadline = None if timeout is None else time.monotonic() + timeout
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
    as it is done; DeadlineExceededError (a TimeoutError too, as concurrent.futures raises) if
    ``timeout`` seconds pass (from this call) before every one is; InvalidArgumentError
    for a bad ``timeout`` (negative, over 1e9 s)."""
    timeout = check.optional_seconds(timeout, "timeout")
    fs = list(dict.fromkeys(futures))
    deadline = None if timeout is None else time.monotonic() + timeout
    pending = []
    for f in fs:
        if f.done():
            yield f
        else:
            pending.append(f)
    native = _native(pending)
    if native is None:
        try:
            yield from _futures_as_completed(set(pending), _left(deadline))
        except concurrent.futures.TimeoutError:
            raise _late(len(fs), timeout) from None
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
    """:func:`concurrent.futures.wait`, its waiter's event waited for in slices on the main
    thread (:func:`_sliced`)."""
    if threading.current_thread() is not threading.main_thread():
        return concurrent.futures.wait(fs, timeout, return_when)
    with _base._AcquireFutures(fs):
        done = {f for f in fs if f._state in _FINISHED}
        if (done and (return_when == FIRST_COMPLETED or (return_when == FIRST_EXCEPTION and any(
                _raised(f) for f in done)))) or len(done) == len(fs):
            return done, fs - done
        waiter = _install_waiter(fs, return_when)
    with _installed(fs, waiter):
        _sliced(waiter.event, timeout)
    done.update(waiter.finished_futures)
    return done, fs - done


def _futures_as_completed(fs: set[concurrent.futures.Future[Any]], timeout: float | None
                          ) -> Iterator[concurrent.futures.Future[Any]]:
    """:func:`concurrent.futures.as_completed`, its waiter's event waited for in slices on
    the main thread (:func:`_sliced`)."""
    if threading.current_thread() is not threading.main_thread():
        yield from concurrent.futures.as_completed(fs, timeout)
        return
    deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
    with _base._AcquireFutures(fs):
        finished = [f for f in fs if f._state in _FINISHED]
        waiter = _install_waiter(fs, "_AS_COMPLETED")
    with _installed(fs, waiter):
        left = len(fs)
        while True:
            for f in finished:
                left -= 1
                yield f
            if not left:
                return
            if not _sliced(waiter.event, _left(deadline)):
                raise concurrent.futures.TimeoutError(f"{left} (of {len(fs)}) futures unfinished")
            with waiter.lock:
                finished, waiter.finished_futures = waiter.finished_futures, []
                waiter.event.clear()


def _sliced(event: threading.Event, timeout: float | None) -> bool:
    """``event.wait(timeout)`` in slices, so that a signal's handler runs while the main
    thread waits (also for a signal that another thread took, which wakes no wait of
    this one); whether it was set. One waiter for all the futures: a slice costs nothing
    per future."""
    return wait_in_slices(event.wait, timeout, _SIGNAL_SLICE)


@contextlib.contextmanager
def _installed(fs: set[concurrent.futures.Future[Any]], waiter: Any) -> Iterator[None]:
    """While it lasts, ``waiter`` (installed on every one of ``fs``) is told of them."""
    try:
        yield
    finally:
        for f in fs:
            with f._condition:
                f._waiters.remove(waiter)


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
