"""RecvFuture: the future of a recv, which raises TensorverbsError only and runs its
caller's callbacks on the recv's peer's lane."""
from __future__ import annotations

import concurrent.futures
import functools
from typing import Any, Callable

from ..errors import CancelledError, DeadlineExceededError
from .lanes import Lanes


class RecvFuture(concurrent.futures.Future[Any]):
    """A :class:`concurrent.futures.Future` of a recv from ``peer``. :meth:`result` and
    :meth:`exception` raise CancelledError once it is cancelled and DeadlineExceededError
    when their ``timeout`` passes first (the recv goes on). A callback added while it is
    pending runs on ``peer``'s lane of ``lanes`` (if given), never in the thread that
    settles it; one added once it is done runs at once, in the caller's thread."""

    def __init__(self, lanes: Lanes | None = None, peer: str = "") -> None:
        super().__init__()
        self._lanes, self._peer = lanes, peer

    def add_done_callback(self, fn: Callable[[concurrent.futures.Future[Any]], object]) -> None:
        if self._lanes is not None and not self.done():
            fn = functools.partial(self._lanes.run, self._peer, fn)
        super().add_done_callback(fn)

    def result(self, timeout: float | None = None) -> Any:
        try:
            return super().result(timeout)
        except (concurrent.futures.CancelledError, concurrent.futures.TimeoutError):
            raise self._waiting_error(timeout) from None

    def exception(self, timeout: float | None = None) -> BaseException | None:
        try:
            return super().exception(timeout)
        except (concurrent.futures.CancelledError, concurrent.futures.TimeoutError):
            raise self._waiting_error(timeout) from None

    def _waiting_error(self, timeout: float | None) -> CancelledError | DeadlineExceededError:
        if self.cancelled():
            return CancelledError("the recv was cancelled")
        return DeadlineExceededError(f"the recv did not end within {timeout:g} s of waiting for it "
                                     "(it goes on)")


def add_internal_callback(fut: concurrent.futures.Future[Any],
                          fn: Callable[[concurrent.futures.Future[Any]], object]) -> None:
    """Run ``fn`` (tensorverbs' own, quick and never raising) when ``fut`` is done, in the
    thread that settles it, whatever kind of future it is."""
    concurrent.futures.Future.add_done_callback(fut, fn)
