"""One recv as every protocol tracks it: what it asks for and the future its caller holds
(:class:`RecvCall`), how its transfer is pending (:class:`PendingRecv`), and settling,
time left and cancelling, the same for all."""
from __future__ import annotations

import abc
import concurrent.futures
import time
from dataclasses import dataclass, field
from typing import Any, Hashable

from ..devices import HOST, Device
from ..errors import DeadlineExceededError, TensorverbsError
from ..out import Out
from .future import RecvFuture
from .key import RendezvousKey


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


def describe_recv(key: RendezvousKey, step_id: int) -> str:
    """A recv, for messages: "recv of 'w' from /job:ps/replica:0/task:0 at step 3"."""
    return f"recv of {key.name!r} from {key.src} at step {step_id}"


@dataclass(eq=False)
class RecvCall:
    """One recv: what it asks for and the future its caller holds."""

    key: RendezvousKey
    step_id: int
    device: Device = HOST
    timeout: float | None = None
    future: RecvFuture = field(default_factory=RecvFuture)
    started: float = field(default_factory=time.monotonic)
    out: Out | None = None
    #: the peer's number in the protocol's native core, once a recv there serves it
    peer_id: int = -1
    #: when its tensor came (time.monotonic()), if it was kept until its caller looked
    arrived: float | None = None

    @property
    def what(self) -> str:
        return describe_recv(self.key, self.step_id)

    @property
    def match(self) -> tuple[int, Hashable]:
        return (self.step_id, self.key.matching)

    def time_left(self) -> float | None:
        """Seconds left of its timeout (none without one)."""
        if self.timeout is None:
            return None
        return max(0.0, self.timeout - (time.monotonic() - self.started))

    def fail(self, error: TensorverbsError) -> bool:
        return settle(self.future, error)

    def done(self) -> bool:
        """Whether its future is settled."""
        return self.future.done()


class PendingRecv(abc.ABC):
    """A recv in flight, as its protocol (or the local table) tracks it."""

    @abc.abstractmethod
    def cancel(self) -> None:
        """Stop the transfer; the future is settled by the caller of cancel."""

    def peer_answered(self) -> bool:
        """Whether the peer answered (it can tell what it holds when the deadline passes)."""
        return False

    def deadline_error(self, call: RecvCall, timeout: float) -> TensorverbsError:
        """The error a recv gets when its deadline passes at this point of the transfer."""
        return DeadlineExceededError(f"{call.what} timed out after {timeout:g} s")
