"""Send completion: a passive send learns when its receiver has the tensor.

Every send gets a ticket of the native core's :class:`SendLedger`, carried with its value
through either protocol. The transport marks it delivered when the receiver has the
tensor (its write completed, its message was taken, its stream was confirmed, or a local
recv took it); an aborted or cleaned-up step fails it with the reason, and a server that
stops fails whatever is left. :class:`SendHandle` is what ``Server.send`` returns;
:class:`Sends` is the ledger of one task, for ``Server.flush``.
"""
from __future__ import annotations

import ast
import difflib
import logging
import re
import time
from typing import Callable

from .. import _core
from .. import arguments as check
from ..errors import DeadlineExceededError, TensorverbsError, from_code

log = logging.getLogger(__name__)

#: how many of the oldest sends not settled yet :meth:`Sends.held` looks through
HELD_SCAN = 4096
#: how many steps, and how many names, :meth:`Sends.held` tells at most
HELD_STEPS, HELD_NAMES = 8, 3
#: a send as :func:`describe_send` describes it
_SEND = re.compile(r"(?P<name>'.*'|\".*\") to (?P<dst>\S+) at step (?P<step>-?\d+)")

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


def describe_send(name: str, dst: object, step: int) -> str:
    """A send, for its ticket and messages: "'w' to /job:worker/replica:0/task:0 at step 3"."""
    return f"{name!r} to {dst} at step {step}"


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
        timeout = check.optional_seconds(timeout, "timeout")
        if not wait_in_slices(self._settled_within, timeout):
            waiting = [c.what for c in self._completions if c.outcome() is None]
            raise DeadlineExceededError(f"{'; '.join(waiting)} was not received within {timeout:g} s")
        failed = [(c.what, outcome) for c in self._completions
                  if (outcome := c.outcome()) is not None and outcome[0]]
        if not failed:
            return None
        if len(self._completions) == 1:
            code, message = failed[0][1]
            return from_code(code, message)
        return from_code(failed[0][1][0], "; ".join(message for _, (_, message) in failed))  # (each names its send)

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
    """The sends of one task (``owner``, for messages) not settled yet."""

    def __init__(self, owner: str = "") -> None:
        self._ledger = _core.SendLedger()
        self._owner = owner

    def open(self, what: str, parts: int = 1) -> "_core.SendTicket":
        """A ticket for a new send (its value carries it, or each of its ``parts`` values,
        a batch of blocks, does; ``ticket.completion`` is the caller's)."""
        return self._ledger.open(what, parts)

    def pending(self) -> int:
        """How many sends are not settled yet."""
        return self._ledger.open_count()

    def flush(self, timeout: float | None) -> None:
        """Wait until every send so far is settled; DeadlineExceededError naming the
        oldest that are not if ``timeout`` seconds pass first."""
        if wait_in_slices(self._ledger.wait_all, timeout):
            return
        raise DeadlineExceededError(f"flush: {self._open()} not received within {timeout:g} s")

    def close(self, code: int, message: str) -> None:
        """Fail every send not settled yet with ``(code, message)``; a warning names them
        (their receivers never get them)."""
        if self._ledger.open_count():
            log.warning("%s stopped with %s that no receiver took: they are dropped (flush(timeout) "
                        "before stop() waits for their receivers)", self._owner, self._open())
        self._ledger.fail_all(code, message)

    def held(self, receiver: str, name: str, step: int) -> tuple[list[int], list[str]]:
        """What this task holds for ``receiver`` (among its oldest HELD_SCAN sends not
        settled yet): the steps at which it holds ``name`` (HELD_STEPS at most), and the
        names close to ``name`` it holds at ``step`` (HELD_NAMES at most)."""
        steps: set[int] = set()
        names: set[str] = set()
        for what in self._ledger.describe_open(HELD_SCAN):
            send = _SEND.fullmatch(what)
            if send is None or send["dst"] != receiver:
                continue
            held_name, held_step = ast.literal_eval(send["name"]), int(send["step"])
            if held_name == name:
                steps.add(held_step)
            elif held_step == step:
                names.add(held_name)
        return sorted(steps)[:HELD_STEPS], difflib.get_close_matches(name, names, HELD_NAMES)

    def _open(self) -> str:
        """The sends not settled yet, for messages: their count and the oldest three."""
        waiting, oldest = self._ledger.open_count(), self._ledger.describe_open(3)
        more = f" and {waiting - len(oldest)} more" if waiting > len(oldest) else ""
        return f"{waiting} sent tensor(s): {', '.join(oldest)}{more}"
