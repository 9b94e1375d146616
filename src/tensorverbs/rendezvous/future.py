"""RecvFuture: the future of a recv, which raises TensorverbsError only, runs its
caller's callbacks on the recv's peer's lane, can be awaited in asyncio, and lets a
signal's exception (Ctrl-C) interrupt a wait for it in the main thread.

Why a wait of the main thread goes in slices: a signal interrupts a sleeping wait only if
the main thread takes the signal while asleep. If its C handler runs just before the wait
goes to sleep (the main thread released the GIL and was preempted there: under CPU load
for tens of milliseconds), or in another thread of the process, the sleep that follows is
not interrupted, and the Python handler (KeyboardInterrupt) would run only when the
future is settled, e.g. at the recv's deadline. A sleep of at most a slice bounds that
(the native core's blocking recv waits in slices of the same length)."""
from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import threading
import time
import weakref
from concurrent.futures import _base
from typing import Any, Callable, Generator, Iterable, Protocol, TypeVar

from .. import _core
from ..errors import CancelledError, DeadlineExceededError, TensorverbsError
from ..in_hand import IN_HAND
from .collected import collecting, later
from .completion import wait_in_slices
from .condition import Condition
from .lanes import Lanes

T = TypeVar("T")

#: the longest a wait of the main thread for a recv sleeps before signal handlers run
_SIGNAL_SLICE = 0.02
#: the longest a wait of another thread for a recv sleeps at once (any timeout, even inf)
_THREAD_SLICE = 1.0

_log = logging.getLogger("concurrent.futures")
log = logging.getLogger(__name__)
#: the states of a cancelled future, and of a done one
_CANCELLED = (_base.CANCELLED, _base.CANCELLED_AND_NOTIFIED)
_DONE = (*_CANCELLED, _base.FINISHED)


class NativeRecv(Protocol):
    """A recv in flight in a native core: it waits for the answer and settles the future
    in the waiting thread, and its future's cancel gives it up. A parked recv keeps its
    answer until the future takes it."""

    def wait(self, seconds: float) -> int: ...

    def cancel(self) -> None: ...

    def settle_parked(self, call: Any, settle: Callable[..., bool]) -> bool: ...

    def eager(self, call: Any, settle: Callable[..., bool]) -> None: ...


class RecvFuture(concurrent.futures.Future[Any]):
    """A :class:`concurrent.futures.Future` of a recv from ``peer``. :meth:`result` and
    :meth:`exception` raise CancelledError once it is cancelled and DeadlineExceededError
    when their ``timeout`` passes first (the recv goes on), as concurrent.futures does: a
    ``concurrent.futures`` CancelledError and TimeoutError too. Dropped unread, it gives
    its tensor to the next recv of its key and step, as :meth:`cancel` does. A callback
    added while it is pending runs on ``peer``'s lane of ``lanes`` (if given), never in the thread that
    settles it; one added once it is done runs at once, in the caller's thread.

    A parked recv (:meth:`settled_by` with ``parked``) leaves its answer in the native
    core until the future is looked at: whatever looks first (``done()``, ``result()``,
    ``exception()``) settles it, in that thread, so that no thread is woken and no Python
    runs as the answer comes. Its state field stays as it is until then, as
    concurrent.futures' own functions expect (they read it holding the futures' conditions,
    twice): adding a waiter (``concurrent.futures.wait``) or a callback (asyncio) makes the
    answer settle as it comes, by the core's settler thread (at once if it came already).
    So ``repr`` shows such a future pending, and ``cancel()`` succeeds, until it is looked
    at (a cancelled future's tensor goes to the next recv of its key and step)."""

    # the fields most futures keep as they are, shared until set (a recv in flight makes
    # fewer of them: thousands may be)
    _result: Any = None
    _exception: BaseException | None = None
    _return: Callable[..., object] | None = None
    _return_args: tuple[Any, ...] = ()
    _native: NativeRecv | None = None  # (None once the answer went elsewhere)
    _on_cancel: NativeRecv | None = None
    _parked_in: NativeRecv | None = None  # holds a parked recv's answer
    # while it may be parked: settle(call, self, *answer) settles it (two fields, not a tuple: one
    # object fewer for the garbage collector per recv in flight)
    _parked_call: Any = None
    _parked_settle: Callable[..., bool] | None = None
    _eager = False  # the parked recv was told to settle as its answer comes
    # a descriptor's answer that came before settled_by() (see _settle_variant), for it
    _early: tuple[Any, ...] | None = None
    _read = False  # result() gave its caller the tensor
    # the base class's lists of waiters and callbacks, made when first asked for
    _waiting: list[Any] | None = None
    _callbacks: list[Callable[[concurrent.futures.Future[Any]], object]] | None = None

    def __init__(self, lanes: Lanes | None = None, peer: str = "") -> None:
        # the base class's fields, its condition the lean one
        self._condition = Condition()  # type: ignore[assignment]
        self._state = _base.PENDING
        self._lanes, self._peer = lanes, peer

    # The base class reads these two fields to add a waiter or a callback, and so do
    # concurrent.futures.wait() and as_completed(): a parked recv settles its answer as it
    # comes from then on.
    @property
    def _waiters(self) -> list[Any]:
        self._something_waits()
        if self._waiting is None:
            self._waiting = []
        return self._waiting

    @_waiters.setter
    def _waiters(self, waiters: list[Any]) -> None:
        self._waiting = waiters

    @property
    def _done_callbacks(self) -> list[Callable[[concurrent.futures.Future[Any]], object]]:
        self._something_waits()
        if self._callbacks is None:
            self._callbacks = []
        return self._callbacks

    @_done_callbacks.setter
    def _done_callbacks(self, callbacks: list[Callable[[concurrent.futures.Future[Any]], object]]) -> None:
        self._callbacks = callbacks

    def _something_waits(self) -> None:
        """A waiter or a callback is added (or the list is read to settle it): a parked
        recv's answer is settled as it comes from now on."""
        if self._parked_call is not None and self._state == _base.PENDING:
            self._settle_as_it_comes()

    def _take(self) -> None:
        """Settle this future with its parked recv's answer if it came (in this thread)."""
        native = self._parked_in
        if self._parked_call is not None and native is not None:
            native.settle_parked(self, _settle_with)

    def _settle_as_it_comes(self) -> None:
        """Have the parked recv settle this future as its answer comes, by the core's
        settler thread; one that came already too (never in this thread: the caller may hold
        the condition of futures it waits for, and has read their state)."""
        native = self._parked_in
        if self._eager or self._parked_call is None or native is None:
            return
        native.eager(self, _settle_with)
        self._eager = True

    def done(self) -> bool:
        if self._parked_call is not None:
            self._take()
        return super().done()

    def __await__(self) -> Generator[Any, None, Any]:
        """``await fut`` in a coroutine: the recv's result, without blocking the event loop.
        Cancelling the awaiting task cancels the recv (a result that came just then stays
        in this future); a recv cancelled itself raises CancelledError, as ``result()``."""
        return self._awaited().__await__()

    async def _awaited(self) -> Any:
        waiter = asyncio.wrap_future(self)
        try:
            return await asyncio.shield(waiter)  # tells the task's cancellation from the recv's
        except asyncio.CancelledError:
            if waiter.cancelled():
                raise CancelledError("the recv was cancelled") from None
            if not self.cancel():  # the awaiting task was cancelled: the recv with it, unless it ended
                # (its tensor, which the loop may have taken for the task meanwhile, stays
                # unread: this future, dropped, gives it back)
                waiter.cancel()
                self._read = False
            raise

    def settled_by(self, native: NativeRecv, parked: tuple[Callable[..., bool], Any] | None = None) -> None:
        """Let a thread that waits for the result settle this future itself, woken directly
        by the answer (no hand-off through the thread that settles it otherwise):
        ``native.wait(seconds)`` waits so and returns 0 (not yet), 1 (settled), 2
        (settled elsewhere: wait on this future) or 3 (parked: settled here then).
        Cancelling this future calls ``native.cancel()`` (quick, never raising); at once if
        it is cancelled already. ``parked``: (settle, call) of a recv that parks its answer
        in ``native``, which ``settle(call, self, *answer)`` settles this future with (the
        call may hold this future only weakly); a descriptor it gets (a relay's) settles it
        as it comes (:func:`_settle_variant`)."""
        self._native = self._on_cancel = native
        if parked is not None:
            with _EARLY:  # (_settle_variant reads them so)
                self._parked_in = native
                self._parked_settle, self._parked_call = parked
                early, self._early = self._early, None
            if early is not None:  # a descriptor came as the recv started: the parked settle
                self._parked_call = None  # (gives the tensor back if this future is cancelled)
                parked[0](parked[1], self, *early)
            elif self._callbacks or self._waiting:  # added as it started
                self._settle_as_it_comes()
        if self._state in _CANCELLED:  # (read without the lock: cancel() reads it after setting it)
            self._parked_call = None
            native.cancel()

    def take_early(self) -> tuple[Any, ...] | None:
        """The answer that came before :meth:`settled_by` and was not settled (settled_by
        was interrupted), for its caller to hand back; None if none."""
        with _EARLY:
            early, self._early = self._early, None
        return early

    def parked_in(self) -> NativeRecv | None:
        """The native recv that keeps this future's answer until it is looked at (it can be
        waited for with others at once: :mod:`.waits`); None if it settles this future as
        the answer comes, or did."""
        return self._parked_in if self._parked_call is not None and not self._eager else None

    def cancel(self) -> bool:
        if not super().cancel():
            return False
        with self._condition:  # its waiters (concurrent.futures.wait) told, as an executor does
            if self._state == _base.CANCELLED:
                self._state = _base.CANCELLED_AND_NOTIFIED
                for waiter in self._waiting or ():
                    waiter.add_cancelled(self)
        self._parked_call = None
        if self._on_cancel is not None:  # (a tensor it parked, or parks yet, goes to the next recv)
            self._on_cancel.cancel()
        return True

    def returnable(self, give_back: Callable[..., object], *args: Any) -> None:
        """Tell how to hand the tensor this future was settled with back to the next recv
        of its key and step, ``give_back(*args)`` (tensorverbs' own: set by the rendezvous
        that settled it; no object binds them, one for every future would be one more for
        the garbage collector to track)."""
        with self._condition:
            self._return, self._return_args = give_back, args

    def give_back(self) -> bool:
        """Hand the tensor this future holds to the next recv of its key and step, as if it
        had never been received (its caller drops the result); once. False if there is
        none to hand back (not settled with a tensor, handed back already, or a tensor
        passed by handle)."""
        with self._condition:
            give_back, self._return = self._return, None
        if give_back is None or not self.done() or self.cancelled() or super().exception() is not None:
            return False
        give_back(*self._return_args)
        return True

    def set_result(self, result: Any) -> None:
        self._finish(result, None)

    def set_exception(self, exception: BaseException | None) -> None:
        self._finish(None, exception)

    def _finish(self, result: Any, exception: BaseException | None) -> None:
        """The base class's set_result/set_exception, without making the lists of waiters
        and callbacks where none was added (a settled future held by its caller would keep
        them, more objects for the garbage collector)."""
        with self._condition:
            if self._state in _DONE:
                raise concurrent.futures.InvalidStateError(f"{self._state}: {self!r}")
            self._result, self._exception, self._state = result, exception, _base.FINISHED
            for waiter in self._waiting or ():
                if exception is None:
                    waiter.add_result(self)
                else:
                    waiter.add_exception(self)
            self._condition.notify_all()
        self._invoke_callbacks()

    def _invoke_callbacks(self) -> None:
        """Run every done-callback even when one raises what a signal's handler raises in
        the thread settling this future (Ctrl-C), then raise the first such exception (the
        base class would skip the callbacks after it). The callbacks are dropped once run:
        one that refers to this future (a future made of this one) leaves no cycle, and a
        future dropped unread is freed, its tensor given back, at once."""
        interrupted: BaseException | None = None
        callbacks, self._callbacks = self._callbacks, None
        for callback in callbacks or ():
            try:
                callback(self)
            except Exception:
                _log.exception("exception calling callback for %r", self)
            except BaseException as exc:
                interrupted = interrupted or exc
        if interrupted is not None:
            raise interrupted

    def add_done_callback(self, fn: Callable[[concurrent.futures.Future[Any]], object]) -> None:
        if self._lanes is not None and not self.done():
            fn = functools.partial(self._lanes.run, self._peer, fn)
        super().add_done_callback(fn)

    def result(self, timeout: float | None = None) -> Any:
        try:
            result = super().result(self._wait(timeout))
        except TensorverbsError:  # what the recv ended with (a timeout or a stop too)
            raise
        except (concurrent.futures.CancelledError, concurrent.futures.TimeoutError):
            raise self._waiting_error(timeout) from None
        self._read = True
        return result

    def exception(self, timeout: float | None = None) -> BaseException | None:
        try:
            return super().exception(self._wait(timeout))
        except (concurrent.futures.CancelledError, concurrent.futures.TimeoutError):
            raise self._waiting_error(timeout) from None

    def _wait(self, timeout: float | None) -> float | None:
        """Wait until done or ``timeout`` seconds passed; on the main thread in slices, so
        that signal handlers run in between (their exception propagates). Returns the
        timeout left for the base class's wait: 0 when done waiting here."""
        if self.done():
            return timeout
        if threading.current_thread() is threading.main_thread():
            wait_in_slices(self._done_within, timeout, _SIGNAL_SLICE)
        elif self._native is not None:
            wait_in_slices(self._done_within, timeout, _THREAD_SLICE)
        else:
            return timeout
        return 0

    def _done_within(self, seconds: float) -> bool:
        native = self._native
        if native is not None:
            started = time.monotonic()
            if native.wait(seconds) == 0 or self.done():  # (done() takes a parked answer)
                return self.done()
            # settled elsewhere, or here onto a lane (a copy to a device): the future's own
            # wait from here on, which a parked recv must settle as its answer comes
            self._native = None
            self._settle_as_it_comes()
            seconds = max(0.0, seconds - (time.monotonic() - started))
        try:
            super().exception(seconds)
        except concurrent.futures.TimeoutError:
            return False
        except concurrent.futures.CancelledError:
            pass
        return True

    def __del__(self) -> None:
        """Dropped unread: the tensor goes to the next recv of its key and step, as after
        :meth:`cancel` (a pending or parked recv is given up, a tensor it settled with is
        handed back)."""
        if self._read:
            return
        try:
            if self._state == _base.FINISHED:
                if self._exception is None and not collecting():
                    self.give_back()
                elif self._exception is None and self._return is not None:  # (freed in a collection: .collected)
                    later(self._return, *self._return_args)
            elif self._state == _base.PENDING and self._parked_call is not None and self._on_cancel is not None:
                self._on_cancel.cancel()
        except Exception:  # (as the interpreter finalizes, the rendezvous may be gone)
            log.debug("a dropped recv future could not give its tensor back", exc_info=True)

    def _waiting_error(self, timeout: float | None) -> CancelledError | DeadlineExceededError:
        if self.cancelled():
            return CancelledError("the recv was cancelled")
        return WaitTimedOut(f"the recv did not end within {timeout:g} s of waiting for it (it goes on)")


class WaitTimedOut(DeadlineExceededError, concurrent.futures.TimeoutError):
    """A wait for a recv's future that its ``timeout`` ended (the recv goes on): also
    ``concurrent.futures.TimeoutError``, which before Python 3.11 is not the built-in one."""


def _settle_with(fut: RecvFuture, *answer: Any) -> bool:
    """Settle ``fut`` with its parked recv's ``answer`` (the native recv calls it, in the
    thread that looked at ``fut`` or in the core's settler thread); False if ``fut`` was
    settled otherwise already (its tensor goes to the next recv)."""
    call, settle = fut._parked_call, fut._parked_settle
    if call is None or settle is None:
        return False
    taken = settle(call, fut, *answer)
    fut._parked_call = None  # (after: interrupted before, the settler thread settles it)
    return taken


def _settle_variant(ref: "weakref.ref[RecvFuture]", *answer: Any) -> bool:
    """:func:`_settle_with` of a parked recv's descriptor, which the settler thread settles
    as it comes (``ref``: its future, held weakly: one dropped meanwhile takes nothing).
    The recv starts before its future is told of it (:meth:`RecvFuture.settled_by`): an
    answer that comes first waits in the future for that."""
    fut = ref()
    if fut is None:
        return False
    with _EARLY:
        if fut._parked_settle is None and fut._state == _base.PENDING:
            fut._early = answer
            return True
    return _settle_with(fut, *answer)


#: held while an answer that came before settled_by() is left in its future, or taken (not
#: the future's own lock: its caller may hold that as the recv starts, adding a callback)
_EARLY = threading.Lock()


_core.set_variant_settle(_settle_variant)


class _Starting(threading.local):
    """The lists collecting the futures of the recvs this thread starts (see :func:`starting`)."""

    def __init__(self) -> None:
        self.lists: list[list[RecvFuture]] = []


_starting = _Starting()


def starting() -> list[list[RecvFuture]]:
    """This thread's lists that collect the futures of the recvs it starts: a caller
    starting many (a batch) appends its list, and pops it when done; :func:`started`
    adds each future to the last one before its recv can go out. So the caller can give
    every started recv up when a signal's exception interrupts it, also one whose future
    it never got (the exception came as the call that started it returned)."""
    return _starting.lists


def started(fut: RecvFuture) -> None:
    """``fut``'s recv is about to start: the batch starting it (if any) holds it, and the
    public call's hand (:mod:`tensorverbs.in_hand`) until the call returns it."""
    IN_HAND.started = fut
    lists = _starting.lists
    if lists:
        lists[-1].append(fut)


def giving_up(body: Callable[[], T]) -> T:
    """``body()``, which starts recvs (a batch's); if it raises (a signal's exception
    too), each recv it started is given up (:func:`started` tells them before they can go
    out); if it returns, the public call's hand holds them until the call returns."""
    lists, mine = starting(), list[RecvFuture]()
    try:
        lists.append(mine)
        result = body()
        lists.pop()  # (a signal's handler may run as it returns: here, mine are given up)
        IN_HAND.started = mine
        return result
    except BaseException:
        give_up_all(mine)
        raise
    finally:
        if lists and lists[-1] is mine:
            lists.pop()


def give_up_all(futures: Iterable[concurrent.futures.Future[Any]]) -> None:
    """Give every recv up: a pending one is cancelled, a settled one's tensor is kept for
    the next recv of it."""
    for fut in futures:
        if not fut.cancel() and isinstance(fut, RecvFuture):
            fut.give_back()


def add_internal_callback(fut: concurrent.futures.Future[Any],
                          fn: Callable[[concurrent.futures.Future[Any]], object]) -> None:
    """Run ``fn`` (tensorverbs' own, quick and never raising) when ``fut`` is done, in the
    thread that settles it, whatever kind of future it is."""
    concurrent.futures.Future.add_done_callback(fut, fn)
