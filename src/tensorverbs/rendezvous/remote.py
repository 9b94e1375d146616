"""The remote-rendezvous base: local recvs go to the table, remote ones to a protocol.

Each protocol ("grpc", "grpc+verbs") subclasses :class:`RemoteRendezvous` and implements
:meth:`~RemoteRendezvous.recv_from_remote`. What every protocol needs is done here once:
deadlines, aborting a step's pending recvs, the caller cancelling its future, and
turning a received :class:`Value` into the array the caller gets.
"""
from __future__ import annotations

import abc
import collections
import concurrent.futures
import threading
from typing import TYPE_CHECKING, Any

from ..errors import AbortedError, CancelledError, DeadlineExceededError, TensorverbsError
from ..devices import HOST, Device
from ..tensor import mark_dead
from .key import RendezvousKey
from .local import Value

if TYPE_CHECKING:
    from ..runtime import TaskRuntime


class PendingRecv(abc.ABC):
    """A recv in flight, as its protocol (or the local table) tracks it."""

    @abc.abstractmethod
    def cancel(self) -> None:
        """Stop the transfer; the future is settled by the caller of cancel."""

    def deadline_error(self, what: str, timeout: float) -> TensorverbsError:
        """The error a recv gets when its deadline passes at this point of the transfer."""
        return DeadlineExceededError(f"{what} timed out after {timeout:g} s")


def settle(fut: concurrent.futures.Future, error: BaseException | None = None,
           result: Any = None) -> bool:
    """Complete ``fut`` unless it is already done; True if this call completed it."""
    try:
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(result)
        return True
    except concurrent.futures.InvalidStateError:
        return False


def describe(key: RendezvousKey, step_id: int) -> str:
    return f"recv of {key.name!r} from {key.src} at step {step_id}"


class RemoteRendezvous(abc.ABC):
    """The rendezvous of one task."""

    protocol: str

    def __init__(self, runtime: "TaskRuntime") -> None:
        self.rt = runtime
        self._lock = threading.RLock()
        self._pending: dict[int, dict[concurrent.futures.Future, PendingRecv]] = \
            collections.defaultdict(dict)

    def start(self) -> None:
        """Bring up what the protocol needs beyond gRPC."""

    def stop(self) -> None:
        """Fail every pending recv and release the protocol's resources."""
        with self._lock:
            pending = [(f, op) for ops in self._pending.values() for f, op in ops.items()]
            self._pending.clear()
        for fut, op in pending:
            op.cancel()
            settle(fut, CancelledError("the server stopped"))

    def recv_async(self, key: RendezvousKey, step_id: int, timeout: float | None,
                   device: Device = HOST) -> concurrent.futures.Future:
        """Start a recv; the future yields the tensor (on ``device``) or raises a
        TensorverbsError."""
        fut: concurrent.futures.Future = concurrent.futures.Future()
        fut.device = device  # type: ignore[attr-defined]  # read by complete()
        what = describe(key, step_id)
        if key.src == self.rt.task:
            waiter = self.rt.table.recv_async(
                step_id, key, lambda err, value: settle(fut, err) if err else self.complete(fut, value))
            op: PendingRecv | None = _LocalRecv(waiter) if waiter is not None else None
        else:
            with self._lock:  # against a concurrent abort_step of this step
                error = self.rt.table.aborted(step_id)
                if error is not None:
                    settle(fut, error)
                    return fut
                op = self.recv_from_remote(key, step_id, fut)
                if not fut.done():
                    self._pending[step_id][fut] = op
            fut.add_done_callback(lambda f: self._forget(step_id, f))
        if op is not None and timeout is not None and not fut.done():
            self.rt.loop.call_later(timeout, self._expire, fut, op, what, timeout)
        if op is not None:
            fut.add_done_callback(lambda f: f.cancelled() and op.cancel())
        return fut

    def complete(self, fut: concurrent.futures.Future, value: Value, nbytes: int | None = None) -> None:
        """Settle ``fut`` with ``value`` on the future's device. ``nbytes`` (the bytes that
        crossed the network) counts the value as received from a peer."""
        device = fut.device
        result = mark_dead(value.array) if value.is_dead else value.array
        if device is not HOST:
            result = device.from_host(value.array)
            self.rt.counters.add("proxy_copies")
        if settle(fut, None, result) and nbytes is not None:
            self.rt.counters.add("tensors_received")
            self.rt.counters.add("bytes_received", nbytes)

    def _forget(self, step_id: int, fut: concurrent.futures.Future) -> None:
        with self._lock:
            ops = self._pending.get(step_id)
            if ops is not None:
                ops.pop(fut, None)
                if not ops:
                    del self._pending[step_id]

    @staticmethod
    def _expire(fut: concurrent.futures.Future, op: PendingRecv, what: str, timeout: float) -> None:
        if not fut.done():
            error = op.deadline_error(what, timeout)
            if settle(fut, error):
                op.cancel()

    def abort_step(self, step_id: int, error: AbortedError) -> None:
        """Fail the step's pending recvs (local and remote) and refuse its later ones."""
        with self._lock:
            self.rt.table.abort_step(step_id, error)
            ops = self._pending.pop(step_id, {})
        for fut, op in ops.items():
            if settle(fut, AbortedError(error.message)):
                op.cancel()

    @abc.abstractmethod
    def recv_from_remote(self, key: RendezvousKey, step_id: int,
                         fut: concurrent.futures.Future) -> PendingRecv:
        """Start fetching ``key`` from ``key.src``; settle ``fut`` with :func:`settle`."""


class _LocalRecv(PendingRecv):
    """A recv from this task's own table, waiting for its send."""

    def __init__(self, waiter) -> None:
        self._waiter = waiter

    def cancel(self) -> None:
        self._waiter.cancel()

