"""Send completion: a passive send learns when its receiver has the tensor.

Every send gets a ticket of the native core's :class:`SendLedger`, carried with its value
through either protocol. The transport marks it delivered when the receiver has the
tensor (its write completed, its message was taken, its stream was confirmed, or a local
recv took it); an aborted or cleaned-up step fails it with the reason, and a server that
stops fails whatever is left. :class:`SendHandle` is what ``Server.send`` returns;
:class:`Sends` is the ledger of one task, for ``Server.flush``.
"""
from __future__ import annotations

import time
from typing import Callable

from .. import _core
from ..errors import DeadlineExceededError, TensorverbsError, from_code
from .. import arguments as check

#: the longest a wait stays in native code: Python handles signals (Ctrl-C) in between
_SLICE = 0.1


def wait_in_slices(wait: Callable[[float], bool], timeout: float | None, slice_s: float = _SLICE) -> bool:
    """Call ``wait(seconds)`` (which releases the GIL and returns True once done) in slices
    of ``slice_s`` until it returns True or ``timeout`` seconds (None: no limit) have
    passed, so that a signal's exception (KeyboardInterrupt) interrupts the wait; False on
    timeout."""
    deadline = None if timeout is None else time.monotonic() + max(0.0, float(timeout))
    while True:
        left = slice_s if deadline is None else min(slice_s, deadline - time.monotonic())
        if wait(max(0.0, left)):
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False


class SendHandle:
    """The completion of a passive send (what :meth:`tensorverbs.Server.send` returns): of
    one receiver, or of every receiver of a broadcast.

    It completes when the receiver (every receiver) has the tensor. It fails with
    AbortedError when the step is aborted or cleaned up first, CancelledError when the
    server stops first; a broadcast fails if the send to any receiver failed, naming
    each that did. A send whose receiver never asks stays pending: wait with a timeout."""

    __slots__ = ("_completions",)

    def __init__(self, *completions: "_core.SendCompletion") -> None:
        self._completions = completions

    @property
    def what(self) -> str:
        """The send, for messages: "'w' to /job:worker/replica:0/task:0 at step 3" (each
        receiver's, joined by "; ", for a broadcast)."""
        return "; ".join(completion.what for completion in self._completions)

    @property
    def completions(self) -> tuple["_core.SendCompletion", ...]:
        """The completion of each receiver's send."""
        return self._completions

    def done(self) -> bool:
        """Whether the send is settled (delivered or failed) for every receiver."""
        return all(completion.outcome() is not None for completion in self._completions)

    def wait(self, timeout: float | None = None) -> None:
        """Block until the receiver (every receiver) has the tensor; raise the send's
        TensorverbsError if it failed, DeadlineExceededError if ``timeout`` seconds passed
        first (the send stays pending); InvalidArgumentError for a bad ``timeout``
        (negative, over 1e9 s)."""
        error = self.exception(timeout)
        if error is not None:
            raise error

    def exception(self, timeout: float | None = None) -> TensorverbsError | None:
        """Block like :meth:`wait`; the send's error, or None once it was delivered."""
        if not wait_in_slices(self._settled_within, timeout):
            waiting = [c.what for c in self._completions if c.outcome() is None]
            raise DeadlineExceededError(f"{'; '.join(waiting)} was not received within {timeout:g} s")
        timeout = check.optional_seconds(timeout, "timeout")
        failed = [(c.what, outcome) for c in self._completions
                  if (outcome := c.outcome()) is not None and outcome[0]]
        if not failed:
            return None
        if len(self._completions) == 1:
            code, message = failed[0][1]
            return from_code(code, message)
        return from_code(failed[0][1][0], "; ".join(f"{what}: {message}" for what, (_, message) in failed))

    def _settled_within(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for the sends still open; whether all are settled."""
        deadline = time.monotonic() + seconds
        for completion in self._completions:
            if completion.outcome() is None and not completion.wait(max(0.0, deadline - time.monotonic())):
                return False
        return True

    def __repr__(self) -> str:
        outcomes = [c.outcome() for c in self._completions]
        state = ("pending" if None in outcomes else
                 "failed" if any(outcome[0] for outcome in outcomes if outcome) else "delivered")
        return f"<SendHandle {self.what}: {state}>"


class Sends:
    """The sends of one task not settled yet."""

    def __init__(self) -> None:
        self._ledger = _core.SendLedger()

    def open(self, what: str) -> "_core.SendTicket":
        """A ticket for a new send (its value carries it; ``ticket.completion`` is the
        caller's)."""
        return self._ledger.open(what)

    def pending(self) -> int:
        """How many sends are not settled yet."""
        return self._ledger.open_count()

    def flush(self, timeout: float | None) -> None:
        """Wait until every send so far is settled; DeadlineExceededError naming the
        oldest that are not if ``timeout`` seconds pass first."""
        if wait_in_slices(self._ledger.wait_all, timeout):
            return
        waiting, oldest = self._ledger.open_count(), self._ledger.describe_open(3)
        more = f" and {waiting - len(oldest)} more" if waiting > len(oldest) else ""
        raise DeadlineExceededError(
            f"flush: {waiting} sent tensor(s) not received within {timeout:g} s: "
            f"{', '.join(oldest)}{more}")

    def close(self, code: int, message: str) -> None:
        """Fail every send not settled yet with ``(code, message)``."""
        self._ledger.fail_all(code, message)
