"""What the two sides of a relay broadcast share: the task's protocol they send and
receive through (:class:`Transport`), what a receiver confirms, and how the relay's own
sends are offered (:class:`RelayOffers`)."""
from __future__ import annotations

import concurrent.futures
from typing import TYPE_CHECKING, Any, Callable, Protocol

import numpy as np

from ..cluster import TaskName
from ..devices import HOST, Device
from ..errors import TensorverbsError
from ..out import Out
from .completion import Sends
from .key import RendezvousKey
from .local import Value

if TYPE_CHECKING:
    from .. import _core

#: what a receiver confirms under an ack name
HAVE_IT, NEED_IT = 1, 0


class Transport(Protocol):
    """What a relay sends and receives through: the task's protocol (its rendezvous)."""

    def send(self, step_id: int, key: RendezvousKey, value: Value) -> None: ...

    def recv_async(self, key: RendezvousKey, step_id: int, timeout: float | None, device: Device = HOST,
                   out: Out | None = None, *, own: bool = False) -> concurrent.futures.Future: ...

    def cleanup_step(self, step_id: int) -> None: ...

    def allocate(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray: ...

    def watch(self, step_id: int, name: str, watcher: Callable[[TaskName], None]) -> None: ...

    def unwatch(self, step_id: int, name: str) -> None: ...


class RelayOffers:
    """Offers the sends of a relay of ``task`` (its ``incarnation``) through ``transport``,
    their tickets from ``sends``."""

    def __init__(self, task: TaskName, incarnation: int, sends: Sends, transport: Transport) -> None:
        self._task, self._incarnation, self._sends, self._rendezvous = task, incarnation, sends, transport

    def offer(self, step: int, dst: TaskName, name: str, array: Any, what: str = "",
               ticket: "_core.SendTicket | None" = None) -> None:
        """Offer ``array`` as ``name`` to ``dst``, a send of the relay's own (``what``, for
        its ticket; none: not tracked by ``flush``) or with the ``ticket`` of a relayed send."""
        key = RendezvousKey(self._task, self._incarnation, dst, name)
        if ticket is None and what:
            ticket = self._sends.open(f"{what} to {dst} at step {step}")
        try:
            self._rendezvous.send(step, key, Value(array, False, ticket))
        except TensorverbsError as exc:
            if ticket is not None:
                ticket.fail(int(exc.code), exc.message)
            raise
