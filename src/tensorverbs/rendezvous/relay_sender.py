"""The sending side of a relay broadcast (:class:`RelaySender`): the sender offers each
receiver a :class:`~.relay_plan.RelayDescriptor` under the tensor's own key, and the
tensor itself (a large one in parts) to the receivers at the top of the relay's tree under
the relay's data name (each part's name);
each receiver's send completes as it confirms, or as it takes the tensor from the sender.
A receiver whose parent is gone asks for the tensor, which the sender then offers it
directly."""
from __future__ import annotations

import concurrent.futures
import itertools
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ..cluster import TaskName
from ..errors import TensorverbsError, as_error
from ..tensor import dtype_enum
from .completion import SendHandle, Sends, describe_send
from .key import RendezvousKey
from .relay_offers import NEED_IT, RelayOffers, Transport
from .relay_plan import (PREFIX, RelayDescriptor, ack_name, data_name, direct_name, part_count, part_name,
                         part_views, tree)

if TYPE_CHECKING:
    from .. import _core


@dataclass
class _Sent:
    """The sender's relay of one tensor: its array (offered again to a receiver whose
    parent is gone) and each receiver's ticket, settled by its confirmation."""

    tag: str
    name: str
    step: int
    array: Any
    receivers: list[TaskName]
    tickets: list["_core.SendTicket"]
    #: each receiver's confirmation being received
    acks: dict[int, concurrent.futures.Future] = field(default_factory=dict)


class RelaySender(RelayOffers):
    """The relay broadcasts one task sends."""

    def __init__(self, task: TaskName, incarnation: int, sends: Sends, transport: Transport) -> None:
        super().__init__(task, incarnation, sends, transport)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        #: step -> the relays this task sends at it whose receivers did not all confirm
        self._sent: dict[int, list[_Sent]] = {}

    def broadcast(self, name: str, array: np.ndarray, keys: Sequence[RendezvousKey], step: int,
                  fanout: int) -> SendHandle:
        """Offer ``array`` as ``name`` to each receiver of ``keys`` by relay, ``fanout``
        children per receiver in their order; its handle completes per receiver as each
        confirms."""
        tag = f"{PREFIX}{self._incarnation:x}:{next(self._ids)}"
        receivers = [key.dst for key in keys]
        sent = _Sent(tag, name, step, array, receivers,
                     [self._sends.open(describe_send(name, task, step)) for task in receivers])
        dtype, shape = dtype_enum(array.dtype), tuple(array.shape)
        count = 1 if array.dtype.kind == "O" else part_count(array.nbytes)
        plan = tree(len(receivers), fanout)
        parts = part_views(array, count) if count > 1 else []  # (settled by the receivers' confirmations)
        try:
            for i, (parent, children) in enumerate(plan):
                descriptor = RelayDescriptor(tag, dtype, shape,
                                             str(self._task if parent < 0 else receivers[parent]),
                                             tuple(str(receivers[c]) for c in children), count)
                self.offer(step, receivers[i], name, descriptor.encode(), f"{name!r} (its relay)")
            for i, (parent, _) in enumerate(plan):
                if parent >= 0:
                    continue
                if count == 1:  # delivered, as any send, once they take it
                    self.offer(step, receivers[i], data_name(tag), array, ticket=sent.tickets[i])
                    continue
                for part, view in enumerate(parts):
                    self.offer(step, receivers[i], part_name(tag, part), view)
        except TensorverbsError as exc:  # the step was aborted or cleaned up
            for ticket in sent.tickets:
                ticket.fail(int(exc.code), exc.message)
            raise
        with self._lock:
            self._sent.setdefault(step, []).append(sent)
        for i in range(len(receivers)):
            self._await_ack(sent, i, 0)
        return SendHandle(*(ticket.completion for ticket in sent.tickets))

    def _await_ack(self, sent: _Sent, i: int, attempt: int) -> None:
        """Receive receiver ``i``'s ``attempt``-th confirmation."""
        key = RendezvousKey(sent.receivers[i], 0, self._task, ack_name(sent.tag, attempt))
        fut = sent.acks[i] = self._rendezvous.recv_async(key, sent.step, None)
        fut.add_done_callback(lambda f: self._acked(sent, i, attempt, f))

    def _acked(self, sent: _Sent, i: int, attempt: int, fut: concurrent.futures.Future) -> None:
        """Receiver ``i`` confirmed (or is gone): settle its ticket, or offer it the
        tensor directly if its parent is gone."""
        ticket, receiver = sent.tickets[i], sent.receivers[i]
        if fut.cancelled():  # its step ended (drop_step settled the ticket)
            return
        error = fut.exception()
        if error is None and int(np.asarray(fut.result()).reshape(-1)[0]) == NEED_IT and attempt == 0:
            try:
                self.offer(sent.step, receiver, direct_name(sent.tag), sent.array, ticket=ticket)
                self._await_ack(sent, i, 1)
                return
            except TensorverbsError as exc:
                error = exc
        if error is None:
            ticket.deliver()
        else:
            error = as_error(error, "its confirmation")
            ticket.fail(int(error.code), f"{receiver} did not confirm the relayed tensor: {error.message}")
        if all(ticket.completion.outcome() is not None for ticket in sent.tickets):  # all settled
            with self._lock:
                sent.array = None
                at_step = self._sent.get(sent.step, [])
                if sent in at_step:
                    at_step.remove(sent)
                if not at_step:
                    self._sent.pop(sent.step, None)

    def holds(self) -> bool:
        """Whether a relay this task sent waits for a receiver."""
        return bool(self._sent)

    def drop_step(self, step: int, error: TensorverbsError) -> None:
        """The relays sent at ``step`` fail (``error``: it was cleaned up or aborted) for
        each receiver that did not confirm yet."""
        with self._lock:
            sent = self._sent.pop(step, [])
        for relay in sent:
            for i, ticket in enumerate(relay.tickets):
                ticket.fail(int(error.code), error.message)
                relay.acks[i].cancel()
